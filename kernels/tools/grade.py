"""Collect a workshop room's exercises and grade them with nbgrader, partial credit per check.

    sudo python -m kernels.tools.grade /srv/room 00 03 --out grades.csv     # the hub's folder, the exercises

For each participant of the room (a home under <room>/home, made by workshop/jupyterhub_config.py) and each
exercise asked, nbgrader's ``generate_assignment`` and ``autograde`` run in a grading folder of that participant's
own, ``<room>/grading/<name>``: their ``exercises/NN_*.ipynb`` is the submission, ``solutions/NN_*.ipynb`` the
source. nbgrader puts the graded cell back as the source has it, hidden test included: ``passed.score(points)``,
the exercise's points times the share of its checks that pass, which nbgrader takes as the cell's partial credit.
The grades are read from each folder's gradebook and written as one CSV: participant, exercise, points, of.

Autograding runs the participant's code. As root (a hub that separates participants), each participant's grading
runs as their own Unix user ``jupyter-<name>``, reading their notebooks included (root only makes their grading
folder and reads back the numbers): nobody's code runs as root or reaches another's grade, and a link into another's
home is read with the participant's own rights. Without root (a hub that does not separate them) it runs as you.
Either way a participant who wants a full score can fake one from their own code (as in any notebook autograder):
the grade is feedback for the room, not an exam.
Participants' kernels run with COURSE_RECORDED=1: the checks run, nothing is timed."""
import argparse
import csv
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "jupyter-"  # workshop/jupyterhub_config.py's Unix user for a participant
MAX_NOTEBOOK = 64 * 2**20  # a notebook with its outputs; past it, the file is not graded


def participants(room):
    """{name: (their home, their Unix user or None)} of the room's homes."""
    found = {}
    for home in sorted((Path(room) / "home").iterdir()):
        if not home.is_dir():
            continue
        try:
            user = pwd.getpwnam(home.name) if home.name.startswith(PREFIX) else None
        except KeyError:
            user = None
        found[home.name.removeprefix(PREFIX) if user else home.name] = (home, user)
    return found


def numbers():
    """The course's exercise numbers, in order."""
    return sorted(p.name[:2] for p in ROOT.glob("solutions/[0-9][0-9]_*.ipynb"))


def exercise(number):
    """The notebook's file name of exercise ``number`` (00-08)."""
    found = sorted((ROOT / "solutions").glob(f"{number}_*.ipynb"))
    if not found:
        raise SystemExit(f"no exercise {number}: the course has {', '.join(numbers())}")
    return found[0].name


def _course(folder, name, home, notebooks):
    """The nbgrader course folder of one participant, made by them: the sources, and their submissions (one they
    cannot read, or that is not there, left out). Run as the participant: a link in their home to a file of someone
    else's is read with their rights, not root's."""
    for old in list(folder.iterdir()):
        shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    missing = {}
    for nb in notebooks:
        assignment = nb[:2]
        (folder / "source" / assignment).mkdir(parents=True)
        shutil.copy(ROOT / "solutions" / nb, folder / "source" / assignment / nb)
        (folder / "submitted" / name / assignment).mkdir(parents=True)
        try:
            (folder / "submitted" / name / assignment / nb).write_bytes(_notebook_bytes(home / "exercises" / nb))
        except (OSError, ValueError) as e:
            missing[nb] = f"their exercises/{nb} could not be read ({type(e).__name__}{': ' + str(e) if isinstance(e, ValueError) else ''})"
    return missing


def _notebook_bytes(path, limit=MAX_NOTEBOOK):
    """The bytes of a notebook: a regular file (not a device or a pipe) of at most ``limit`` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise ValueError(f"not a notebook file of at most {limit // 2**20} MiB")
        return f.read(limit + 1)[:limit]


def grade_one(room, name, home, user, notebooks, timeout=600, gpu=None, limit=1800):
    """Grade ``name``'s notebooks in their grading folder, in a process of theirs (as ``user`` when given: root
    only makes the folder and hands it over), ended with everything it started after ``limit`` seconds:
    {notebook: [points, of] or a note}."""
    folder = Path(room) / "grading" / name
    folder.parent.mkdir(mode=0o711, exist_ok=True)
    empty = folder.parent / ".no-config"  # Jupyter's config folder for the grading: root's, and empty
    empty.mkdir(mode=0o755, exist_ok=True)
    folder.mkdir(mode=0o700, exist_ok=True)
    # nbgrader runs alembic, and Jupyter the kernel, from this Python's folder
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {"PATH": path, "HOME": str(folder), "COURSE_RECORDED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "TRITON_CACHE_DIR": str(folder / ".triton"), "MPLCONFIGDIR": str(folder / ".matplotlib"),
           "JUPYTER_RUNTIME_DIR": str(folder / ".runtime"), "JUPYTER_CONFIG_DIR": str(empty),
           "LANG": os.environ.get("LANG", "C.UTF-8")}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    elif "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    as_user = {}
    if user:
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    # no terminal and a session of its own (their code must not reach the instructor's terminal, and all of it is
    # ended together); its output goes to files, not pipes, which a process it left behind could hold open
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen([sys.executable, "-m", "kernels.tools.grade", "--participant", str(folder), name,
                                  str(home), *notebooks, "--timeout", str(timeout)], cwd=folder.parent, env=env,
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True, **as_user)
        try:
            child.wait(limit)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(child.pid, signal.SIGKILL)  # what is left of it: kernels included
        except ProcessLookupError:
            pass
        child.wait()
        killed = child.returncode == -signal.SIGKILL
        try:
            got = json.loads(_tail(out).strip().splitlines()[-1])
            return {nb: _checked(got[nb]) if nb in got else f"not graded: still running after {limit} s"
                    for nb in notebooks}
        except Exception:  # noqa: BLE001 - whatever their process printed, it is not a grade
            why = f"still running after {limit} s" if killed else _tail(err).strip()[-300:]
            return {nb: _note(f"grading failed: {why}") for nb in notebooks}


def _tail(f, size=64 * 2**10):
    """The last ``size`` bytes a child wrote to ``f``, as text."""
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - size))
    return f.read().decode(errors="replace")


def _checked(grade):
    """What a participant's grading process reported, as finite numbers or a note (it ran their code: trust no type)."""
    if isinstance(grade, list) and len(grade) == 2:
        points, of = float(grade[0]), float(grade[1])
        if not (0 <= points <= of < 1e6):
            raise ValueError(f"not a grade: {points} of {of}")
        return [points, of]
    return _note(grade)


def _note(text):
    """A note safe in a CSV a spreadsheet opens (no formula) and on a terminal (no control characters)."""
    text = "".join(ch for ch in str(text)[:300] if ch.isprintable())
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def participant(folder, name, home, notebooks, timeout):
    """In the participant's process: their course folder, nbgrader's two steps per notebook, the grades as JSON."""
    folder, home = Path(folder), Path(home)
    out = _course(folder, name, home, notebooks)
    print(json.dumps(out), flush=True)  # what is known so far, after every notebook: the grader keeps the last
    nbgrader = [sys.executable, "-m", "nbgrader"]
    for nb in notebooks:
        if nb in out:
            continue
        assignment = nb[:2]
        for step in (["generate_assignment", assignment, "--force"],
                     ["autograde", assignment, "--force", f"--student={name}", f"--Execute.timeout={timeout}"]):
            done = subprocess.run(nbgrader + step + [f"--CourseDirectory.root={folder}"], cwd=folder,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if done.returncode:
                out[nb] = f"nbgrader {step[0]} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
                break
        else:
            out[nb] = list(read_grade(folder, name, assignment, nb))
        print(json.dumps(out), flush=True)


def read_grade(folder, name, assignment, nb):
    """(points, of) of one graded notebook, from the gradebook nbgrader wrote in ``folder``."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gb:
        graded = gb.find_submission_notebook(nb[:-len(".ipynb")], assignment, name)
        return graded.score, graded.max_score


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--participant"]:  # the process that grades one participant, as them
        folder, name, home, *rest = argv[1:]
        notebooks = [a for a in rest if a.endswith(".ipynb")]
        return participant(folder, name, home, notebooks, int(rest[rest.index("--timeout") + 1]))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("room", help="the hub's folder (where it was started: it holds home/)")
    p.add_argument("numbers", nargs="*", help="the exercises to grade (00-08); all when none")
    p.add_argument("--out", default="grades.csv")
    p.add_argument("--jobs", type=int, default=4, help="participants graded at once")
    p.add_argument("--timeout", type=int, default=600, help="seconds a cell may run")
    p.add_argument("--gpu", help="CUDA_VISIBLE_DEVICES for the grading (default: as this process has it)")
    p.add_argument("--limit", type=int, default=1800, help="seconds one participant's grading may take, in all")
    args = p.parse_args(argv)
    if not (Path(args.room) / "home").is_dir():
        raise SystemExit(f"{args.room} has no home/: give the folder the hub was started in")
    notebooks = [exercise(n) for n in args.numbers or numbers()]
    people = participants(args.room)
    if not people:
        raise SystemExit(f"{args.room}/home holds no participant's home: nobody has logged in to this room")
    if os.geteuid() != 0:
        print("[grade] not root: every participant's code runs as you", file=sys.stderr)
    elif any(user is None for _, user in people.values()):
        raise SystemExit("as root, every participant is graded as their own Unix user; these homes have none: "
                         + ", ".join(n for n, (_, u) in people.items() if u is None))
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        graded = dict(zip(people, pool.map(lambda n: grade_one(args.room, n, *people[n], notebooks, args.timeout,
                                                               args.gpu, args.limit), people)))
    out = Path(args.out)
    written = out.with_name(f".{out.name}.{os.getpid()}")  # then moved over: a link at --out is replaced, not followed
    with open(written, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["participant", "exercise", "points", "of", "note"])
        for name, got in graded.items():
            for nb, grade in got.items():
                row = [name, nb[:2], *grade, ""] if isinstance(grade, list) else [name, nb[:2], "", "", grade]
                w.writerow(row)
    os.replace(written, out)
    for name, got in graded.items():
        print(f"{name:26s}", "  ".join(f"{nb[:2]}: {g[0]:g}/{g[1]:g}" if isinstance(g, list) else f"{nb[:2]}: {g}"
                                        for nb, g in got.items()))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
