"""Copy kernels: the same 2D copy written several ways, so the only difference is how data moves.

- ``copy_tile_kernel``: each program copies one BLOCK_M x BLOCK_N tile through plain pointer
  loads; with 16-byte aligned rows the compiler turns them into 16-byte vector loads (lesson 01).
- ``copy_elem_kernel``, ``copy_rows_kernel``, ``copy_cols_kernel``: one element per thread, and a
  coalesced against a strided walk (lesson 01).
- ``copy_loop_kernel``: a persistent grid walking all tiles, pipelined with ``tl.range`` (lesson 02).
- ``copy_tma_kernel`` / ``copy_tma_loop_kernel`` / ``copy_tma_host_loop_kernel``: the tile through a
  tensor descriptor: on Hopper one ``cp.async.bulk.tensor`` moves a whole tile into shared memory,
  completion tracked by an mbarrier (lesson 03).
- ``copy_paths_kernel``, ``read_tma_kernel``, ``fill_tma_kernel``: the persistent copy with each side through
  TMA or pointers, and each side alone (lesson 07: where the copy's last percent goes).
"""
import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from ..lab import operands, smem, tma_rules
from ..lab.errors import ArgumentError
from ..lab.mode import sm_count


@triton.jit
def copy_tile_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    tile = tl.load(x_ptr + rows * stride_xm + cols, mask=mask)
    tl.store(y_ptr + rows * stride_ym + cols, tile, mask=mask)


@triton.jit
def copy_tma_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, N], [stride_xm, 1], [BLOCK_M, BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    y_desc.store([off_m, off_n], x_desc.load([off_m, off_n]))  # the edges: TMA clips out-of-bounds


def _grid(x, BLOCK_M, BLOCK_N):
    return (triton.cdiv(x.shape[0], BLOCK_M), triton.cdiv(x.shape[1], BLOCK_N))


def _out(launcher, x, out, layout):
    """x checked (device, layout) and the tensor the copy goes to: ``out`` checked, or a new one."""
    operands.check(launcher, "x", x, layout=layout)
    return operands.out(launcher, out, x.shape, x, layout, result="the copy")


def _overflow(e, x, BLOCK_M, BLOCK_N, stages=None, tiles=1):
    """The course's message for a copy whose launch ran out of shared memory (see ``smem.overflow``):
    the model is ``tiles`` tiles in shared memory (the TMA store writes out the buffer it loaded)."""
    what = f"{BLOCK_M}x{BLOCK_N} tiles" + (f" with {stages} stages" if stages else "")
    return smem.overflow(e, what, tiles, BLOCK_M * BLOCK_N * x.element_size())


def copy_tile(x, out=None, BLOCK_M=64, BLOCK_N=128, num_warps=4):
    """y = x for a 2D tensor with unit column stride, one tile per program, pointer loads."""
    y = _out("copy_tile", x, out, "rows")
    copy_tile_kernel[_grid(x, BLOCK_M, BLOCK_N)](x, y, x.shape[0], x.shape[1], x.stride(0), y.stride(0),
                                                 BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y


def copy_tma(x, out=None, BLOCK_M=64, BLOCK_N=128, num_warps=4):
    """y = x through device-side TMA descriptors; checks the TMA rules first, sets the allocator."""
    y = _out("copy_tma", x, out, None)  # the layout: the TMA rules below
    tma_rules.ready(("input", x, [BLOCK_M, BLOCK_N]), ("output", y, [BLOCK_M, BLOCK_N]))  # allocator: where it launches
    try:
        copy_tma_kernel[_grid(x, BLOCK_M, BLOCK_N)](x, y, x.shape[0], x.shape[1], x.stride(0), y.stride(0),
                                                    BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps)
    except OutOfResources as e:
        raise _overflow(e, x, BLOCK_M, BLOCK_N) from None
    return y


# ---- lesson 01: one element per thread, and the cost of a strided walk -------------------------

@triton.jit
def copy_elem_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # launched with BLOCK = 32 * num_warps: every thread moves exactly one element
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def copy_rows_kernel(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    # program r copies row r: neighbouring threads touch neighbouring addresses (coalesced)
    row = tl.program_id(0).to(tl.int64)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        tl.store(y_ptr + row * N + cols, tl.load(x_ptr + row * N + cols, mask=mask), mask=mask)


@triton.jit
def copy_cols_kernel(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    # program c copies column c: neighbouring threads touch addresses a whole row apart (strided)
    col = tl.program_id(0)
    for start in range(0, M, BLOCK):
        rows = (start + tl.arange(0, BLOCK)).to(tl.int64)
        mask = rows < M
        tl.store(y_ptr + rows * N + col, tl.load(x_ptr + rows * N + col, mask=mask), mask=mask)


def copy_elem(x, out=None, num_warps=4):
    """y = x, one element per thread (the 'ants moving house' copy)."""
    y = _out("copy_elem", x, out, "flat")
    block = 32 * num_warps
    copy_elem_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block, num_warps=num_warps)
    return y


def copy_rows(x, out=None, BLOCK=1024):
    y = _out("copy_rows", x, out, "matrix")
    copy_rows_kernel[(x.shape[0],)](x, y, x.shape[0], x.shape[1], BLOCK=BLOCK)
    return y


def copy_cols(x, out=None, BLOCK=1024):
    y = _out("copy_cols", x, out, "matrix")
    copy_cols_kernel[(x.shape[1],)](x, y, x.shape[0], x.shape[1], BLOCK=BLOCK)
    return y


# ---- lesson 02: a persistent copy loop, pipelined by tl.range ------------------------------------

@triton.jit
def copy_loop_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, stages: tl.constexpr):
    # a fixed grid of programs walks all tiles; tl.range's num_stages asks the compiler to keep
    # stages - 1 tiles' loads in flight ahead of the store (kernel-level num_stages would not)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), num_stages=stages):
        rows = (t // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
        cols = (t % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        mask = (rows < M) & (cols < N)
        tl.store(y_ptr + rows * stride_ym + cols, tl.load(x_ptr + rows * stride_xm + cols, mask=mask), mask=mask)


def copy_loop(x, out=None, BLOCK_M=64, BLOCK_N=128, stages=3, num_warps=4, programs=None):
    """y = x with a persistent grid (one program per SM by default) and a tl.range-pipelined loop."""
    y = _out("copy_loop", x, out, "rows")
    try:
        copy_loop_kernel[(programs or sm_count(x),)](x, y, x.shape[0], x.shape[1], x.stride(0), y.stride(0),
                                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, stages=stages, num_warps=num_warps)
    except OutOfResources as e:  # the ring holds the stages - 1 tiles in flight
        raise _overflow(e, x, BLOCK_M, BLOCK_N, stages, stages - 1) from None
    return y


# ---- lesson 03: persistent TMA copies, device-side and host-side descriptors ---------------------

@triton.jit
def _copy_tiles(x_desc, y_desc, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, stages: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), num_stages=stages):
        off_m = (t // tiles_n) * BLOCK_M
        off_n = (t % tiles_n) * BLOCK_N
        y_desc.store([off_m, off_n], x_desc.load([off_m, off_n]))


@triton.jit
def copy_tma_loop_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, stages: tl.constexpr):
    # device-side descriptors: the tensor map is written by the kernel into global scratch memory
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, N], [stride_xm, 1], [BLOCK_M, BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [M, N], [stride_ym, 1], [BLOCK_M, BLOCK_N])
    _copy_tiles(x_desc, y_desc, M, N, BLOCK_M, BLOCK_N, stages)


@triton.jit
def copy_tma_host_loop_kernel(x_desc, y_desc, M, N,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, stages: tl.constexpr):
    # host-side descriptors: the tensor map is built on the CPU and passed as a kernel parameter
    _copy_tiles(x_desc, y_desc, M, N, BLOCK_M, BLOCK_N, stages)


def copy_tma_loop(x, out=None, BLOCK_M=64, BLOCK_N=128, stages=4, descriptor="device", num_warps=4, programs=None):
    """y = x, persistent grid (one program per SM, or ``programs``), TMA loads and stores through
    ``descriptor``-side tensor maps."""
    y = _out("copy_tma_loop", x, out, None)  # the layout: the TMA rules below
    kernel, grid, args, meta = tma_loop_launch(x, y, BLOCK_M, BLOCK_N, stages, descriptor, num_warps, programs)
    try:
        kernel[grid](*args, **meta)
    except OutOfResources as e:
        raise _overflow(e, x, BLOCK_M, BLOCK_N, stages, stages) from None
    return y


def tma_loop_launch(x, y, BLOCK_M=64, BLOCK_N=128, stages=4, descriptor="device", num_warps=4, programs=None):
    """(kernel, grid, args, kwargs) of one ``copy_tma_loop`` launch, TMA rules checked. With ``descriptor="host"``
    the two tensor maps are built here, once: launching the result again reuses them (lesson 03, section 7)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    if descriptor not in ("device", "host"):
        raise ArgumentError(f"copy_tma_loop: descriptor is 'device' or 'host', got {descriptor!r}")
    tma_rules.ready(("input", x, [BLOCK_M, BLOCK_N]), ("output", y, [BLOCK_M, BLOCK_N]))
    grid = (programs or sm_count(x),)
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, stages=stages, num_warps=num_warps)
    if descriptor == "host":
        xd, yd = (TensorDescriptor.from_tensor(t, [BLOCK_M, BLOCK_N]) for t in (x, y))
        return copy_tma_host_loop_kernel, grid, (xd, yd, x.shape[0], x.shape[1]), meta
    return copy_tma_loop_kernel, grid, (x, y, x.shape[0], x.shape[1], x.stride(0), y.stride(0)), meta


# ---- lesson 07: where a copy's time goes ---------------------------------------------------------

@triton.jit
def _tile_at(t, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    return (t // tiles_n) * BLOCK_M, (t % tiles_n) * BLOCK_N


@triton.jit
def copy_paths_kernel(x_desc, y_desc, x_ptr, y_ptr, M, N,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, stages: tl.constexpr,
                      LOAD_TMA: tl.constexpr, STORE_TMA: tl.constexpr, EVICT: tl.constexpr, STORE_CACHE: tl.constexpr):
    # lesson 03's persistent copy with each side chosen apart: a tile comes in through the TMA engine or
    # through pointer loads (cp.async once tl.range pipelines them, lesson 02; EVICT: their L2 eviction
    # hint), and leaves through the engine or st.global (STORE_CACHE: its cache operator). Only the
    # pointer side takes hints: Triton 3.6's descriptor load passes none.
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), num_stages=stages):
        off_m, off_n = _tile_at(t, N, BLOCK_M, BLOCK_N)
        rows = off_m + tl.arange(0, BLOCK_M)[:, None]
        cols = off_n + tl.arange(0, BLOCK_N)[None, :]
        mask = (rows < M) & (cols < N)
        if LOAD_TMA:
            tile = x_desc.load([off_m, off_n])
        else:
            tile = tl.load(x_ptr + rows * N + cols, mask=mask, eviction_policy=EVICT)
        if STORE_TMA:
            y_desc.store([off_m, off_n], tile)
        else:
            tl.store(y_ptr + rows * N + cols, tile, mask=mask, cache_modifier=STORE_CACHE)


@triton.jit
def read_tma_kernel(x_desc, sums_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, stages: tl.constexpr):
    # the copy's read side alone: every tile in through TMA, added into a register tile so that the
    # loads are used; one sum per program
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), num_stages=stages):
        off_m, off_n = _tile_at(t, N, BLOCK_M, BLOCK_N)
        acc += x_desc.load([off_m, off_n]).to(tl.float32)
    tl.store(sums_ptr + tl.program_id(0), tl.sum(acc))


@triton.jit
def fill_tma_kernel(y_desc, value, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # the copy's write side alone: one register tile of ``value`` stored through TMA at every tile
    tile = tl.full((BLOCK_M, BLOCK_N), value, y_desc.dtype)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tiles, tl.num_programs(0)):
        off_m, off_n = _tile_at(t, N, BLOCK_M, BLOCK_N)
        y_desc.store([off_m, off_n], tile)


def _host_maps(*named, box):
    from triton.tools.tensor_descriptor import TensorDescriptor
    tma_rules.ready(*[(name, t, box) for name, t in named])
    return [TensorDescriptor.from_tensor(t, box) for _, t in named]


def copy_paths(x, out=None, load="tma", store="tma", BLOCK_M=64, BLOCK_N=128, stages=4, programs=None,
               evict_first=False, streaming_store=False, num_warps=4):
    """y = x, persistent, with the load side and the store side each ``"tma"`` (host tensor maps) or
    ``"pointer"``; ``evict_first`` / ``streaming_store``: the pointer side's cache hints (lesson 07)."""
    for side, how in (("load", load), ("store", store)):
        if how not in ("tma", "pointer"):
            raise ArgumentError(f"copy_paths: {side} is 'tma' or 'pointer', got {how!r}")
    y = _out("copy_paths", x, out, "matrix")  # the pointer side indexes rows * N + cols
    x_desc, y_desc = _host_maps(("input", x), ("output", y), box=[BLOCK_M, BLOCK_N])
    try:
        copy_paths_kernel[(programs or sm_count(x),)](
            x_desc, y_desc, x, y, x.shape[0], x.shape[1], BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, stages=stages,
            LOAD_TMA=load == "tma", STORE_TMA=store == "tma", EVICT="evict_first" if evict_first else "",
            STORE_CACHE=".cs" if streaming_store else "", num_warps=num_warps)
    except OutOfResources as e:
        raise _overflow(e, x, BLOCK_M, BLOCK_N, stages, stages) from None
    return y


def read_tma(x, BLOCK_M=64, BLOCK_N=128, stages=4, programs=None, num_warps=4):
    """The fp32 sums of x (one per program) read through TMA: the read side of ``copy_tma_loop`` alone."""
    operands.check("read_tma", "x", x, layout="matrix")
    (x_desc,) = _host_maps(("input", x), box=[BLOCK_M, BLOCK_N])
    grid = programs or sm_count(x)
    sums = x.new_empty(grid, dtype=torch.float32)
    try:
        read_tma_kernel[(grid,)](x_desc, sums, x.shape[0], x.shape[1], BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                 stages=stages, num_warps=num_warps)
    except OutOfResources as e:
        raise _overflow(e, x, BLOCK_M, BLOCK_N, stages, stages) from None
    return sums


def fill_tma(y, value, BLOCK_M=64, BLOCK_N=128, programs=None, num_warps=4):
    """y[:] = value through TMA stores: the write side of ``copy_tma_loop`` alone."""
    operands.check("fill_tma", "y", y, layout="matrix")
    (y_desc,) = _host_maps(("output", y), box=[BLOCK_M, BLOCK_N])
    fill_tma_kernel[(programs or sm_count(y),)](y_desc, value, y.shape[0], y.shape[1], BLOCK_M=BLOCK_M,
                                                BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y
