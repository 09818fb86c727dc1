"""Attention's forward pass, FlashAttention-style, fed by TMA (lesson 09): O = softmax(Q K^T * scale) V.

One program owns BLOCK_M rows of Q of one (batch, head): Q's tile is loaded once and stays; K and V stream past
it in BLOCK_N-row tiles through host tensor maps, pipelined by ``tl.range(num_stages=stages)`` (a ring of K/V
stages in shared memory, as lesson 04's GEMM). Per K/V tile, two GEMMs with a softmax between them:
S = Q K^T (fp32), then the **online softmax** (Milakov and Gimelshein, 2018; Dao et al., FlashAttention, 2022): a
running row maximum m and row sum l, and the output accumulator rescaled by exp(m_old - m_new) whenever the
maximum grows, so that S and P never leave the SM; finally O = acc / l.

The tensors are (batch, heads, seq, head_dim), contiguous; the tensor maps see them as (batch * heads, seq,
head_dim) with a (1, BLOCK, head_dim) box, so that a box past a sequence's end reads zeros of that sequence and a
store past it is clipped, never another head's rows: any sequence length works. Keys past the end are masked to
-inf before the softmax. ``causal``: query i sees keys 0..i; with seq_q != seq_k the sequences are aligned at their
ends (bottom-right: the queries are the newest tokens, as against a KV cache; FlashAttention >= 2.1 and
``torch.nn.attention.bias.causal_lower_right`` do so, where SDPA's ``is_causal=True`` aligns top-left); the programs
skip the K/V tiles wholly above the diagonal. Only the tiles that need it are masked: a program walks the tiles all
its rows see whole first, without a mask, then the ones on the diagonal or at the ragged end, masked (as
FlashAttention's kernels split them).

Decode (one query a sequence, a long K/V): one program per (batch, head) leaves most SMs idle when batch x heads is
small, so ``splits`` > 1 gives each split of the keys a program of its own (``split_kernel``: its partial sums,
unnormalised, with its running maximum and sum), and ``combine_kernel`` rescales them to the largest maximum and
adds them up: the online softmax once more, across programs (split-KV; Dao et al., Flash-Decoding, 2023)."""
import math

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from ..lab import operands, smem
from ..lab.errors import ArgumentError
from ..lab.mode import INTERPRET

HEAD_DIMS = (64, 128)
DTYPES = (torch.float16, torch.bfloat16)
LOG2E = 1.4426950408889634  # softmax in base 2: exp(x) = exp2(x * log2(e)), one multiply folded into the scale


@triton.jit
def _kv_tiles(acc, l_i, m_i, q, k_desc, v_desc, bh, lo, hi, rows, seq_k, offset, qk_scale,
              BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
              stages: tl.constexpr, WARP_SPECIALIZE: tl.constexpr = False):
    # the K/V tiles [lo, hi) of one program's rows; MASK: some key of a tile is past the end or, causal, above the
    # diagonal (key j is seen by query i when j <= i + offset), so the tile is masked and a row may see no key yet
    for start_n in tl.range(lo, hi, BLOCK_N, num_stages=stages, warp_specialize=WARP_SPECIALIZE):
        k = k_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        s = tl.dot(q, k.T)  # raw scores: the scale goes in once per row below, and into exp2's argument as one FMA
        if MASK:
            cols = start_n + tl.arange(0, BLOCK_N)
            keep = cols[None, :] < seq_k
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None] + offset)
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)  # running maximum of the scaled (base-2) logits
        shift = m_new
        if MASK:  # a row that has seen no key yet has m_new = -inf: shift it by 0, so that exp2 gives 0, not NaN
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s * qk_scale - shift[:, None])
        alpha = tl.math.exp2(m_i - shift)  # how much the old maximum overstated: rescale what was summed with it
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_kernel(q_desc, k_desc, v_desc, o_desc, seq_q, seq_k, qk_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                     CAUSAL: tl.constexpr, stages: tl.constexpr,
                     WARP_SPECIALIZE: tl.constexpr = False):
    # program (m, bh): rows m*BLOCK_M.. of Q for (batch, head) bh; qk_scale = softmax scale * log2(e)
    start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    q = q_desc.load([bh, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    rows = start_m + tl.arange(0, BLOCK_M)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running row maximum (base-2 logits)
    l_i = tl.zeros((BLOCK_M,), tl.float32)                 # running row sum of exp2(s - m_i)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    offset = seq_k - seq_q  # causal, the sequences' ends aligned: query i sees keys 0..i + offset
    # the tiles every row of the block sees whole go unmasked; the rest (the diagonal, the ragged end) are masked,
    # and causal tiles wholly above the diagonal are skipped
    full = seq_k // BLOCK_N * BLOCK_N
    hi = seq_k
    if CAUSAL:
        full = tl.minimum(full, tl.maximum(start_m + offset + 1, 0) // BLOCK_N * BLOCK_N)
        hi = tl.minimum(seq_k, tl.maximum(start_m + BLOCK_M + offset, 0))
    acc, l_i, m_i = _kv_tiles(acc, l_i, m_i, q, k_desc, v_desc, bh, 0, full, rows, seq_k, offset, qk_scale,
                              BLOCK_N, HEAD_DIM, False, CAUSAL, stages, WARP_SPECIALIZE)
    acc, l_i, m_i = _kv_tiles(acc, l_i, m_i, q, k_desc, v_desc, bh, full, hi, rows, seq_k, offset, qk_scale,
                              BLOCK_N, HEAD_DIM, True, CAUSAL, stages, WARP_SPECIALIZE)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # a row that saw no key (causal, seq_q > seq_k) is 0
    o_desc.store([bh, start_m, 0], out.to(q.dtype).reshape(1, BLOCK_M, HEAD_DIM))


def _check(q, k, v):
    operands.check("attention", "q k v", q, k, v, layout="flat")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ArgumentError(f"attention: {name} has shape {tuple(t.shape)}; it must be (batch, heads, seq, "
                                "head_dim)")
    if q.dtype == torch.bfloat16 and INTERPRET:
        raise ArgumentError("attention: bfloat16 in Triton's interpreter gives wrong dots (triton-lang/triton#11584): "
                            "run bfloat16 on a GPU, or float16 here")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ArgumentError(f"attention: q, k, v are {q.dtype}, {k.dtype}, {v.dtype}; they must be one of "
                            "float16 or bfloat16, the same for all three")
    B, H, _, D = q.shape
    if k.shape[:2] != (B, H) or v.shape != k.shape or k.shape[3] != D:
        raise ArgumentError(f"attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: k and v must "
                            "share a shape, and batch, heads and head_dim must be q's")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ArgumentError(f"attention: seq_q {q.shape[2]}, seq_k {k.shape[2]}: both must be at least 1")
    if D not in HEAD_DIMS:
        raise ArgumentError(f"attention: head_dim {D}; this kernel is built for {HEAD_DIMS}")


# per (head dim, causal), the fastest of the tiles lesson 09's sweep ranked first, timed again in turn with cuDNN on
# the H200 (4 warps: one warpgroup, and two blocks or more an SM by shared memory); causal at head dim 128 keeps a
# 128-row Q tile (a 64-row tile against 128 keys wastes half of each diagonal tile; our reading, not measured apart)
CONFIGS = {(128, False): dict(BLOCK_M=64, BLOCK_N=128, stages=1, num_warps=4),
           (128, True): dict(BLOCK_M=128, BLOCK_N=64, stages=2, num_warps=4),
           (64, False): dict(BLOCK_M=128, BLOCK_N=128, stages=3, num_warps=4),
           (64, True): dict(BLOCK_M=64, BLOCK_N=128, stages=2, num_warps=4)}
DECODE = dict(BLOCK_M=16, BLOCK_N=128, stages=3, num_warps=4)  # one query a sequence: the smallest tl.dot tile


def attention(q, k, v, causal=False, scale=None, BLOCK_M=None, BLOCK_N=None, stages=None, num_warps=None,
              splits=None, out=None):
    """O = softmax(Q K^T * scale) V over (batch, heads, seq, head_dim) tensors, as
    ``torch.nn.functional.scaled_dot_product_attention``; ``causal``: its mask aligned at the sequences' ends
    (``causal_lower_right``: the same as ``is_causal=True`` where seq_q == seq_k). ``scale``: 1/sqrt(head_dim) by
    default. Tiles left as None take ``CONFIGS[head_dim, causal]``, or ``DECODE`` for decode (at most 16 queries, no
    causal mask). ``splits`` > 1 splits the keys among that many programs per query block (split-KV), each writing its
    partial sums, and a second kernel combines them; None: ``decode_splits`` at decode, else 1."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    _check(q, k, v)
    B, H, seq_q, D = q.shape
    seq_k = k.shape[2]
    given = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, stages=stages, num_warps=num_warps)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if not scale > 0:
        raise ArgumentError(f"attention: scale {scale}; it must be positive (the kernel scales each row's maximum)")
    if causal and seq_q == 1:
        causal = False  # aligned at the ends, the one query sees every key: the same mask as none
    decode = seq_q <= DECODE["BLOCK_M"] and not causal
    cfg = {**(DECODE if decode else CONFIGS[D, causal]), **{name: x for name, x in given.items() if x is not None}}
    if splits is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 132
        splits = decode_splits(B * H * triton.cdiv(seq_q, cfg["BLOCK_M"]), seq_k, sms, cfg["BLOCK_N"]) if decode else 1
    if splits != 1 and (causal or not isinstance(splits, int) or splits < 1):
        raise ArgumentError(f"attention: splits={splits!r} with causal={causal}: split-KV is the decode path, a "
                            "whole number of splits, without a causal mask (one query a sequence sees every key)")
    o = operands.out("attention", out, q.shape, q, "flat")
    BM, BN = cfg["BLOCK_M"], cfg["BLOCK_N"]
    descs = [TensorDescriptor.from_tensor(t.view(B * H, t.shape[2], D), [1, block, D])
             for t, block in ((q, BM), (k, BN), (v, BN), (o, BM))]
    launch = dict(BLOCK_M=BM, BLOCK_N=BN, HEAD_DIM=D, stages=cfg["stages"], num_warps=cfg["num_warps"])
    try:
        if splits == 1:
            attention_kernel[(triton.cdiv(seq_q, BM), B * H)](*descs, seq_q, seq_k, scale * LOG2E, CAUSAL=causal,
                                                              **launch)
            return o
        chunk = triton.cdiv(triton.cdiv(seq_k, splits), BN) * BN  # whole tiles a split: only the last is ragged
        splits = triton.cdiv(seq_k, chunk)
        part = torch.empty(splits, B * H * seq_q, D, dtype=torch.float32, device=q.device)
        ml = torch.empty(splits, B * H * seq_q, 2, dtype=torch.float32, device=q.device)
        split_kernel[(triton.cdiv(seq_q, BM), B * H, splits)](*descs[:3], part, ml, seq_q, seq_k, scale * LOG2E,
                                                              chunk, **launch)
        combine_kernel[(B * H * seq_q,)](part, ml, o, B * H * seq_q, splits, SPLITS=triton.next_power_of_2(splits),
                                         HEAD_DIM=D)
    except OutOfResources as e:
        raise overflow(e, BM, BN, D, cfg["stages"], q.element_size()) from None
    return o


def decode_splits(programs, seq_k, sms, BLOCK_N=DECODE["BLOCK_N"]):
    """Splits of the keys for ``programs`` query blocks (batch x heads, at decode): doubled while the grid stays
    within one wave of ``sms`` and each split keeps at least 4 K/V tiles. 32 heads of one sequence on 132 SMs:
    4 splits, 128 programs (lesson 09 measures 1 to 64)."""
    splits = 1
    while 2 * splits * programs <= sms and seq_k >= 2 * splits * 4 * BLOCK_N:
        splits *= 2
    return splits


@triton.jit
def split_kernel(q_desc, k_desc, v_desc, part_ptr, ml_ptr, seq_q, seq_k, qk_scale, chunk,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, stages: tl.constexpr):
    # program (m, bh, s): rows m*BLOCK_M.. of Q against keys [s * chunk, s * chunk + chunk), no causal mask; writes
    # its unnormalised acc and its m and l (fp32) for combine_kernel
    start_m, bh, sp = tl.program_id(0) * BLOCK_M, tl.program_id(1), tl.program_id(2)
    q = q_desc.load([bh, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    rows = start_m + tl.arange(0, BLOCK_M)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    lo = sp * chunk
    hi = tl.minimum(lo + chunk, seq_k)
    full = lo + (hi - lo) // BLOCK_N * BLOCK_N
    acc, l_i, m_i = _kv_tiles(acc, l_i, m_i, q, k_desc, v_desc, bh, lo, full, rows, seq_k, 0, qk_scale,
                              BLOCK_N, HEAD_DIM, False, False, stages)
    acc, l_i, m_i = _kv_tiles(acc, l_i, m_i, q, k_desc, v_desc, bh, full, hi, rows, seq_k, 0, qk_scale,
                              BLOCK_N, HEAD_DIM, True, False, stages)
    row = (sp * tl.num_programs(1) + bh).to(tl.int64) * seq_q + rows  # (split, bh, query) rows of part and ml: int64,
    # since part holds splits x batch x heads x seq_q x head_dim fp32 values
    ok = rows < seq_q
    d = tl.arange(0, HEAD_DIM)
    tl.store(part_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=ok[:, None])
    tl.store(ml_ptr + 2 * row, m_i, mask=ok)
    tl.store(ml_ptr + 2 * row + 1, l_i, mask=ok)


@triton.jit
def combine_kernel(part_ptr, ml_ptr, o_ptr, n_rows, splits, SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr):
    # program r: one (bh, query) row; each split's sums rescaled to the largest maximum, as the online softmax does
    r = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, SPLITS)
    ok = s < splits
    m = tl.load(ml_ptr + 2 * (s * n_rows + r), mask=ok, other=float("-inf"))
    l = tl.load(ml_ptr + 2 * (s * n_rows + r) + 1, mask=ok, other=0.0)
    w = tl.math.exp2(m - tl.max(m, 0))
    d = tl.arange(0, HEAD_DIM)
    acc = tl.load(part_ptr + (s * n_rows + r)[:, None] * HEAD_DIM + d[None, :], mask=ok[:, None], other=0.0)
    o = tl.sum(acc * w[:, None], 0) / tl.sum(l * w, 0)
    tl.store(o_ptr + r * HEAD_DIM + d, o.to(o_ptr.dtype.element_ty))


def overflow(e, BLOCK_M, BLOCK_N, head_dim, stages, esize=2):
    """A launch out of shared memory, as the course says it. The model: a K tile and a V tile per stage of the ring,
    and one BLOCK_M x head_dim tile (smem's "output tile": O leaves through shared memory by a TMA store, and Q's
    tile, the same size, lands there by TMA). The compiled kernel's figure, in the message too, decides."""
    return smem.overflow(e, f"attention {BLOCK_M}x{BLOCK_N}, head_dim {head_dim}, with {stages} stages", stages,
                         2 * BLOCK_N * head_dim * esize, BLOCK_M * head_dim * esize)


def flops(batch, heads, seq_q, seq_k, head_dim, causal=False):
    """Two GEMMs per (query, key) pair, 2 FLOPs a multiply-add each: 4 * seq_q * seq_k * head_dim per head; causal
    keeps about half of the pairs (the course counts seq_q * seq_k / 2, as FlashAttention's papers do)."""
    return 4 * batch * heads * seq_q * seq_k * head_dim // (2 if causal else 1)


def bytes_per_query_block(BLOCK_M, seq_k, head_dim, esize=2, fused=True):
    """Bytes one block of BLOCK_M queries moves to and from memory: its Q rows read and O rows written, all of K and
    V read (from L2 or HBM); unfused (S = Q K^T, P = softmax(S), O = P V as three kernels), its BLOCK_M x seq_k
    rows of S and of P each written and read back too, in the inputs' dtype."""
    own = 2 * BLOCK_M * head_dim + 2 * seq_k * head_dim
    return (own + (0 if fused else 4 * BLOCK_M * seq_k)) * esize
