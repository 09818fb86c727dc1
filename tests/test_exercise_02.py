"""Exercise 02's check, fed the wrong answers learners write: each must say what kind of wrong it is
and where, not only that a number is off."""
import torch
import triton
import triton.language as tl

from conftest import report
from kernels.lessons import l02_cp_async_exercise as ex02
from kernels.ops import gemm
from kernels.ops.gemm import grouped_tile


# ---- exercise 02: the pointer GEMM's K loop ------------------------------------------------------

@triton.jit
def _no_advance_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):  # the pointers never move on: every step multiplies the first tiles
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _launch(kernel, programs=None):
    def matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, programs=programs, out=None):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype) if out is None else out
        grid, args, meta = gemm.launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages)
        kernel[(programs,) if programs else grid](*args, **meta)
        return c
    return matmul


def test_ex02_pointers_that_never_advance_are_wrong_everywhere():
    passed, text = report(ex02.check, _launch(_no_advance_kernel), _no_advance_kernel)
    assert not passed and "FAIL  matmul: values" in text
    assert "elements off by more than 10% of the typical value: rows 0-" in text, text  # where: all of C
