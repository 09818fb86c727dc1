"""Collecting and grading a room (kernels/tools/grade.py) end to end: three participants' homes as the hub makes
them, each a Unix user of their own, graded by nbgrader as themselves, partial credit per check."""
import csv
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NB = "00_memory_wall.ipynb"
SUM = "return (flops / (tflops * 1e12) + nbytes / (tbps * 1e12)) * 1e3"  # the roofline as a sum: one check fails
MAX = "return max(flops / (tflops * 1e12), nbytes / (tbps * 1e12)) * 1e3"


def _answered(wrong_roofline=False):
    """Exercise 00 as a participant leaves it: the exercise with every answer cell filled in from the solution
    (and, if asked, the roofline added up instead of maxed)."""
    solution = nbformat.read(ROOT / "solutions" / NB, as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.read(ROOT / "exercises" / NB, as_version=4)
    for c in nb.cells:
        grade_id = c.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            c.source = answers[grade_id].replace(MAX, SUM) if wrong_roofline else answers[grade_id]
    return nb


def test_a_room_is_collected_and_graded_with_partial_credit(tmp_path):
    pytest.importorskip("nbgrader", reason="nbgrader is not installed (requirements.txt pins it)")
    if os.geteuid() != 0:
        pytest.skip("grading a separated room runs each participant's code as their own Unix user: needs root")
    room = Path(tempfile.mkdtemp(prefix="grade-", dir="/tmp"))  # pytest's own tmp folders are closed to others
    room.chmod(0o711)
    suffix = uuid.uuid4().hex[:4]
    names = {f"ada-{suffix}": _answered(), f"bob-{suffix}": None, f"cy-{suffix}": _answered(wrong_roofline=True),
             f"eve-{suffix}": "a link to ada's"}
    try:
        for name, nb in names.items():
            home = room / "home" / f"jupyter-{name}"
            subprocess.run(["useradd", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", "--user-group",
                            f"jupyter-{name}"], check=True)
            (home / "exercises").mkdir(parents=True)
            if nb is None:  # bob never started: the exercise as the hub copied it
                shutil.copy(ROOT / "exercises" / NB, home / "exercises" / NB)
            elif isinstance(nb, str):  # eve hands in ada's work: her notebook is a link to ada's
                (home / "exercises" / NB).symlink_to(room / "home" / f"jupyter-ada-{suffix}" / "exercises" / NB)
            else:
                nbformat.write(nb, home / "exercises" / NB)
            subprocess.run(["chown", "-R", f"jupyter-{name}:jupyter-{name}", str(home)], check=True)
            home.chmod(0o700)
        out = tmp_path / "grades.csv"
        done = subprocess.run([sys.executable, "-m", "kernels.tools.grade", str(room), "00", "--out", str(out),
                               "--jobs", "4"], cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        rows = {r["participant"]: r for r in csv.DictReader(out.open())}
        got = {name[:-5]: (rows[name]["points"], rows[name]["of"], rows[name]["note"]) for name in names}
        # every check passed; none attempted; 4 of the 5 checks passed (the roofline check failed); eve's link is
        # read with her rights, which do not reach ada's home
        assert got.pop("eve") == ("", "", f"their exercises/{NB} could not be read (PermissionError)"), done.stdout
        assert got == {"ada": ("5.0", "5.0", ""), "bob": ("0.0", "5.0", ""), "cy": ("4.0", "5.0", "")}, (got, done.stdout)
        assert not list((room / "grading" / f"eve-{suffix}").rglob(f"submitted/*/*/{NB}"))
        # each participant's code ran as themselves: the grading folder, and what nbgrader wrote in it, is theirs
        for name in list(names)[:3]:
            db = room / "grading" / name / "gradebook.db"
            assert db.stat().st_uid == pwd.getpwnam(f"jupyter-{name}").pw_uid, name
    finally:
        for name in names:
            subprocess.run(["userdel", f"jupyter-{name}"], capture_output=True)
        shutil.rmtree(room, ignore_errors=True)


def test_a_participant_cannot_hang_the_grading_or_feed_it_a_device(tmp_path):
    """hal's notebook leaves a process behind in a session of its own, holding the grading's output open; his other
    exercise is a link to /dev/zero. The grading ends at its limit with a note for each, and returns."""
    pytest.importorskip("nbgrader", reason="nbgrader is not installed (requirements.txt pins it)")
    if os.geteuid() != 0:
        pytest.skip("grading a separated room runs each participant's code as their own Unix user: needs root")
    room = Path(tempfile.mkdtemp(prefix="grade-", dir="/tmp"))
    room.chmod(0o711)
    user = f"jupyter-hal-{uuid.uuid4().hex[:4]}"
    home = room / "home" / user
    nb = _answered()
    leave_behind = nbformat.v4.new_code_cell(
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(10**6)")
    nb.cells.insert(1, leave_behind)
    try:
        subprocess.run(["useradd", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", "--user-group", user],
                       check=True)
        (home / "exercises").mkdir(parents=True)
        nbformat.write(nb, home / "exercises" / NB)
        (home / "exercises" / "03_tma_descriptors.ipynb").symlink_to("/dev/zero")
        subprocess.run(["chown", "-R", f"{user}:{user}", str(home)], check=True)
        home.chmod(0o700)
        out = tmp_path / "grades.csv"
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "kernels.tools.grade", str(room), "00", "03", "--out", str(out),
                               "--limit", "45"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and time.monotonic() - start < 120, done.stdout[-2000:] + done.stderr[-2000:]
        notes = {r["exercise"]: r["note"] for r in csv.DictReader(out.open())}
        assert notes == {"00": "not graded: still running after 45 s",
                         "03": "their exercises/03_tma_descriptors.ipynb could not be read (ValueError: not a "
                               "notebook file of at most 64 MiB)"}, (notes, done.stdout)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
        time.sleep(1)
        subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(room, ignore_errors=True)


def test_a_note_cannot_be_a_formula_or_move_the_terminal():
    from kernels.tools import grade
    assert grade._note("=HYPERLINK(\"http://x\")") == "'=HYPERLINK(\"http://x\")"
    assert grade._note("ok\x1b[2Jnote") == "ok[2Jnote"
    with pytest.raises(ValueError):
        grade._checked([float("inf"), 5])
    assert grade._checked([4, 5]) == [4.0, 5.0] and grade._checked({"a": 1}) == "{'a': 1}"


def test_a_wrong_room_or_exercise_is_said_plainly(tmp_path):
    from kernels.tools import grade
    with pytest.raises(SystemExit, match="has no home/: give the folder the hub was started in"):
        grade.main([str(tmp_path / "nowhere"), "00"])
    (tmp_path / "home").mkdir()
    with pytest.raises(SystemExit, match="no exercise 42: the course has 00, 01, "):
        grade.main([str(tmp_path), "42"])
    with pytest.raises(SystemExit, match="holds no participant's home"):
        grade.main([str(tmp_path), "00"])
