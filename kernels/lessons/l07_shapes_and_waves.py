"""Lesson 07: the course's GEMM at every shape. A small configuration space searched per shape and dtype
(tile, stages, warps, persistent or one tile per program, warp specialisation, the split last wave, the
output tile stored in halves), the winners against cuBLAS over twelve shapes in fp16 and bf16; why small
shapes lose (launch cost apart from GPU time); wave quantization at 3072^3 and the split last wave that
answers it; and where the TMA copy's last percent against torch's copy goes."""
import functools
import json
import math

import matplotlib.pyplot as plt
import torch

from ..lab import bench, measure, results as recorded_results, smem
from ..lab.widgets import REFUSALS, Widget
from . import any_shape
from ..ops import gemm, gemm_auto

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
CANDIDATES = 3  # the screen's fastest configurations timed again, side by side, per point (measure_best)
LESSON04 = gemm.LESSON04  # lesson 04's persistent default


def _tile(m, n, k, w, s):
    return dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, num_warps=w, stages=s)


def stored_in_halves(m, n, k, s, elem_bytes=2):
    """True where the output tile must leave in two halves (``subtile``) for ``s`` stages to fit one block:
    the whole tile does not fit beside the ring, half of it does. None where neither fits."""
    ring = smem.gemm_stage_bytes(m, n, k, elem_bytes)
    if smem.Budget(s, ring, output_tile=m * n * 2).fits:
        return False
    return True if smem.Budget(s, ring, output_tile=m * n).fits else None


WIDE = 256  # BLOCK_N of the tiles whose output tile is also tried in halves: 32-64 KiB of staging buffer


def epilogues(n, halves):
    """The epilogue options the search tries for a tile ``n`` wide: in halves only where the whole tile does not
    fit (``halves``); whole, and in halves, for the wide tiles; whole otherwise."""
    if halves:
        return [{"subtile": True}]
    return [{}, {"subtile": True}] if n == WIDE else [{}]


def space():
    """[(kernel name, config)]: the configurations the search tries, each fitting one block's shared memory
    by the course's budget (ring of A and B tiles plus the output tile the TMA store stages, whole or in two
    halves: ``epilogues``)."""
    out = []
    for m, n, k, w in TILES:
        for s in STAGES:
            halves = stored_in_halves(m, n, k, s)
            if halves is None:
                continue
            for extra in epilogues(n, halves):
                for persistent in (True, False):
                    out.append(("gemm_tma_host", {**_tile(m, n, k, w, s), "persistent": persistent, **extra}))
            if not halves:  # the split kernel stores whole tiles
                out.append(("gemm_split_tail", _tile(m, n, k, w, s)))
    # no warp_specialize: on these loops Triton 3.6 compiles the same code with and without it (finding
    # "warp-specialize"); the recorded screen's warp-specialised entries are left out by ``candidates``
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
            screen = measure.screened([(name, cfg, functools.partial(planned, name, cfg, a, b, c)) for name, cfg in space()],
                                      c, ref, 1e-2, REFUSALS, f" at {shape} {dtype}")
            fns.update(screen[0])
            cfgs.update(screen[1])
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
    """The search run. Screening the whole space at 24 points takes minutes and a few hundred compiles, so a
    lesson reads the recorded screen, labelled with its device and date, wherever one is recorded; redo it on
    your GPU with ``python -m kernels.tools.record 07:search``. Where none is recorded, a GPU measures it now."""
    store = recorded_results.recorded()
    found = store.select(LESSON, "search")
    if found:
        return measure.Run(found, measure.recorded_label(store, found))
    return measure.run(LESSON, "search", measure_search)


def candidates(records, shape, dtype, top=CANDIDATES):
    """The ``top`` fastest configurations of the screen at one point, fastest first: [(name, config)]."""
    searched = {(name, json.dumps(cfg, sort_keys=True)) for name, cfg in space()}
    rs = sorted((r for r in records if r["name"] != "cublas_gemm" and tuple(r["shape"]) == tuple(shape)
                 and r["dtype"] == dtype and (r["name"], json.dumps(r["config"], sort_keys=True)) in searched),
                key=lambda r: r["ms"])
    return [(r["name"], r["config"]) for r in rs[:top]]


def measure_best():
    """Per shape and dtype, the screen's three fastest configurations (each through its plan), lesson 04's
    default (called as lesson 04 calls it) and cuBLAS, timed in turn three times (``measure.timed``). The
    fastest candidate is recorded as ``gemm_best`` (the others as ``gemm_candidate``): the figures the bars
    are read from. A screen is one short timing per configuration, so its order among near-equals is noise;
    timing the top three again, side by side, picks among them on a steadier figure. Picking the fastest of
    three measured figures favours it where they are near-equal (by how much is not measured)."""
    screen = search().records
    records = []
    for dtype in DTYPES:
        for shape in SHAPES:
            a, b, c = operands(shape, dtype)
            variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c))]
            for name, cfg in candidates(screen, shape, dtype):
                variants.append(("gemm_candidate", {"kernel": name, **cfg}, planned(name, cfg, a, b, c)))
            variants.append(("gemm_lesson04", LESSON04,
                             lambda: gemm.matmul_tma_persistent(a, b, stages=3, out=c, BLOCK_M=128, BLOCK_N=256,
                                                                BLOCK_K=64)))
            recs = [{**r, "dtype": dtype} for r in measure.timed(variants, c, torch.matmul(a, b), 1e-2, shape=shape,
                                                                  flops=bench.gemm_flops(*shape))]
            fastest = min((r for r in recs if r["name"] == "gemm_candidate"), key=lambda r: r["ms"])
            fastest["name"] = "gemm_best"
            records += recs
    return records


def measure_default():
    """Lesson 04's default at every shape and dtype, called as lesson 04 calls it (checks, a scratch allocation
    for the device-side maps, Triton's dispatch, every call) and through its plan (``gemm.plan``: the checks and
    the dispatch once; the allocation stays), timed in turn with cuBLAS: the configuration's own speed apart
    from the cost of calling it."""
    records = []
    for dtype in DTYPES:
        for shape in SHAPES:
            a, b, c = operands(shape, dtype)
            variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c)),
                        ("gemm_lesson04", LESSON04, lambda: gemm.matmul_tma_persistent(a, b, out=c, **LESSON04)),
                        ("gemm_lesson04_plan", LESSON04, gemm.plan("gemm_tma_persistent", a, b, c, **LESSON04))]
            records += [{**r, "dtype": dtype} for r in measure.timed(variants, c, torch.matmul(a, b), 1e-2,
                                                                      shape=shape, flops=bench.gemm_flops(*shape))]
    return records


def measure_launch():
    """At the two smallest squares, fp16: each kernel timed three ways - ``do_bench`` (L2 cleared before each
    call, the host's launch work overlapping the clearing), replayed from a CUDA graph (GPU time alone, L2
    warm) and the host's own time per call - to separate what the GPU does from what the launch costs. The
    search's winner runs twice: called as a learner calls it (checks, tensor maps, Triton's dispatch on every
    call) and through its plan (all of that once); and ``gemm_auto.matmul`` called plainly (its fast path after the
    first call: the kept compiled kernel, tensor maps encoded per call)."""
    records = []
    for shape in LAUNCH_SHAPES:
        a, b, c = operands(shape, "float16")
        name, config = candidates(search().records, shape, "float16", top=1)[0]
        best = {"name": name, "config": config}
        cfg = {"kernel": name, **config}
        variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c)),
                    ("gemm_lesson04", LESSON04,
                     lambda: gemm.matmul_tma_persistent(a, b, stages=3, out=c, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)),
                    ("gemm_best_called", cfg, functools.partial(launcher(best["name"], best["config"]), a, b, c)),
                    ("gemm_best", cfg, planned(best["name"], best["config"], a, b, c)),
                    ("gemm_auto", {"kernel": "gemm_auto"}, lambda: gemm_auto.matmul(a, b, out=c))]
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


COPY_SHAPE = (16384, 16384)
COPY_BOXES = [(64, 128), (128, 128), (32, 256)]  # 16, 32 and 16 KiB of fp16
COPY_STAGES = (2, 3, 4, 6)
COPY_PER_SM = (1, 2, 3)  # programs per SM, all resident at once where their buffers fit one SM
COPY_DEFAULT = dict(BLOCK_M=64, BLOCK_N=128, stages=4)  # lesson 03's copy; the paths and the one-way runs use it
SMEM_PER_SM = 233_472  # 228 KiB of shared memory per Hopper SM (each block also reserves 1 KiB)


def copy_sweep():
    """[config]: lesson 03's persistent TMA copy (host tensor maps) at each box, stage count and number of
    programs per SM whose buffers (stages x box, the model of lesson 03, plus 1 KiB each) fit one SM together."""
    out = []
    for m, n in COPY_BOXES:
        for s in COPY_STAGES:
            for per in COPY_PER_SM:
                if per * (s * m * n * 2 + 1024) <= SMEM_PER_SM:
                    out.append(dict(BLOCK_M=m, BLOCK_N=n, stages=s, per_sm=per))
    return out


def torch_copy_runs(x, y):
    """The names of the GPU activities one ``y.copy_(x)`` launches, from torch's profiler."""
    import warnings

    from torch.profiler import ProfilerActivity, profile
    y.copy_(x)
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # the profiler warns that it keeps one cycle's events: one is all there is
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            y.copy_(x)
            torch.cuda.synchronize()
        return sorted({e.key for e in prof.key_averages()})


def measure_copy():
    """Where a 16384^2 fp16 copy's time goes, every entry timed in turn with ``torch_copy`` (one run, so one
    clock state): lesson 03's TMA copy over ``copy_sweep()``; the copy with each side through TMA or
    through pointers, the pointer side with and without cache hints; lesson 06's hand-written TMA copy, which
    stores the very buffer it loaded; and each side alone - a read (torch's sum, a TMA read) and a write
    (torch's fill, a TMA fill) of the same bytes."""
    from ..ops import copy, tma_cuda
    x = bench.randn(*COPY_SHAPE)
    y = torch.empty_like(x)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    d = COPY_DEFAULT
    variants = [("torch_copy", {"runs": torch_copy_runs(x, y)}, lambda: y.copy_(x))]
    for cfg in copy_sweep():
        c = {k: v for k, v in cfg.items() if k != "per_sm"}
        variants.append(("copy_tma_loop", cfg, lambda c=c, p=cfg["per_sm"] * sms:
                         copy.copy_tma_loop(x, out=y, descriptor="host", programs=p, **c)))
    for load, store, hints in (("pointer", "pointer", False), ("pointer", "pointer", True), ("tma", "pointer", False),
                               ("tma", "pointer", True), ("pointer", "tma", False), ("pointer", "tma", True)):
        cfg = {"load": load, "store": store, "hints": hints, **d}
        variants.append(("copy_paths", cfg, lambda load=load, store=store, hints=hints: copy.copy_paths(
            x, out=y, load=load, store=store, evict_first=hints, streaming_store=hints, **d)))
    # two questions at one box, each answered both ways: does the tile pass through registers (Triton: yes;
    # lesson 06's CUDA: no, the store reads the buffer the load filled), and is the grid persistent with
    # a ring of stages, or one tile per program (many small programs resident per SM instead)?
    tiles = (COPY_SHAPE[0] // d["BLOCK_M"]) * (COPY_SHAPE[1] // d["BLOCK_N"])
    box = {k: d[k] for k in ("BLOCK_M", "BLOCK_N")}
    variants += [("copy_tma_loop", {**box, "stages": 1, "programs": "one per tile"},
                  lambda: copy.copy_tma_loop(x, out=y, descriptor="host", programs=tiles, stages=1, **box)),
                 ("cuda_copy_tile", box, lambda: tma_cuda.copy_tile(x, out=y, check=False)),
                 ("cuda_ring", {**box, "stages": 4, "ctas_per_sm": 2},
                  lambda: tma_cuda.ring(x, out=y, box=(d["BLOCK_M"], d["BLOCK_N"]), stages=4, ctas_per_sm=2,
                                        swizzle=False, check=False))]
    # (the CUDA kernels' barrier-timeout counter is read once, after the timing)
    records = measure.timed(variants, y, x, shape=COPY_SHAPE, nbytes=bench.copy_bytes(x))
    if tma_cuda.timeouts(x):
        raise tma_cuda.BarrierTimeout("copy run: CTAs of the CUDA copies gave up waiting on a barrier while timed")
    # one way: half the bytes of a copy; checked first, then timed in turn with the copy again
    total = x.double().sum()  # ~1.6e4 in size; a tile left out changes it by ~90, fp32 summing by far less than 1
    one_way = [("torch_copy", {}, lambda: y.copy_(x)),
               ("torch_sum", {}, lambda: x.sum(dtype=torch.float32)),
               ("read_tma", d, lambda: copy.read_tma(x, **d)),
               ("torch_fill", {}, lambda: y.fill_(1.5)),
               ("fill_tma", {k: d[k] for k in ("BLOCK_M", "BLOCK_N")},
                lambda: copy.fill_tma(y, 1.5, BLOCK_M=d["BLOCK_M"], BLOCK_N=d["BLOCK_N"]))]
    for name, _, fn in one_way[1:]:
        y.fill_(float("nan"))
        got = fn()
        ok = (abs(float(got.double().sum() - total)) < 1.0 if name in ("torch_sum", "read_tma")
              else bool((y == 1.5).all()))
        assert ok, f"{name} computed a wrong result"
    ms = bench.interleaved_ms({i: fn for i, (_, _, fn) in enumerate(one_way)})
    half = bench.copy_bytes(x) // 2
    records += [recorded_results.record(name, ms[i], config={**cfg, "one_way": True}, shape=COPY_SHAPE,
                                        nbytes=2 * half if name == "torch_copy" else half, baseline=None if i == 0
                                        else "torch_copy") for i, (name, cfg, _) in enumerate(one_way)]
    return records


def geomean(xs):
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs))


RUNS = {"search": measure_search, "default": measure_default, "best": measure_best, "launch": measure_launch, "waves": measure_waves,
        "copy": measure_copy,
        "small_m": lambda: any_shape.measure_small_m(DTYPES),
        "auto": lambda: any_shape.measure_auto(any_shape.NEW_SHAPES, DTYPES),
        "copy_shapes": any_shape.measure_copy_shapes}


# ---- views: what the notebook prints and draws from the runs' records --------------------------------------

def shape_name(shape):
    return "x".join(map(str, shape))


def short(dtype):
    return {"float16": "fp16", "bfloat16": "bf16"}.get(dtype, dtype)


def describe(name, cfg):
    """A configuration in one line: ``128x256x64 s3 w8 persistent``."""
    kind = {"gemm_split_tail": "split last wave"}.get(name, "persistent" if cfg.get("persistent") else "one tile/program")
    ws = " warp-specialised" if cfg.get("warp_specialize") else ""
    split = f" split={cfg['split']}" if "split" in cfg else ""
    halves = " C in halves" if cfg.get("subtile") else ""
    return (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['stages']} w{cfg['num_warps']} "
            f"{kind}{ws}{split}{halves}")


def space_summary():
    """Lines: how many configurations of each kind the search tries, and the tiles it leaves out."""
    cfgs = space()
    kinds = {}
    for name, cfg in cfgs:
        k = ("split last wave" if name == "gemm_split_tail" else "warp-specialised" if cfg.get("warp_specialize")
             else "persistent" if cfg["persistent"] else "one tile per program")
        kinds[k] = kinds.get(k, 0) + 1
    out = [f"{len(cfgs)} configurations: " + ", ".join(f"{n} {k}" for k, n in kinds.items())]
    for m, n, k, w in TILES:
        for s in STAGES:
            halves = stored_in_halves(m, n, k, s)
            whole = smem.Budget(s, smem.gemm_stage_bytes(m, n, k), output_tile=m * n * 2)
            half = smem.Budget(s, smem.gemm_stage_bytes(m, n, k), output_tile=m * n)
            if halves is None:
                out.append(f"left out: {m}x{n}x{k} at {s} stages ({half.model / 1024:.0f} KiB > "
                           f"{half.limit / 1024:.0f} KiB even with the output tile stored in halves)")
            elif halves:
                out.append(f"stored in halves: {m}x{n}x{k} at {s} stages ({whole.model / 1024:.0f} KiB whole, "
                           f"{half.model / 1024:.0f} KiB in halves, limit {half.limit / 1024:.0f} KiB)")
    return out


def pairs(records, name):
    """{(shape, dtype): (record named ``name``, the cuBLAS record of the same shape and dtype)}."""
    cublas = {(tuple(r["shape"]), r["dtype"]): r for r in records if r["name"] == "cublas_gemm"}
    return {(tuple(r["shape"]), r["dtype"]): (r, cublas[(tuple(r["shape"]), r["dtype"])])
            for r in records if r["name"] == name and (tuple(r["shape"]), r["dtype"]) in cublas}


def ratios(records, name):
    """{(shape, dtype): cuBLAS time / ``name``'s time} (above 1: faster than cuBLAS)."""
    return {k: c["ms"] / r["ms"] for k, (r, c) in pairs(records, name).items()}


def print_lesson04(default):
    """Lesson 04's default (128x256x64, 3 stages, persistent) against cuBLAS at every shape and dtype, called as
    lesson 04 calls it and through its plan (``measure_default``)."""
    called, plan = ratios(default.records, "gemm_lesson04"), ratios(default.records, "gemm_lesson04_plan")
    print("cuBLAS time / kernel time, per dtype: called, then planned")
    for shape in SHAPES:
        line = "  ".join(f"{short(d)} {called[(shape, d)]:4.2f}x {plan[(shape, d)]:4.2f}x" for d in DTYPES
                         if (shape, d) in called)
        print(f"{shape_name(shape):>16}: {line}")
    for what, got in (("called", called), ("planned", plan)):
        low = min(got, key=got.get)
        print(f"lesson 04's default, {what}, against cuBLAS: from {got[low]:.2f}x ({shape_name(low[0])} "
              f"{short(low[1])}) to {max(got.values()):.2f}x; geomean {geomean(got.values()):.3f}x")


def winner_table(search_run):
    """Per shape and dtype: the search's winner, and its time against cuBLAS in the same turn."""
    got = winners(search_run.records)
    cublas = {(tuple(r["shape"]), r["dtype"]): r for r in search_run.records if r["name"] == "cublas_gemm"}
    for shape in SHAPES:
        for d in DTYPES:
            w = got.get((shape, d))
            if w:
                print(f"{shape_name(shape):>16} {short(d)}: {describe(w['name'], w['config']):48s} "
                      f"{cublas[(shape, d)]['ms'] / w['ms']:.2f}x cuBLAS")


def tile_economics(shape, sms=132):
    """Per tile of the search: flops per byte loaded into shared memory (each K step loads
    (BM + BN) x BK elements and does 2 x BM x BN x BK flops), the tiles of ``shape``, and the fraction of
    the SMs' tile slots the waves fill (tiles / (waves x SMs))."""
    M, N, _ = shape
    rows = []
    for m, n in dict.fromkeys((m, n) for m, n, _, _ in TILES):  # each tile once (128x128 comes with 4 and 8 warps)
        tiles, full, tail = gemm.waves(M, N, m, n, sms)
        slots = -(-tiles // sms) * sms
        rows.append(dict(tile=f"{m}x{n}", intensity=m * n / (m + n), tiles=tiles, waves=tiles / sms,
                         fill=tiles / slots))
    return rows


def print_economics(shapes, sms=132):
    for shape in shapes:
        print(f"{shape_name(shape)} on {sms} SMs:")
        for r in tile_economics(shape, sms):
            print(f"  {r['tile']:>8}: {r['intensity']:5.1f} flop per byte of shared memory filled | {r['tiles']:5d} tiles "
                  f"= {r['waves']:5.2f} waves, slots filled {r['fill']:4.0%}")


def plot_winners(best, ax=None):
    """Winner / cuBLAS and lesson 04's default / cuBLAS per shape, fp16 and bf16, with the bars drawn."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(7, 3))[1]
    win, l04 = ratios(best.records, "gemm_best"), ratios(best.records, "gemm_lesson04")
    x = range(len(SHAPES))
    for i, d in enumerate(DTYPES):
        off = (i - 0.5) * 0.4
        ax.bar([j + off for j in x], [win.get((s, d), 0) for s in SHAPES], 0.4, label=f"search winner {short(d)}",
               color=f"C{i}")
        ax.plot([j + off for j in x], [l04.get((s, d), float("nan")) for s in SHAPES], "k_", ms=8,
                label="lesson 04 default" if i == 0 else None)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(0.85, color="red", lw=0.8, ls="--", label="0.85 (no point below)")
    ax.set_xticks(list(x), [shape_name(s) for s in SHAPES], rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="x cuBLAS (higher: faster)", title=f"course GEMM vs cuBLAS ({best.label})")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=6, ncol=2)
    return ax


BAR_GEOMEAN, BAR_MIN = 0.97, 0.85


def bars(best):
    """The bars, computed: (geomean, (worst point, its ratio), points below 0.85, verdict lines)."""
    got = ratios(best.records, "gemm_best")
    g, worst = geomean(got.values()), min(got, key=got.get)
    below = sorted((k for k, v in got.items() if v < BAR_MIN), key=got.get)
    lines = [f"{len(got)} (shape, dtype) points: geomean {g:.3f}x cuBLAS (bar {BAR_GEOMEAN}): "
             f"{'met' if g >= BAR_GEOMEAN else 'NOT met'}",
             f"lowest {got[worst]:.3f}x at {shape_name(worst[0])} {short(worst[1])} (bar: none below {BAR_MIN}): "
             f"{'met' if not below else 'NOT met'}"]
    if below:
        lines.append("below the bar: " + ", ".join(f"{shape_name(s)} {short(d)} ({got[(s, d)]:.2f}x)" for s, d in below))
    under_one = [k for k, v in got.items() if BAR_MIN <= v < BAR_GEOMEAN]
    if under_one:
        lines.append(f"between {BAR_MIN} and {BAR_GEOMEAN}: " + ", ".join(
            f"{shape_name(s)} {short(d)} ({got[(s, d)]:.2f}x)" for s, d in sorted(under_one, key=got.get)))
    return g, (worst, got[worst]), below, lines


def launch_table(launch):
    """{(shape, name): {timer: record}} of the launch run."""
    out = {}
    for r in launch.records:
        out.setdefault((tuple(r["shape"]), r["name"]), {})[r["config"]["timer"]] = r
    return out


def print_launch(launch):
    for (shape, name), t in launch_table(launch).items():
        print(f"{shape_name(shape):>14} {name:14s} do_bench {t['do_bench']['ms'] * 1e3:6.1f} us | "
              f"CUDA graph (GPU alone) {t['cuda_graph']['ms'] * 1e3:6.1f} us | host {t['host']['ms'] * 1e3:6.1f} us per call")


def print_waves_run(waves_run):
    base = waves_run.find("cublas_gemm")
    for r in waves_run.records:
        if r["name"] != "cublas_gemm":
            print(f"{describe(r['name'], r['config']):52s} {r['tflops']:5.0f} TFLOP/s  {base['ms'] / r['ms']:.2f}x cuBLAS")
    print(f"{'cuBLAS':52s} {base['tflops']:5.0f} TFLOP/s")


def plot_waves(M, N, BLOCK_M, BLOCK_N, sms=132, K=None, BLOCK_K=64, split=False, ax=None):
    """The output tiles of M x N on ``sms`` SMs, one row per wave: each cell an SM busy with one tile;
    with ``split`` the last wave's tiles are cut in K slices that fill more of the idle SMs."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    tiles, full, tail = gemm.waves(M, N, BLOCK_M, BLOCK_N, sms)
    rows = full + (1 if tail else 0)
    ax = ax or plt.subplots(figsize=(6, 0.35 * rows + 1.2))[1]
    for w in range(full):
        ax.add_patch(Rectangle((0, w), sms, 0.8, color="C0"))
    slices = 1
    if tail:
        if split:
            _, slices = gemm.split_plan(M, N, K or M, BLOCK_M, BLOCK_N, BLOCK_K, sms)
        used = tail * slices
        ax.add_patch(Rectangle((0, full), used, 0.8 / slices if slices > 1 else 0.8, color="C1"))
        ax.add_patch(Rectangle((used, full), sms - used, 0.8, fill=False, hatch="//", ec="grey"))
    ax.set(xlim=(0, sms), ylim=(rows, -0.2), xlabel=f"SM (of {sms})", ylabel="wave",
           yticks=[i + 0.4 for i in range(rows)], yticklabels=[str(i + 1) for i in range(rows)])
    what = f"{tail} tiles" + (f" x {slices} K slices (each 1/{slices} of the work)" if slices > 1 else "")
    ax.set_title(f"{shape_name((M, N))}, {BLOCK_M}x{BLOCK_N} tiles: {tiles} tiles = {full} whole waves"
                 + (f" + last wave of {what}; hatched: idle" if tail else ""), fontsize=8)
    return ax


# ---- the widget: one configuration of the space at one shape, from the search ------------------------------

MODES = ("persistent", "one tile per program", "split last wave")


def config_of(BLOCK_M, BLOCK_N, stages, mode):
    """The search's (kernel name, config) for a widget setting (the first of TILES with that tile: its
    BLOCK_K and warps), or None where the tile is not in the space."""
    tile = next(((m, n, k, w) for m, n, k, w in TILES if (m, n) == (BLOCK_M, BLOCK_N)), None)
    if tile is None:
        return None
    cfg = _tile(*tile, stages)
    if mode == "split last wave":
        return "gemm_split_tail", cfg
    halves = {"subtile": True} if stored_in_halves(*tile[:3], stages) else {}  # as the space has it
    return "gemm_tma_host", {**cfg, "persistent": mode == "persistent", **halves}


class ShapeConfig(Widget):
    """One configuration at one shape (fp16): its time in the search against cuBLAS, its waves on the SMs,
    its shared-memory budget; a configuration outside the space is refused with the limit it breaks."""
    lesson = LESSON
    sliders = dict(shape=[shape_name(s) for s in SHAPES], BLOCK_M=[64, 128], BLOCK_N=[64, 128, 256], stages=STAGES,
                   mode=list(MODES))
    defaults = dict(shape="3072x3072x3072", BLOCK_M=128, BLOCK_N=128, stages=4, mode="persistent")
    title, base_label = "fp16, timed in the search", "cuBLAS"

    def budget(self, cfg, compiled):
        name, c = config_of(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["stages"], cfg["mode"])
        return smem.Budget(c["stages"], smem.gemm_stage_bytes(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]),
                           output_tile=c["BLOCK_M"] * c["BLOCK_N"] * (1 if c.get("subtile") else 2))

    def evidence(self, cfg, compiled):
        M, N, K = map(int, cfg["shape"].split("x"))
        name, c = config_of(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["stages"], cfg["mode"])
        sms = measure.sm_count() or 132
        tiles, full, tail = gemm.waves(M, N, c["BLOCK_M"], c["BLOCK_N"], sms)
        lines = [f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}, {c['num_warps']} warps: {tiles} tiles on {sms} SMs = "
                 f"{full} whole waves + a last wave of {tail} tiles ({sms - tail if tail else 0} SMs idle in it)"]
        if name == "gemm_split_tail":
            whole, split = gemm.split_plan(M, N, K, c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], sms)
            lines.append(f"split plan: {whole} tiles whole, " + (
                f"the last {tiles - whole} cut in {split} K slices = {(tiles - whole) * split} programs" if split > 1
                else "no split (the last wave is full, or too full to split)"))
        return lines

    def query(self, cfg):
        name, c = config_of(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["stages"], cfg["mode"])
        shape = tuple(map(int, cfg["shape"].split("x")))
        return measure.Query(LESSON, "search", name, c, shape, launcher(name, c))

    def label(self, cfg):
        return f"{cfg['shape']}: {describe(*config_of(cfg['BLOCK_M'], cfg['BLOCK_N'], cfg['stages'], cfg['mode']))}"


shape_config = ShapeConfig()


def print_why(search_run, dtype="float16", sms=132):
    """Per shape, the winner's tile beside the two things a tile trades: flops per byte it fills shared
    memory with, and how full its waves keep the SMs (tiles / (waves started x SMs))."""
    got = winners(search_run.records)
    for shape in SHAPES:
        w = got.get((shape, dtype))
        if w is None:
            continue
        c = w["config"]
        tiles, full, tail = gemm.waves(shape[0], shape[1], c["BLOCK_M"], c["BLOCK_N"], sms)
        fill = tiles / ((full + (1 if tail else 0)) * sms)
        print(f"{shape_name(shape):>16} {short(dtype)}: winner {c['BLOCK_M']}x{c['BLOCK_N']} "
              f"{'(split last wave) ' if w['name'] == 'gemm_split_tail' else ''}"
              f"| {c['BLOCK_M'] * c['BLOCK_N'] / (c['BLOCK_M'] + c['BLOCK_N']):4.1f} flop/B | {tiles:5d} tiles, "
              f"waves fill the SMs {fill:4.0%}")


# ---- the copy's last percent (the copy run) --------------------------------------------------------------

BAR_COPY = 0.98  # the bar: the best TMA copy against torch's copy at 16384^2 fp16
TMA_COPIES = ("copy_tma_loop", "cuda_copy_tile", "cuda_ring")


def copy_run():
    return measure.run(LESSON, "copy", measure_copy, "hopper")


def _copy_groups(records):
    """(the copies timed with the first torch_copy, the one-way entries timed with the second)."""
    one_way = [r for r in records if r["config"].get("one_way")]
    return [r for r in records if not r["config"].get("one_way")], one_way


def copies(records):
    """[(record, x torch copy)] of every copy timed with the first torch_copy."""
    group = _copy_groups(records)[0]
    base = next(r for r in group if r["name"] == "torch_copy")
    return [(r, base["ms"] / r["ms"]) for r in group if r is not base]


def sweep(records):
    """[(record, x torch copy)] of the sweep (``copy_sweep()``) alone."""
    return [(r, x) for r, x in copies(records) if r["name"] == "copy_tma_loop" and "per_sm" in r["config"]]


def torch_copy_is(records):
    """What torch's copy launched, from the run's profile: the GPU activity names."""
    base = next(r for r in _copy_groups(records)[0] if r["name"] == "torch_copy")
    return [n for n in base["config"].get("runs", []) if "Memcpy" in n or "memcpy" in n]


def in_flight_kib(cfg):
    """KiB of loads the sweep's TMA copy keeps in flight on one SM: programs x (stages - 1) x box (a ring of
    ``stages`` slots loads stages - 1 tiles ahead of the one being stored, lesson 02)."""
    return cfg["per_sm"] * (cfg["stages"] - 1) * cfg["BLOCK_M"] * cfg["BLOCK_N"] * 2 / 1024


def plot_copy_sweep(records, label, ax=None):
    ax = ax or plt.subplots(figsize=(6.4, 3.4))[1]
    swept = sweep(records)
    for i, (m, n) in enumerate(COPY_BOXES):
        for per, marker in zip(COPY_PER_SM, "o^s"):
            pts = sorted((in_flight_kib(r["config"]), x) for r, x in swept
                         if (r["config"]["BLOCK_M"], r["config"]["BLOCK_N"]) == (m, n) and r["config"]["per_sm"] == per)
            if pts:
                ax.plot(*zip(*pts), marker=marker, color=f"C{i}", ls="-" if per == 1 else ":",
                        label=f"box {m}x{n}, {per}/SM")
    ax.axhline(1.0, color="grey", lw=1)
    ax.axhline(BAR_COPY, color="grey", lw=1, ls="--")
    ax.set(xlabel="loads in flight per SM (KiB): programs x (stages - 1) x box", ylabel="x torch copy",
           title=f"16384^2 fp16 TMA copy (Triton) - {label}")
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    return ax


def print_copy_sweep(records, top=4):
    swept = sorted(sweep(records), key=lambda rx: -rx[1])
    lo = swept[-1]
    print(f"{len(swept)} configurations, from {lo[1]:.3f}x ({_copy_cfg(lo[0]['config'])}) to {swept[0][1]:.3f}x; "
          f"the {top} fastest:")
    for r, x in swept[:top]:
        print(f"  {_copy_cfg(r['config']):36s} {in_flight_kib(r['config']):5.0f} KiB in flight/SM  {r['gbps']:6.0f} GB/s  "
              f"{x:.3f}x")


def _copy_cfg(cfg):
    per = f", {cfg['per_sm']}/SM" if "per_sm" in cfg else f", {cfg['programs']}" if "programs" in cfg else ""
    stages = f", {cfg['stages']} stage{'s' * (cfg['stages'] != 1)}" if "stages" in cfg else ""
    extra = f", {cfg['ctas_per_sm']} CTAs/SM" if "ctas_per_sm" in cfg else ""
    return f"box {cfg['BLOCK_M']}x{cfg['BLOCK_N']}{stages}{per}{extra}"


def print_copy_paths(records):
    """The copy with each side through TMA or pointers, hints on the pointer side or not."""
    for r, x in copies(records):
        if r["name"] == "copy_paths":
            c = r["config"]
            hints = "evict_first load / .cs store" if c["hints"] else "no hints"
            print(f"  load {c['load']:7s} store {c['store']:7s} {hints:30s} {r['gbps']:6.0f} GB/s  {x:.3f}x torch copy")


def path_code():
    """The four paths' sm_90 code at lesson 03's box (64x128, 4 stages), compiled ahead of time: what carries the
    tile in and out. Columns: load/store."""
    import dataclasses

    from triton.tools.tensor_descriptor import TensorDescriptor

    from ..lab import aot
    from ..lab.mode import DEVICE
    from ..ops import copy
    M, N = COPY_SHAPE
    x = torch.empty(16, dtype=torch.float16, device=DEVICE)
    desc = TensorDescriptor(x, [M, N], [N, 1], [COPY_DEFAULT["BLOCK_M"], COPY_DEFAULT["BLOCK_N"]])
    out = []
    for load in ("tma", "pointer"):
        for store in ("tma", "pointer"):
            c = aot.compile_sm90(copy.copy_paths_kernel, desc, desc, x, x, M, N, LOAD_TMA=load == "tma",
                                 STORE_TMA=store == "tma", EVICT="", STORE_CACHE="", num_warps=4, **COPY_DEFAULT)
            out.append(dataclasses.replace(c, name=f"{load}/{store}"))
    return out


def copy_questions(records):
    """{(through registers?, schedule): (record, x torch copy)} - the two questions at lesson 03's box."""
    got = {}
    for r, x in copies(records):
        c = r["config"]
        if r["name"] == "copy_tma_loop" and (c.get("programs") == "one per tile" or
                                             (c.get("per_sm") == 1 and c["stages"] == 4 and c["BLOCK_M"] == 64
                                              and c["BLOCK_N"] == 128)):
            got[("registers", "one tile per program" if "programs" in c else "persistent ring")] = (r, x)
        elif r["name"] == "cuda_copy_tile":
            got[("no registers", "one tile per program")] = (r, x)
        elif r["name"] == "cuda_ring":
            got[("no registers", "persistent ring")] = (r, x)
    return got


def print_copy_questions(records):
    got = copy_questions(records)
    print(f"{'':34s}{'persistent ring':>28s}{'one tile per program':>28s}")
    for regs, who in (("registers", "Triton"), ("no registers", "CUDA, lesson 06")):
        cells = []
        for schedule in ("persistent ring", "one tile per program"):
            r = got.get((regs, schedule))
            cells.append(f"{r[0]['gbps']:.0f} GB/s {r[1]:.3f}x" if r else "-")
        print(f"{regs + ' (' + who + ')':34s}" + "".join(f"{c:>28s}" for c in cells))


def print_one_way(records):
    """Each side of the copy alone: torch's sum and fill, TMA's read and fill, beside torch's copy."""
    for r in _copy_groups(records)[1]:
        what = {"torch_copy": "copy (read + write)", "torch_sum": "read only (sum)", "read_tma": "read only, TMA",
                "torch_fill": "write only (fill)", "fill_tma": "write only, TMA"}[r["name"]]
        print(f"  {r['name']:11s} {what:22s} {r['ms'] * 1000:6.1f} us  {r['gbps']:6.0f} GB/s")


def copy_bar(records):
    """The copy's bar, computed: (the best TMA copy's ratio to torch's copy, verdict lines)."""
    tma = [(r, x) for r, x in copies(records) if r["name"] in TMA_COPIES]
    (best, x), (tbest, tx) = (max(rs, key=lambda rx: rx[1]) for rs in (tma, [rx for rx in tma
                                                                           if rx[0]["name"] == "copy_tma_loop"]))
    return x, [f"best TMA copy at 16384^2 fp16: {best['name']} ({_copy_cfg(best['config'])}) {x:.3f}x torch copy "
               f"(bar {BAR_COPY}): {'met' if x >= BAR_COPY else 'NOT met'}",
               f"the best Triton TMA copy: {_copy_cfg(tbest['config'])}, {tx:.3f}x"]
