"""Split-K GEMM with an optional swap of A and B: the course's GEMM for short, wide products (lessons 07, 08).

When M is small (a decode step: M from 1 to a few hundred tokens), C has few tiles: M = 16, N = 4096 in
128-wide tiles is 32 tiles, so 32 of 132 SMs would each stream a whole column of B while 100 sit idle. Every
byte of B is read once whatever the tiling, so such a GEMM is bound by bandwidth, and the bandwidth of 32
SMs is far from the chip's. Two ideas put the idle SMs to work and keep the tensor cores' shape sensible:

- **Split K**: each output tile is cut into SPLIT slices along K, one program per slice, so tiles x SPLIT
  programs stream B. A slice writes its fp32 partial sum to a scratch buffer and counts itself in; the slice
  that counts last adds the partials up and stores the tile (the same protocol as lesson 07's split last
  wave), so one launch does it all.
- **Swap A and B** (``SWAP``): compute C^T = B^T A^T, so the large N runs along the MMA's M (which wgmma wants
  64 rows of) and the small M along its N (which may be 8 to 256). The tile is transposed once, in
  registers, before it is stored.

One kernel serves fp16/bf16 (B given as (K, N)) and FP8 e4m3 (B given as B^T, (N, K), K-major as wgmma reads
FP8: ``B_T``), the latter with per-tensor scales applied in the epilogue (``SCALED``). The partials and counts are
kept per device, tile and split (``gemm._scratch``) and shared by every call of that kind: two such calls on two
streams at once would race on them (the course launches on one stream)."""
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from ..lab import smem, tma_rules
from ..lab.errors import CourseError
from ..lab.mode import sm_count
from ..lab.plan import Plan
from .gemm import _inputs, _scratch


@triton.jit
def matmul_splitk_kernel(a_desc, b_desc, c_desc, partial_ptr, count_ptr, scale_a_ptr, scale_b_ptr, M, N, K, SPLIT,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         SWAP: tl.constexpr, B_T: tl.constexpr, SCALED: tl.constexpr):
    # program = (tile, slice): the SPLIT slices of a tile are neighbours, the tiles walk N fastest (A's few
    # rows are read by every tile of their row and stay in L2). SPLIT is a runtime value: Triton compiles one
    # variant for 1, one for multiples of 16 and one for the rest, not one per split
    pid = tl.program_id(0)
    tile, s = pid // SPLIT, pid % SPLIT
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m, off_n = (tile // tiles_n) * BLOCK_M, (tile % tiles_n) * BLOCK_N
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_slice = tl.cdiv(k_tiles, SPLIT)
    k0 = s * per_slice
    k1 = tl.minimum(k0 + per_slice, k_tiles)
    acc = tl.zeros((BLOCK_N, BLOCK_M) if SWAP else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k0, k1):
        a = a_desc.load([off_m, ki * BLOCK_K])  # (BLOCK_M, BLOCK_K)
        if B_T:
            b = b_desc.load([off_n, ki * BLOCK_K]).T  # B^T's (BLOCK_N, BLOCK_K) box, seen as (BLOCK_K, BLOCK_N)
        else:
            b = b_desc.load([ki * BLOCK_K, off_n])
        if SWAP:
            acc = tl.dot(b.T, a.T, acc)  # C^T's tile: N along the MMA's M, M along its N
        else:
            acc = tl.dot(a, b, acc)
    if SPLIT > 1:
        SHAPE: tl.constexpr = acc.shape
        at = tl.arange(0, SHAPE[0])[:, None] * SHAPE[1] + tl.arange(0, SHAPE[1])[None, :]
        size: tl.constexpr = BLOCK_M * BLOCK_N
        tl.store(partial_ptr + pid * size + at, acc)
        tl.debug_barrier()  # every thread's part of the partial is written before the count says so
        if tl.atomic_add(count_ptr + tile, 1, sem="acq_rel") == SPLIT - 1:
            tl.debug_barrier()
            acc = tl.zeros(SHAPE, dtype=tl.float32)
            for j in range(SPLIT):  # .cg: read in L2, where the other slices' stores are, not a stale L1 line
                acc += tl.load(partial_ptr + (tile * SPLIT + j) * size + at, cache_modifier=".cg")
            tl.store(count_ptr + tile, 0)  # ready for the next call
            _store(c_desc, acc, scale_a_ptr, scale_b_ptr, off_m, off_n, SWAP, SCALED)
    else:
        _store(c_desc, acc, scale_a_ptr, scale_b_ptr, off_m, off_n, SWAP, SCALED)


@triton.jit
def _store(c_desc, acc, scale_a_ptr, scale_b_ptr, off_m, off_n, SWAP: tl.constexpr, SCALED: tl.constexpr):
    if SCALED:
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    if SWAP:
        acc = acc.T
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def split_for(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, sms, fill=1):
    """The default number of K slices: enough for the programs (tiles x slices) to cover every SM ``fill`` times,
    with at least two BLOCK_K steps per slice (a slice of one step has nothing to pipeline), at most 16."""
    tiles = max(1, triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N))
    k_tiles = triton.cdiv(K, BLOCK_K)
    return max(1, min(triton.cdiv(sms * fill, tiles), k_tiles // 2, 16))


def _launch(a, b, c, BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, stages=4, num_warps=4, split=None, swap_ab=False, fill=1,
            b_t=False, scales=None, programs=None):
    """(kernel, grid, args, kwargs) of one launch, host-side tensor maps; ``b`` is B (K, N), or B^T (N, K)
    with ``b_t``; ``scales``: (scale_a, scale_b) for FP8."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    if min(BLOCK_M, BLOCK_N, BLOCK_K) < 16:
        raise CourseError(f"split-K tiles are at least 16 x 16 x 16 (the MMA's smallest), got "
                          f"{BLOCK_M} x {BLOCK_N} x {BLOCK_K}")
    M, K = a.shape
    N = b.shape[0] if b_t else b.shape[1]
    b_box = [BLOCK_N, BLOCK_K] if b_t else [BLOCK_K, BLOCK_N]
    tma_rules.ready(("A", a, [BLOCK_M, BLOCK_K]), ("B^T" if b_t else "B", b, b_box), ("C", c, [BLOCK_M, BLOCK_N]))
    split = split or split_for(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, programs or sm_count(a), fill)
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    partials, counts = _scratch(a.device, tiles if split > 1 else 1, split, BLOCK_M, BLOCK_N)
    scale_a, scale_b = scales if scales is not None else (counts, counts)  # unread unless SCALED
    descs = (TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K]), TensorDescriptor.from_tensor(b, b_box),
             TensorDescriptor.from_tensor(c, [BLOCK_M, BLOCK_N]))
    return (matmul_splitk_kernel, (tiles * split,), (*descs, partials, counts, scale_a, scale_b, M, N, K, split),
            dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SWAP=swap_ab, B_T=b_t,
                 SCALED=scales is not None, num_stages=stages, num_warps=num_warps))


def _start(launch, a, c, start=None):
    kernel, grid, args, kw = launch
    try:
        return start(*launch) if start else kernel[grid](*args, **kw)
    except OutOfResources as e:
        raise smem.overflow(e, f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} split-K with {kw['num_stages']} "
                               f"stages", kw["num_stages"], smem.gemm_stage_bytes(kw["BLOCK_M"], kw["BLOCK_N"],
                                                                                   kw["BLOCK_K"], a.element_size()),
                            kw["BLOCK_M"] * kw["BLOCK_N"] * c.element_size()) from None


def matmul_splitk(a, b, BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, stages=4, num_warps=4, split=None, swap_ab=False,
                  fill=1, programs=None, out=None):
    """C = A @ B (fp16/bf16), each output tile cut in ``split`` slices along K (default ``split_for``: enough
    programs to cover the SMs ``fill`` times), with ``swap_ab`` computed as C^T = B^T A^T (lesson 07)."""
    c = _inputs("matmul_splitk", a, b, out)
    _start(_launch(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps, split, swap_ab, fill, programs=programs),
           a, c)
    return c


def launch_fp8(a, bt, scale_a, scale_b, c, **config):
    """``_launch`` for FP8: A (M, K) and B^T (N, K) in e4m3 with their per-tensor scales (lesson 08)."""
    return _launch(a, bt, c, b_t=True, scales=(scale_a, scale_b), **config)


def start_fp8(a, bt, scale_a, scale_b, c, start=None, **config):
    return _start(launch_fp8(a, bt, scale_a, scale_b, c, **config), a, c, start)


def plan(a, b, c, **config):
    """A ``lab.plan.Plan`` of ``matmul_splitk`` into ``c``: checks, tensor maps and compilation once."""
    _inputs("plan(gemm_splitk)", a, b, c)
    return _start(_launch(a, b, c, **config), a, c, start=Plan)

