"""fp16 GEMM with pointer loads: C = A @ B, fp32 accumulation, grouped tile order.

Loads that feed ``tl.dot`` are what Triton's software pipeliner works on: with num_stages >= 2
they become asynchronous copies into a ring of shared-memory buffers (cp.async on sm_80/sm_90),
num_stages - 1 tiles ahead of the math. Grouped order walks GROUP_M row-tiles down a column
before moving right, so tiles that share A rows and B columns run close in time and meet in L2."""
import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from ..lab import aot, operands, smem, tma_rules
from ..lab.errors import CourseError
from ..lab.mode import DEVICE, sm_count


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of program ``pid`` in grouped order: ids fill GROUP_M rows of tiles, column by column."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    # the same GEMM with device-side descriptors: no masks (TMA zero-fills reads past the edge and
    # clips writes), no pointer arithmetic; strides other than the last come from the arguments
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_bk, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [stride_cm, 1], [BLOCK_M, BLOCK_N])
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def matmul_tma_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                                 stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                 GROUP_M: tl.constexpr, TMA_STORE: tl.constexpr,
                                 WARP_SPECIALIZE: tl.constexpr = False):
    # persistent: a fixed grid (one program per SM) walks the tiles in grouped order; flatten=True lets
    # the pipeliner run the next tile's first loads while the current tile's last steps compute
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_bk, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [stride_cm, 1], [BLOCK_M, BLOCK_N])
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K]), b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N]), acc)
        out = acc.to(c_ptr.dtype.element_ty)
        if TMA_STORE:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], out)
        else:
            rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, out,
                     mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_tma_probe_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, stages: tl.constexpr, LOADS: tl.constexpr, MATH: tl.constexpr):
    # lesson 04's measuring probe: the TMA GEMM with its K loop pipelined by tl.range and either part
    # switched off. It is persistent (one program per SM walks the tiles) so that every variant runs
    # one block per SM, as the GEMM does: a loads-only block needs few registers, and three of them
    # sharing an SM would keep three times the loads in flight. LOADS=False loads each tile's first A
    # and B once and multiplies them K/BLOCK_K times (math only). MATH=False loads every tile and keeps
    # an elementwise running max of it (loads only): elementwise, so no reduction or layout change
    # per step - a running sum across the tile cost more than the GEMM's math.
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_bk, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [stride_cm, 1], [BLOCK_M, BLOCK_N])
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tiles, tl.num_programs(0)):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        a_max = tl.full((BLOCK_M, BLOCK_K), float("-inf"), tl.float16)
        b_max = tl.full((BLOCK_K, BLOCK_N), float("-inf"), tl.float16)
        a = a_desc.load([pid_m * BLOCK_M, 0])
        b = b_desc.load([0, pid_n * BLOCK_N])
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=stages):
            if LOADS:
                a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
                b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
            if MATH:
                acc = tl.dot(a, b, acc)
            else:
                a_max = tl.maximum(a_max, a)
                b_max = tl.maximum(b_max, b)
        if not MATH:
            acc = tl.max(a_max.to(tl.float32), axis=1)[:, None] + tl.max(b_max.to(tl.float32), axis=0)[None, :]
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


def default_warps(BLOCK_M, BLOCK_N):
    return 8 if BLOCK_M * BLOCK_N >= 128 * 128 else 4


def launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps=None, GROUP_M=8):
    """(grid, args, meta) of one matmul launch - shared by ``matmul`` and ahead-of-time compiles."""
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                num_stages=stages, num_warps=num_warps or default_warps(BLOCK_M, BLOCK_N))
    return grid, args, meta


def compile_sm90(kernel, BLOCK_M, BLOCK_N, BLOCK_K, stages, shape=(8192, 8192, 8192), **meta):
    """The sm_90 code of ``kernel`` (any kernel taking ``matmul_kernel``'s arguments) for an M x N x K
    fp16 GEMM at this tile and stage count, as a launch would compile it. Compiling reads only
    shapes and alignment, so the operands are left uninitialised."""
    M, N, K = shape
    a, b, c = (torch.empty(*s, device=DEVICE, dtype=torch.float16) for s in ((M, K), (K, N), (M, N)))
    _, args, launch = launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    return aot.compile_sm90(kernel, *args, **meta, **launch)


def _inputs(launcher, a, b, out):
    """Check A and B (shapes, dtype, device) and ``out``; returns C (``out``, or a new tensor)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise CourseError(f"{launcher} needs (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise CourseError(f"{launcher}: A and B must share a dtype, got {a.dtype} and {b.dtype}")
    operands.check(launcher, "a b", a, b)
    return operands.out(launcher, out, (a.shape[0], b.shape[1]), a, result="the product")


def _overflow(e, a, BLOCK_M, BLOCK_N, BLOCK_K, stages, c_tile):
    """The course's message for a GEMM launch that ran out of shared memory (see ``smem.overflow``);
    ``c_tile``: the kernel stages the output tile in shared memory for a TMA store."""
    esize = a.element_size()
    return smem.overflow(e, f"{BLOCK_M}x{BLOCK_N}x{BLOCK_K} with {stages} stages", stages,
                         smem.gemm_stage_bytes(BLOCK_M, BLOCK_N, BLOCK_K, esize),
                         BLOCK_M * BLOCK_N * esize if c_tile else 0)


def _launch(kernel, a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M, c_tile):
    grid, args, meta = launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M)
    try:
        kernel[grid](*args, **meta)
    except OutOfResources as e:
        raise _overflow(e, a, BLOCK_M, BLOCK_N, BLOCK_K, stages, c_tile) from None
    return c


def matmul(a, b, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3, num_warps=None, GROUP_M=8, out=None):
    """C = A @ B for 2D fp16/fp32 tensors with the pointer kernel (lesson 02)."""
    c = _inputs("matmul", a, b, out)
    return _launch(matmul_kernel, a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M, c_tile=False)


def _tma_operands(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K):
    tma_rules.ready(("A", a, [BLOCK_M, BLOCK_K]), ("B", b, [BLOCK_K, BLOCK_N]), ("C", c, [BLOCK_M, BLOCK_N]))


def _persistent_grid(a, b, BLOCK_M, BLOCK_N, programs=None):
    """One program per SM (or ``programs``), never more programs than output tiles."""
    tiles = triton.cdiv(a.shape[0], BLOCK_M) * triton.cdiv(b.shape[1], BLOCK_N)
    return (min(tiles, programs or sm_count(a)),)


def matmul_tma_persistent(a, b, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, stages=3, num_warps=None, GROUP_M=8,
                          tma_store=True, programs=None, out=None):
    """C = A @ B with a persistent grid (one program per SM unless ``programs`` says otherwise) (lesson 04)."""
    c = _inputs("matmul_tma_persistent", a, b, out)
    _tma_operands(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K)
    _, args, meta = launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M)
    try:
        matmul_tma_persistent_kernel[_persistent_grid(a, b, BLOCK_M, BLOCK_N, programs)](*args, TMA_STORE=tma_store,
                                                                                           **meta)
    except OutOfResources as e:
        raise _overflow(e, a, BLOCK_M, BLOCK_N, BLOCK_K, stages, c_tile=tma_store) from None
    return c


def matmul_tma_probe(a, b, stages, loads=True, math=True, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, out=None):
    """Lesson 04's probe (see the kernel), one program per SM; only loads=math=True computes A @ B."""
    c = _inputs("matmul_tma_probe", a, b, out)
    _tma_operands(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K)
    _, args, meta = launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, 1)
    try:
        matmul_tma_probe_kernel[_persistent_grid(a, b, BLOCK_M, BLOCK_N)](*args, stages=stages, LOADS=loads, MATH=math,
                                                                          **meta)
    except OutOfResources as e:
        raise _overflow(e, a, BLOCK_M, BLOCK_N, BLOCK_K, stages, c_tile=True) from None
    return c


def matmul_tma(a, b, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3, num_warps=None, GROUP_M=8, out=None):
    """C = A @ B through device-side TMA descriptors (lesson 03); checks the TMA rules first."""
    c = _inputs("matmul_tma", a, b, out)
    _tma_operands(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K)
    return _launch(matmul_tma_kernel, a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M, c_tile=True)
