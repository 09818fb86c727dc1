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
from ..lab.plan import Plan
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


def compile_sm90(kernel, BLOCK_M, BLOCK_N, BLOCK_K, stages, shape=(8192, 8192, 8192), target=aot.SM90, **meta):
    """The sm_90 code (or ``target``'s, e.g. ``aot.SM100``) of ``kernel`` (any kernel taking ``matmul_kernel``'s
    arguments) for an M x N x K fp16 GEMM at this tile and stage count, as a launch would compile it. Compiling
    reads only shapes and alignment, so the operands are left uninitialised."""
    M, N, K = shape
    a, b, c = (torch.empty(*s, device=DEVICE, dtype=torch.float16) for s in ((M, K), (K, N), (M, N)))
    _, args, launch = launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    return aot.compile_for(target, kernel, *args, **meta, **launch)


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
    ``c_tile``: the fraction of the output tile the kernel stages in shared memory for a TMA store (1, a half
    with SUBTILE, 0 without a TMA store)."""
    esize = a.element_size()
    return smem.overflow(e, f"{BLOCK_M}x{BLOCK_N}x{BLOCK_K} with {stages} stages", stages,
                         smem.gemm_stage_bytes(BLOCK_M, BLOCK_N, BLOCK_K, esize),
                         int(BLOCK_M * BLOCK_N * esize * c_tile))


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


def matmul_tma_persistent(a, b, BLOCK_M=None, BLOCK_N=None, BLOCK_K=None, stages=None, num_warps=None, GROUP_M=8,
                          tma_store=True, programs=None, out=None):
    """C = A @ B with a persistent grid (one program per SM unless ``programs`` says otherwise) (lesson 04). Called
    without a tile or stage count, the configuration is the one ``gemm_auto`` predicts fastest for this shape among
    the persistent ones (lesson 07); lesson 04's own is 128 x 256 x 64, 3 stages (``LESSON04``)."""
    c = _inputs("matmul_tma_persistent", a, b, out)
    BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps = _tile(a, b, "gemm_tma_host", (BLOCK_M, BLOCK_N, BLOCK_K, stages),
                                                         num_warps, persistent=True, subtile=False)
    _start(_persistent_launch(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M, tma_store, programs), a,
           c_tile=tma_store)
    return c


def _persistent_launch(a, b, c, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, stages=3, num_warps=None, GROUP_M=8,
                       tma_store=True, programs=None):
    """(kernel, grid, args, kwargs) of one ``matmul_tma_persistent_kernel`` launch (device-side tensor maps),
    operands checked: what ``plan("gemm_tma_persistent", ...)`` prepares once."""
    _tma_operands(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K)
    _, args, meta = launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M)
    return matmul_tma_persistent_kernel, _persistent_grid(a, b, BLOCK_M, BLOCK_N, programs), args, \
        dict(TMA_STORE=tma_store, **meta)


def probe_launch(a, b, c, stages, loads=True, math=True, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64):
    """(kernel, grid, args, kwargs) of one launch of lesson 04's probe, operands checked (what lesson 04's trace
    instruments and launches)."""
    _tma_operands(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K)
    _, args, meta = launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, 1)
    return matmul_tma_probe_kernel, _persistent_grid(a, b, BLOCK_M, BLOCK_N), args, \
        dict(stages=stages, LOADS=loads, MATH=math, **meta)


def matmul_tma_probe(a, b, stages, loads=True, math=True, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, out=None):
    """Lesson 04's probe (see the kernel), one program per SM; only loads=math=True computes A @ B."""
    c = _inputs("matmul_tma_probe", a, b, out)
    kernel, grid, args, kwargs = probe_launch(a, b, c, stages, loads, math, BLOCK_M, BLOCK_N, BLOCK_K)
    try:
        kernel[grid](*args, **kwargs)
    except OutOfResources as e:
        raise _overflow(e, a, BLOCK_M, BLOCK_N, BLOCK_K, stages, c_tile=True) from None
    return c


def matmul_tma(a, b, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3, num_warps=None, GROUP_M=8, out=None):
    """C = A @ B through device-side TMA descriptors (lesson 03); checks the TMA rules first."""
    c = _inputs("matmul_tma", a, b, out)
    _tma_operands(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K)
    return _launch(matmul_tma_kernel, a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M, c_tile=True)


# ---- lesson 07: host-side descriptors, one kernel for both grids --------------------------------

@triton.jit
def matmul_tma_host_kernel(a_desc, b_desc, c_desc, M, N, K,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, SUBTILE: tl.constexpr):
    # the tensor maps come from the host (TensorDescriptor): no allocator, no map written per launch.
    # The grid decides the schedule: one program per tile runs the loop once, one per SM makes it
    # persistent. SUBTILE: c_desc's box is half the tile's width and the tile leaves in two stores.
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K]), b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N]), acc)
        store_tile(c_desc, acc.to(c_desc.dtype), pid_m * BLOCK_M, pid_n * BLOCK_N, SUBTILE)


@triton.jit
def store_tile(c_desc, c, off_m, off_n, SUBTILE: tl.constexpr):
    """Store the tile ``c`` at (off_m, off_n), whole or, with SUBTILE, as two halves side by side: the TMA
    store stages what it writes in shared memory, so halves need half the staging buffer, room that a
    pipeline stage can use."""
    if SUBTILE:
        BLOCK_M: tl.constexpr = c.shape[0]
        HALF: tl.constexpr = c.shape[1] // 2
        left, right = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, HALF)), (0, 2, 1)))
        c_desc.store([off_m, off_n], left)
        c_desc.store([off_m, off_n + HALF], right)
    else:
        c_desc.store([off_m, off_n], c)


def c_box(BLOCK_M, BLOCK_N, subtile=False):
    """The output's TMA box: the whole tile, or (``subtile``) the half that ``store_tile`` stores at a time."""
    return [BLOCK_M, BLOCK_N // 2 if subtile else BLOCK_N]


def _host_descriptors(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, subtile=False):
    from triton.tools.tensor_descriptor import TensorDescriptor
    out_box = c_box(BLOCK_M, BLOCK_N, subtile)
    tma_rules.ready(("A", a, [BLOCK_M, BLOCK_K]), ("B", b, [BLOCK_K, BLOCK_N]), ("C", c, out_box))
    return (TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K]), TensorDescriptor.from_tensor(b, [BLOCK_K, BLOCK_N]),
            TensorDescriptor.from_tensor(c, out_box))


def _host_launch(a, b, c, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, stages=3, num_warps=None, GROUP_M=8,
                 persistent=True, warp_specialize=False, subtile=False, programs=None):
    """(kernel, grid, args, kwargs) of one ``matmul_tma_host_kernel`` launch, operands checked."""
    M, K = a.shape
    N = b.shape[1]
    descs = _host_descriptors(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, subtile)
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    grid = _persistent_grid(a, b, BLOCK_M, BLOCK_N, programs) if persistent else (tiles,)
    return (matmul_tma_host_kernel, grid, (*descs, M, N, K),
            dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, WARP_SPECIALIZE=warp_specialize,
                 SUBTILE=subtile, num_stages=stages, num_warps=num_warps or default_warps(BLOCK_M, BLOCK_N)))


LESSON04 = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, stages=3)  # lesson 04's configuration, tuned at 8192^3


def _tile(a, b, kernel, given, num_warps, chosen=None, **fixed):
    """(BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps) for a launcher: ``given`` as passed; all four left out (fp16
    or bf16, the dtypes the course records), the configuration of ``kernel`` that ``gemm_auto`` predicts fastest for
    this shape with ``fixed`` (its other items, such as ``subtile``, are written into ``chosen``); else lesson 04's
    values for those left out. ``matmul_tma_persistent`` has no records of its own: the host-map kernel's stand in."""
    if all(v is None for v in given) and str(a.dtype).removeprefix("torch.") in ("float16", "bfloat16"):
        from . import gemm_auto  # it imports this module
        cfg = gemm_auto.config_for(kernel, a, b, warp_specialize=False, **fixed)
        if chosen is not None:
            chosen.setdefault("subtile", cfg.get("subtile", False))
        return cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["stages"], num_warps or cfg.get("num_warps")
    return (*(v if v is not None else LESSON04[k] for v, k in zip(given, ("BLOCK_M", "BLOCK_N", "BLOCK_K", "stages"))),
            num_warps)


def _start(launch, a, c_tile=True, start=None):
    """Run one prepared launch (or ``start(kernel, grid, args, kwargs)``, e.g. ``Plan``); a configuration that
    does not fit gets the course's message."""
    kernel, grid, args, kwargs = launch
    try:
        return start(*launch) if start else kernel[grid](*args, **kwargs)
    except OutOfResources as e:
        raise _overflow(e, a, kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["BLOCK_K"], kwargs["num_stages"],
                        c_tile / 2 if kwargs.get("SUBTILE") else c_tile) from None


def matmul_tma_host(a, b, BLOCK_M=None, BLOCK_N=None, BLOCK_K=None, stages=None, num_warps=None, GROUP_M=8,
                    persistent=True, warp_specialize=False, subtile=None, programs=None, out=None):
    """C = A @ B with host-side tensor maps; ``persistent``: one program per SM (or ``programs``) walks the
    tiles, else one program per tile; ``subtile``: the tile is stored in two halves (lesson 07). Called without a
    tile or stage count, the configuration (and ``subtile``) is the one ``gemm_auto`` predicts fastest for this shape
    with this ``persistent``; else the missing values are lesson 04's (``LESSON04``)."""
    c = _inputs("matmul_tma_host", a, b, out)
    chosen = {} if subtile is None else {"subtile": subtile}
    BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps = _tile(a, b, "gemm_tma_host", (BLOCK_M, BLOCK_N, BLOCK_K, stages),
                                                         num_warps, chosen, persistent=persistent, **chosen)
    subtile = chosen.get("subtile", False)
    _start(_host_launch(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M, persistent, warp_specialize,
                        subtile, programs), a)
    return c


# ---- lesson 07: the last wave split along K ------------------------------------------------------

@triton.jit
def _tile_sum(a_desc, b_desc, pid_m, pid_n, k0, k1,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k0, k1):
        acc = tl.dot(a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K]), b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N]), acc)
    return acc


@triton.jit
def matmul_split_tail_kernel(a_desc, b_desc, c_desc, partial_ptr, count_ptr, M, N, K, whole,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, SPLIT: tl.constexpr):
    # Tiles 0 .. whole-1 fill whole waves: each program computes its share of them, persistent. The
    # remaining tiles (the last wave, too few to occupy every SM) are each split into SPLIT slices of K,
    # one program per slice. A slice writes its partial sum to its own fp32 buffer and counts itself in;
    # the slice that counts last adds the partials up, stores the tile and resets the count for the
    # next call.
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for t in tl.range(tl.program_id(0), whole, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _tile_sum(a_desc, b_desc, pid_m, pid_n, 0, k_tiles, BLOCK_M, BLOCK_N, BLOCK_K)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))
    per_slice = tl.cdiv(k_tiles, SPLIT)
    rows = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    for u in range(tl.program_id(0), (tiles - whole) * SPLIT, tl.num_programs(0)):
        slot = u // SPLIT
        pid_m, pid_n = grouped_tile(whole + slot, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        k0 = (u % SPLIT) * per_slice
        acc = _tile_sum(a_desc, b_desc, pid_m, pid_n, k0, tl.minimum(k0 + per_slice, k_tiles), BLOCK_M, BLOCK_N, BLOCK_K)
        tl.store(partial_ptr + u * BLOCK_M * BLOCK_N + rows, acc)
        tl.debug_barrier()  # every thread's part of the partial is written before the count says so
        if tl.atomic_add(count_ptr + slot, 1, sem="acq_rel") == SPLIT - 1:
            tl.debug_barrier()
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(SPLIT):  # .cg: read in L2, where the other slices' stores are, not a stale L1 line
                total += tl.load(partial_ptr + (slot * SPLIT + s) * BLOCK_M * BLOCK_N + rows, cache_modifier=".cg")
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], total.to(c_desc.dtype))
            tl.store(count_ptr + slot, 0)


def waves(M, N, BLOCK_M, BLOCK_N, sms):
    """(tiles, whole waves, tiles in the last wave): how ``tiles`` output tiles fall on ``sms`` SMs, one
    tile per SM at a time. A last wave of r tiles leaves sms - r SMs idle for one tile's time."""
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    return tiles, tiles // sms, tiles % sms


def split_plan(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, sms):
    """(whole, split): the tiles computed whole (every full wave), and how many K slices each tile of the
    last wave gets so that its slices occupy the SMs the last wave would leave idle (1: no split)."""
    tiles, full, tail = waves(M, N, BLOCK_M, BLOCK_N, sms)
    if tail == 0:
        return tiles, 1
    split = min(sms // tail, triton.cdiv(K, BLOCK_K), 8)
    return (full * sms, split) if split > 1 else (tiles, 1)


_SCRATCH = {}  # (device, slots, split, tile) -> (fp32 partials, int32 counts), kept: the counts reset themselves


def _scratch(device, slots, split, BLOCK_M, BLOCK_N):
    key = (str(device), slots, split, BLOCK_M, BLOCK_N)
    if key not in _SCRATCH:
        _SCRATCH[key] = (torch.empty(slots * split * BLOCK_M * BLOCK_N, device=device, dtype=torch.float32),
                         torch.zeros(max(slots, 1), device=device, dtype=torch.int32))
    return _SCRATCH[key]


def _split_tail_launch(a, b, c, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=4, num_warps=None, GROUP_M=8,
                       split=None, programs=None):
    M, K = a.shape
    N = b.shape[1]
    descs = _host_descriptors(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K)
    sms = programs or sm_count(a)
    whole, plan = split_plan(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, sms)
    split = split or plan
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    partials, counts = _scratch(a.device, tiles - whole, split, BLOCK_M, BLOCK_N)
    grid = (min(sms, max(whole, (tiles - whole) * split)),)
    return (matmul_split_tail_kernel, grid, (*descs, partials, counts, M, N, K, whole),
            dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, SPLIT=split, num_stages=stages,
                 num_warps=num_warps or default_warps(BLOCK_M, BLOCK_N)))


def matmul_split_tail(a, b, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=4, num_warps=None, GROUP_M=8,
                      split=None, programs=None, out=None):
    """C = A @ B, persistent over the whole waves, the last wave's tiles split ``split`` ways along K
    (default ``split_plan``) (lesson 07)."""
    c = _inputs("matmul_split_tail", a, b, out)
    _start(_split_tail_launch(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, GROUP_M, split, programs), a)
    return c


# device-side maps still cost a scratch allocation per call (Triton's launcher asks the allocator): a plan
# removes the checks and the dispatch, not that
PLANNED = {"gemm_tma_host": _host_launch, "gemm_split_tail": _split_tail_launch,
           "gemm_tma_persistent": _persistent_launch}


def plan(name, a, b, c, **config):
    """A ``lab.plan.Plan`` of kernel ``name`` (``PLANNED``) computing C = A @ B into ``c`` with ``config``:
    checks, tensor maps and compilation done once (a first launch), each call then launches only."""
    _inputs(f"plan({name})", a, b, c)
    return _start(PLANNED[name](a, b, c, **config), a, start=Plan)
