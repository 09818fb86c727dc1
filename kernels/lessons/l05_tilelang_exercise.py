"""The check behind exercises/05_tilelang.ipynb: a TileLang GEMM whose CUDA has TMA loads and a ring
that grows with the stage count; its values on a Hopper GPU."""
import random
import re

import torch

from ..lab import check as lab_check
from ..lab.errors import CourseError
from ..lab.mode import MODE
from ..ops import tilelang_kernels as tk


def check(program):
    """``program(M, N, K, block_M, block_N, block_K, stages)`` returns a TileLang prim_func computing
    C = A @ B (fp16 in and out); it is compiled for sm_90a here, and run on a Hopper GPU if there is one."""
    rng = random.Random()

    def emitted(*shape_tile_stages):
        func = program(*shape_tile_stages)
        try:
            kernel = tk.build(func)
        except CourseError as e:
            raise AssertionError(str(e)) from None
        src = kernel.get_kernel_source()
        if "wgmma" not in src and "mma" not in src:
            raise lab_check.NotAttempted("no T.gemm in the emitted CUDA: the kernel body is still the stub")
        return kernel, src

    def tma():
        _, src = emitted(1024, 1024, 1024, 128, 128, 64, 3)
        if "tma_load" not in src:
            raise AssertionError("no tma_load in the emitted CUDA: copy the A and B tiles into T.alloc_shared buffers "
                                 "with T.copy inside the T.Pipelined loop; outside a pipelined loop TileLang loads "
                                 "global -> shared with plain vector loads")
        return f"{src.count('tma_load')} tma_load call sites, {src.count('.wait(')} barrier waits, wgmma"

    def ring():
        barriers = {}
        for stages in (1, 3):
            _, src = emitted(1024, 1024, 1024, 128, 128, 64, stages)
            found = re.search(r"mbarrier_mem\[(\d+)\]", src)
            barriers[stages] = int(found.group(1)) if found else 0
        if barriers[3] <= barriers[1]:
            raise AssertionError(f"{barriers[1]} mbarriers at 1 stage and {barriers[3]} at 3: the stage count does "
                                 "not reach the loop; pass it as T.Pipelined(..., num_stages=stages)")
        return f"{barriers[1]} mbarriers at 1 stage, {barriers[3]} at 3: a full/empty pair per buffer of the ring"

    def values():  # ragged against the tiles; N and K multiples of 8 (16-byte rows for TMA)
        for M, N, K in [(rng.randint(200, 700), 8 * rng.randint(30, 90), 8 * rng.randint(30, 90)) for _ in range(2)]:
            kernel, _ = emitted(M, N, K, 128, 128, 64, 3)
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            c = lab_check.poisoned(M, N, device="cuda", padded=False)  # TileLang takes C contiguous
            kernel(a, b, c)
            lab_check.compare(f"{M}x{K} @ {K}x{N}", c, a.float() @ b.float(), 1e-2)
        return "within 1e-2 of torch on two ragged shapes (TMA fills the edges with zeros)"

    checks = [("TileLang GEMM: tma_load in the CUDA", tma), ("stages: the ring grows", ring)]
    if MODE == "hopper":
        checks.append(("TileLang GEMM: values", values))
    else:
        print("(no Hopper GPU here: the emitted CUDA is checked, the values are checked on one)")
    return lab_check.run("exercise 05", checks)
