"""The course's GEMM at shapes nobody tuned for (lessons 07 and 08): small M against the bandwidth roof, and the
GEMM that chooses (``ops.gemm_auto``) called plainly at new shapes against cuBLAS and cuBLASLt's FP8 GEMM.

Runs (each lesson's ``RUNS`` names them, so ``python -m kernels.tools.record 07:small_m`` records one):
- ``small_m``: split-K (``ops.gemm_splitk``) over a small space at decode-like shapes, M from 1 to 256, beside
  cuBLAS, lesson 04's default and a torch copy of B (the bandwidth the roof is drawn from). Its timed configurations
  join the candidates ``gemm_auto`` predicts from.
- ``auto``: at shapes none of the course's runs timed, ``gemm_auto.matmul`` as a learner calls it, and the six
  configurations it ranks best (each through a plan), timed in turn with the vendor's GEMM three times."""
import functools
import math
import multiprocessing

import matplotlib.pyplot as plt
import torch
import triton

from ..lab import bench, measure, results as recorded_results, smem
from ..lab.widgets import REFUSALS
from ..ops import gemm, gemm_auto, gemm_fp8, gemm_splitk

FP8 = "float8_e4m3fn"
# the small-M screen: M from a single row to 256 at two (N, K)
SMALL_M = (1, 8, 16, 32, 64, 128, 256)
SMALL_M_FP8 = (16, 32, 64, 128, 256)  # torch._scaled_mm wants each size of A a multiple of 16
SMALL_NK = ((4096, 4096), (8192, 8192))
# shapes no run of the course timed (fp16 and bf16): squares, LLM projections (Llama-3 8B/70B: hidden 4096/8192,
# MLP 14336/28672, grouped-query K/V 1024), M from 16 to 256
NEW_SHAPES = [(1536, 1536, 1536), (3584, 3584, 3584), (5120, 5120, 5120), (7168, 7168, 7168),
              (2048, 6144, 4096), (4096, 4096, 14336), (8192, 1024, 4096), (2048, 14336, 4096), (4096, 28672, 8192),
              (16, 14336, 4096), (24, 5120, 5120), (32, 4096, 14336), (64, 6144, 4096), (128, 11008, 4096),
              (192, 8192, 2048), (256, 28672, 4096)]
NEW_SHAPES_FP8 = [(3072, 3072, 3072), (6144, 6144, 6144), (4096, 14336, 4096), (8192, 4096, 14336),
                  (32, 14336, 4096), (192, 8192, 8192)]
TOP = 6  # the ranked configurations timed beside the plain call
LESSON04 = gemm.LESSON04  # lesson 04's persistent default
# the copy at four shapes (lesson 07 section 6 measured one): Triton's TMA copy, one tile per program or persistent
COPY_SHAPES = [((16384, 16384), "float16"), ((8192, 32768), "float16"), ((4096, 4096), "float16"),
               ((16384, 8192), "float32")]
COPY_BOXES = [(64, 256), (128, 256), (256, 256), (64, 512), (128, 512)]  # rows x bytes per row


def small_m_space(M, fp8=False):
    """[config] of split-K at M rows: swapped or not; tiles no taller than M needs (a 64-row tile for 16 rows
    multiplies zeros); 64- or 128-wide; 3 or 5 stages where they fit; slices to cover the SMs once or twice."""
    esize = 1 if fp8 else 2
    rows = max(16, triton.next_power_of_2(M))
    out = []
    for swap in (False, True):
        for bm in (16, 32, 64, 128):
            if bm > rows:
                continue
            for bn in (64, 128):
                bk = 256 if fp8 else 128  # 256-byte rows of A and B either way
                for stages in (3, 5):
                    if not smem.Budget(stages, smem.gemm_stage_bytes(bm, bn, bk, esize), output_tile=bm * bn * 2).fits:
                        continue
                    for fill in (1, 2):
                        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=4, stages=stages, swap_ab=swap,
                                        fill=fill))
    return out


def roof_ms(M, N, K, esize, copy_gbps, out_esize=2):
    """The bandwidth roof: A, B and C each moved once at the rate of a copy (GB/s, reads and writes counted)."""
    nbytes = (M * K + K * N) * esize + M * N * out_esize
    return nbytes / (copy_gbps * 1e9) * 1e3


# ---- compiling ahead, in parallel: a screen of a few hundred configurations would spend minutes in one process -------

def _warm(job):
    """Compile (by launching once on uninitialised operands) one configuration in this process; Triton's on-disk
    cache hands the compiled kernel to the process that times it."""
    shape, dtype, kernel, cfg = job
    a, b, c, scales = _operands(shape, dtype, fresh=False)
    try:
        gemm_auto._run(gemm_auto.Choice(kernel, cfg, "warm-up"), a, b, c, scales)
        torch.cuda.synchronize()
    except REFUSALS:
        pass
    return 1


def _specialised(x):
    """How Triton specialises an integer argument: 1, a multiple of 16, or neither."""
    return 1 if x == 1 else 16 if x % 16 == 0 else 0


def _compile_key(shape, dtype, kernel, cfg, sms):
    """What a launch's compiled kernel depends on: the configuration (``fill`` only sets the runtime split) and
    the specialisation of the sizes and of split-K's split."""
    split = None
    if kernel.endswith("splitk"):
        split = _specialised(gemm_splitk.split_for(*shape, cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], sms,
                                                   cfg.get("fill", 1)))
    return (dtype, kernel, tuple(sorted((k, v) for k, v in cfg.items() if k != "fill")),
            tuple(map(_specialised, shape)), split)


def compile_ahead(entries, workers=12):
    """Compile every distinct kernel of ``[(shape, dtype, kernel, config)]`` in ``workers`` processes (spawned:
    each its own CUDA context) before the timing process needs them."""
    jobs, sms = {}, measure.sm_count()
    for e in entries:
        jobs.setdefault(_compile_key(*e, sms), e)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        return sum(pool.map(_warm, list(jobs.values()), chunksize=1))


def _operands(shape, dtype, fresh=True):
    """(A, B or B^T, C, scales or None) on the GPU: fresh normal data (e4m3 quantized for FP8), or uninitialised."""
    M, N, K = shape
    if dtype == FP8:
        if not fresh:
            e = torch.empty
            return (e(M, K, device="cuda").to(gemm_fp8.FP8), e(N, K, device="cuda").to(gemm_fp8.FP8),
                    e(M, N, device="cuda", dtype=torch.bfloat16), (torch.ones((), device="cuda"),) * 2)
        a, sa = gemm_fp8.quantize(torch.randn(M, K, device="cuda"))
        bt, sb = gemm_fp8.quantize(torch.randn(N, K, device="cuda"))
        return a, bt, torch.empty(M, N, device="cuda", dtype=torch.bfloat16), (sa, sb)
    dt = getattr(torch, dtype)
    make = torch.randn if fresh else torch.empty
    return (make(M, K, device="cuda", dtype=dt), make(K, N, device="cuda", dtype=dt),
            torch.empty(M, N, device="cuda", dtype=dt), None)


def _vendor(a, b, c, scales):
    if scales is None:
        return "cublas_gemm", lambda: torch.matmul(a, b, out=c)
    return "scaled_mm", lambda: gemm_fp8.scaled_mm(a, b, *scales, out=c)


def _splitk_name(dtype):
    return "gemm_fp8_splitk" if dtype == FP8 else "gemm_splitk"


def measure_small_m(dtypes):
    """Per point: every configuration of ``small_m_space`` (through its plan, checked first), the vendor's GEMM,
    lesson 04's default (fp16/bf16) and a torch copy of B, timed once in turn (a screen, as lesson 07's)."""
    points = [((M, N, K), dt) for dt in dtypes for N, K in SMALL_NK for M in (SMALL_M_FP8 if dt == FP8 else SMALL_M)]
    compile_ahead([(s, dt, _splitk_name(dt), cfg) for s, dt in points for cfg in small_m_space(s[0], dt == FP8)])
    records = []
    for shape, dtype in points:
        a, b, c, scales = _operands(shape, dtype)
        ref = gemm_auto.reference(a, b, scales).to(c.dtype)
        vendor, vendor_fn = _vendor(a, b, c, scales)
        copy_src, copy_dst = (b, torch.empty_like(b))
        fns, cfgs = {vendor: vendor_fn}, {vendor: (vendor, {})}
        fns["torch_copy"], cfgs["torch_copy"] = (lambda: copy_dst.copy_(copy_src)), ("torch_copy", {})
        if scales is None:
            fns["gemm_lesson04"] = lambda: gemm.matmul_tma_persistent(a, b, out=c, **LESSON04)
            cfgs["gemm_lesson04"] = ("gemm_lesson04", LESSON04)
            bench.check_writes("gemm_lesson04", fns["gemm_lesson04"], c, ref, 2e-2)
        name = _splitk_name(dtype)
        screen = measure.screened([(name, cfg, functools.partial(gemm_auto._run, gemm_auto.Choice(name, cfg, "screen"),
                                                                 a, b, c, scales, start=gemm_auto.Plan))
                                   for cfg in small_m_space(shape[0], dtype == FP8)], c, ref, 2e-2, REFUSALS,
                                  f" at {shape} {dtype}")
        fns.update(screen[0])
        cfgs.update(screen[1])
        ms = bench.interleaved_ms(fns, rounds=1, warmup=10, rep=30)
        flops = bench.gemm_flops(*shape)
        for k, t in ms.items():
            name, cfg = cfgs[k]
            if name == "torch_copy":
                records.append(recorded_results.record(name, t, shape=shape, dtype=dtype, nbytes=bench.copy_bytes(b)))
            else:
                records.append(recorded_results.record(name, t, shape=shape, dtype=dtype, config=cfg, flops=flops,
                                                       baseline=None if name == vendor else vendor))
    return records



def measure_auto(shapes, dtypes):
    """Per new point: the vendor's GEMM, ``gemm_auto`` called plainly (checks, choice, tensor maps and dispatch on
    every call), and the ``TOP`` configurations it ranks best, each through its plan, checked, then timed in turn
    three times (``measure.timed``). The fastest of those is the best configuration the course knows there."""
    points = [(s, dt) for dt in dtypes for s in shapes]
    compile_ahead([(shape, dtype, k, cfg) for shape, dtype in points
                   for _, k, cfg in gemm_auto.rank(*shape, dtype, measure.sm_count())[:TOP]])
    records = []
    for shape, dtype in points:
        a, b, c, scales = _operands(shape, dtype)
        ref = gemm_auto.reference(a, b, scales).to(c.dtype)
        vendor, vendor_fn = _vendor(a, b, c, scales)
        choice = gemm_auto.choose(a, b, c)
        plain = ((lambda: gemm_auto.matmul(a, b, out=c)) if scales is None
                 else (lambda: gemm_auto.matmul_fp8(a, b, *scales, out=c)))
        variants = [(vendor, {}, vendor_fn),
                    ("gemm_auto", {"kernel": choice.kernel, **choice.config, "why": choice.why}, plain)]
        for predicted, kernel, cfg in choice.ranked[:TOP]:
            fn = gemm_auto._run(gemm_auto.Choice(kernel, cfg, "ranked"), a, b, c, scales, start=gemm_auto.Plan)
            variants.append(("gemm_ranked", {"kernel": kernel, **cfg, "predicted_ms": round(predicted, 5)}, fn))
        recs = measure.timed(variants, c, ref, 2e-2, shape=shape, flops=bench.gemm_flops(*shape))
        records += [{**r, "dtype": dtype} for r in recs]
    return records


def copy_configs(esize):
    """[config] of ``copy.copy_tma_loop`` (host tensor maps) tried at every copy shape: each box one tile per
    program, and two boxes persistent with 1 or 2 programs per SM and a 4-stage ring."""
    out = [dict(BLOCK_M=m, BLOCK_N=nb // esize, stages=1, per_sm=None) for m, nb in COPY_BOXES]
    out += [dict(BLOCK_M=m, BLOCK_N=256 // esize, stages=4, per_sm=p) for m in (64, 128) for p in (1, 2)]
    return out


def measure_copy_shapes():
    """Per shape: torch's copy and every ``copy_configs`` entry, checked exactly, then timed in turn three times."""
    from ..ops import copy
    records = []
    for shape, dtype in COPY_SHAPES:
        x = torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype))
        y = torch.empty_like(x)
        sms = measure.sm_count(x)
        variants = [("torch_copy", {}, lambda: y.copy_(x))]
        for cfg in copy_configs(x.element_size()):
            tiles = triton.cdiv(shape[0], cfg["BLOCK_M"]) * triton.cdiv(shape[1], cfg["BLOCK_N"])
            programs = cfg["per_sm"] * sms if cfg["per_sm"] else tiles
            launch = copy.tma_loop_launch(x, y, cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["stages"], "host",
                                          programs=programs)
            variants.append(("copy_tma_loop", {**cfg, "descriptor": "host"}, gemm_auto.Plan(*launch)))
        records += [{**r, "dtype": dtype} for r in measure.timed(variants, y, x, shape=shape,
                                                                  nbytes=bench.copy_bytes(x))]
    return records


def copy_best(records):
    """{(shape, dtype): (best Triton record, x torch copy)} from a ``copy_shapes`` run."""
    out = {}
    for r in records:
        if r["name"] == "copy_tma_loop":
            k = (tuple(r["shape"]), r["dtype"])
            base = next(b for b in records if b["name"] == "torch_copy" and (tuple(b["shape"]), b["dtype"]) == k)
            x = base["ms"] / r["ms"]
            if k not in out or x > out[k][1]:
                out[k] = (r, x)
    return out


def run(lesson, name):
    """A run of this module for ``lesson`` ("07" or "08"): the recorded one wherever one is recorded (each takes
    minutes and hundreds of compiles; redo one with ``python -m kernels.tools.record 07:auto``), else measured now."""
    store = recorded_results.recorded()
    found = store.select(lesson, name)
    if found:
        return measure.Run(found, measure.recorded_label(store, found))
    module = {"07": "l07_shapes_and_waves", "08": "l08_fp8_capstone"}[lesson]
    import importlib
    lesson_module = importlib.import_module(f"kernels.lessons.{module}")
    return measure.run(lesson, name, lesson_module.RUNS[name], "hopper")


# ---- views ---------------------------------------------------------------------------------------------------------

def geomean(xs):
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs))


def auto_table(records):
    """{(shape, dtype): {"vendor", "auto", "best"}: ms}: the plain call, the fastest ranked configuration (the best
    the course knows there) and the vendor's GEMM, from an ``auto`` run."""
    out = {}
    for r in records:
        row = out.setdefault((tuple(r["shape"]), r["dtype"]), {})
        if r["name"] in ("cublas_gemm", "scaled_mm"):
            row["vendor"] = r["ms"]
        elif r["name"] == "gemm_auto":
            row["auto"] = r["ms"]
            row["choice"] = r["config"]
        elif r["name"] == "gemm_ranked":
            row["best"] = min(row.get("best", math.inf), r["ms"])
    return out


def auto_bars(records, fp8=False):
    """(geomean x vendor, lowest, lines): the issue's bars read from an ``auto`` run: fp16/bf16 geomean >= 0.98x
    cuBLAS, none below 0.92x, never below 0.9x of the best known; FP8 geomean >= 1.0x ``_scaled_mm``, none below 0.9x."""
    table = auto_table(records)
    x = {k: v["vendor"] / v["auto"] for k, v in table.items()}
    of_best = {k: v["best"] / v["auto"] if v["best"] < v["auto"] else 1.0 for k, v in table.items()}
    g, worst = geomean(x.values()), min(x, key=x.get)
    bar_g, bar_min = (1.0, 0.9) if fp8 else (0.98, 0.92)
    vendor = "_scaled_mm" if fp8 else "cuBLAS"
    lines = [f"{len(x)} new points: geomean {g:.3f}x {vendor} (bar {bar_g}): {'met' if g >= bar_g else 'NOT met'}",
             f"lowest {x[worst]:.3f}x at {'x'.join(map(str, worst[0]))} {worst[1]} (bar: none below {bar_min}): "
             f"{'met' if x[worst] >= bar_min else 'NOT met'}"]
    known = {k: v["vendor"] / v["best"] for k, v in table.items()}
    lines.append(f"the best configuration the course knows at each point (the fastest of the {TOP} ranked, through "
                 f"plans): geomean {geomean(known.values()):.3f}x {vendor}, lowest {min(known.values()):.3f}x")
    near = sum(1 for v in of_best.values() if v >= 0.95)
    lines.append(f"the plain call within 5% of the best known configuration at {near} of {len(of_best)} points")
    if not fp8:
        lo = min(of_best, key=of_best.get)
        lines.append(f"against the best configuration the course knows at each point: lowest {of_best[lo]:.3f}x at "
                     f"{'x'.join(map(str, lo[0]))} {lo[1]} (bar 0.9): {'met' if of_best[lo] >= 0.9 else 'NOT met'}")
    return g, x[worst], lines


def splitk_code(M=16, N=4096, K=4096):
    """The sm_90 code of split-K at M x N x K fp16 with a 16-row tile, unswapped and swapped (``Compiled`` each,
    named so): which MMA instruction the tile gets."""
    import dataclasses

    from ..lab import aot
    from ..lab.mode import DEVICE
    a = torch.empty(M, K, device=DEVICE, dtype=torch.float16)
    b = torch.empty(K, N, device=DEVICE, dtype=torch.float16)
    c = torch.empty(M, N, device=DEVICE, dtype=torch.float16)
    out = []
    for swap in (False, True):
        kernel, _, args, kw = gemm_splitk._launch(a, b, c, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, stages=3, swap_ab=swap,
                                                  programs=132)
        out.append(dataclasses.replace(aot.compile_sm90(kernel, *args, **kw), name="swap-AB" if swap else "16-row tile"))
    return out


def print_choices(shapes, dtype=torch.float16):
    """What ``gemm_auto`` would run at each shape, and why (operands left uninitialised: the choice reads shapes)."""
    from ..lab.mode import DEVICE
    name = gemm_auto.dtype_name(dtype)
    known = gemm_auto.known(name)
    print(f"{len(known)} configurations timed at {len({s for pts in known.values() for s, _ in pts})} shapes "
          f"({name}, recorded runs {', '.join(gemm_auto.RUNS)})")
    for M, N, K in shapes:
        a, b = (torch.empty(s, device=DEVICE, dtype=dtype) for s in ((M, K), (K, N)))
        ch = gemm_auto.choose(a, b, torch.empty(M, N, device=DEVICE, dtype=dtype))
        cfg = " ".join(f"{k}={v}" for k, v in ch.config.items())
        guess = f", predicted {ch.predicted_ms * 1e3:.1f} us on {measure.sm_count()} SMs" if ch.predicted_ms else ""
        print(f"{M}x{N}x{K}: {ch.kernel} {cfg}\n    {ch.why}{guess}")


def small_m_view(records, N, K, dtype):
    """{M: {"vendor", "splitk", "lesson04", "roof"}: ms} at one (N, K) from a ``small_m`` run: the screen's fastest
    split-K, and the roof from the torch copy's rate timed beside it."""
    out = {}
    esize = 1 if dtype == FP8 else 2
    for r in records:
        M, n, k = r["shape"]
        if (n, k) != (N, K) or r["dtype"] != dtype:
            continue
        row = out.setdefault(M, {})
        if r["name"] in ("cublas_gemm", "scaled_mm"):
            row["vendor"] = r["ms"]
        elif r["name"] == "torch_copy":
            row["roof"] = roof_ms(M, N, K, esize, r["gbps"])
        elif r["name"] == "gemm_lesson04":
            row["lesson04"] = r["ms"]
        elif r["name"].endswith("splitk") and r["ms"] < row.get("splitk", math.inf):
            row["splitk"], row["splitk_config"] = r["ms"], r["config"]
    return dict(sorted(out.items()))


def print_small_m(records, N, K, dtype):
    """One line per M: the roof, the vendor, the best split-K of the screen and lesson 04's default, each as the
    time and the fraction of the roof it reaches."""
    vendor = "_scaled_mm" if dtype == FP8 else "cuBLAS"
    print(f"M x {N} x {K} {dtype}: time in us (fraction of the bandwidth roof)")
    print(f"{'M':>5} {'roof':>7} {vendor:>15} {'split-K':>15} {'lesson 04':>15}   split-K's configuration")
    for M, row in small_m_view(records, N, K, dtype).items():
        cells = [f"{row[k] * 1e3:6.1f} ({row['roof'] / row[k]:4.0%})" if k in row else "-"
                 for k in ("vendor", "splitk", "lesson04")]
        c = row.get("splitk_config", {})
        cfg = (f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['stages']}{' swap-AB' if c['swap_ab'] else ''}"
               f" fill {c['fill']}") if c else ""
        print(f"{M:5d} {row['roof'] * 1e3:7.1f} " + " ".join(f"{x:>15}" for x in cells) + f"   {cfg}")


def print_auto(records):
    """Per new point: the vendor's time, the plain call and the best ranked configuration as a ratio to it, and what
    the plain call ran."""
    table = auto_table(records)
    vendor = "_scaled_mm" if any(d == FP8 for _, d in table) else "cuBLAS"
    print(f"{'shape':>18} {'dtype':>5} {vendor + ' us':>12} {'plain call':>10} {'best known':>10}   chosen")
    for (shape, dtype), v in table.items():
        c = v["choice"]
        tile = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['stages']}" if "BLOCK_M" in c else ""
        print(f"{'x'.join(map(str, shape)):>18} {short(dtype):>5} {v['vendor'] * 1e3:12.1f} {v['vendor'] / v['auto']:9.3f}x "
              f"{v['vendor'] / v['best']:9.3f}x   {c['kernel']} {tile}")


def _tile(c):
    kind = {"gemm_split_tail": "split last wave", "gemm_splitk": "split-K", "gemm_fp8_splitk": "split-K"}.get(
        c["kernel"], "one tile/program" if c.get("persistent") is False else "persistent")
    return f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['stages']} {kind}"


def print_misses(records, within=0.95):
    """Each point where the plain call ran slower than ``within`` x the best known configuration: what the rule
    ranked first (its prediction, its time through a plan, the plain call's time) and the fastest of the six."""
    by = {}
    for r in records:
        by.setdefault((tuple(r["shape"]), r["dtype"]), []).append(r)
    for (shape, dtype), rs in by.items():
        plain = next(r for r in rs if r["name"] == "gemm_auto")
        ranked = [r for r in rs if r["name"] == "gemm_ranked"]
        best = min(ranked, key=lambda r: r["ms"])
        if best["ms"] / plain["ms"] >= within:
            continue
        first = ranked[0]
        print(f"{'x'.join(map(str, shape))} {short(dtype)}: ranked first {_tile(first['config'])}, predicted "
              f"{first['config']['predicted_ms'] * 1e3:.1f} us, {first['ms'] * 1e3:.1f} us through a plan, "
              f"{plain['ms'] * 1e3:.1f} us called plainly\n    fastest of the six: {_tile(best['config'])}, "
              f"{best['ms'] * 1e3:.1f} us (ranked {ranked.index(best) + 1})")


def short(dtype):
    return {"float16": "fp16", "bfloat16": "bf16", FP8: "e4m3"}.get(dtype, dtype)


def print_copy_shapes(records):
    """Per copy shape: torch's copy, Triton's best TMA copy and its ratio, against the bar of 0.97x."""
    for (shape, dtype), (r, x) in copy_best(records).items():
        c = r["config"]
        how = f"{c['per_sm']}/SM, {c['stages']} stages" if c["per_sm"] else "one tile per program"
        print(f"{'x'.join(map(str, shape)):>12} {dtype:8s} box {c['BLOCK_M']}x{c['BLOCK_N']} {how:22s} "
              f"{r['gbps']:6.0f} GB/s {x:.3f}x torch copy (bar 0.97: {'met' if x >= 0.97 else 'NOT met'})")


def plot_small_m(records, N, K, dtype, label, ax=None):
    """Achieved bandwidth (A + B + C bytes over time) against M: the roof, the vendor, split-K, lesson 04's default."""
    ax = ax or plt.subplots(figsize=(6.4, 3.4))[1]
    view = small_m_view(records, N, K, dtype)
    esize = 1 if dtype == FP8 else 2
    Ms = list(view)
    gbs = lambda M, ms: ((M * K + K * N) * esize + M * N * 2) / (ms * 1e-3) / 1e9
    for key, style, name in (("roof", "k--", "roof: a copy's rate"), ("vendor", "o-", "cuBLAS" if esize == 2 else
                                                                           "_scaled_mm"),
                             ("splitk", "s-", "split-K (best of the screen)"), ("lesson04", "^:", "lesson 04 default")):
        pts = [(M, gbs(M, view[M][key])) for M in Ms if key in view[M]]
        if pts:
            ax.plot(*zip(*pts), style, label=name)
    ax.set(xscale="log", xlabel="M (rows of A: tokens)", ylabel="GB/s of A + B + C", ylim=(0, None),
           title=f"M x {N} x {K} {short(dtype)}\n{label}")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    return ax
