"""The course's code, in four rooms:

- ``kernels.lab``: the small library every lesson uses (mode, compiling for sm_90, instruction
  counts, timing, recorded results, shared-memory budgets, widgets, exercise checks, plots).
  It imports nothing from the rooms above it.
- ``kernels.ops``: the Triton and TileLang kernels and their launchers, one file per job.
- ``kernels.lessons``: one module per notebook, named like it (``l03_tma_descriptors`` is
  ``notebooks/03_tma_descriptors.ipynb``), with its exercise check beside it
  (``l03_tma_descriptors_exercise``).
- ``kernels.tools``: recording results on a GPU, generating exercises from solutions.

Importing the package picks the run mode (see ``kernels.lab.mode``) before any kernel exists, so
``import kernels`` comes before ``import triton`` in every notebook."""
from .lab.mode import DEVICE, HAS_TMA, INTERPRET, LIVE, MODE, device_name, recorded_only, sm_count  # noqa: F401  (first)

import torch  # noqa: E402
import triton  # noqa: E402

from .lab import alloc  # noqa: E402

if LIVE:  # CUDA's start, here rather than inside a check: a check's watch (lab/check.py) would count it as the GPU
    # falling behind. 32 processes starting at once on an H100, 16 cores busy, took up to 6 s to make their context,
    # and 24 of 32 checks whose first CUDA call it was gave up at the old 5 s limit; none did with it made first
    # (2026-12-06, issue 41)
    torch.empty(1, device=DEVICE)

if INTERPRET:  # the interpreter's float arguments typed as a launch types them, its loops on any NumPy (triton_internals)
    from .lab.triton_internals import interpret_float_arguments_as_fp32, interpret_loop_bounds_on_any_numpy
    interpret_float_arguments_as_fp32()
    interpret_loop_bounds_on_any_numpy()

_MODE_TEXT = {
    "hopper": "Hopper GPU: every kernel, measurement and widget runs live",
    "gpu": "CUDA GPU without TMA: kernels run live; TMA evidence is sm_90 code compiled ahead of time",
    "cpu": "no GPU: kernels run in the Triton interpreter at small sizes; PTX/SASS compiled for sm_90 "
           "ahead of time; timings are recorded ones, labelled",
}


def times_here(needs="gpu"):
    """Whether a cell may time kernels on this machine: a CUDA GPU (a Hopper one for ``needs="hopper"``)
    and no COURSE_RECORDED=1 (a room sharing the GPU shows recorded figures instead)."""
    from .lab import measure
    return measure.can_run(needs)


def banner():
    """One line: mode, device, versions. Every notebook starts with it (and sets the allocator that
    device-side descriptors need in the notebook's thread)."""
    alloc.install()
    cap = torch.cuda.get_device_capability() if MODE != "cpu" else None
    sm = f" (sm_{cap[0]}{cap[1]})" if cap else ""
    print(f"[{MODE}] {device_name()}{sm} | torch {torch.__version__} | triton {triton.__version__} | "
          f"{_MODE_TEXT[MODE]}")
    if recorded_only():
        print("COURSE_RECORDED=1: every timing and widget figure is the recorded one (results/), labelled so; "
              "nothing is timed on this machine" + (" (kernels still run, for correctness)" if LIVE else ""))
