"""Exercise 08's check, fed the wrong answers learners write: each must say what kind of wrong it is. The kernel:
the inner loop and epilogue of the FP8 TMA GEMM, C = (A @ B) * scale_a * scale_b from A and B^T in e4m3."""
import torch
import triton
import triton.language as tl

from conftest import report
from kernels.lab.mode import INTERPRET
from kernels.lessons import l08_fp8_capstone_exercise as ex08
from kernels.ops.gemm import grouped_tile


def _launcher(kernel):
    """The exercise's launcher, around any kernel with its arguments."""
    def fp8_matmul(a, bt, scale_a, scale_b, BLOCK_M, BLOCK_N, BLOCK_K, stages, programs=None, out=None):
        from triton.tools.tensor_descriptor import TensorDescriptor
        M, K = a.shape
        N = bt.shape[0]
        c = torch.empty(M, N, device=a.device, dtype=torch.bfloat16) if out is None else out
        descs = (TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K]), TensorDescriptor.from_tensor(bt, [BLOCK_N, BLOCK_K]),
                 TensorDescriptor.from_tensor(c, [BLOCK_M, BLOCK_N]))
        kernel[(programs or 132,)](*descs, scale_a, scale_b, M, N, K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                   GROUP_M=8, num_stages=stages, num_warps=8 if BLOCK_M * BLOCK_N >= 128 * 128 else 4)
        return c
    return fp8_matmul


def _check(kernel):
    return report(ex08.check, _launcher(kernel), kernel)


# the worked solution
@triton.jit
def _right_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


# the unattempted exercise
@triton.jit
def _stub_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # YOUR CODE HERE
        raise NotImplementedError()


# B^T passed to tl.dot as it is
@triton.jit
def _untransposed_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt, acc)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


# the scales forgotten
@triton.jit
def _no_scale_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


# the scale applied twice
@triton.jit
def _scale_twice_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale * scale).to(c_desc.dtype))


# scale_b forgotten
@triton.jit
def _one_scale_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc)
        scale = tl.load(scale_a_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


# the running accumulator scaled at every K step
@triton.jit
def _scale_running_acc_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc) * scale
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


# each step's product scaled before it is added (right values, a multiply per K step)
@triton.jit
def _scale_per_step_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc += tl.dot(a, bt.T) * scale
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


# B^T's box coordinates swapped
@triton.jit
def _swapped_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, bt.T, acc)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


# the tiles converted to fp16 before the dot
@triton.jit
def _upcast_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a.to(tl.float16), bt.T.to(tl.float16), acc)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


def test_ex08_the_right_kernel_passes_and_the_stub_is_not_attempted():
    passed, text = _check(_right_kernel)
    assert passed, text
    passed, text = _check(_stub_kernel)
    assert not passed and "exercise 08: not attempted yet" in text, text


def test_ex08_b_not_transposed_names_the_transpose():
    passed, text = _check(_untransposed_kernel)
    assert not passed and "bt.T" in text and "Traceback" not in text, text


def test_ex08_scale_mistakes_are_named():
    for kernel, words in ((_no_scale_kernel, "without the scales"), (_scale_twice_kernel, "applied twice"),
                          (_one_scale_kernel, "one of the two scales is missing"),
                          (_scale_running_acc_kernel, "scaled at every K step")):
        passed, text = _check(kernel)
        assert not passed and words in text, (kernel.fn.__name__, text)


def test_ex08_a_multiply_per_k_step_is_seen_in_the_code():
    # the values are right (scaling each step's product is exact algebra); the code has a multiply per step
    passed, text = _check(_scale_per_step_kernel)
    assert not passed and "pass  FP8 GEMM: values" in text and "inside the K loop" in text, text


def test_ex08_swapped_b_coordinates_are_named():
    passed, text = _check(_swapped_kernel)
    assert not passed and "coordinates are swapped" in text, text


def test_ex08_converted_tiles_are_named():
    passed, text = _check(_upcast_kernel)
    assert not passed and "not e4m3 x e4m3" in text, text


# the accumulation in fp16: each K step's wgmma sums in fp16 (values within 1e-2 here, off at real K)
@triton.jit
def _fp16_acc_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc += tl.dot(a, bt.T, out_dtype=tl.float16)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


# an fp16 accumulator from the start
@triton.jit
def _fp16_zeros_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc, out_dtype=tl.float16)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


# the sum tl.dot returns thrown away
@triton.jit
def _dot_dropped_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            tl.dot(a, bt.T, acc)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


def test_ex08_an_fp16_accumulator_is_named():
    for kernel in (_fp16_acc_kernel, _fp16_zeros_kernel):
        passed, text = _check(kernel)
        assert not passed and "wgmma accumulates in f16" in text and "fp32 accumulator" in text, (kernel.fn.__name__,
                                                                                                   text)


def test_ex08_a_dropped_dot_result_is_named():
    passed, text = _check(_dot_dropped_kernel)
    assert not passed and "not attempted" not in text, text
    assert text.count("the result of tl.dot is dropped") == 2, text



@triton.jit
def _short_k_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K) - 1):  # <- one K step short
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc)
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


@triton.jit
def _scale_b_twice_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc)
        scale = tl.load(scale_b_ptr) * tl.load(scale_b_ptr)  # <- scale_b twice
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


def test_ex08_a_k_loop_that_stops_early_and_a_scale_loaded_twice_are_named():
    passed, text = _check(_short_k_kernel)
    assert not passed and "K steps: the K loop stops early; it runs tl.cdiv(K, BLOCK_K) steps" in text, text
    passed, text = _check(_scale_b_twice_kernel)
    assert not passed and "scale_b loaded twice, through scale_b's pointer in place of scale_a's" in text, text


@triton.jit
def _no_dot_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])  # loaded, never multiplied
        scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


def test_ex08_tiles_loaded_and_never_multiplied_are_not_taken_for_the_stub():
    passed, text = _check(_no_dot_kernel)
    if INTERPRET:  # the trace sees A and B^T loaded and C stored: the kernel is written, its tl.dot is missing
        assert not passed and "nothing accumulates into acc in the K loop" in text, text
    else:
        assert not passed and "not attempted" in text, text


def test_ex08_shapes_leave_a_k_loop_bounded_by_m_or_n_short():
    """A K loop to tl.cdiv(M, BLOCK_K) or tl.cdiv(N, BLOCK_K) must stop early on every shape the check draws, or it
    passes: with K from 144 and BLOCK_K = 128, a loop to cdiv(M, BLOCK_K) ran K's two steps (caught by the report's
    sample test in CI). And K is never a multiple of BLOCK_K: the last K box always runs past K."""
    steps = lambda n: -(-n // ex08.TILE[2])  # noqa: E731
    for _ in range(500):
        M, N, K = ex08._shape()
        assert steps(K) > max(steps(M), steps(N)) and K % ex08.TILE[2], (M, N, K)
