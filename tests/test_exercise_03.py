"""Exercise 03's check, fed the wrong answers learners write: each must say what kind of wrong it is
and where, not only that a number is off."""
import torch

from conftest import report
from kernels.lab import tma_rules
from kernels.lessons import l03_tma_descriptors_exercise as ex03
from kernels.ops import gemm


# ---- exercise 03: pointer loads where TMA is asked -------------------------------------------------

def test_ex03_pointer_loads_are_named_in_the_compiled_code():
    def matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype) if out is None else out
        tma_rules.ready(("A", a, [BLOCK_M, BLOCK_K]), ("B", b, [BLOCK_K, BLOCK_N]), ("C", c, [BLOCK_M, BLOCK_N]))
        return gemm.matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=c)
    passed, text = report(ex03.check, matmul, gemm.matmul_kernel)
    assert not passed and "no cp.async.bulk.tensor in the sm_90 code" in text and "load the tiles with a descriptor" in text
