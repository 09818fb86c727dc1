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
-inf before the softmax. ``causal``: query i sees keys 0..i; the programs skip the K/V tiles wholly above the
diagonal. Only the tiles that need it are masked: a program walks the tiles all its rows see whole first, without
a mask, then the ones on the diagonal or at the ragged end, masked (as FlashAttention's kernels split them)."""
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
              stages: tl.constexpr):
    # the K/V tiles [lo, hi) of one program's rows; MASK: some key of a tile is past the end or, causal, above the
    # diagonal (key j is seen by query i when j <= i + offset), so the tile is masked and a row may see no key yet
    for start_n in tl.range(lo, hi, BLOCK_N, num_stages=stages):
        k = k_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        s = tl.dot(q, k.T) * qk_scale
        if MASK:
            cols = start_n + tl.arange(0, BLOCK_N)
            keep = cols[None, :] < seq_k
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None] + offset)
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        shift = m_new
        if MASK:  # a row that has seen no key yet has m_new = -inf: shift it by 0, so that exp2 gives 0, not NaN
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - shift[:, None])
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
                     CAUSAL: tl.constexpr, stages: tl.constexpr):
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
                              BLOCK_N, HEAD_DIM, False, CAUSAL, stages)
    acc, l_i, m_i = _kv_tiles(acc, l_i, m_i, q, k_desc, v_desc, bh, full, hi, rows, seq_k, offset, qk_scale,
                              BLOCK_N, HEAD_DIM, True, CAUSAL, stages)
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
    if D not in HEAD_DIMS:
        raise ArgumentError(f"attention: head_dim {D}; this kernel is built for {HEAD_DIMS}")


def attention(q, k, v, causal=False, scale=None, BLOCK_M=128, BLOCK_N=64, stages=2, num_warps=8, out=None):
    """O = softmax(Q K^T * scale) V over (batch, heads, seq, head_dim) tensors, as
    ``torch.nn.functional.scaled_dot_product_attention`` with ``is_causal=causal`` (for seq_q != seq_k, the causal
    mask aligned at the sequences' ends, as SDPA's bottom-right mask). ``scale``: 1/sqrt(head_dim) by default."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    _check(q, k, v)
    B, H, seq_q, D = q.shape
    seq_k = k.shape[2]
    o = operands.out("attention", out, q.shape, q, "flat")
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    descs = [TensorDescriptor.from_tensor(t.view(B * H, t.shape[2], D), [1, block, D])
             for t, block in ((q, BLOCK_M), (k, BLOCK_N), (v, BLOCK_N), (o, BLOCK_M))]
    grid = (triton.cdiv(seq_q, BLOCK_M), B * H)
    try:
        attention_kernel[grid](*descs, seq_q, seq_k, scale * LOG2E, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=D,
                               CAUSAL=causal, stages=stages, num_warps=num_warps)
    except OutOfResources as e:
        raise overflow(e, BLOCK_M, BLOCK_N, D, stages, q.element_size()) from None
    return o


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
