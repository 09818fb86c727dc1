"""Lesson 04: double buffering and pipelining. Measure the math time C and the load time M of a TMA
GEMM with probes that switch one of them off, predict every stage count from them, compare with the
measured kernel; then the steps beyond: persistent grid, TMA-store epilogue, warp specialisation,
and the course's best GEMM against cuBLAS over six shapes."""
import math

import matplotlib.pyplot as plt
import torch

from . import DEVICE, MODE, device_name, gemm
from .lab import aot, bench, plots, smem
from .lab.widgets import sliders
from .roofline import gemm_flops

SHAPE = (8192, 8192, 8192)
TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
STAGES = [1, 2, 3, 4]
SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (4096, 14336, 4096), (8192, 4096, 14336), (16384, 4096, 4096)]  # M, N, K; the last three LLM-like
PROBES = {"full": (True, True), "math_only": (False, True), "loads_only": (True, False),
          "consume_only": (False, False)}  # (LOADS, MATH); consume_only: what the loads-only probe adds


def _records(ms, shape, configs, baseline="cublas_gemm"):
    return [bench.record("04", name if name == "cublas_gemm" else name.split("@")[0], t, shape=shape,
                         flops=gemm_flops(*shape), config=configs.get(name, {}),
                         baseline=None if name == "cublas_gemm" else baseline) for name, t in ms.items()]


def measure_model():
    """Probes (full / math only / loads only) at every stage count, and cuBLAS, interleaved."""
    a, b, c = bench.gemm_operands(*SHAPE)
    ref = torch.matmul(a, b)
    fns, configs = {"cublas_gemm": lambda: torch.matmul(a, b, out=c)}, {}
    for s in STAGES:
        for probe, (loads, mth) in PROBES.items():
            key = f"probe_{probe}@{s}"
            fns[key] = (lambda s=s, loads=loads, mth=mth: gemm.matmul_tma_probe(a, b, s, loads, mth, out=c, **TILE))
            configs[key] = {**TILE, "stages": s}
    ms = bench.checked_interleaved(fns, c, ref, tol=1e-2, checked=[f"probe_full@{s}" for s in STAGES])
    return _records(ms, SHAPE, configs)


def step_variants(a, b, c):
    """name -> (launch, config): each step of the lesson's GEMM, same tile."""
    v = {"cublas_gemm": (lambda: torch.matmul(a, b, out=c), {})}
    for s in (3, 4):
        v[f"gemm_tma@{s}"] = (lambda s=s: gemm.matmul_tma(a, b, num_stages=s, out=c, **TILE), {**TILE, "stages": s})
        v[f"gemm_tma_persistent@{s}"] = (lambda s=s: gemm.matmul_tma_persistent(a, b, num_stages=s, out=c, **TILE),
                                         {**TILE, "stages": s, "epilogue": "tma"})
        v[f"gemm_tma_persistent_ptrstore@{s}"] = (
            lambda s=s: gemm.matmul_tma_persistent(a, b, num_stages=s, tma_store=False, out=c, **TILE),
            {**TILE, "stages": s, "epilogue": "pointer"})
    return v


def _fits(fn):
    try:
        fn()
        return True
    except Exception as e:  # a step that does not fit this GPU is left out, and said
        print(f"left out: {e}")
        return False


def measure_steps():
    shape = SHAPE
    a, b, c = bench.gemm_operands(*shape)
    ref = torch.matmul(a, b)
    variants = {k: v for k, v in step_variants(a, b, c).items() if _fits(v[0])}
    ms = bench.checked_interleaved({k: v[0] for k, v in variants.items()}, c, ref, tol=1e-2)
    return _records(ms, shape, {k: v[1] for k, v in variants.items()})


def measure_shapes():
    """Every step variant and the lesson-02 pointer GEMM on six shapes, each against cuBLAS in its round."""
    records = []
    for shape in SHAPES:
        a, b, c = bench.gemm_operands(*shape)
        ref = torch.matmul(a, b)
        variants = {k: v for k, v in step_variants(a, b, c).items()
                    if not k.startswith("gemm_tma_persistent_ptrstore")}
        variants["gemm_pointer@4"] = (lambda: gemm.matmul(a, b, num_stages=4, out=c, **TILE), {**TILE, "stages": 4})
        variants = {k: v for k, v in variants.items() if _fits(v[0])}
        ms = bench.checked_interleaved({k: v[0] for k, v in variants.items()}, c, ref, tol=1e-2)
        records += [dict(r, name=r["name"] + "_shapes") if r["name"] != "cublas_gemm" else dict(r, name="cublas_gemm_shapes")
                    for r in _records(ms, shape, {k: v[1] for k, v in variants.items()}, baseline="cublas_gemm_shapes")]
    return records


def versus_cublas(records):
    """[(shape, best course record, cuBLAS record)] per shape, in the order measured."""
    rows = []
    for shape in dict.fromkeys(tuple(r["shape"]) for r in records):
        rs = [r for r in records if tuple(r["shape"]) == shape]
        cublas = next(r for r in rs if r["name"] == "cublas_gemm_shapes")
        rows.append((shape, max((r for r in rs if r is not cublas), key=lambda r: -r["ms"]), cublas))
    return rows


# ---- the model ----------------------------------------------------------------------------------

def probe_times(records):
    """{probe: {stages: ms}} from probe records."""
    out = {p: {} for p in PROBES}
    for r in records:
        if r["name"].startswith("probe_"):
            out[r["name"][len("probe_"):]][r["config"]["stages"]] = r["ms"]
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


def results(kind):
    """Records of 'model', 'steps' or 'shapes': measured now (GPU) or recorded (CPU), and a label."""
    if MODE != "cpu":
        return {"model": measure_model, "steps": measure_steps, "shapes": measure_shapes}[kind](), \
            f"measured live on {device_name()}"
    rec = bench.Recorded()
    pick = {"model": lambda r: r["name"].startswith("probe_") or (r["name"] == "cublas_gemm"),
            "steps": lambda r: r["name"].startswith("gemm_") and not r["name"].endswith(("_shapes", "_sweep"))
            or r["name"] == "cublas_gemm",
            "shapes": lambda r: r["name"].endswith("_shapes")}[kind]
    return [r for r in rec.all("04") if pick(r)], rec.label


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
    own = ax is None  # draw and show a figure of its own, or fill the caller's axes
    if own:
        _, ax = plt.subplots(figsize=(7, 1.8))
    for k, ((l0, l1), (c0, c1)) in enumerate(zip(load, comp)):
        ax.broken_barh([(l0, l1 - l0)], (1.1, 0.8), color=f"C{k % 10}", alpha=0.6)
        ax.broken_barh([(c0, c1 - c0)], (0.1, 0.8), color=f"C{k % 10}")
        ax.text((c0 + c1) / 2, 0.5, str(k), ha="center", va="center", fontsize=7, color="white")
    ax.set(yticks=[0.5, 1.5], yticklabels=["compute", "load"], xlabel="time per step (us)",
           title=title or f"{stages} stage(s): {comp[-1][1]:.1f} us for 8 steps")
    if own:
        plt.show()


# ---- the widget ----------------------------------------------------------------------------------

@sliders(defaults=dict(BLOCK_M=128, BLOCK_N=256, stages=3, persistent=True),
         BLOCK_M=[64, 128], BLOCK_N=[128, 256], stages=STAGES, persistent=[False, True])
def pipelined_gemm(BLOCK_M, BLOCK_N, stages, persistent):
    """Widget: the shared-memory ring, the timeline the model predicts, and the measured TFLOP/s."""
    tile = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=64)
    compiled = compile_config(dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, stages=stages, persistent=persistent))
    budget = smem.Budget(stages, smem.gemm_stage_bytes(**tile), compiled=compiled.shared)
    print(budget.text())
    budget.require()
    rec = bench.Recorded()  # the probes are measured once, by the lesson's benchmark, not at every slider move
    t = probe_times(rec.all("04"))
    if t["math_only"] and t["loads_only"]:
        scale_c = BLOCK_M * BLOCK_N / (TILE["BLOCK_M"] * TILE["BLOCK_N"])      # math grows with the tile's area
        scale_m = (BLOCK_M + BLOCK_N) / (TILE["BLOCK_M"] + TILE["BLOCK_N"])     # loads with its perimeter
        ref_steps = math.prod(s // b for s, b in zip(SHAPE, TILE.values()))  # tile-steps, shared by 132 SMs
        C = t["math_only"][1] / ref_steps * scale_c * 1e3 * 132
        M = t["loads_only"][stages] / ref_steps * scale_m * 1e3 * 132
        plot_timeline(C, M, stages, title=f"model (from the 128x256x64 probes, {rec.label}): C={C:.2f} us, "
                                          f"M={M:.2f} us per step per SM")
    config = {**tile, "stages": stages, "persistent": persistent}
    a, b, c = bench.gemm_operands(*SHAPE) if MODE != "cpu" else (None, None, None)
    launch = (lambda: gemm.matmul_tma_persistent(a, b, num_stages=stages, out=c, **tile)) if persistent else \
        (lambda: gemm.matmul_tma(a, b, num_stages=stages, out=c, **tile))
    rate, base, where = bench.versus(launch, lambda: torch.matmul(a, b, out=c),
                                     rate=lambda ms: bench.tflops(gemm_flops(*SHAPE), ms), lesson="04",
                                     name="gemm_sweep", config=config, shape=SHAPE, base_name="cublas_gemm_sweep_run",
                                     unit="tflops")
    plots.report_versus("8192^3 fp16", f"{BLOCK_M}x{BLOCK_N}x64, {stages} stages{', persistent' if persistent else ''}",
                        rate, "cuBLAS", base, "TFLOP/s", where)


def sweep_configs():
    from .lab.widgets import combinations
    return list(combinations(pipelined_gemm))


def compile_config(cfg, a=None, b=None, c=None):
    """The sm_90 code of a widget configuration (operands only give shapes and alignment)."""
    if a is None:
        a = b = c = torch.empty(*SHAPE[:2], dtype=torch.float16, device=DEVICE)
    _, args, meta = gemm.launch_args(a, b, c, cfg["BLOCK_M"], cfg["BLOCK_N"], 64, cfg["stages"])
    kernel = gemm.matmul_tma_persistent_kernel if cfg["persistent"] else gemm.matmul_tma_kernel
    return aot.compile_sm90(kernel, *args, **({"TMA_STORE": True} if cfg["persistent"] else {}), **meta)


def fits(cfg):
    """Does the configuration's shared memory (ring, and the output tile if persistent) fit one block?"""
    return compile_config(cfg).shared <= smem.limit()


def benchmarks():
    records = measure_model() + measure_steps() + measure_shapes()
    a, b, c = bench.gemm_operands(*SHAPE)
    records.append(bench.record("04", "cublas_gemm_sweep_run", bench.median_ms(lambda: torch.matmul(a, b, out=c)),
                                shape=SHAPE, flops=gemm_flops(*SHAPE)))
    for cfg in sweep_configs():
        tile = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N")}
        if not fits(cfg):
            continue  # refused by the widget: the ring and the epilogue buffer do not fit
        fn = gemm.matmul_tma_persistent if cfg["persistent"] else gemm.matmul_tma
        ms = bench.median_ms(lambda: fn(a, b, num_stages=cfg["stages"], out=c, BLOCK_K=64, **tile))
        records.append(bench.record("04", "gemm_sweep", ms, shape=SHAPE, config=cfg, flops=gemm_flops(*SHAPE),
                                    baseline="cublas_gemm_sweep_run"))
    return records
