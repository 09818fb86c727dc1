"""The exercise checks, fed the wrong answers learners write: each must say what kind of wrong it is
and where, not only that a number is off. (More of the catalogue: issue 11.)"""
import contextlib
import io

import torch
import triton
import triton.language as tl

from kernels.lab import tma_rules
from kernels.lessons import l00_memory_wall_exercise as ex00, l02_cp_async_exercise as ex02
from kernels.lessons import l03_tma_descriptors_exercise as ex03, l04_pipelining_exercise as ex04
from kernels.ops import gemm
from kernels.ops.gemm import grouped_tile


def _report(check, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        passed = check(*args)
    return passed, out.getvalue()


# ---- exercise 00 ---------------------------------------------------------------------------------

def _intensity(M, N, K, e):
    return 2 * M * N * K / ((M * K + K * N + M * N) * e)


@triton.jit
def _stub_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    raise NotImplementedError()  # nbgrader's stub, as the exercise hands it out


def _stub_axpy(alpha, x, y, out):
    raise NotImplementedError()


def test_ex00_roofline_as_a_sum_is_named():
    passed, text = _report(ex00.check, _intensity, lambda f, b, tf, tb: (f / (tf * 1e12) + b / (tb * 1e12)) * 1e3,
                           _stub_axpy, _stub_kernel)
    assert not passed and "the larger of the two times, not their sum" in text
    assert "todo  axpy: compiled code: not attempted yet" in text  # the stub is a stub, not an error


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
    passed, text = _report(ex02.check, _launch(_no_advance_kernel), _no_advance_kernel)
    assert not passed and "FAIL  matmul: values" in text
    assert "elements off by more than 10% of the typical value: rows 0-" in text, text  # where: all of C


# ---- exercise 03: pointer loads where TMA is asked -------------------------------------------------

def test_ex03_pointer_loads_are_named_in_the_compiled_code():
    def matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype) if out is None else out
        tma_rules.ready(("A", a, [BLOCK_M, BLOCK_K]), ("B", b, [BLOCK_K, BLOCK_N]), ("C", c, [BLOCK_M, BLOCK_N]))
        return gemm.matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=c)
    passed, text = _report(ex03.check, matmul, gemm.matmul_kernel)
    assert not passed and "no cp.async.bulk.tensor in the sm_90 code" in text and "load the tiles with a descriptor" in text


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
    passed, text = _report(ex04.check, matmul, _one_tile_kernel)
    assert not passed and "elements never written" in text and "the grid or a store mask misses them" in text, text
