"""Exercise 00's check, fed the wrong answers learners write: each must say what kind of wrong it is
and where, not only that a number is off."""
import triton
import triton.language as tl

from conftest import report
from kernels.lessons import l00_memory_wall_exercise as ex00


def _intensity(M, N, K, e):
    return 2 * M * N * K / ((M * K + K * N + M * N) * e)


def _roofline(flops, nbytes, tflops, tbps):
    return max(flops / (tflops * 1e12), nbytes / (tbps * 1e12)) * 1e3


def _bytes(n, e, fused):
    return (3 if fused else 5) * n * e


def _launcher(kernel):
    def relu_axpy(alpha, x, y, out, BLOCK=1024):
        kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, alpha, x.numel(), BLOCK=BLOCK)
        return out
    return relu_axpy


def _check_kernel(kernel):
    return report(ex00.check, _intensity, _roofline, _bytes, _launcher(kernel), kernel)


@triton.jit
def _right_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0), mask=mask)


@triton.jit
def _stub_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    raise NotImplementedError()  # nbgrader's stub, as the exercise hands it out


def _stub(*args):
    raise NotImplementedError()


def test_ex00_the_right_answers_pass_and_the_stubs_are_not_attempted():
    passed, text = _check_kernel(_right_kernel)
    assert passed, text
    passed, text = report(ex00.check, _stub, _stub, _stub, _launcher(_stub_kernel), _stub_kernel)
    assert not passed and "exercise 00: not attempted yet" in text, text


# ---- the numbers ----------------------------------------------------------------------------------------

def test_ex00_roofline_as_a_sum_is_named():
    passed, text = report(ex00.check, _intensity, lambda f, b, tf, tb: (f / (tf * 1e12) + b / (tb * 1e12)) * 1e3,
                          _bytes, _launcher(_stub_kernel), _stub_kernel)
    assert not passed and "the larger of the two times, not their sum" in text
    assert "todo  relu_axpy: compiled code: not attempted yet" in text  # the stub is a stub, not an error


def test_ex00_intensity_in_elements_and_c_counted_twice_are_named():
    passed, text = report(ex00.check, lambda M, N, K, e: 2 * M * N * K / (M * K + K * N + M * N), _roofline,
                          _bytes, _launcher(_right_kernel), _right_kernel)
    assert not passed and "that is FLOP per element: divide by the bytes" in text, text
    passed, text = report(ex00.check, lambda M, N, K, e: 2 * M * N * K / ((M * K + K * N + 2 * M * N) * e),
                          _roofline, _bytes, _launcher(_right_kernel), _right_kernel)
    assert not passed and "C is written once, not read and written" in text, text


def test_ex00_unfused_bytes_without_the_intermediate_are_named():
    passed, text = report(ex00.check, _intensity, _roofline, lambda n, e, fused: 3 * n * e,
                          _launcher(_right_kernel), _right_kernel)
    assert not passed and "unfused (torch: an add kernel, then a ReLU kernel)" in text, text
    assert "the add kernel writes alpha * x + y to memory, and the ReLU kernel reads it back" in text, text


# ---- the kernel -----------------------------------------------------------------------------------------

@triton.jit
def _no_relu_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def test_ex00_a_missing_relu_is_named():
    passed, text = _check_kernel(_no_relu_kernel)
    assert not passed and "out equals alpha * x + y: the ReLU is missing" in text, text


@triton.jit
def _alpha_on_y_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + alpha * y, 0.0), mask=mask)


def test_ex00_alpha_on_the_wrong_vector_is_named():
    passed, text = _check_kernel(_alpha_on_y_kernel)
    assert not passed and "alpha multiplies y instead of x" in text, text


@triton.jit
def _no_block_offset_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) + tl.arange(0, BLOCK)  # program p starts at p, not p * BLOCK
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0), mask=mask)


def test_ex00_programs_that_overlap_leave_the_tail_never_written():
    passed, text = _check_kernel(_no_block_offset_kernel)
    assert not passed and "elements never written (indices " in text, text


@triton.jit
def _load_unmasked_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # the last block reads past the end; its store is masked, so the values pass
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0), mask=offs < n)


def test_ex00_unmasked_loads_are_named_from_the_compiled_code():
    passed, text = _check_kernel(_load_unmasked_kernel)
    assert not passed and "pass  relu_axpy: values" in text, text
    assert "2 of the 3 global loads and stores have no predicate (ld.global" in text, text


@triton.jit
def _two_pass_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
    t = tl.load(out_ptr + offs, mask=mask)  # the unfused version inside one kernel: stored, then read back
    tl.store(out_ptr + offs, tl.maximum(t, 0.0), mask=mask)


def test_ex00_storing_and_reloading_the_intermediate_is_named():
    passed, text = _check_kernel(_two_pass_kernel)
    assert not passed and "pass  relu_axpy: values" in text, text
    assert "3 ld.global and 2 st.global per thread: one pass loads x and y once" in text, text


@triton.jit
def _store_unmasked_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0))  # the last block writes past the end of out


def test_ex00_an_unmasked_store_writes_past_the_end_and_is_named():
    passed, text = _check_kernel(_store_unmasked_kernel)
    assert not passed and "elements written outside the output" in text and "past its end" in text, text
    assert "a store mask is missing" in text, text
    assert "1 of the 3 global loads and stores have no predicate (st.global" in text, text


def test_ex00_a_wrong_term_of_the_intensity_is_named():
    flops_wrong = lambda M, N, K, e: 2 * M * N * M / ((M * K + K * N + M * N) * e)
    bytes_wrong = lambda M, N, K, e: 2 * M * N * K / ((M * K + K * N + N * N) * e)
    passed, text = report(ex00.check, flops_wrong, _roofline, _bytes, _launcher(_right_kernel), _right_kernel)
    assert not passed and "your FLOP count is 2 * M * M * N: a GEMM does M * N * K multiply-adds" in text, text
    passed, text = report(ex00.check, bytes_wrong, _roofline, _bytes, _launcher(_right_kernel), _right_kernel)
    assert not passed and "your bytes count M * K + K * N + N * N elements: A is M x K" in text, text


def test_ex00_roofline_arguments_confused_are_named():
    wrong = lambda flops, nbytes, tflops, tbps: _roofline(nbytes, nbytes, tflops, tbps)
    passed, text = report(ex00.check, _intensity, wrong, _bytes, _launcher(_right_kernel), _right_kernel)
    assert not passed and "you computed it with nbytes in place of flops: flops go with tflops" in text, text


def test_ex00_an_input_loaded_through_the_other_pointer_is_named():
    @triton.jit
    def kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(y_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0), mask=mask)
    passed, text = _check_kernel(kernel)
    assert not passed and "out equals relu(alpha * y + y): x is loaded through y's pointer" in text, text


def test_ex00_x_through_y_is_named_when_alpha_nearly_cancels(monkeypatch):
    """alpha = -1.0003: alpha * y + y nearly cancels, and a GPU's fused multiply-add differs from torch's two roundings
    by 8e-5 of that small result (1e-6 is the fp32 tolerance); the mistake must still be named."""
    import random
    choice = random.choice
    monkeypatch.setattr(random, "uniform", lambda a, b: 1.0003)
    monkeypatch.setattr(random, "choice", lambda seq: -1 if list(seq) == [-1, 1] else choice(seq))
    test_ex00_an_input_loaded_through_the_other_pointer_is_named()


def test_ex00_stretch_names_the_bytes_per_element_counted():
    passed, text = report(ex00.check_stretch, _launcher(_right_kernel), lambda n: n * (4 + 4 + 3))
    assert not passed and "you count 11 bytes per element; count each vector once, at its own element size" in text


def test_ex00_a_wrong_factor_of_the_bytes_is_named():
    passed, text = report(ex00.check, _intensity, _roofline, lambda n, e, fused: (3 if fused else 5) * n * n,
                          _launcher(_right_kernel), _right_kernel)
    assert not passed and "your bytes count is 3 * n * n: n in place of elem_bytes" in text, text
    passed, text = report(ex00.check, _intensity, _roofline, lambda n, e, fused: (3 if fused else 5) * e * e,
                          _launcher(_right_kernel), _right_kernel)
    assert not passed and "your bytes count is 3 * elem_bytes * elem_bytes: elem_bytes in place of n" in text, text


@triton.jit
def _store_swapped_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(tl.maximum(alpha * x + y, 0.0), out_ptr + offs, mask=mask)  # the value first


def test_ex00_tl_store_with_its_arguments_swapped_is_named():
    passed, text = _check_kernel(_store_swapped_kernel)
    assert not passed and "FAIL  relu_axpy: values: tl.store takes the pointers first, then the value: " \
        "`tl.store(tl.maximum(alpha * x + y, 0.0), out_ptr + offs, mask=mask)` passes the value first and the " \
        "pointers second, swapped" in text, text
    assert "write tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0), mask=mask)" in text, text


@triton.jit
def _x_through_out_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(out_ptr + offs, mask=mask)  # the output's pointer
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0), mask=mask)


def test_ex00_an_input_loaded_through_the_output_pointer_is_named():
    passed, text = _check_kernel(_x_through_out_kernel)
    assert not passed and "run again on an out filled with random values, the kernel writes relu(alpha * out + y) " \
        "of those values: x is loaded through out_ptr, the output's pointer; load it from x_ptr" in text, text


@triton.jit
def _relu_at_one_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 1.0), mask=mask)  # clamps at 1


def test_ex00_a_relu_that_clamps_elsewhere_than_zero_is_named():
    passed, text = _check_kernel(_relu_at_one_kernel)
    assert not passed and "out equals max(alpha * x + y, 1): the ReLU clamps at 1 in place of 0" in text, text
