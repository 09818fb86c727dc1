"""Lesson 04: double buffering and pipelining. Measure the math time C and the load time M of a TMA
GEMM with probes that switch one of them off, predict every stage count from them, compare with the
measured kernel; then the steps beyond: persistent grid, TMA-store epilogue, warp specialisation,
and the course's best GEMM against cuBLAS over six shapes."""
import math

import torch
from matplotlib.patches import Patch

from ..lab import bench, kernel_trace, measure, plots, results as recorded_results, smem
from ..lab.widgets import REFUSALS, Widget
from ..ops import gemm

LESSON = "04"
SHAPE = (8192, 8192, 8192)
SMALL = (2048, 2048, 2048)  # the shape where the course's TMA GEMMs fall behind cuBLAS (section 6)
TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
STAGES = [1, 2, 3, 4]
SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (4096, 14336, 4096), (8192, 4096, 14336), (16384, 4096, 4096)]  # M, N, K; the last three LLM-like
PROBES = {"full": (True, True), "math_only": (False, True), "loads_only": (True, False),
          "consume_only": (False, False)}  # (LOADS, MATH); consume_only: the maximum alone (folded: probe_loops)


def probe_loops(stages=3):
    """{probe: None, or (ld.shared.v4, max.f16x2)} of the loads-only and consume-only probes' sm_90 PTX at TILE: what one
    thread does in one step of the K loop (the loop inside the loop over tiles, LLVM's "Loop Header: Depth=2"), or
    None where the compiler left no K loop."""
    import re
    from ..lab import aot
    a, b, c = (torch.empty(*s, device=gemm.DEVICE, dtype=torch.float16) for s in ((SHAPE[0], SHAPE[2]),
                                                                                     (SHAPE[2], SHAPE[1]), SHAPE[:2]))
    found = {}
    for probe in ("loads_only", "consume_only"):
        kernel, _, args, kwargs = gemm.probe_launch(a, b, c, stages, *PROBES[probe], **TILE)
        lines = aot.compile_for(aot.SM90, kernel, *args, **kwargs).ptx.splitlines()
        heads = [(i, m[1]) for i, line in enumerate(lines) if (m := re.match(r"(\$L__BB\w+):", line))
                 and any("Loop Header: Depth=2" in after for after in lines[i:i + 4])]
        found[probe] = None
        for i, label in heads:
            end = next(j for j in range(i, len(lines)) if re.search(rf"\bbra(\.uni)?\s+\{label};", lines[j]))
            body = "\n".join(lines[i:end + 1])
            found[probe] = (body.count("ld.shared.v4"), body.count("max.f16x2"))
    return found


def measure_model():
    """Probes (full / math only / loads only / consume only) at every stage count, and cuBLAS, interleaved."""
    a, b, c = bench.gemm_operands(*SHAPE)
    variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c))]
    for s in STAGES:
        for probe, (loads, mth) in PROBES.items():
            variants.append(("gemm_tma_probe", {**TILE, "stages": s, "probe": probe},
                             lambda s=s, loads=loads, mth=mth: gemm.matmul_tma_probe(a, b, s, loads, mth, out=c, **TILE)))
    return measure.timed(variants, c, torch.matmul(a, b), 1e-2, shape=SHAPE, flops=bench.gemm_flops(*SHAPE),
                         checked=lambda name, cfg: cfg.get("probe", "full") == "full")  # the others compute no A @ B


def budget(name, cfg, compiled=None):
    """The shared memory a GEMM variant of this lesson asks for, by the course's rule (``smem.Budget``):
    the ring of A and B tiles, plus the output tile where the persistent kernel stages it for a TMA
    store apart from the ring (its next tile's loads are already in flight); the one-tile kernels
    reuse the ring for it."""
    out_tile = cfg["BLOCK_M"] * cfg["BLOCK_N"] * 2 if name == "gemm_tma_persistent" and cfg["epilogue"] == "tma" else 0
    return smem.Budget(cfg["stages"], smem.gemm_stage_bytes(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]),
                       output_tile=out_tile, compiled=compiled)


def step_variants(a, b, c, fitting=True):
    """[(name, config, launch)]: cuBLAS, then each step of the lesson's GEMM at the same tile; with
    ``fitting`` only those whose shared memory fits one block (``left_out`` names the others)."""
    v = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c))]
    for s in (3, 4):
        v.append(("gemm_tma", {**TILE, "stages": s}, lambda s=s: gemm.matmul_tma(a, b, stages=s, out=c, **TILE)))
        for epilogue in ("tma", "pointer"):
            v.append(("gemm_tma_persistent", {**TILE, "stages": s, "epilogue": epilogue},
                      lambda s=s, e=epilogue: gemm.matmul_tma_persistent(a, b, stages=s, tma_store=e == "tma", out=c,
                                                                        **TILE)))
    return [x for x in v if not fitting or x[0] == "cublas_gemm" or budget(x[0], x[1]).fits]


def left_out():
    """One line per step variant that does not fit one block's shared memory, with its budget: the
    compiled kernel's figure (compiled for sm_90, no launch needed) and the model's beside it."""
    lines = []
    for name, cfg, _ in step_variants(None, None, None, fitting=False)[1:]:
        if not budget(name, cfg).fits:
            kernel = gemm.matmul_tma_persistent_kernel if name == "gemm_tma_persistent" else gemm.matmul_tma_kernel
            extra = dict(TMA_STORE=cfg["epilogue"] == "tma") if "epilogue" in cfg else {}
            compiled = gemm.compile_sm90(kernel, *TILE.values(), cfg["stages"], **extra).shared
            b = budget(name, cfg, compiled)
            lines.append(f"{measure.describe(name, cfg)}: {b.parts()} = {b.model / 1024:.1f} KiB by the model, "
                         f"{b.compiled / 1024:.1f} KiB compiled, over the {b.limit / 1024:.1f} KiB one block may use")
    return lines


def _fitting(variants):
    """The variants that launch on this GPU; the others are left out, and said (the budget above leaves
    out what cannot fit, so on a Hopper GPU this says nothing)."""
    kept = []
    for name, cfg, fn in variants:
        try:
            fn()
            kept.append((name, cfg, fn))
        except REFUSALS as e:
            print(f"left out: {measure.describe(name, cfg)}: {e}")
    return kept


def measure_steps():
    a, b, c = bench.gemm_operands(*SHAPE)
    return measure.timed(_fitting(step_variants(a, b, c)), c, torch.matmul(a, b), 1e-2, shape=SHAPE,
                         flops=bench.gemm_flops(*SHAPE))


def measure_shapes():
    """Every step variant with the TMA-store epilogue and the lesson-02 pointer GEMM on six shapes, each
    against cuBLAS in its round."""
    records = []
    for shape in SHAPES:
        a, b, c = bench.gemm_operands(*shape)
        variants = [v for v in step_variants(a, b, c) if v[1].get("epilogue") != "pointer"]
        variants.append(("gemm_pointer", {**TILE, "stages": 4}, lambda: gemm.matmul(a, b, stages=4, out=c, **TILE)))
        records += measure.timed(_fitting(variants), c, torch.matmul(a, b), 1e-2, shape=shape,
                                 flops=bench.gemm_flops(*shape))
    return records


def measure_launch():
    """At 2048^3, where one GEMM is tens of microseconds of GPU work, each kernel three ways: timed as
    every other figure (``do_bench``: a launch from Python per repetition, L2 cleared before each),
    replayed from a CUDA graph (``do_bench_cudagraph``: the launches recorded once, so no Python or
    driver work per launch, and no L2 clearing), and the host's own time per launch (Python, argument
    checks, descriptor set-up, the driver call), with the GPU kept busy meanwhile."""
    a, b, c = bench.gemm_operands(*SMALL)
    t = dict(TILE)
    variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c)),
                ("gemm_pointer", {**t, "stages": 4}, lambda: gemm.matmul(a, b, stages=4, out=c, **t)),
                ("gemm_tma", {**t, "stages": 3}, lambda: gemm.matmul_tma(a, b, stages=3, out=c, **t)),
                ("gemm_tma_persistent", {**t, "stages": 3, "epilogue": "tma"},
                 lambda: gemm.matmul_tma_persistent(a, b, stages=3, out=c, **t))]
    flops = bench.gemm_flops(*SMALL)
    records = [{**r, "config": {**r["config"], "timer": "do_bench"}}
               for r in measure.timed(variants, c, torch.matmul(a, b), 1e-2, shape=SMALL, flops=flops)]
    for name, cfg, fn in variants:
        records.append(recorded_results.record(name, bench.graph_ms(fn), shape=SMALL, flops=flops,
                                               config={**cfg, "timer": "cuda_graph"}))
        records.append(recorded_results.record(name, bench.host_us(fn) / 1000, shape=SMALL, config={**cfg, "timer": "host"}))
    return records


def launch_rows(records):
    """[(name, config, {timer: record})] for the launch run, in the order measured."""
    rows = {}
    for r in records:
        cfg = {k: v for k, v in r["config"].items() if k != "timer"}
        rows.setdefault((r["name"], str(cfg)), (r["name"], cfg, {}))[2][r["config"]["timer"]] = r
    return list(rows.values())


def results(run):
    """A run of this lesson (see RUNS): measured now on a GPU, recorded otherwise, with its label."""
    return measure.run(LESSON, run, RUNS[run])


def versus_cublas(records):
    """[(shape, best course record, cuBLAS record)] per shape, in the order measured."""
    rows = []
    for shape in dict.fromkeys(tuple(r["shape"]) for r in records):
        rs = [r for r in records if tuple(r["shape"]) == shape]
        cublas = next(r for r in rs if r["name"] == "cublas_gemm")
        rows.append((shape, min((r for r in rs if r is not cublas), key=lambda r: r["ms"]), cublas))
    return rows


def best_tma(records, shape):
    """The fastest TMA GEMM record (one tile per program or persistent) at ``shape``."""
    return min((r for r in records if tuple(r["shape"]) == tuple(shape) and r["name"].startswith("gemm_tma")),
               key=lambda r: r["ms"])


# ---- the model ----------------------------------------------------------------------------------

def probe_times(records):
    """{probe: {stages: ms}} from probe records."""
    out = {p: {} for p in PROBES}
    for r in records:
        if r["name"] == "gemm_tma_probe":
            out[r["config"]["probe"]][r["config"]["stages"]] = r["ms"]
    return out


def predict(t, stages):
    """Predicted ms at ``stages`` from the math-only time C and the loads-only times M(S), all totals
    over the whole GEMM: one stage is serial, C + M(1); with S >= 2 stages loads overlap math and the
    slower of the two sets the pace, max(C, M(S)), plus one step of each per tile to fill and drain."""
    C, M1 = t["math_only"][1], t["loads_only"][1]
    k_steps = SHAPE[2] // TILE["BLOCK_K"]
    if stages == 1:
        return C + M1
    return max(C, t["loads_only"][stages]) + (C + M1) / k_steps


def model_table(records):
    """[(stages, predicted ms, measured ms, error)] for the lesson's tile."""
    t = probe_times(records)
    return [(s, predict(t, s), t["full"][s], predict(t, s) / t["full"][s] - 1) for s in STAGES]


def tile_steps(shape=SHAPE, tile=TILE):
    """How many (output tile, K step) pairs a GEMM of ``shape`` walks with ``tile``."""
    return math.prod(s // b for s, b in zip(shape, tile.values()))


def per_step_us(ms, sms):
    """A whole-GEMM time as microseconds per step on one SM: the steps are shared by ``sms`` SMs."""
    return ms * 1e3 * sms / tile_steps()


# ---- the timeline --------------------------------------------------------------------------------

def timeline(C, M, stages, steps=8):
    """Start and end of each step's load and compute when S stages share the shared-memory ring:
    a load needs a free buffer (the compute S steps earlier has finished) and the copy engine (loads
    one after another); a compute needs its tiles and the previous compute."""
    load, comp = [], []
    for k in range(steps):
        start = 0.0
        if k:
            start = load[k - 1][1] if stages > 1 else comp[k - 1][1]
        if stages > 1 and k >= stages:
            start = max(start, comp[k - stages][1])
        load.append((start, start + M))
        begin = max(load[k][1], comp[k - 1][1] if k else 0.0)
        comp.append((begin, begin + C))
    return load, comp


def plot_timeline(C, M, stages, ax=None, title=None):
    load, comp = timeline(C, M, stages)
    own = ax is None  # the widget's figure, of its own (not pyplot's: see plots.show), or the caller's axes
    if own:
        fig, ax = plots.subplots((7, 1.8))
    for k, ((l0, l1), (c0, c1)) in enumerate(zip(load, comp)):
        ax.broken_barh([(l0, l1 - l0)], (1.1, 0.8), color=f"C{k % 10}", alpha=0.6)
        ax.broken_barh([(c0, c1 - c0)], (0.1, 0.8), color=f"C{k % 10}")
        ax.text((c0 + c1) / 2, 0.5, str(k), ha="center", va="center", fontsize=7, color="white")
    ax.set(yticks=[0.5, 1.5], yticklabels=["compute", "load"], xlabel="time on one SM (us)",
           title=title or f"{stages} stage{'s' * (stages > 1)}: {comp[-1][1]:.1f} us for {len(comp)} steps")
    if own:
        plots.show(fig)


# ---- the timeline, measured: Proton inside the kernel -----------------------------------------------

def measure_trace():
    """The GEMM of the model (the probe with loads and math on, lesson 04's tile, 8192^3 fp16) at each stage count:
    checked, timed plainly (``do_bench`` median), then launched once with its waits marked (``kernel_trace``) and
    checked again. Each record: the plain time, and under ``trace`` the trace's medians per step (cycles), the
    share of time in each scope, and a few steps to draw. No clock: NVML's samples during a ``do_bench`` of a
    few hundred milliseconds are not the clock of one traced launch (lesson 04, section 8 reads ncu's)."""
    a, b, c = bench.gemm_operands(*SHAPE)
    ref = torch.matmul(a, b)
    records = []
    for s in STAGES:
        kernel, grid, args, kwargs = gemm.probe_launch(a, b, c, s, **TILE)
        fn = lambda: kernel[grid](*args, **kwargs)
        bench.check_writes(f"the {s}-stage GEMM", fn, c, ref, 1e-2)
        ms = bench.median_ms(fn)
        c.fill_(float("nan"))
        events = kernel_trace.trace(kernel, grid, args, kwargs)
        assert bench.rel_err(c, ref) < 1e-2, f"the instrumented {s}-stage GEMM computed a wrong result"
        r = recorded_results.record("gemm_tma_probe_traced", ms, shape=SHAPE, flops=bench.gemm_flops(*SHAPE),
                                    config={**TILE, "stages": s})
        r["trace"] = {**kernel_trace.summary(events), "window": kernel_trace.window(events)}
        records.append(r)
    return records


def trace_rows(records, t):
    """Per stage count: the plain GEMM's time, the model's and the trace's step against one stage's, and the
    trace's medians per step (cycles): the step, and the warp's time waiting for tiles, issuing its wgmma and
    waiting for a wgmma."""
    by = {r["config"]["stages"]: r for r in records}
    if 1 not in by:
        raise LookupError("the trace run has no one-stage record: every ratio is against one stage's step")
    one, rows = by[1]["trace"], []
    for s, r in sorted(by.items()):
        tr = r["trace"]
        rows.append({"stages": s, "ms": r["ms"], "model": predict(t, s) / predict(t, 1),
                     "traced": tr["cycles_per_step"] / one["cycles_per_step"], **tr})
    return rows


def print_trace(records, t):
    print("stages | GEMM ms | a step against one stage's: model, traced | cycles per step (median): step, "
          "waiting for tiles, issuing wgmma, waiting for wgmma")
    for r in trace_rows(records, t):
        print(f"{r['stages']:6d} | {r['ms']:7.3f} | {r['model']:31.2f}  {r['traced']:6.2f} | "
              f"{r['cycles_per_step']:30.0f}"
              f"  {r['tma_wait']:17.0f}  {r['mma_issue']:13.0f}  {r['mma_wait']:16.0f}")


def plot_trace(records, t, steps=4):
    """Per stage count, the model's timeline (left, per SM, from the probes) beside a few steps Proton recorded on
    one CTA's two warp groups (right, cycles): where each waits for tiles (TMA) or for its wgmma."""
    fig, axes = plots.subplots((11, 7), nrows=len(records), ncols=2)
    colours = {"tma_wait": "C3", "mma_issue": "C2", "mma_wait": "C0"}
    for row, r in zip(axes, sorted(records, key=lambda r: r["config"]["stages"])):
        s = r["config"]["stages"]
        sms = measure.sm_count()
        plot_timeline(per_step_us(t["math_only"][1], sms), per_step_us(t["loads_only"][s], sms), s, ax=row[0],
                      title=f"model, {s} stage{'s' * (s > 1)}")
        window = r["trace"]["window"]
        end = 0
        for y, (warp, events) in enumerate(sorted(window.items())):
            starts = [e[1] for e in events if e[0] == kernel_trace.STEP] or [events[0][1]]
            stop = starts[steps] if len(starts) > steps else events[-1][1] + events[-1][2]
            end = max(end, stop)
            row[1].broken_barh([(starts[0], stop - starts[0])], (y + 0.1, 0.8), color="0.85")
            for name, start, dur in events:
                if start < stop:
                    row[1].broken_barh([(start, max(dur, 8))], (y + 0.1, 0.8), color=colours[name])
        row[1].set(yticks=[y + 0.5 for y in range(len(window))], yticklabels=[f"warp {w}" for w in sorted(window)],
                   xlim=(0, end),
                   title=f"traced, {s} stage{'s' * (s > 1)}: {r['trace']['cycles_per_step']:.0f} cycles a step")
    axes[-1][1].set_xlabel("SM cycles")
    handles = [Patch(color=c) for c in (*colours.values(), "0.85")]
    fig.legend(handles, ["waiting for tiles", "issuing wgmma", "waiting for a wgmma", "the rest"], ncol=4,
               loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    plots.show(fig)


# ---- the ring ------------------------------------------------------------------------------------

def ring(C, M, stages=3, steps=7):
    """Who waits for whom in an S-slot ring, step by step, with the times of ``timeline``. Step k uses
    slot k % S. Its fill is the (k // S)-th completion of that slot's full barrier, so the consumer waits
    on parity (k // S) % 2 - the bit that flips each time the ring wraps (section 4's PTX:
    ``mbarrier.try_wait.parity``; lesson 05's CUDA: ``wait((k % 6) / 3)`` for S = 3). The producer may
    refill a slot only once the consumer has released it, that is once the compute of step k - S is done.
    Returns one dict per step: slot, phase, the load and compute intervals, and each side's wait (or None)."""
    load, comp = timeline(C, M, stages, steps)
    rows = []
    for k in range(steps):
        free = load[k - 1][1] if k else 0.0         # when the producer could start this load
        idle = comp[k - 1][1] if k else 0.0         # when the consumer could start this step
        rows.append(dict(k=k, slot=k % stages, phase=(k // stages) % 2, load=load[k], compute=comp[k],
                         producer_waits=(free, load[k][0]) if load[k][0] > free + 1e-9 else None,
                         consumer_waits=(idle, comp[k][0]) if comp[k][0] > idle + 1e-9 else None))
    return rows


def plot_ring(C=1.0, M=0.6, stages=3, steps=7):
    """The ring drawn: a row per slot (TMA filling it, then wgmma reading it, then released), and a row
    each for the waits of the producer (on an empty slot) and of the consumer (on a full one)."""
    import matplotlib.pyplot as plt
    rows = ring(C, M, stages, steps)
    fig, ax = plt.subplots(figsize=(7, 0.45 * (stages + 2) + 1))
    y = {s: stages + 1 - s for s in range(stages)}  # slot 0 on top, the two wait rows below
    for r in rows:
        (l0, l1), (c0, c1), s = r["load"], r["compute"], r["slot"]
        ax.broken_barh([(l0, l1 - l0)], (y[s] - 0.35, 0.7), color=f"C{s}", alpha=0.35)
        ax.broken_barh([(c0, c1 - c0)], (y[s] - 0.35, 0.7), color=f"C{s}")
        ax.text((l0 + l1) / 2, y[s], f"TMA k={r['k']}\nphase {r['phase']}", ha="center", va="center", fontsize=6)
        ax.text((c0 + c1) / 2, y[s], f"wgmma k={r['k']}", ha="center", va="center", fontsize=6, color="white")
        ax.plot([c1], [y[s] + 0.42], "v", color="k", ms=4)  # released: the slot's empty signal
        for lane, side, what in ((1, "producer_waits", "empty"), (0, "consumer_waits", "full")):
            if r[side]:
                w0, w1 = r[side]
                ax.broken_barh([(w0, w1 - w0)], (lane - 0.3, 0.6), color="C3", alpha=0.5)
                ax.text((w0 + w1) / 2, lane, f"{what}[{s}]", ha="center", va="center", fontsize=6)
    ax.set(yticks=[0, 1, *y.values()],
           yticklabels=["consumer waits", "producer waits", *(f"slot {s}" for s in y)],
           xlabel="time (one step's math = 1)",
           title=f"{stages}-slot ring, {steps} K steps, a load taking {M / C:.1f} of a step's math (v: slot released)")
    ax.tick_params(axis="y", labelsize=8)
    ax.title.set_fontsize(9)
    fig.tight_layout()
    plt.show()


# ---- the widget ----------------------------------------------------------------------------------

class PipelinedGemm(Widget):
    """The shared-memory ring, the timeline the model predicts, and the measured TFLOP/s."""
    lesson = LESSON
    sliders = dict(BLOCK_M=[64, 128], BLOCK_N=[128, 256], stages=STAGES, persistent=[False, True])
    defaults = dict(BLOCK_M=128, BLOCK_N=256, stages=3, persistent=True)
    title, base_label = "8192^3 fp16", "cuBLAS"

    def compile(self, cfg):
        if cfg["persistent"]:
            return gemm.compile_sm90(gemm.matmul_tma_persistent_kernel, cfg["BLOCK_M"], cfg["BLOCK_N"], 64,
                                     cfg["stages"], TMA_STORE=True)
        return gemm.compile_sm90(gemm.matmul_tma_kernel, cfg["BLOCK_M"], cfg["BLOCK_N"], 64, cfg["stages"])

    def budget(self, cfg, compiled):
        name = "gemm_tma_persistent" if cfg["persistent"] else "gemm_tma"
        return budget(name, dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=64, stages=cfg["stages"],
                                 epilogue="tma"), compiled=compiled.shared)

    def evidence(self, cfg, compiled):
        # the probes are measured once, by the lesson's recording, not at every slider move
        store = recorded_results.recorded()
        t = probe_times(store.select(LESSON, "model"))
        if not (t["math_only"] and t["loads_only"]):
            return ["no recorded probes: the timeline needs lesson 04's recording"]
        scale_c = cfg["BLOCK_M"] * cfg["BLOCK_N"] / (TILE["BLOCK_M"] * TILE["BLOCK_N"])   # math grows with the area
        scale_m = (cfg["BLOCK_M"] + cfg["BLOCK_N"]) / (TILE["BLOCK_M"] + TILE["BLOCK_N"])  # loads with the perimeter
        C = per_step_us(t["math_only"][1], store.sm_count) * scale_c
        M = per_step_us(t["loads_only"][cfg["stages"]], store.sm_count) * scale_m
        plot_timeline(C, M, cfg["stages"], title=f"model (from the 128x256x64 probes, {store.label}): "
                                                 f"C={C:.2f} us, M={M:.2f} us per step per SM")
        return []

    def query(self, cfg):
        tile = dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=64, stages=cfg["stages"])
        kernel = gemm.matmul_tma_persistent if cfg["persistent"] else gemm.matmul_tma
        return measure.Query(LESSON, "sweep", "gemm_tma", cfg, SHAPE, lambda a, b, c: kernel(a, b, **tile, out=c))

    def label(self, cfg):
        return (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x64, {cfg['stages']} stages"
                f"{', persistent' if cfg['persistent'] else ''}")


pipelined_gemm = PipelinedGemm()


# ---- the same kernel on Blackwell, compiled ahead of time (nothing of it runs: the course has no sm_100 GPU) --------

BLACKWELL_TILE = (128, 256, 64, 3)  # BLOCK_M, BLOCK_N, BLOCK_K, stages: section 5's persistent kernel
BLACKWELL_FAMILIES = ["cp.async.bulk.tensor load", "cp.async.bulk.tensor store", "mbarrier", "wgmma.mma_async",
                      "tcgen05 alloc", "tcgen05 mma", "tcgen05 commit", "tcgen05 ld", "tcgen05 st", "tcgen05 dealloc",
                      "UTMALDG", "UTMASTG", "SYNCS", "HGMMA", "UTCHMMA", "UTCBAR", "LDTM", "STTM"]


def blackwell_pair(num_ctas=1):
    """Section 5's persistent TMA GEMM compiled for sm_90 and for sm_100 (Blackwell): [Compiled, Compiled], named by
    target. ``num_ctas=2`` asks Triton for clusters of two programs."""
    import dataclasses

    from ..lab import aot
    out = []
    for target, name in ((aot.SM90, "sm_90"), (aot.SM100, "sm_100")):
        c = gemm.compile_sm90(gemm.matmul_tma_persistent_kernel, *BLACKWELL_TILE, target=target, TMA_STORE=True,
                              num_ctas=num_ctas)
        out.append(dataclasses.replace(c, name=name))
    return out


def mma_lines(compiled):
    """The lines of sm_100 code that issue and complete the MMA: the ``elect.sync`` that picks one thread, the first
    ``tcgen05.mma`` it predicates, the first ``tcgen05.commit`` (to an mbarrier) and ``tcgen05.ld`` (TMEM to
    registers)."""
    import re

    from ..lab import isa
    ops = list(isa.ptx_ops(compiled.ptx))
    mma = next(text for op, text in ops if op.startswith("tcgen05.mma"))
    pred = re.match(r"@!?(%p\d+)", mma)
    elect = next((text for op, text in ops if op.startswith("elect.sync") and pred and pred.group(1) + "," in text),
                 None)
    first = lambda prefix: next(text for op, text in ops if op.startswith(prefix))  # noqa: E731
    return [line for line in (elect, mma, first("tcgen05.commit"), first("tcgen05.ld")) if line]


def two_cta(compiled):
    """(the cluster size the PTX declares, whether any MMA runs on a pair of CTAs: ``cta_group::2``)."""
    import re
    size = re.search(r"\.reqnctapercluster\s+(\d+)", compiled.ptx)
    return int(size.group(1)) if size else 1, "cta_group::2" in compiled.ptx

RUNS = {"model": measure_model, "trace": measure_trace, "steps": measure_steps, "shapes": measure_shapes,
        "launch": measure_launch, "sweep": pipelined_gemm.sweep}
