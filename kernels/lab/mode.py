"""The run mode, picked once at import, before any kernel is defined.

- ``hopper``: a CUDA GPU of compute capability 9.x (H100, H200, GH200) - everything runs live.
- ``gpu``: another CUDA GPU (e.g. A100, sm_80) - no TMA engine: descriptor kernels still run,
  lowered to ordinary loads, and the notebooks show the sm_90 code compiled ahead of time.
- ``cpu``: no GPU - kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, set here,
  because Triton reads it when ``@triton.jit`` runs), sm_90 PTX/SASS is compiled ahead of time
  in a helper process, and timings come from ``results/``, labelled with device and date.

Nothing else in the course looks at the machine: it asks this module."""
import os
import sys

import torch

_AOT_WORKER = os.environ.get("COURSE_AOT_WORKER") == "1"  # the compile-only child: never interpret


def _detect_mode():
    if not torch.cuda.is_available():
        return "cpu"
    return "hopper" if torch.cuda.get_device_capability()[0] == 9 else "gpu"


MODE = "cpu" if _AOT_WORKER else _detect_mode()
if MODE == "cpu" and not _AOT_WORKER:
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        # triton.language's own helpers (tl.cdiv, ...) were already compiled-mode functions: an
        # interpreted kernel calling them fails with "Cannot call @triton.jit'd outside of the scope of a kernel"
        raise ImportError("No GPU here, so the course runs Triton in its interpreter, which must be on before "
                          "Triton is imported: put `import kernels` before `import triton` (restart the kernel "
                          "first), or start Python with TRITON_INTERPRET=1.")
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
HAS_TMA = MODE == "hopper" or (MODE == "gpu" and torch.cuda.get_device_capability()[0] >= 9)
DEVICE = "cuda" if MODE != "cpu" else "cpu"
LIVE = MODE != "cpu"  # kernels run on a CUDA GPU; its figures are measured now unless recorded_only()

_SMS = {}  # device index -> SM count: asked of the driver once per GPU, not at every persistent launch


def sm_count(t):
    """Streaming multiprocessors of the GPU that holds ``t``: the grid of a persistent kernel
    (4 programs stand in for them in the interpreter)."""
    if not t.is_cuda:
        return 4
    index = t.get_device()
    n = _SMS.get(index)
    if n is None:
        n = _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return n


def recorded_only():
    """``COURSE_RECORDED=1``: every figure is the recorded one (results/), even on a GPU, so a room of
    learners sharing one card never times an 8192^3 GEMM on it (nor each other). Read at each call, so
    setting it in a running session (or a test) takes effect; kernels still run for correctness."""
    return os.environ.get("COURSE_RECORDED", "0").strip() not in ("", "0")


def device_name():
    return torch.cuda.get_device_name() if MODE != "cpu" else "CPU (no CUDA device)"
