"""The check behind exercises/09_attention.ipynb: the online-softmax update inside the K/V loop of the attention
kernel (running maximum, weights, rescaled running sum and accumulator, the second GEMM). Checked in values (the
interpreter in CPU mode, the GPU live) against SDPA in fp32, on inputs whose scores grow along the keys, so that
every K/V tile raises the rows' maxima and a missing or misplaced rescale shows; each wrong answer learners write is
computed tile by tile in torch and named when the output equals it. A second input has scores past 2^128 in base
2, where exp2 without the running maximum overflows. Then the compiled sm_90 code: both GEMMs on wgmma, S and P
never stored to global memory."""
import math
import re

import torch

from ..lab import aot, check as lab_check
from ..lab.mode import DEVICE, MODE

LOG2E = 1.4426950408889634
TILE = (32, 16)      # BLOCK_M, BLOCK_N of the values check: unequal (a max over the wrong axis cannot broadcast)
CODE_TILE = (64, 128)  # what the compiled code is read at: a tile of lesson 09's (head dim 128, 4 warps)
HEAD_DIM = 64


def _operands(seq_q, seq_k, ramp, rng):
    """Q, K, V (1 x 2 heads, fp16) on the course's device whose scores grow along the keys: column 0 of Q is
    positive and column 0 of K rises by ``ramp`` from the first key to the last, so most K/V tiles raise most rows'
    maxima (about half of the (row, tile) pairs, measured on the check's shapes: enough for every wrong answer below
    to land far from the right one)."""
    g = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    q, k, v = (torch.randn(1, 2, s, HEAD_DIM, generator=g) for s in (seq_q, seq_k, seq_k))
    q[..., 0] = q[..., 0].abs() + 1.0
    k[..., 0] += torch.linspace(0, ramp, seq_k)
    return [t.to(torch.float16).to(DEVICE) for t in (q, k, v)]


def simulate(q, k, v, block_n, bug=None):
    """The kernel's loop in torch (fp32), one K/V tile at a time, as written right or with one of ``WRONG``'s
    mistakes; P is rounded to the inputs' dtype before the second GEMM, as the kernel does."""
    q, k, v = (t.float().cpu() for t in (q, k, v))
    seq_k = k.shape[2]
    scale = LOG2E / math.sqrt(q.shape[3])
    m = torch.full(q.shape[:3], float("-inf"))
    l = torch.zeros(q.shape[:3])
    acc = torch.zeros(q.shape)
    exp_p = torch.exp if bug in ("base e", "base e weights") else torch.exp2
    exp_a = torch.exp if bug in ("base e", "base e alpha") else torch.exp2
    for start in range(0, seq_k, block_n):
        s = q @ k[:, :, start:start + block_n].transpose(-1, -2) * scale
        if bug == "scaled twice":
            s = s * scale
        m_new = torch.maximum(m, s.amax(-1))
        p = exp_p(s) if bug == "unshifted" else exp_p(s - (m if bug == "old max" else m_new)[..., None])
        alpha = exp_a(m_new - m) if bug == "alpha inverted" else exp_a(m - m_new)
        if bug == "stale max":
            m_new = torch.full_like(m, float("-inf"))
            alpha = torch.zeros_like(alpha)  # exp2(-inf - m_new): what came before is dropped at every tile
        pv = p.half().float() @ v[:, :, start:start + block_n]
        if bug == "after the sum":
            l, acc = (l + p.sum(-1)) * alpha, (acc + pv) * alpha[..., None]
        else:
            l = l + p.sum(-1) if bug in ("l not rescaled", "neither rescaled") else l * alpha + p.sum(-1)
            acc = acc + pv if bug in ("acc not rescaled", "neither rescaled") else acc * alpha[..., None] + pv
        m = m_new
    return acc / l[..., None]


# the wrong answers learners write, as ``simulate`` computes them, and what each message says
WRONG = {
    "acc not rescaled": "the accumulator is not rescaled: when the maximum grows, acc (summed with the old maximum) "
                        "must be multiplied by alpha = exp2(m_i - m_new) before this tile's P @ V is added",
    "l not rescaled": "the running sum l_i is not rescaled: l_i = l_i * alpha + tl.sum(p, 1), alpha = "
                      "exp2(m_i - m_new), so that all of it is summed against the same maximum",
    "neither rescaled": "neither l_i nor acc is rescaled when the maximum grows (or alpha is computed after m_i = "
                        "m_new, so it is 1): both were summed against the old maximum; multiply both by alpha = "
                        "exp2(m_i - m_new), computed before m_i moves on",
    "alpha inverted": "alpha is exp2(m_new - m_i), inverted: the old sums are too large by the growth of the "
                      "maximum, so multiply by exp2(m_i - m_new) (at most 1)",
    "stale max": "the running maximum m_i is never updated (m_i = m_new missing): alpha = exp2(-inf - m_new) = 0 "
                 "drops everything before the last tile",
    "base e": "exp in place of exp2: the scores are base-2 logits (log2(e) is folded into qk_scale), so the "
              "weights are tl.math.exp2(s - m_new) and alpha tl.math.exp2(m_i - m_new)",
    "base e weights": "the weights use exp, alpha exp2: the scores are base-2 logits (log2(e) is folded into "
                      "qk_scale), so p = tl.math.exp2(s - m_new[:, None])",
    "base e alpha": "alpha uses exp, the weights exp2: the scores are base-2 logits, so alpha = "
                    "tl.math.exp2(m_i - m_new)",
    "unshifted": "the weights are exp2(s), not shifted by the running maximum, while alpha rescales as if they were: "
                 "p = tl.math.exp2(s - m_new[:, None])",
    "old max": "the weights are shifted by the old maximum m_i (-inf at the first tile: exp2 of +inf): shift them "
               "by the new one, p = tl.math.exp2(s - m_new[:, None])",
    "scaled twice": "the scores are scaled twice: the frame's s already holds qk_scale (log2(e) / sqrt(d)); the "
                    "update takes s as it is",
    "after the sum": "alpha is applied after this tile is added (acc = (acc + P @ V) * alpha): this tile's P was "
                     "computed with the new maximum already; rescale the old sums first, then add",
}


def _values(attend, kernel):
    rng = lab_check.rng()
    BM, BN = TILE
    notes = []
    for seq_q, seq_k, ramp in ((rng.randint(40, 90), rng.randint(5, 9) * BN + rng.randint(1, BN - 1), 12.0),
                               (rng.randint(33, 60), rng.randint(4, 6) * BN, 12.0)):
        q, k, v = _operands(seq_q, seq_k, ramp, rng)
        out = torch.full_like(q, lab_check.POISON)
        try:
            if attend(q, k, v, BLOCK_M=BM, BLOCK_N=BN, out=out) is None:
                raise NotImplementedError
        except Exception as e:  # noqa: BLE001 - what Triton says of a shape or dtype mistake, said for this loop
            if lab_check.is_stub(e):
                raise
            raise AssertionError(_explain(e)) from None
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float()).cpu()
        got = out.float().cpu()
        if (got == lab_check.POISON).all():
            raise lab_check.NotAttempted("the output was never stored")
        err = lab_check.rel_err(got, ref)
        if err > 1e-2:
            named = [text for bug, text in WRONG.items() if _same(got, simulate(q, k, v, BN, bug))]
            nan = torch.isnan(got).any().item()
            why = " - or - ".join(named) if named else (
                "NaN in the output: a weight or a rescale is exp2 of inf - inf" if nan else
                "the output matches none of the usual mistakes: compare your update with the formulas of the lesson's "
                "section 2, in base 2 (the frame's s is already scaled)")
            raise AssertionError(f"{seq_q} queries x {seq_k} keys (tiles of {BN} keys, the last one ragged): relative "
                                 f"error {err:.2e} against SDPA; {why}")
        notes.append(f"{seq_q}x{seq_k}")
    # scores far past 128 in base 2, rising then falling along the keys: exp2 of an unshifted score overflows fp32,
    # and so does alpha = exp2(m_i - m_new) when m_new is one tile's maximum and falls below the running one
    for ends, why in (((-800, 900), "exp2 of a score past 128 overflows fp32: the weights are exp2(s - m_new), the "
                                    "scores shifted by the running maximum, never exp2(s)"),
                      ((900, -800), "the maximum a tile is shifted by must be the running one, which never falls: "
                                    "m_new = tl.maximum(m_i, tl.max(s, 1)); one tile's own maximum, below the "
                                    "running one, makes alpha = exp2(m_i - m_new) overflow")):
        q, k, v = _operands(40, 4 * BN, 0.0, rng)
        k[..., 0] = torch.linspace(*ends, k.shape[2], device=k.device).half()
        out = torch.full_like(q, lab_check.POISON)
        attend(q, k, v, BLOCK_M=BM, BLOCK_N=BN, out=out)
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float()).cpu()
        if not torch.isfinite(out.float()).all() or lab_check.rel_err(out.float().cpu(), ref) > 1e-2:
            way = "rising" if ends[0] < ends[1] else "falling"
            raise AssertionError(f"with scores in the hundreds (base-2 logits), {way} along the keys, the output is "
                                 f"wrong or not finite: {why}")
    return (f"within 1e-2 of SDPA (fp32) on {', '.join(notes)} with rising scores, and on scores past 128 (base 2), "
            "rising and falling")


def _same(got, wrong):
    """Whether an output equals what a wrong answer computes: NaN in the same places, the rest within 1e-2."""
    nan = torch.isnan(got)
    if not torch.equal(nan, torch.isnan(wrong)):
        return False
    return nan.all().item() or lab_check.rel_err(got[~nan], wrong[~nan]) < 1e-2


def _explain(e):
    """What Triton said of a mistake in the update, said for this loop."""
    text = lab_check.explain(e)
    if "same dtype" in text:
        return (f"the second tl.dot refused its operands ({text}): P is fp32 and V fp16; convert P to V's dtype, "
                "tl.dot(p.to(v.dtype), v, acc)")
    if "must have equal reduction dimensions" in text:
        return (f"the second tl.dot refused its operands ({text}): it multiplies P (BLOCK_M x BLOCK_N) by V "
                "(BLOCK_N x HEAD_DIM), in that order (swapped, the shapes do not meet): tl.dot(p.to(v.dtype), v, acc)")
    if re.search(r"tl\.(sum|max)\(\s*\d", text):
        return (f"a reduction's arguments are swapped ({text}): tl.max and tl.sum take the tensor first, then the "
                "axis: tl.max(s, 1), tl.sum(p, 1), over the keys")
    if "axis" in text or "shape" in text.lower() or "broadcast" in text.lower():
        return (f"a shape does not fit ({text}): the row maximum and the row sum reduce S (BLOCK_M x BLOCK_N) over "
                "axis 1, the keys, to one value per row like m_i and l_i (another axis in place of 1 gives a "
                "shape that does not fit); a per-row vector meets a tile as v[:, None], one value down each row")
    return text


def compile_sm90(kernel, BLOCK_M=CODE_TILE[0], BLOCK_N=CODE_TILE[1]):
    """``kernel`` compiled for sm_90 at lesson 09's 4k shape, head dim 128, 4 warps, one stage."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    B, H, S, D = 4, 16, 4096, 128
    descs = [TensorDescriptor.from_tensor(torch.empty(B * H, S, D, dtype=torch.float16, device=DEVICE), [1, blk, D])
             for blk in (BLOCK_M, BLOCK_N, BLOCK_N, BLOCK_M)]
    return aot.compile_sm90(kernel, *descs, S, S, LOG2E / math.sqrt(D), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=D,
                            stages=1, num_warps=4)


def _code(kernel):
    try:
        compiled = lab_check.require_kept_dot(compile_sm90(kernel), kernel)
    except aot.CompileError as e:
        if lab_check.is_stub(e):
            raise
        raise AssertionError(_explain(e)) from None
    counts = compiled.counts()
    wgmma = [line for line in compiled.ptx.splitlines() if "wgmma.mma_async" in line]
    from_registers = sum("}, {" in line for line in wgmma)  # A as registers: P, the softmax's output, never stored
    problems = []
    if not from_registers or from_registers == len(wgmma):
        problems.append("the code lacks one of the two GEMMs on the tensor cores: S = Q K^T (both operands in "
                        "shared memory) and O += P V (P from registers): acc = tl.dot(p.to(v.dtype), v, acc)")
    if counts["st.global"]:
        problems.append(f"{counts['st.global']} plain global stores: S or P leaves the SM; keep them in registers")
    if problems:
        raise AssertionError("; ".join(problems))
    return (f"{len(wgmma) - from_registers} wgmma for Q K^T from shared memory, {from_registers} for P V with P in "
            f"registers, {counts['cp.async.bulk.tensor load']} TMA loads, no plain global store ({compiled.origin})")


def check(attend, kernel):
    """``attend(q, k, v, BLOCK_M, BLOCK_N, stages=1, num_warps=4, out=None)`` launches ``kernel`` (the exercise's
    arguments: q_desc, k_desc, v_desc, o_desc, seq_q, seq_k, qk_scale, BLOCK_M, BLOCK_N, HEAD_DIM, stages)."""
    return lab_check.run("exercise 09", [("online softmax: values", lambda: _values(attend, kernel)),
                                         ("the code: two GEMMs on wgmma, S and P on chip", lambda: _code(kernel))], twin=True)


def check_at_size(attend, seq=4096):
    """On a GPU: ``attend`` at the benchmark's 4k shape (4 x 16 heads, head dim 128, fp16) against SDPA in fp32,
    within 1e-2; prints its verdict as ``check`` does and returns it (a ``Verdict``)."""
    assert MODE != "cpu", "check_at_size needs a GPU"

    def at_size():
        q, k, v = (torch.randn(4, 16, seq, 128, dtype=torch.float16, device="cuda") for _ in range(3))
        out = torch.full_like(q, lab_check.POISON)  # what is never written stays the poison
        attend(q, k, v, *CODE_TILE, out=out)
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
        err = lab_check.compare(f"4 x 16 x {seq} x 128 at the course's tile {CODE_TILE}", out.flatten(0, 2),
                                ref.flatten(0, 2), 1e-2)
        return f"relative error {err:.1e}"
    return lab_check.run("exercise 09 at size", [(f"attention at 4 x 16 x {seq} x 128", at_size)])
