"""Exercise 04's check, fed the wrong answers learners write: each must say what kind of wrong it is
and where, not only that a number is off."""
import torch
import triton
import triton.language as tl

from conftest import report
from kernels.lab import tma_rules
from kernels.lessons import l04_pipelining_exercise as ex04
from kernels.ops import gemm
from kernels.ops.gemm import grouped_tile


# ---- exercise 04: one tile per program where a persistent walk is asked -----------------------------

@triton.jit
def _one_tile_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_bk, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [stride_cm, 1], [BLOCK_M, BLOCK_N])
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)  # its own tile, and no other
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k * BLOCK_K]), b_desc.load([k * BLOCK_K, pid_n * BLOCK_N]), acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


def test_ex04_a_kernel_that_is_not_persistent_leaves_tiles_never_written():
    def matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, programs=None, out=None):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype) if out is None else out
        tma_rules.ready(("A", a, [BLOCK_M, BLOCK_K]), ("B", b, [BLOCK_K, BLOCK_N]), ("C", c, [BLOCK_M, BLOCK_N]))
        _, args, meta = gemm.launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages)
        _one_tile_kernel[(programs,)](*args, **meta)
        return c
    passed, text = report(ex04.check, matmul, _one_tile_kernel)
    assert not passed and "elements never written" in text and "the grid or a store mask misses them" in text, text
