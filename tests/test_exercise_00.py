"""Exercise 00's check, fed the wrong answers learners write: each must say what kind of wrong it is
and where, not only that a number is off."""
import triton
import triton.language as tl

from conftest import report
from kernels.lessons import l00_memory_wall_exercise as ex00


# ---- exercise 00 ---------------------------------------------------------------------------------

def _intensity(M, N, K, e):
    return 2 * M * N * K / ((M * K + K * N + M * N) * e)


@triton.jit
def _stub_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    raise NotImplementedError()  # nbgrader's stub, as the exercise hands it out


def _stub_axpy(alpha, x, y, out):
    raise NotImplementedError()


def test_ex00_roofline_as_a_sum_is_named():
    passed, text = report(ex00.check, _intensity, lambda f, b, tf, tb: (f / (tf * 1e12) + b / (tb * 1e12)) * 1e3,
                           _stub_axpy, _stub_kernel)
    assert not passed and "the larger of the two times, not their sum" in text
    assert "todo  axpy: compiled code: not attempted yet" in text  # the stub is a stub, not an error
