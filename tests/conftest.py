import matplotlib
import pytest

matplotlib.use("Agg")  # widget callbacks draw; no screen in tests

import kernels  # noqa: E402  (picks the mode before any kernel module is imported)

gpu_only = pytest.mark.skipif(kernels.MODE == "cpu", reason="needs a CUDA GPU")
cpu_only = pytest.mark.skipif(kernels.MODE != "cpu", reason="interpreter-mode behaviour")

def prose(notebook):
    """The markdown of ``notebooks/<notebook>.ipynb``, its whitespace runs made single spaces: what a test holds the
    figures a lesson states to (a sentence may break at any word)."""
    import nbformat
    from pathlib import Path
    cells = nbformat.read(Path(__file__).parents[1] / "notebooks" / f"{notebook}.ipynb", 4).cells
    return " ".join(" ".join(c.source for c in cells if c.cell_type == "markdown").split())


def saved_output(notebook, marker):
    """The text the committed ``notebooks/<notebook>.ipynb`` holds as the output of its code cell whose source contains
    ``marker``: the run the page was saved with, which a lesson's prose may quote (naming that run)."""
    import nbformat
    from pathlib import Path
    cells = nbformat.read(Path(__file__).parents[1] / "notebooks" / f"{notebook}.ipynb", 4).cells
    cell, = [c for c in cells if c.cell_type == "code" and marker in c.source]
    return "".join(o.get("text", "") for o in cell.outputs)


def recorded_run(lesson, run):
    """The recorded run ``run`` of ``lesson`` (kernels.lab.measure.Run, labelled), on a GPU too: a lesson's prose quotes
    the record, which a live measurement would not reproduce."""
    from kernels.lab import measure, results
    store = results.recorded()
    found = store.select(lesson, run)
    assert found, f"no recorded lesson {lesson} run {run!r}: python -m kernels.tools.record {lesson}:{run}"
    return measure.Run(found, store.label_of(found))


# what a widget's refusal must name: the limit it hit, not a traceback (test_widgets, test_browser)
REFUSAL_LIMITS = ("shared memory", "TMA", "box", "needs a CUDA GPU", "Hopper GPU")


def report(check, *args):
    """Run an exercise check as the notebook does; return (passed, what it printed)."""
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        passed = check(*args)
    return passed, out.getvalue()


def own_process_on_gpu(test):
    """On a GPU, run ``test`` in a pytest of its own: the wrong answer it feeds makes the kernel trap, and a
    trap leaves the process's CUDA context unusable for every test after it."""
    import functools
    import inspect
    import os
    import subprocess
    import sys
    if kernels.MODE == "cpu" or os.environ.get("COURSE_OWN_PROCESS") == "1":
        return test

    @functools.wraps(test)
    def alone(*args, **kwargs):
        # this test's own node, parameters included ("tests/x.py::test_y[04] (call)")
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0] if "[" in os.environ.get(
            "PYTEST_CURRENT_TEST", "") else f"{inspect.getsourcefile(test)}::{test.__name__}"
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node], text=True,
                             capture_output=True, timeout=600, env={**os.environ, "COURSE_OWN_PROCESS": "1"})
        assert run.returncode == 0, run.stdout[-4000:]
    return alone


@pytest.fixture(autouse=True)
def own_interview_progress(tmp_path, monkeypatch):
    """Scores a test gives in the interview pack go to a file of the test's own, never the tester's home."""
    monkeypatch.setenv("COURSE_PROGRESS", str(tmp_path / "interview.json"))


# ---- the parallel part's schedule (make test: pytest-xdist) ----------------------------------------------------
# A work unit goes to one worker whole: a notebook's cells (they share a kernel), a test file's tests, or, in a file
# named in SPREAD, each test alone (None) or every n-th test together (n: a module fixture worth building once a
# worker, e.g. exercise 06's CUDA extensions). Units start longest first, by the seconds tests/durations.json holds
# for each (`make test-here DURATIONS=1` on a GPU writes it anew), so the last to finish are short ones. (xdist's
# own --dist loadgroup renames a test's node id, which pytest 9 no longer lets it do: the schedule is this hook's.)
DURATIONS = __import__("pathlib").Path(__file__).with_name("durations.json")
UNKNOWN_S = 10.0  # a unit the file does not know yet (a new test file)
SPREAD = {f"tests/test_{name}.py": n for name, n in [
    ("exercise_01", None), ("exercise_02", None), ("exercise_03", None), ("exercise_04", None),
    ("exercise_05", None), ("exercise_06", 3), ("exercise_08", None), ("exercise_09", None), ("mutants", None),
    ("notebooks", None), ("twin", None), ("widgets", None)]}


def units(nodeids):
    """The work unit of each node id: its file, itself, or one of n groups of its file (by a hash of the id, so that
    the controller and the workers, which see the tests in different orders, agree)."""
    import zlib
    found = []
    for nodeid in nodeids:
        path = nodeid.split("::")[0]
        n = SPREAD.get(path, 0)
        found.append(path if path not in SPREAD else nodeid if n is None else
                     f"{path}#{zlib.crc32(nodeid.encode()) % n}")
    return found


_UNIT = {}  # node id -> its work unit, in this process


def pytest_collection_modifyitems(config, items):
    """Longest units first; a unit's own tests keep their order (a notebook's cells run in turn)."""
    import json
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    found = units([item.nodeid for item in items])
    _UNIT.update(zip((item.nodeid for item in items), found))
    rank = {u: (-seconds.get(u, UNKNOWN_S), first) for first, u in reversed(list(enumerate(found)))}
    items[:] = [item for _, item in sorted(enumerate(items), key=lambda p: (rank[found[p[0]]], p[0]))]


@pytest.hookimpl(optionalhook=True)  # a run without xdist (the timing part) has no such hook
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling (a scope goes to one worker whole, in the order collected) with ``units`` as scopes."""
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            if nodeid not in _UNIT:  # the controller collects nothing: it learns the units here, once
                _UNIT.update(zip(self.collection, units(self.collection)))
            return _UNIT[nodeid]
    config.option.loadscopereorder = False  # the collection's order is the schedule's
    return Units(config, log)


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="JSON", help="write each work unit's seconds (setup, call and "
                     "teardown of its tests) to JSON: the order of the next runs (tests/durations.json)")


_SPENT = {}


class _Spent:
    """Each test's setup, call and teardown added to its unit. A plugin of its own: a conftest's hook about a test
    hears only the tests below the conftest's folder, not the notebooks'."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        yield
        unit = _UNIT.get(item.nodeid, item.nodeid.split("::")[0])
        _SPENT[unit] = _SPENT.get(unit, 0.0) + call.duration


def pytest_configure(config):
    if config.getoption("--record-durations"):
        config.pluginmanager.register(_Spent(), "course-durations")


def _parts(out):
    """The workers' shares of ``--record-durations out``."""
    from pathlib import Path
    return Path(out).parent.glob(Path(out).name + ".gw*")


def pytest_sessionstart(session):
    """The controller clears what a run that died may have left of its workers' durations."""
    out = session.config.getoption("--record-durations")
    if out and not hasattr(session.config, "workerinput"):
        for part in _parts(out):
            part.unlink()


def pytest_sessionfinish(session):
    """Each process writes what its tests spent (``--record-durations``); the controller, last, adds them up."""
    import json
    from pathlib import Path
    out = session.config.getoption("--record-durations")
    if not out:
        return
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if worker:
        Path(f"{out}.{worker}").write_text(json.dumps(_SPENT))
        return
    spent = dict(_SPENT)
    for part in _parts(out):
        for unit, s in json.loads(part.read_text()).items():
            spent[unit] = spent.get(unit, 0.0) + s
        part.unlink()
    Path(out).write_text(json.dumps({u: round(s, 1) for u, s in sorted(spent.items())}, indent=0) + "\n")
