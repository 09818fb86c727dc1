"""Shared memory: what a tile configuration asks for, against what one block may have.

One rule for every lesson: the compiled kernel's own figure decides where there is one (Triton
reports it; it includes barriers and any buffer the compiler adds), and the model - stages x one
stage's tiles, plus the output tile where the kernel stages it through shared memory for a TMA
store - is shown beside it, so a learner can see where the bytes go."""
from dataclasses import dataclass

import torch

from .errors import SharedMemoryError
from .mode import MODE

# per-block limit with opt-in on Hopper: 227 KB = 232,448 bytes (an H200 reports exactly this)
HOPPER_LIMIT = 232_448


def limit():
    """Bytes of shared memory one block may use on this GPU (the Hopper limit with no GPU)."""
    if MODE == "cpu":
        return HOPPER_LIMIT
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return getattr(props, "shared_memory_per_block_optin", HOPPER_LIMIT)


def gemm_stage_bytes(BLOCK_M, BLOCK_N, BLOCK_K, elem_bytes=2):
    """One pipeline stage of a GEMM holds an A tile (BM x BK) and a B tile (BK x BN)."""
    return (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * elem_bytes


@dataclass
class Budget:
    stages: int
    stage_bytes: int
    output_tile: int = 0  # bytes of the output tile staged in shared memory for a TMA store
    compiled: int = None  # what the compiled kernel really asks for, when known
    limit: int = None

    def __post_init__(self):
        self.limit = self.limit or limit()

    @property
    def model(self):
        return self.stages * self.stage_bytes + self.output_tile

    @property
    def used(self):
        return self.compiled if self.compiled is not None else self.model

    @property
    def fits(self):
        return self.used <= self.limit

    def parts(self):
        tile = f" + {self.output_tile / 1024:.1f} KiB output tile" if self.output_tile else ""
        return f"{self.stages} x {self.stage_bytes / 1024:.1f} KiB{tile}"

    def text(self, width=40):
        filled = min(width, round(width * self.used / self.limit))
        bar = "#" * filled + "." * (width - filled)
        real = f", compiled kernel asks {self.compiled / 1024:.1f} KiB" if self.compiled is not None else ""
        return (f"shared memory [{bar}] {self.parts()} = {self.model / 1024:.1f} KiB by the model{real}; "
                f"limit {self.limit / 1024:.1f} KiB per block")

    def require(self):
        if not self.fits:
            raise SharedMemoryError(
                f"{self.used / 1024:.1f} KiB of shared memory needed, {self.limit / 1024:.1f} KiB available "
                f"per block: use fewer stages or a smaller tile ({self.parts()} by the model)")
        return self


def overflow(e, what, stages, stage_bytes, output_tile=0):
    """Triton's OutOfResources ``e``, raised by a launch, as the course's SharedMemoryError: the compiled
    kernel's figure and this GPU's limit (both from ``e``) with the model's budget (``stages`` x
    ``stage_bytes`` + ``output_tile``) beside them. Launchers call it in the ``except`` around their
    launch, so nothing here runs on the happy path. Any other resource (threads, tensor memory) comes
    back as Triton raised it."""
    if e.name != "shared memory":
        return e
    budget = Budget(stages, stage_bytes, output_tile, compiled=e.required, limit=e.limit)
    return SharedMemoryError(f"{what} does not fit: {e.required / 1024:.1f} KiB of shared memory asked, "
                             f"{e.limit / 1024:.1f} KiB per block on this GPU (model: {budget.parts()} = "
                             f"{budget.model / 1024:.1f} KiB) - use fewer stages or a smaller tile")
