"""Lesson 04: double buffering and pipelining. Measure the math time C and the load time M of a TMA
GEMM with probes that switch one of them off, predict every stage count from them, compare with the
measured kernel; then the steps beyond: persistent grid, TMA-store epilogue, warp specialisation,
and the course's best GEMM against cuBLAS over six shapes."""
import math

import torch

from ..lab import bench, measure, plots, results as recorded_results, smem
from ..lab.widgets import REFUSALS, Widget
from ..ops import gemm

LESSON = "04"
SHAPE = (8192, 8192, 8192)
TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
STAGES = [1, 2, 3, 4]
SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (4096, 14336, 4096), (8192, 4096, 14336), (16384, 4096, 4096)]  # M, N, K; the last three LLM-like
PROBES = {"full": (True, True), "math_only": (False, True), "loads_only": (True, False),
          "consume_only": (False, False)}  # (LOADS, MATH); consume_only: what the loads-only probe adds


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


def step_variants(a, b, c):
    """[(name, config, launch)]: cuBLAS, then each step of the lesson's GEMM at the same tile."""
    v = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c))]
    for s in (3, 4):
        v.append(("gemm_tma", {**TILE, "stages": s}, lambda s=s: gemm.matmul_tma(a, b, stages=s, out=c, **TILE)))
        for epilogue in ("tma", "pointer"):
            v.append(("gemm_tma_persistent", {**TILE, "stages": s, "epilogue": epilogue},
                      lambda s=s, e=epilogue: gemm.matmul_tma_persistent(a, b, stages=s, tma_store=e == "tma", out=c,
                                                                        **TILE)))
    return v


def _fitting(variants):
    """The variants that launch on this GPU; the others are left out, and said."""
    kept = []
    for name, cfg, fn in variants:
        try:
            fn()
            kept.append((name, cfg, fn))
        except REFUSALS as e:
            print(f"left out: {name} {cfg}: {e}")
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
    ax.set(yticks=[0.5, 1.5], yticklabels=["compute", "load"], xlabel="time per step (us)",
           title=title or f"{stages} stage(s): {comp[-1][1]:.1f} us for 8 steps")
    if own:
        plots.show(fig)


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
        # the persistent kernel stages its output tile in shared memory for the TMA store, apart from the
        # ring (the next tile's loads are already in flight); the one-tile kernel reuses the ring for it
        out_tile = cfg["BLOCK_M"] * cfg["BLOCK_N"] * 2 if cfg["persistent"] else 0
        return smem.Budget(cfg["stages"], smem.gemm_stage_bytes(cfg["BLOCK_M"], cfg["BLOCK_N"], 64),
                           output_tile=out_tile, compiled=compiled.shared)

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

RUNS = {"model": measure_model, "steps": measure_steps, "shapes": measure_shapes, "sweep": pipelined_gemm.sweep}
