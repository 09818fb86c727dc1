"""Exercise 01's check, fed the wrong answers learners write for the fused residual update
(out = h + alpha * f, h and out fp32, f fp16, three row strides): each must say what kind of wrong it is
and where, not only that a number is off."""
import triton
import triton.language as tl

from conftest import report
from kernels.lab.mode import INTERPRET
from kernels.lessons import l01_naive_loads_exercise as ex01


def _check(kernel):
    return report(ex01.check, lambda h, f, alpha, out, BM, BN: ex01.launch(kernel, h, f, alpha, out, BM, BN), kernel)


@triton.jit
def _right(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_the_right_kernel_passes():
    passed, text = _check(_right)
    assert passed and "every load 16 bytes" in text, text


# ---- one row stride for every tensor ------------------------------------------------------------

@triton.jit
def _one_stride(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    offs = rows * stride_hm + cols  # h's stride used for f and out too
    h = tl.load(h_ptr + offs, mask=mask)
    f = tl.load(f_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_one_stride_for_three_tensors_is_named():
    passed, text = _check(_one_stride)
    assert not passed and "FAIL  residual add: values" in text, text
    if INTERPRET:  # the trace names the stride of the load that used h's
        assert "the load of f (program 0) moves" in text and "(" in text and "is the row stride of h)" in text, text
    else:
        assert "row 0 is right and the rows after it are not: a row stride is wrong" in text, text


# ---- the width as the row stride ----------------------------------------------------------------

@triton.jit
def _width_as_stride(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * N + cols, mask=mask)  # as if the rows were packed
    f = tl.load(f_ptr + rows * N + cols, mask=mask)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_the_width_used_as_the_row_stride_is_named():
    passed, text = _check(_width_as_stride)
    assert not passed and "a row stride is wrong" in text and "the width N is not a row stride" in text, text


# ---- alpha * f: fp32 by the argument alpha; fp16 arithmetic where a value is rounded ----------

@triton.jit
def _no_conversion(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f, mask=mask)  # alpha, fp32, promotes f


def test_ex01_alpha_times_f_needs_no_conversion_in_either_mode():
    """alpha is an fp32 argument: compiled, alpha * f is fp32 (the same sm_90 code as the solution's with
    f.to(tl.float32), seen on the H200, 2026-12-02); the course's interpreter types it so too
    (triton_internals.interpret_float_arguments_as_fp32), so CPU mode passes what the GPU passes."""
    passed, text = _check(_no_conversion)
    assert passed, text


@triton.jit
def _fp16_product(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    tl.store(out_ptr + rows * stride_om + cols, h + (alpha * f).to(tl.float16), mask=mask)  # rounded to fp16


def test_ex01_fp16_arithmetic_is_named():
    passed, text = _check(_fp16_product)
    assert not passed and "errors the size of fp16 rounding" in text and "alpha * f is fp32 already" in text, text
    assert "pass  residual add: 16-byte loads" in text, text  # the loads are right: only the values fail


# ---- a tile offset without * BLOCK_M ------------------------------------------------------------

@triton.jit
def _tile_offset(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) + tl.arange(0, BLOCK_M)[:, None]  # tiles overlap; the last rows are never reached
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_a_wrong_tile_offset_leaves_rows_never_written():
    passed, text = _check(_tile_offset)
    assert not passed and "elements never written (rows " in text and "the grid or a store mask misses them" in text, text
    if INTERPRET:
        assert "the load of h in program (1, 0) starts at row 1" in text and "program_id(0) in place of" in text, text
    else:
        assert "program_id(0) owns rows" in text, text


# ---- the two program ids swapped ----------------------------------------------------------------

@triton.jit
def _swapped_ids(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # axis 1 walks columns, not rows
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_swapped_program_ids_leave_tiles_never_written():
    passed, text = _check(_swapped_ids)
    assert not passed and "elements never written" in text, text
    if INTERPRET:
        assert "program_id(1) * BLOCK_M in place of program_id(0) * BLOCK_M" in text, text
    else:
        assert "program_id(0) owns rows" in text, text


# ---- clamped indices instead of masks: right values, narrow loads -------------------------------

@triton.jit
def _clamped(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    r, c = tl.minimum(rows, M - 1), tl.minimum(cols, N - 1)  # stay inside by clamping, no load masks
    h = tl.load(h_ptr + r * stride_hm + c)
    f = tl.load(f_ptr + r * stride_fm + c)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32), mask=(rows < M) & (cols < N))


def test_ex01_clamped_indices_compile_to_narrow_loads():
    passed, text = _check(_clamped)
    assert not passed and "pass  residual add: values" in text, text  # right values: only the code is wrong
    assert "FAIL  residual add: 16-byte loads: the loads compile to" in text and "16-bit" in text, text
    assert "could not prove that neighbouring columns are adjacent" in text and "tl.minimum" in text, text


# ---- a row at a time: right values, one element per thread per load -----------------------------

@triton.jit
def _row_at_a_time(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    for i in range(BLOCK_M):
        row = tl.program_id(0) * BLOCK_M + i
        mask = (cols < N) & (row < M)
        h = tl.load(h_ptr + row * stride_hm + cols, mask=mask)
        f = tl.load(f_ptr + row * stride_fm + cols, mask=mask)
        tl.store(out_ptr + row * stride_om + cols, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_a_row_at_a_time_is_too_narrow_per_thread():
    passed, text = _check(_row_at_a_time)
    assert not passed and "pass  residual add: values" in text, text
    assert "too few elements for a 16-byte vector per thread" in text, text


# ---- a store without its mask: writes past the edges ---------------------------------------------

@triton.jit
def _no_store_mask(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32))  # edge tiles write past the edges


def test_ex01_a_store_without_its_mask_is_caught_writing_outside():
    passed, text = _check(_no_store_mask)
    assert not passed and "elements written outside the output" in text and "a store mask is missing" in text, text
    assert "a row stride is wrong" not in text, text
    if INTERPRET:
        assert "the store of out (program" in text and "columns past its last): its mask lets lanes past" in text, text
    else:
        assert "the edge tiles' stores have no mask" in text, text


# ---- loads without their masks: the guard bands hide it, the compiled code shows it ---------------

@triton.jit
def _f_unmasked(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols)  # the edge tiles read past f; the store mask drops what they read
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_a_load_without_its_mask_is_named_in_the_compiled_code():
    passed, text = _check(_f_unmasked)
    assert not passed and "FAIL  residual add: 16-byte loads: the tl.load of f (f_ptr) has no mask" in text, text
    assert "h (h_ptr)" not in text, text  # h's load is masked
    if INTERPRET:  # the guard bands take the stray reads, the trace sees them
        assert "the values are right, but the load of f (program" in text and "outside f" in text, text
    else:
        assert "pass  residual add: values" in text, text


@triton.jit
def _no_load_masks(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols)  # only the store is masked
    f = tl.load(f_ptr + rows * stride_fm + cols)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_loads_without_masks_are_named_in_the_compiled_code():
    passed, text = _check(_no_load_masks)
    assert not passed and "the tl.loads of h (h_ptr) and f (f_ptr) have no mask" in text, text
    assert ("the values are right, but the load of h" if INTERPRET else "pass  residual add: values") in text, text


# ---- the stretch goal: a bias load without its mask -----------------------------------------------

@triton.jit
def _bias_right(h_ptr, f_ptr, b_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    bias = tl.load(b_ptr + cols, mask=cols < N)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32) + bias, mask=mask)


@triton.jit
def _bias_unmasked(h_ptr, f_ptr, b_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    bias = tl.load(b_ptr + cols)  # the last column tile reads past the bias
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32) + bias, mask=mask)


def test_ex01_stretch_a_bias_load_without_its_mask_is_named():
    _, text = report(ex01.stretch, _bias_right)
    assert "stretch (optional): all 2 checks pass" in text, text
    _, text = report(ex01.stretch, _bias_unmasked)
    assert ("the values are right, but the load of bias" if INTERPRET else "pass  residual add + bias: values") in text
    assert "FAIL  residual add + bias: load widths: the tl.load of bias (b_ptr) has no mask" in text, text


# ---- a tile of BLOCK_N rows: right values, twice the loads --------------------------------------

@triton.jit
def _rows_of_block_n(h_ptr, f_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_N)[:, None]  # tiles overlap: each row loaded twice
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32), mask=mask)


def test_ex01_a_tile_larger_than_block_m_rows_is_named():
    passed, text = _check(_rows_of_block_n)
    assert not passed and "pass  residual add: values" in text, text  # overlapping tiles write the same values
    assert "each program loads more than its tile - its rows are tl.arange(0, BLOCK_M)" in text, text


@triton.jit
def _bias_mask_by_rows(h_ptr, f_ptr, b_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    bias = tl.load(b_ptr + cols, mask=rows < N)  # right only while M <= N
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32) + bias, mask=mask)


@triton.jit
def _bias_mask_by_m(h_ptr, f_ptr, b_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    bias = tl.load(b_ptr + cols, mask=cols < M)  # right only while M >= N
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32) + bias, mask=mask)


@triton.jit
def _bias_rows_of_block_n(h_ptr, f_ptr, b_ptr, out_ptr, M, N, stride_hm, stride_fm, stride_om, alpha,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_N)[:, None]  # tiles overlap: each row loaded twice
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    h = tl.load(h_ptr + rows * stride_hm + cols, mask=mask)
    f = tl.load(f_ptr + rows * stride_fm + cols, mask=mask)
    bias = tl.load(b_ptr + cols, mask=cols < N)
    tl.store(out_ptr + rows * stride_om + cols, h + alpha * f.to(tl.float32) + bias, mask=mask)


def test_ex01_stretch_a_bias_mask_on_the_wrong_dimension_fails_the_values():
    for wrong, mask in ((_bias_mask_by_rows, "rows < N"), (_bias_mask_by_m, "cols < M")):  # each right on one aspect
        _, text = report(ex01.stretch, wrong)
        assert "FAIL  residual add + bias: values" in text, text
        named = f"the bias masked by {mask}: the bias has one value per column, N in all" in text
        # on the shape where cols < M reaches past N, the trace sees the lanes past the bias's end first
        assert named or INTERPRET and mask == "cols < M" and "through to memory outside bias" in text, text


def test_ex01_stretch_a_tile_larger_than_block_m_rows_is_named():
    _, text = report(ex01.stretch, _bias_rows_of_block_n)
    assert "pass  residual add + bias: values" in text, text
    assert "each program loads more than its tile - its rows are tl.arange(0, BLOCK_M)" in text, text
