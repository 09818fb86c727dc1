"""Lesson 07: the course's GEMM at every shape. A small configuration space searched per shape and dtype
(tile, stages, warps, persistent or one tile per program, warp specialisation, the split last wave), the
winners against cuBLAS over twelve shapes in fp16 and bf16; why small shapes lose (launch cost apart from
GPU time); wave quantization at 3072^3 and the split last wave that answers it."""
import functools
import math

import torch

from ..lab import bench, measure, results as recorded_results, smem
from ..lab.widgets import REFUSALS
from ..ops import gemm

LESSON = "07"
DTYPES = ("float16", "bfloat16")
# M, N, K: squares (1024 and 3072 leave the last wave of tiles part-empty on 132 SMs), LLM projections
# (Llama-style 4096 x 11008 MLP, 14336 wide), a short K, and decode-like small M
SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (3072, 3072, 3072), (4096, 4096, 4096), (6144, 6144, 6144),
          (8192, 8192, 8192), (4096, 11008, 4096), (4096, 4096, 11008), (8192, 8192, 1024), (16, 4096, 4096),
          (128, 4096, 4096), (8192, 4096, 14336)]
TILES = [(128, 256, 64, 8), (128, 128, 64, 4), (128, 128, 64, 8), (64, 256, 64, 4), (64, 128, 64, 4),
         (128, 64, 64, 4), (64, 64, 128, 4)]  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps
STAGES = (3, 4, 5)
WAVES_SHAPE = (3072, 3072, 3072)
LAUNCH_SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048)]
LESSON04 = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, stages=3)  # lesson 04's persistent default


def _tile(m, n, k, w, s):
    return dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, num_warps=w, stages=s)


def space():
    """[(kernel name, config)]: the configurations the search tries, each fitting one block's shared memory
    by the course's budget (ring of A and B tiles plus the output tile the TMA store stages)."""
    out = []
    for m, n, k, w in TILES:
        for s in STAGES:
            if not smem.Budget(s, smem.gemm_stage_bytes(m, n, k), output_tile=m * n * 2).fits:
                continue
            for persistent in (True, False):
                out.append(("gemm_tma_host", {**_tile(m, n, k, w, s), "persistent": persistent}))
            out.append(("gemm_split_tail", _tile(m, n, k, w, s)))
    for m, n, k, w, s in ((128, 256, 64, 8, 3), (128, 128, 64, 8, 4)):
        out.append(("gemm_tma_host", {**_tile(m, n, k, w, s), "persistent": True, "warp_specialize": True}))
    return out


def launcher(name, cfg):
    """``launch(a, b, c)`` for a search entry."""
    c = dict(cfg)
    stages = c.pop("stages")
    kernel = gemm.matmul_split_tail if name == "gemm_split_tail" else gemm.matmul_tma_host
    return lambda a, b, out: kernel(a, b, stages=stages, out=out, **c)


def planned(name, cfg, a, b, c):
    """The entry prepared once (``gemm.plan``): each call launches only, so small shapes are timed on the GPU's
    work and not on Python's (section 2 measures both)."""
    return gemm.plan(name, a, b, c, **cfg)


def operands(shape, dtype):
    M, N, K = shape
    dt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt)
    return a, b, torch.empty(M, N, device="cuda", dtype=dt)


def measure_search():
    """The search, measured once per session (the best run and the launch run use its winners). Each entry
    is timed through its plan (``planned``)."""
    return list(_searched())


@functools.lru_cache(maxsize=None)
def _searched():
    """Every configuration of ``space()`` at every shape and dtype, each checked against torch first, timed
    once in turn (a screen: ``do_bench`` median over 30 ms), cuBLAS timed in the same turn."""
    records = []
    for dtype in DTYPES:
        for shape in SHAPES:
            a, b, c = operands(shape, dtype)
            ref = torch.matmul(a, b)
            fns, cfgs = {"cublas_gemm": lambda: torch.matmul(a, b, out=c)}, {"cublas_gemm": ("cublas_gemm", {})}
            for i, (name, cfg) in enumerate(space()):
                try:
                    fn = planned(name, cfg, a, b, c)
                    bench.check_writes(name, fn, c, ref, 1e-2)
                except REFUSALS as e:
                    print(f"left out at {shape} {dtype}: {measure.describe(name, cfg)}: {e}")
                    continue
                fns[i], cfgs[i] = fn, (name, cfg)
            ms = bench.interleaved_ms(fns, rounds=1, warmup=10, rep=30)
            flops = bench.gemm_flops(*shape)
            records += [recorded_results.record(cfgs[k][0], t, shape=shape, dtype=dtype, config=cfgs[k][1], flops=flops,
                                                baseline=None if k == "cublas_gemm" else "cublas_gemm")
                        for k, t in ms.items()]
    return tuple(records)


def winners(records):
    """{(shape, dtype): the fastest search record} from a search run's records."""
    best = {}
    for r in records:
        if r["name"] != "cublas_gemm":
            k = (tuple(r["shape"]), r["dtype"])
            if k not in best or r["ms"] < best[k]["ms"]:
                best[k] = r
    return best


def search():
    """The search run: measured now on a GPU (once per session), else the recorded one."""
    return measure.run(LESSON, "search", measure_search)


def measure_best():
    """Per shape and dtype, the search's winner (this session's search on a GPU) against cuBLAS and against
    lesson 04's default, timed in turn three times (``measure.timed``): the figures the bars are read from."""
    best = winners(search().records)
    records = []
    for dtype in DTYPES:
        for shape in SHAPES:
            a, b, c = operands(shape, dtype)
            w = best[(shape, dtype)]
            cfg = dict(w["config"])
            variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c)),
                        ("gemm_best", {"kernel": w["name"], **cfg}, planned(w["name"], cfg, a, b, c)),
                        ("gemm_lesson04", LESSON04,
                         lambda: gemm.matmul_tma_persistent(a, b, stages=3, out=c, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64))]
            recs = measure.timed(variants, c, torch.matmul(a, b), 1e-2, shape=shape, flops=bench.gemm_flops(*shape))
            records += [{**r, "dtype": dtype} for r in recs]
    return records


def measure_launch():
    """At the two smallest squares, fp16: each kernel timed three ways - ``do_bench`` (L2 cleared before each
    call, the host's launch work overlapping the clearing), replayed from a CUDA graph (GPU time alone, L2
    warm) and the host's own time per call - to separate what the GPU does from what the launch costs. The
    search's winner runs twice: called as a learner calls it (checks, tensor maps, Triton's dispatch on every
    call) and through its plan (all of that once)."""
    records = []
    for shape in LAUNCH_SHAPES:
        a, b, c = operands(shape, "float16")
        best = winners(search().records)[(shape, "float16")]
        cfg = {"kernel": best["name"], **best["config"]}
        variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c)),
                    ("gemm_lesson04", LESSON04,
                     lambda: gemm.matmul_tma_persistent(a, b, stages=3, out=c, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)),
                    ("gemm_best_called", cfg, functools.partial(launcher(best["name"], best["config"]), a, b, c)),
                    ("gemm_best", cfg, planned(best["name"], best["config"], a, b, c))]
        flops = bench.gemm_flops(*shape)
        records += [{**r, "config": {**r["config"], "timer": "do_bench"}}
                    for r in measure.timed(variants, c, torch.matmul(a, b), 1e-2, shape=shape, flops=flops)]
        for name, cfg, fn in variants:
            records.append(recorded_results.record(name, bench.graph_ms(fn), shape=shape, flops=flops,
                                                   config={**cfg, "timer": "cuda_graph"}))
            records.append(recorded_results.record(name, bench.host_us(fn) / 1000, shape=shape,
                                                   config={**cfg, "timer": "host"}))
    return records


def measure_waves():
    """At 3072^3 fp16 (576 tiles of 128x128 on 132 SMs: four whole waves and a fifth of 48 tiles): the
    persistent kernel at 128x128 and 128x256, the split last wave at 128x128, and cuBLAS, in turn."""
    a, b, c = operands(WAVES_SHAPE, "float16")
    t = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, stages=4)
    entries = [("gemm_tma_host", {**t, "persistent": True}),
               ("gemm_tma_host", {**t, "BLOCK_N": 256, "num_warps": 8, "stages": 3, "persistent": True}),
               ("gemm_split_tail", {**t, "split": 1}), ("gemm_split_tail", {**t, "split": 2})]
    variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c))]
    variants += [(name, cfg, planned(name, cfg, a, b, c)) for name, cfg in entries]
    return measure.timed(variants, c, torch.matmul(a, b), 1e-2, shape=WAVES_SHAPE,
                         flops=bench.gemm_flops(*WAVES_SHAPE))


def geomean(xs):
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs))


RUNS = {"search": measure_search, "best": measure_best, "launch": measure_launch, "waves": measure_waves}
