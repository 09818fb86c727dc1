"""Exercise 03's check, fed the wrong answers learners write for a whole linear layer through tensor
descriptors (y = x @ W^T + b, W stored N x K, no masks): each must say what kind of wrong it is and where,
or what the compiled code lacks. The launcher is the exercise's own; only the kernel is wrong."""
import random

import pytest
import triton
import triton.language as tl

from conftest import own_process_on_gpu, report
from kernels.lab.mode import INTERPRET
from kernels.lessons import l03_tma_descriptors_exercise as ex03

# Every wrong kernel below is the solution with one mistake, marked "# <- ...".


def _check(kernel):
    def linear(x, w, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None):
        return ex03.launch(kernel, x, w, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=out)
    return report(ex03.check, linear, kernel)


@triton.jit
def _right(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), tl.trans(w_desc.load([off_n, k * BLOCK_K])), acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_the_right_kernel_passes():
    passed, text = _check(_right)
    assert passed and "every byte through a tensor map" in text, text


# ---- W described as lesson 03's B: K x N --------------------------------------------------------

@triton.jit
def _w_as_kn(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [K, N], [stride_wn, 1], [BLOCK_K, BLOCK_N])  # <- W is N x K
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([k * BLOCK_K, off_n]), acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_w_described_as_k_by_n_is_named():
    passed, text = _check(_w_as_kn)
    assert not passed and "FAIL  linear layer: values, whole tiles" in text, text
    if INTERPRET:
        assert "the descriptor of W has shape [" in text and "describe it as stored, shape [N, K]" in text, text
    else:
        assert "check how W is indexed (W is N x K: describe it as stored, shape [N, K]" in text, text


# ---- the W tile not transposed ------------------------------------------------------------------

@triton.jit
def _no_transpose(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]), acc)  # <- no .T
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_an_untransposed_w_tile_is_named():
    passed, text = _check(_no_transpose)
    assert not passed and "FAIL  linear layer: values, whole tiles" in text, text
    assert "equal reduction dimensions" in text and "the W tile loaded as W is stored is BLOCK_N x BLOCK_K" in text, text
    assert "FAIL  linear layer: through TMA only" in text, text


# ---- W through pointers (cp.async), y through pointers (st.global), the bias through a pointer --

@triton.jit
def _pointer_w(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    rn = off_n + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + rk
        w = tl.load(w_ptr + rn[:, None] * stride_wn + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K),
                    other=0.0)  # <- W's tiles through pointers
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w.T, acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_w_through_pointers_is_named_in_the_compiled_code():
    passed, text = _check(_pointer_w)
    assert not passed and "pass  linear layer: values, ragged edges" in text, text  # right numbers
    assert "FAIL  linear layer: through TMA only" in text and "a tile of x or W still comes through pointers" in text, text


@triton.jit
def _pointer_store(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    rm, rn = off_m + tl.arange(0, BLOCK_M), off_n + tl.arange(0, BLOCK_N)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))  # <- y through pointers


def test_ex03_a_pointer_store_is_named_in_the_compiled_code():
    passed, text = _check(_pointer_store)
    assert not passed and "pass  linear layer: values, ragged edges" in text, text
    assert "y is stored through pointers" in text, text


@triton.jit
def _pointer_bias(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    rn = off_n + tl.arange(0, BLOCK_N)
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :].to(tl.float32)  # <- a pointer and a mask
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_a_pointer_bias_is_named_in_the_compiled_code():
    passed, text = _check(_pointer_bias)
    assert not passed and "pass  linear layer: values, ragged edges" in text, text
    assert "ld.global: something is still loaded through a pointer (the bias?" in text, text


# ---- the bias: missing, or along the wrong axis -------------------------------------------------

@triton.jit
def _no_bias(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))  # <- no bias


def test_ex03_a_missing_bias_is_named():
    passed, text = _check(_no_bias)
    assert not passed and "the bias is missing" in text, text


@triton.jit
def _bias_by_row(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_M])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    acc += b_desc.load([off_m])[:, None].to(tl.float32)  # <- one value per row
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_a_bias_along_the_rows_is_named():
    passed, text = _check(_bias_by_row)
    if INTERPRET:
        assert not passed and "the tile loaded from b spans 128 along N" in text and "BLOCK_M in place of BLOCK_N" in text
    else:
        assert not passed and "the bias is added along the rows" in text, text


# ---- a descriptor as wide as the row stride: the zero fill never happens ------------------------

@triton.jit
def _stride_as_extent(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, stride_xm], [stride_xm, 1], [BLOCK_M, BLOCK_K])  # <- [M, K]
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, stride_wn], [stride_wn, 1], [BLOCK_N, BLOCK_K])  # <- [N, K]
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_a_descriptor_reaching_into_the_padding_is_named():
    passed, text = _check(_stride_as_extent)
    assert not passed and "a descriptor's shape reaches past the tensor into its padding" in text, text
    if INTERPRET:
        assert "the descriptor of x has shape [" in text and "describe it as stored, shape [M, K]" in text, text
    else:
        assert "elements are NaN" in text and "with zeros instead of NaN past the edges the result is right" in text


@triton.jit
def _y_as_wide_as_its_stride(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, stride_ym], [stride_ym, 1], [BLOCK_M, BLOCK_N])  # <- [M, N]
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_a_store_descriptor_wider_than_y_writes_into_its_padding():
    passed, text = _check(_y_as_wide_as_its_stride)
    if INTERPRET:  # the trace sees the descriptor's shape even where the values come out right
        assert not passed and "the descriptor of y has shape [" in text and "shape [M, N]" in text, text
    else:
        assert not passed and "pass  linear layer: values, whole tiles" in text, text  # inside, all is well
        assert "elements written outside the output" in text and "the row stride here is" in text, text
        assert "tiles that lie inside the tensors came out right, so the edges are the problem" in text, text


# ---- a K coordinate in steps, not elements -------------------------------------------------------

@triton.jit
def _k_in_steps(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k]), w_desc.load([off_n, k]).T, acc)  # <- k, not k * BLOCK_K
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


@own_process_on_gpu
def test_ex03_a_k_coordinate_in_steps_is_named():
    passed, text = _check(_k_in_steps)
    assert not passed and "FAIL  linear layer: values, whole tiles" in text, text
    # the interpreter refuses a load at a coordinate that is not 16-byte aligned; on the H200 the kernel traps
    assert ("a load's coordinates are in elements: step k starts at k * BLOCK_K" in text
            or "instead of elements, k * BLOCK_K" in text), text


# ---- an fp16 accumulator ------------------------------------------------------------------------

@triton.jit
def _fp16_sum(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)  # <- an fp16 accumulator
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc, out_dtype=tl.float16)
    out = acc.to(tl.float32) + b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], out.to(y_ptr.dtype.element_ty))


def test_ex03_fp16_accumulation_is_named():
    passed, text = _check(_fp16_sum)
    assert not passed and "into float32" in text and "errors the size of fp16 rounding: accumulate in fp32" in text, text


# ---- a block shape with BLOCK_M where BLOCK_N belongs: right on square tiles only -------------------

@triton.jit
def _bias_box_of_block_m(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_M])  # <- [BLOCK_N]: one value per column
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_a_bias_box_of_block_m_is_named():
    passed, text = _check(_bias_box_of_block_m)
    assert not passed and "FAIL  linear layer: values, whole tiles" in text, text
    if INTERPRET:
        assert "the tile loaded from b spans 128 along N where BLOCK_N = 64 belongs: BLOCK_M in place of BLOCK_N" in text
    else:
        assert "b_desc's block shape is [BLOCK_M]; the bias has one value per column of the tile: [BLOCK_N]" in text, text


@triton.jit
def _w_box_of_block_m(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_M, BLOCK_K])  # <- [BLOCK_N, BLOCK_K]
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_a_w_box_of_block_m_rows_is_named():
    passed, text = _check(_w_box_of_block_m)
    assert not passed and "FAIL  linear layer: values, whole tiles" in text, text
    if INTERPRET:
        assert "the tile loaded from W spans 128 along N where BLOCK_N = 64 belongs: BLOCK_M in place of BLOCK_N" in text
    else:
        assert "w_desc's block shape is [BLOCK_M, BLOCK_K]; W's tile is [BLOCK_N, BLOCK_K]" in text, text


@triton.jit
def _bias_at_off_m(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    acc += b_desc.load([off_m])[None, :].to(tl.float32)  # <- off_n: the bias goes with the columns
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


def test_ex03_a_bias_loaded_at_the_row_offset_is_named():
    passed, text = _check(_bias_at_off_m)
    if INTERPRET:
        assert not passed and "b's column coordinate (N), the offset of the program's tile, is off_m" in text, text
        assert "where off_n = pid_n * BLOCK_N belongs: pid_m in place of pid_n" in text, text
    else:
        assert not passed and "each tile's bias is loaded at its row offset, b_desc.load([off_m])" in text, text


# ---- the stretch: host-side descriptors ------------------------------------------------------------

def _host(kernel):
    """The stretch's launcher (the solution notebook's linear_host, without the learner-facing rule checks)."""
    def linear_host(x, w, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None):
        import torch
        from triton.tools.tensor_descriptor import TensorDescriptor
        y = torch.empty((x.shape[0], w.shape[0]), device=x.device, dtype=x.dtype) if out is None else out
        descs = [TensorDescriptor.from_tensor(t, box) for t, box in
                 ((x, [BLOCK_M, BLOCK_K]), (w, [BLOCK_N, BLOCK_K]), (b, [BLOCK_N]), (y, [BLOCK_M, BLOCK_N]))]
        M, K, N = x.shape[0], x.shape[1], w.shape[0]
        kernel[(triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)](
            *descs, M, N, K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8, num_stages=stages)
        return y
    return linear_host


@triton.jit
def _host_rows_by_block_n(x_desc, w_desc, b_desc, y_desc, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_N  # <- the row offset counts BLOCK_N, not BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), w_desc.load([off_n, k * BLOCK_K]).T, acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_desc.dtype))


def test_ex03_stretch_a_row_offset_in_block_n_fails_on_the_tall_shape():
    passed, text = report(ex03.stretch, _host(_host_rows_by_block_n), _host_rows_by_block_n)
    assert "FAIL  host descriptors: values" in text, text


def test_ex03_ragged_shapes_tell_m_n_and_k_apart():
    """On every draw, each pair of M, N and K differs in its steps of BLOCK_K and in its tiles, on some shape: a K
    loop, a bound or a tile count written with the wrong size cannot pass."""
    rng = random.Random()
    steps = lambda n, b: -(-n // b)  # noqa: E731
    for _ in range(500):
        shapes = ex03.ragged_shapes(rng)
        for b in (ex03.TILE[2], ex03.TILE[0], ex03.TILE[1]):
            for i, j in ((0, 1), (0, 2), (1, 2)):
                assert any(steps(s[i], b) != steps(s[j], b) for s in shapes), (shapes, b, i, j)
        assert all(s[1] % 8 == 0 for s in shapes)


# ---- W's descriptor given M rows in place of N: too far on one shape, too short on another -------------

@triton.jit
def _w_rows_m(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tl.program_id(0) // tiles_n) * BLOCK_M
    off_n = (tl.program_id(0) % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [M, K], [stride_wn, 1], [BLOCK_N, BLOCK_K])  # <- M rows, not N
    b_desc = tl.make_tensor_descriptor(b_ptr, [N], [1], [BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(x_desc.load([off_m, k * BLOCK_K]), tl.trans(w_desc.load([off_n, k * BLOCK_K])), acc)
    acc += b_desc.load([off_n])[None, :].to(tl.float32)
    y_desc.store([off_m, off_n], acc.to(y_ptr.dtype.element_ty))


@pytest.mark.skipif(not INTERPRET, reason="the bound is read from the interpreter's trace")
def test_ex03_a_descriptor_with_the_wrong_size_is_named_whichever_shape_comes_first():
    """On the shape where M is far larger than N, W's lanes run to the tile's end and the size is ambiguous; the
    check says that only after the shape where M falls short of N, which names it."""
    for _ in range(2):
        passed, text = _check(_w_rows_m)
        assert not passed and "the descriptor of W has shape" in text and "shape [N, K]: M in place of N" in text, text
