import matplotlib
import pytest

matplotlib.use("Agg")  # widget callbacks draw; no screen in tests

import kernels  # noqa: E402  (picks the mode before any kernel module is imported)

gpu_only = pytest.mark.skipif(kernels.MODE == "cpu", reason="needs a CUDA GPU")
cpu_only = pytest.mark.skipif(kernels.MODE != "cpu", reason="interpreter-mode behaviour")
