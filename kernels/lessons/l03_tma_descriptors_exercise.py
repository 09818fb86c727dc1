"""The check behind exercises/03_tma_descriptors.ipynb: a GEMM through tensor descriptors, right on
ragged shapes, compiled to TMA loads, refusing operands that break a TMA rule."""
import random

import torch

from ..lab import check as lab_check
from ..lab.errors import TMAError
from ..lab.mode import DEVICE
from ..ops import gemm


def check(matmul, kernel):
    """``matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None)`` launches ``kernel`` (args as
    gemm.matmul_kernel) into ``out``, checking the TMA rules on its operands first."""
    rng = random.Random()

    def values():  # ragged against the tiles; K and N stay multiples of 8 (16-byte row strides)
        lab_check.gemm_values(matmul, [(rng.randint(65, 300), 8 * rng.randint(9, 40), 8 * rng.randint(9, 40))
                              for _ in range(3)], 64, 64, 32, 2)
        return "within 1e-2 of torch on three ragged shapes, edge tiles included"

    def code():
        compiled = lab_check.require_dot(gemm.compile_sm90(kernel, 128, 128, 64, 3, shape=(4096, 4096, 4096)))
        counts = compiled.counts()
        if not counts["cp.async.bulk.tensor load"]:
            raise AssertionError(f"no cp.async.bulk.tensor in the sm_90 code ({counts['ld.global']} ld.global, "
                                 f"{counts['cp.async']} cp.async): load the tiles with a descriptor's .load([row, col]), "
                                 "not through pointers")
        return (f"{counts['cp.async.bulk.tensor load']} TMA loads (UTMALDG: {counts['UTMALDG']}), "
                f"{counts['mbarrier']} mbarrier operations, {counts['ld.global']} ld.global")

    def rules():
        ok = matmul(*(torch.randn(64, 64, device=DEVICE, dtype=torch.float16) for _ in range(2)), 64, 64, 32, 2)
        if ok is None or not ok.abs().max() > 0:
            raise lab_check.NotAttempted("write the kernel first")
        a = torch.randn(64, 100, device=DEVICE, dtype=torch.float16)  # rows of 200 bytes
        b = torch.randn(100, 64, device=DEVICE, dtype=torch.float16)
        sq = torch.randn(64, 64, device=DEVICE, dtype=torch.float16)
        msgs = []
        for what, x, y in (("a 200-byte row stride", a, b), ("a column-major B", sq, sq.t())):
            try:
                matmul(x, y, 64, 64, 32, 2)
            except TMAError as e:
                msgs.append(f"{what} is refused: {e}")
                continue
            raise AssertionError(f"{what} was launched: check the operands with kernels.lab.tma_rules.check_operand "
                                 "before building descriptors, so the learner sees the rule, not a crash")
        return "; ".join(msgs)

    return lab_check.run("exercise 03", [("TMA matmul: values", values), ("TMA matmul: cp.async.bulk.tensor", code),
                                     ("TMA rules on bad inputs", rules)])
