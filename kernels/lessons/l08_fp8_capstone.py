"""Lesson 08, the capstone: an FP8 (e4m3) GEMM on Hopper, TMA-fed, pipelined and persistent, with per-tensor
scales, against cuBLASLt's FP8 GEMM (torch._scaled_mm) in the same run."""
import functools

import torch

from ..lab import bench, measure, results as recorded_results, smem
from ..lab.widgets import REFUSALS
from ..ops import gemm_fp8

LESSON = "08"
NEEDS = "hopper"  # e4m3 wgmma is sm_90: other GPUs have no FP8 tensor cores of this kind (or lower them)
BAR_SHAPE = (8192, 8192, 4096)
SHAPES = [(8192, 8192, 4096), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096), (2048, 2048, 2048),
          (16384, 8192, 4096)]
TILES = [(128, 256, 128, 8), (128, 128, 128, 8), (128, 128, 128, 4), (64, 256, 128, 4)]  # BM, BN, BK, warps
STAGES = (3, 4, 5)


def space():
    """[config]: FP8 tiles x stages that fit one block (a stage holds BM x BK + BN x BK bytes; the bf16
    output tile is staged for the TMA store), persistent or one tile per program, and warp specialisation
    for the two largest tiles."""
    out = []
    for m, n, k, w in TILES:
        for s in STAGES:
            if not smem.Budget(s, smem.gemm_stage_bytes(m, n, k, 1), output_tile=m * n * 2).fits:
                continue
            for persistent in (True, False):
                out.append(dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, num_warps=w, stages=s, persistent=persistent))
    out += [dict(BLOCK_M=128, BLOCK_N=n, BLOCK_K=128, num_warps=8, stages=s, persistent=True, warp_specialize=True)
            for n, s in ((256, 3), (128, 4))]
    return out


def operands(shape):
    """A (M, K) and B^T (N, K) quantized to e4m3 from fresh normal data, with their scales, and a bf16 C."""
    M, N, K = shape
    a, sa = gemm_fp8.quantize(torch.randn(M, K, device="cuda"))
    bt, sb = gemm_fp8.quantize(torch.randn(N, K, device="cuda"))
    return a, bt, sa, sb, torch.empty(M, N, device="cuda", dtype=torch.bfloat16)


def measure_search():
    return list(_searched())


@functools.lru_cache(maxsize=None)
def _searched():
    """Every configuration at every shape, checked against the fp32 product of the same e4m3 values, then
    timed once in turn (``do_bench`` median over 30 ms) beside torch._scaled_mm with fast accumulation."""
    records = []
    for shape in SHAPES:
        a, bt, sa, sb, c = operands(shape)
        ref = gemm_fp8.reference(a, bt, sa, sb)
        fns = {"scaled_mm": lambda: gemm_fp8.scaled_mm(a, bt, sa, sb, out=c)}
        cfgs = {"scaled_mm": ("scaled_mm", {"fast_accum": True})}
        for i, cfg in enumerate(space()):
            try:
                fn = gemm_fp8.plan(a, bt, sa, sb, c, **cfg)  # prepared once: each call launches only
                bench.check_writes("gemm_fp8", fn, c, ref, 2e-2)
            except REFUSALS as e:
                print(f"left out at {shape}: {measure.describe('gemm_fp8', cfg)}: {e}")
                continue
            fns[i], cfgs[i] = fn, ("gemm_fp8", cfg)
        ms = bench.interleaved_ms(fns, rounds=1, warmup=10, rep=30)
        records += [recorded_results.record(cfgs[k][0], t, shape=shape, dtype="float8_e4m3fn", config=cfgs[k][1],
                                            flops=bench.gemm_flops(*shape),
                                            baseline=None if k == "scaled_mm" else "scaled_mm")
                    for k, t in ms.items()]
    return tuple(records)


def search():
    return measure.run(LESSON, "search", measure_search, NEEDS)


def winners(records):
    """{shape: the fastest gemm_fp8 record}."""
    best = {}
    for r in records:
        if r["name"] == "gemm_fp8" and (tuple(r["shape"]) not in best or r["ms"] < best[tuple(r["shape"])]["ms"]):
            best[tuple(r["shape"])] = r
    return best


def measure_best():
    """Per shape, the search's winner against torch._scaled_mm with fast accumulation (what Triton's fp8 dot
    does on sm_90 by default) and with precise accumulation, timed in turn three times; the accuracy of
    each against the fp32 product of the same e4m3 values is in the ``rel_err`` of its config."""
    best = winners(search().records)
    records = []
    for shape in SHAPES:
        a, bt, sa, sb, c = operands(shape)
        cfg = best[shape]["config"]
        variants = [("scaled_mm", {"fast_accum": True}, lambda: gemm_fp8.scaled_mm(a, bt, sa, sb, out=c)),
                    ("gemm_fp8", cfg, gemm_fp8.plan(a, bt, sa, sb, c, **cfg)),
                    ("scaled_mm_precise", {"fast_accum": False},
                     lambda: gemm_fp8.scaled_mm(a, bt, sa, sb, fast_accum=False, out=c))]
        ref = gemm_fp8.reference(a, bt, sa, sb)
        recs = measure.timed(variants, c, ref, 2e-2, shape=shape, flops=bench.gemm_flops(*shape))
        for r, (_, _, fn) in zip(recs, variants):
            fn()
            r["rel_err"] = round(float(((c.float() - ref.float()).norm() / ref.float().norm())), 5)
            r["dtype"] = "float8_e4m3fn"
        records += recs
    return records


RUNS = {"search": measure_search, "best": measure_best}
