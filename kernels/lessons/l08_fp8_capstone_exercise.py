"""The check behind exercises/08_fp8_capstone.ipynb: the inner loop and the epilogue of the FP8 TMA GEMM,
C = (A @ B) * scale_a * scale_b from A (M, K) and B^T (N, K) in e4m3. Checked in values (in the interpreter in
CPU mode, where FP8 dots run correctly) against the fp32 product of the same e4m3 values, and in the compiled
sm_90 code: wgmma on e4m3 operands, TMA loads, and the scale multiplied once per tile, not once per K step."""
import random
import re

import torch

from ..lab import check as lab_check, isa, trace
from ..lab.mode import DEVICE, MODE
from ..ops import gemm_fp8

TILE = (64, 32, 128)  # BLOCK_M, BLOCK_N, BLOCK_K of the values check: BLOCK_N != BLOCK_K, so an untransposed B^T
PROGRAMS = 3          # cannot meet A in tl.dot by accident; 128 e4m3 = 128-byte rows, as on the GPU
CODE_TILE, CODE_STAGES = (128, 256, 128), 3  # what the compiled code is read at: the course's tile


def _shape():
    """A ragged M x N x K: N a multiple of 8 (16-byte rows of the fp16 C), K of 16 (16-byte rows of e4m3) but not
    of BLOCK_K (the last K box runs past K: TMA fills it with zeros), and K's steps of BLOCK_K (3 or 4) more than
    M's or N's tiles of that size (1 or 2): a K loop bounded by M or N stops early and shows in the values (with
    K from 144, a loop to cdiv(M, BLOCK_K) ran K's two steps and passed)."""
    return random.randint(70, 200), 8 * random.randint(9, 30), 16 * random.choice([r for r in range(17, 31) if r % 8])


def _operands(M, N, K):
    """Small e4m3 values (products summed over K stay well inside fp16) and two scales, so that a scale
    forgotten, doubled or misplaced gives a different C: with scale_a in [0.3, 0.35] and scale_b in [2, 2.4],
    the wrong factors 1, scale_a, scale_b and (scale_a * scale_b)^2 differ from each other and from the right
    one, scale_a * scale_b (0.6 to 0.84), by 16% or more (with scale_b below 2 the doubled scale could equal
    scale_a alone: scale_a * scale_b^2 = 1)."""
    a = (torch.randn(M, K, device=DEVICE) * 2).to(gemm_fp8.FP8)
    bt = (torch.randn(N, K, device=DEVICE) * 2).to(gemm_fp8.FP8)
    sa = torch.tensor(random.uniform(0.3, 0.35), device=DEVICE)
    sb = torch.tensor(random.uniform(2.0, 2.4), device=DEVICE)
    return a, bt, sa, sb


def _tiled(a, bt, BM, BN, BK, b_box):
    """C as a kernel computes it when tile (m, n)'s K step k reads the B^T box ``b_box(n, k)`` = (row, col)
    of a BN x BK box, zero past the edges (what TMA does)."""
    M, N, K = a.shape[0], bt.shape[0], a.shape[1]
    btp = torch.zeros(N + 4 * max(BN, BK) + K, K + 4 * max(BN, BK) + N)
    btp[:N, :K] = bt.float()
    ap = torch.zeros(M + BM, K + BK)
    ap[:M, :K] = a.float()
    out = torch.zeros(-(-M // BM) * BM, -(-N // BN) * BN)
    for m in range(-(-M // BM)):
        for n in range(-(-N // BN)):
            acc = torch.zeros(BM, BN)
            for k in range(-(-K // BK)):
                r, c = b_box(n, k)
                acc += ap[m * BM:(m + 1) * BM, k * BK:(k + 1) * BK] @ btp[r:r + BN, c:c + BK].t()
            out[m * BM:(m + 1) * BM, n * BN:(n + 1) * BN] = acc
    return out[:M, :N]


_DOT_SHAPES = "must have equal reduction dimensions"  # what Triton says of tl.dot(a, bt) here


def _untransposed(e):
    return (f"tl.dot refused the shapes ({lab_check.explain(e)}): the B^T box is (BLOCK_N, BLOCK_K), K along its "
            "rows, and A's is (BLOCK_M, BLOCK_K), so the product takes its transpose, tl.dot(a, bt.T, acc) - a view, "
            "no data moves")


def _values(matmul, kernel=None):
    BM, BN, BK = TILE
    for M, N, K in [_shape() for _ in range(2)]:
        a, bt, sa, sb = _operands(M, N, K)
        out = lab_check.poisoned(M, N)
        layout = trace.Gemm(("A", "mk"), ("B^T", "nk"), ("C", "mn"), dict(M=M, N=N, K=K, BLOCK_M=BM, BLOCK_N=BN,
                                                                            BLOCK_K=BK))
        try:
            with trace.watching(layout, A=a, **{"B^T": bt}, C=out, scale_a=sa, scale_b=sb) as seen:
                if matmul(a, bt, sa, sb, BM, BN, BK, 2, programs=PROGRAMS, out=out) is None:
                    raise NotImplementedError
        except Exception as e:
            text = str(e)
            if lab_check.is_stub(e) or isinstance(e, trace.Diagnosis):
                raise
            if _DOT_SHAPES in text:
                raise AssertionError(_untransposed(e)) from None
            raise
        if (out == 0).all():
            dropped = kernel is not None and lab_check.dropped_dot(kernel)
            if dropped:
                raise AssertionError(lab_check.dropped_dot_message(dropped))
            told = trace.after(seen, layout, AssertionError("the output came out all zeros"))
            if isinstance(told, trace.Diagnosis):  # the kernel ran and stored C: written, so not the stub
                raise told
            if seen and {"A", "B^T"} <= {x.tensor for x in seen.accesses if x.op == "load"}:
                raise AssertionError("the kernel loads A and B^T and stores C, but C comes out all zeros: nothing "
                                     "accumulates into acc in the K loop (no tl.dot?): acc = tl.dot(a, bt.T, acc)")
            raise lab_check.NotAttempted("the output came out all zeros: the kernel body is still the stub")
        s = (sa * sb).item()
        product = (a.float() @ bt.float().t()).cpu()
        steps = -(-K // BK)
        swapped = _tiled(a.cpu(), bt.cpu(), BM, BN, BK, lambda n, k: (k * BK, n * BN)) * s
        # scaling the running accumulator at every step multiplies step k's product by s^(steps - k)
        per_step = sum((a.float()[:, k * BK:(k + 1) * BK] @ bt.float()[:, k * BK:(k + 1) * BK].t()).cpu()
                       * s ** (steps - k) for k in range(steps))
        ref = product * s
        candidates = [("A @ B without the scales: multiply the accumulator by scale_a * scale_b after the K loop",
                       product),
                      ("A @ B * (scale_a * scale_b)^2: the scale is applied twice", product * s * s),
                      ("A @ B * scale_a (or * scale_b): one of the two scales is missing", product * sa.item()),
                      ("A @ B * scale_b (or * scale_a): one of the two scales is missing", product * sb.item()),
                      ("the product with the running accumulator scaled at every K step (acc = tl.dot(...) * scale "
                       "inside the loop): scale once, after the loop", per_step),
                      ("the product of B^T boxes loaded at [k * BLOCK_K, pid_n * BLOCK_N]: the coordinates are "
                       "swapped; B^T is (N, K), so its box starts at [pid_n * BLOCK_N, k * BLOCK_K]", swapped)]
        if steps == 1:
            candidates = candidates[:4] + candidates[5:]
        candidates += [("A @ B * scale_a^2: scale_a loaded twice, through scale_a's pointer in place of scale_b's; the "
                        "scale is scale_a * scale_b", product * sa.item() ** 2),
                       ("A @ B * scale_b^2: scale_b loaded twice, through scale_b's pointer in place of scale_a's; the "
                        "scale is scale_a * scale_b", product * sb.item() ** 2),
                       ("(A @ B) * scale rounded to e4m3 before the store: the tile is converted to another "
                        "descriptor's dtype (a_desc's or bt_desc's, e4m3); convert it to C's, c_desc.dtype",
                        (product * s).to(torch.float8_e4m3fn).float())]
        partial = torch.zeros_like(product)
        for t in range(1, steps):  # a K loop that stops early: the sum of its first t boxes
            partial += (a.float()[:, (t - 1) * BK:t * BK] @ bt.float()[:, (t - 1) * BK:t * BK].t()).cpu()
            candidates.append((f"the sum of the first {t} of the {steps} K steps: the K loop stops early; it runs "
                               "tl.cdiv(K, BLOCK_K) steps", partial * s))
        # e4m3 products are exact in fp32; what is left is the order of the sums and the fp16 rounding of C
        try:
            lab_check.compare_tiles(f"{M}x{K} @ ({N}x{K})^T e4m3", out.cpu(), ref, 1e-2, BM, BN, candidates)
        except AssertionError as e:
            told = trace.after(seen, layout, e)
            if told is not e:
                raise told from None
            raise
        told = trace.after(seen, layout)
        if told:
            raise told
    return f"within 1e-2 of the fp32 product of the same e4m3 values, scaled, on two ragged shapes ({PROGRAMS} programs)"


def compile_sm90(kernel):
    return gemm_fp8.compile_sm90(*CODE_TILE, CODE_STAGES, num_warps=8, kernel=kernel)


def _block_of_wgmma(ptx):
    """The PTX of the basic block that issues the wgmma: from the label before the first one to the first
    label or branch after the last one."""
    lines = ptx.splitlines()
    w = [i for i, line in enumerate(lines) if "wgmma.mma_async" in line]
    start = max((i for i in range(w[0]) if lines[i].startswith("$L")), default=0)
    end = next((i for i in range(w[-1], len(lines)) if lines[i].startswith("$L") or " bra" in lines[i]), len(lines))
    return "\n".join(lines[start:end])


def _multiplies(ptx):
    return sum(1 for op, _ in isa.ptx_ops(ptx) if op.split(".")[0] in ("mul", "fma") and op.endswith("f32"))


def _code(kernel):
    try:
        compiled = lab_check.require_kept_dot(compile_sm90(kernel), kernel)
    except Exception as e:
        if _DOT_SHAPES in str(e):
            raise AssertionError(_untransposed(e)) from None
        raise
    counts = compiled.counts(sass=False)
    operands = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.\w+\.\w+\.(\w+)\.(\w+)", compiled.ptx))
    problems = []
    if operands != {("e4m3", "e4m3")}:
        types = ", ".join(sorted(f"{x} x {y}" for x, y in operands))
        problems.append(f"wgmma multiplies {types}, not e4m3 x e4m3: the tiles were converted before tl.dot, which "
                        "loses the FP8 tensor cores' rate; pass the e4m3 tiles to tl.dot as they are")
    accumulators = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.\w+\.(\w+)\.\w+\.\w+", compiled.ptx))
    if accumulators - {"f32"}:
        problems.append(f"wgmma accumulates in {', '.join(sorted(accumulators))}: keep an fp32 accumulator "
                        "(tl.zeros(..., dtype=tl.float32), and tl.dot without out_dtype) and convert when storing")
    if not counts["cp.async.bulk.tensor load"]:
        problems.append("no cp.async.bulk.tensor loads: load A and B^T through a_desc and bt_desc")
    # the scale belongs after the loop: a multiply that needs each step's wgmma result sits in the basic block of
    # the wgmma itself (from its label to the next branch), while the epilogue's sits in a block of its own
    per_thread = CODE_TILE[0] * CODE_TILE[1] // (32 * compiled.num_warps)
    in_step = _multiplies(_block_of_wgmma(compiled.ptx))
    if in_step:
        problems.append(f"{in_step} fp32 multiplies in the K step, beside the wgmma ({per_thread} accumulator "
                        "elements per thread): the scale is applied inside the K loop, a multiply of the whole "
                        "accumulator at every step (and wgmma can no longer accumulate in place); multiply once, "
                        "after the loop")
    if problems:
        raise AssertionError("; ".join(problems))
    return (f"{counts['wgmma.mma_async']} wgmma.mma_async on e4m3 x e4m3, {counts['cp.async.bulk.tensor load']} "
            f"cp.async.bulk.tensor loads, no fp32 multiply in the K step ({compiled.origin})")


def check(matmul, kernel):
    """``matmul(a, bt, scale_a, scale_b, BLOCK_M, BLOCK_N, BLOCK_K, stages, programs=None, out=None)`` launches
    ``kernel`` (gemm_fp8.matmul_fp8_kernel's arguments, without WARP_SPECIALIZE and SUBTILE) into ``out``."""
    return lab_check.run("exercise 08", [("FP8 GEMM: values", lambda: _values(matmul, kernel)),
                                         ("the code: e4m3 wgmma, TMA, one scale", lambda: _code(kernel))], twin=True)


def check_at_size(matmul, shape=(8192, 8192, 4096)):
    """On a GPU: ``matmul`` at a real size on quantized normal data, against the fp32 product of the same e4m3
    values, within 2e-2; prints its verdict as ``check`` does and returns it (a ``Verdict``)."""
    assert MODE != "cpu", "check_at_size needs a GPU"
    M, N, K = shape

    def at_size():
        a, sa = gemm_fp8.quantize(torch.randn(M, K, device="cuda"))
        bt, sb = gemm_fp8.quantize(torch.randn(N, K, device="cuda"))
        out = lab_check.poisoned(M, N, dtype=torch.bfloat16, padded=False)
        matmul(a, bt, sa, sb, 128, 256, 128, 3, out=out)
        ref = gemm_fp8.reference(a, bt, sa, sb).float()
        err = lab_check.compare(f"{M}x{N}x{K} at the course's tile (128x256x128, 3 stages)", out, ref, 2e-2)
        return f"relative error {err:.1e}"
    return lab_check.run("exercise 08 at size", [(f"FP8 GEMM at {M}x{N}x{K}", at_size)])
