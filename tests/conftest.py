import matplotlib
import pytest

matplotlib.use("Agg")  # widget callbacks draw; no screen in tests

import kernels  # noqa: E402  (picks the mode before any kernel module is imported)

gpu_only = pytest.mark.skipif(kernels.MODE == "cpu", reason="needs a CUDA GPU")
cpu_only = pytest.mark.skipif(kernels.MODE != "cpu", reason="interpreter-mode behaviour")

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
