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


@pytest.fixture
def room():
    """A room's folder as the hub leaves it (its participants are added with ``_participant``), and afterwards
    every process and Unix user of its participants gone."""
    pytest.importorskip("nbgrader", reason="nbgrader is not installed (requirements.txt pins it)")
    if os.geteuid() != 0:
        pytest.skip("grading a separated room runs each participant's code as their own Unix user: needs root")
    folder = Path(tempfile.mkdtemp(prefix="grade-", dir="/tmp"))  # pytest's own tmp folders are closed to others
    folder.chmod(0o711)
    yield folder
    for home in (folder / "home").glob("jupyter-*"):
        subprocess.run(["pkill", "-KILL", "-u", home.name], capture_output=True)
    time.sleep(1)
    for home in (folder / "home").glob("jupyter-*"):
        subprocess.run(["userdel", home.name], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def _participant(room, user, fill):
    """The Unix user ``user`` with a 0700 home in ``room`` whose exercises/ ``fill(folder)`` writes."""
    home = room / "home" / user
    subprocess.run(["useradd", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", "--user-group", user],
                   check=True)
    (home / "exercises").mkdir(parents=True)
    fill(home / "exercises")
    subprocess.run(["chown", "-R", f"{user}:{user}", str(home)], check=True)
    home.chmod(0o700)


def test_a_room_is_collected_and_graded_with_partial_credit(room, tmp_path):
    suffix = uuid.uuid4().hex[:4]
    ada = room / "home" / f"jupyter-ada-{suffix}" / "exercises" / NB
    names = {f"ada-{suffix}": lambda ex: nbformat.write(_answered(), ex / NB),
             # bob never started: the exercise as the hub copied it
             f"bob-{suffix}": lambda ex: shutil.copy(ROOT / "exercises" / NB, ex / NB),
             f"cy-{suffix}": lambda ex: nbformat.write(_answered(wrong_roofline=True), ex / NB),
             # eve hands in ada's work: her notebook is a link to ada's
             f"eve-{suffix}": lambda ex: (ex / NB).symlink_to(ada)}
    for name, fill in names.items():
        _participant(room, f"jupyter-{name}", fill)
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


def test_a_participant_cannot_hang_the_grading_or_feed_it_a_device(room, tmp_path):
    """hal's notebook leaves a process behind in a session of its own, holding the grading's output open; his other
    exercise is a link to /dev/zero. The grading ends at its limit with a note for each, and returns."""
    nb = _answered()
    leave_behind = nbformat.v4.new_code_cell(
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(10**6)")
    nb.cells.insert(1, leave_behind)

    def fill(exercises):
        nbformat.write(nb, exercises / NB)
        (exercises / "03_tma_descriptors.ipynb").symlink_to("/dev/zero")
    _participant(room, f"jupyter-hal-{uuid.uuid4().hex[:4]}", fill)
    out = tmp_path / "grades.csv"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kernels.tools.grade", str(room), "00", "03", "--out", str(out),
                           "--limit", "45"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and time.monotonic() - start < 120, done.stdout[-2000:] + done.stderr[-2000:]
    notes = {r["exercise"]: r["note"] for r in csv.DictReader(out.open())}
    assert notes == {"00": "not graded: still running after 45 s",
                     "03": "their exercises/03_tma_descriptors.ipynb could not be read (ValueError: not a "
                           "notebook file of at most 64 MiB)"}, (notes, done.stdout)


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
