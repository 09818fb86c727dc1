"""The check behind exercises/01_naive_loads.ipynb: a tile copy, exact on ragged shapes and compiled
to 16-byte loads."""
import random

import torch

from ..lab import aot, check as lab_check
from ..lab.mode import DEVICE


def _ragged_shapes(rng, n=3):
    """Shapes that are not multiples of any tile: the edges need masks."""
    return [(rng.randint(65, 400), rng.randint(65, 400)) for _ in range(n)]


def check(copy_2d, kernel):
    """``copy_2d(x, out, BLOCK_M, BLOCK_N)`` launches ``kernel`` to copy a 2D tensor tile by tile."""
    rng = random.Random()

    def values():
        for (M, N), dtype in zip(_ragged_shapes(rng), (torch.float16, torch.float32, torch.float16)):
            x = torch.randn(M, N, device=DEVICE, dtype=dtype)
            out = lab_check.poison_like(x)
            copy_2d(x, out, 32, 64)
            lab_check.compare(f"copy of {M}x{N} {dtype}", out, x, 0.0)
        return "exact on three ragged shapes, fp16 and fp32"

    def code():
        x = torch.empty(4, dtype=torch.float16, device=DEVICE)
        compiled = aot.compile_sm90(kernel, x, x, 16384, 16384, 16384, 16384, BLOCK_M=64, BLOCK_N=128, num_warps=4)
        counts = compiled.counts()
        if not counts["ld.global"]:
            raise lab_check.NotAttempted("the kernel loads nothing")
        narrow = {k: v for k, v in counts.items() if k.startswith("ld.global ") and k != "ld.global 128-bit" and v}
        if narrow or not counts["ld.global 128-bit"]:
            raise AssertionError(f"the loads compile to {narrow or counts}, not 16-byte vectors: index the "
                                 "contiguous dimension with unit stride (x_ptr + rows * stride + cols), so the "
                                 "compiler can prove that 8 neighbouring fp16 elements are adjacent")
        return f"{counts['ld.global 128-bit']} x 128-bit ld.global per thread for a 64x128 fp16 tile"

    return lab_check.run("exercise 01", [("copy: values", values), ("copy: 16-byte loads", code)])
