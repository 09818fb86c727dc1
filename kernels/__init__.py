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
from .lab.mode import DEVICE, HAS_TMA, INTERPRET, LIVE, MODE, banner, device_name, sm_count  # noqa: F401
