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
