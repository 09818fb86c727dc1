"""Lesson 02: asynchronous copies. The pointer GEMM over stage counts against cuBLAS, what
num_stages changes in its code, and a copy loop pipelined by tl.range."""
import matplotlib.pyplot as plt
import torch

from . import DEVICE, MODE, copy, device_name, gemm
from .lab import aot, bench, plots, smem
from .lab.widgets import sliders
from .roofline import copy_bytes, gemm_flops

SHAPE = (8192, 8192, 8192)
TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
STAGES = [1, 2, 3, 4]
COPY_SHAPE = (16384, 16384)


def compile_gemm(BLOCK_M, BLOCK_N, BLOCK_K, stages, shape=SHAPE):
    """The sm_90 code of the pointer GEMM for this configuration (compiling reads only shapes and
    alignment, so uninitialised operands do)."""
    M, N, K = shape
    a, b, c = (torch.empty(*s, device=DEVICE, dtype=torch.float16) for s in ((M, K), (K, N), (M, N)))
    _, args, meta = gemm.launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    compiled = aot.compile_sm90(gemm.matmul_kernel, *args, **meta)
    compiled.name = f"{BLOCK_M}x{BLOCK_N}x{BLOCK_K} s{stages}"
    return compiled


def budget(BLOCK_M, BLOCK_N, BLOCK_K, stages, compiled=None):
    return smem.Budget(stages, smem.gemm_stage_bytes(BLOCK_M, BLOCK_N, BLOCK_K),
                       compiled=compiled.shared if compiled else None)


def measure_stages(tile=TILE, stages=STAGES):
    """cuBLAS and the pointer GEMM at each stage count, interleaved, 8192^3 fp16. Returns records."""
    a, b, c = bench.gemm_operands(*SHAPE)
    fns = {"cublas_gemm": lambda: torch.matmul(a, b, out=c)}
    for s in stages:
        fns[s] = (lambda s=s: gemm.matmul(a, b, num_stages=s, out=c, **tile))
    ms = bench.checked_interleaved(fns, c, torch.matmul(a, b), tol=1e-2)
    flops = gemm_flops(*SHAPE)
    return [bench.record("02", "cublas_gemm" if n == "cublas_gemm" else "gemm_pointer", t, shape=SHAPE, flops=flops,
                         config={} if n == "cublas_gemm" else {**tile, "stages": n},
                         baseline=None if n == "cublas_gemm" else "cublas_gemm") for n, t in ms.items()]


def stages_result():
    """({stages: TFLOP/s}, cuBLAS TFLOP/s, label): live or recorded."""
    if MODE != "cpu":
        recs = measure_stages()
        where = f"measured live on {device_name()}"
    else:
        rec = bench.Recorded()
        recs = [r for r in rec.all("02") if r["shape"] == list(SHAPE) and r["name"] in ("gemm_pointer", "cublas_gemm")
                and (r["name"] == "cublas_gemm" or all(r["config"].get(k) == v for k, v in TILE.items()))]
        where = rec.label
    pointer = {r["config"]["stages"]: r["tflops"] for r in recs if r["name"] == "gemm_pointer"}
    cublas = next(r["tflops"] for r in recs if r["name"] == "cublas_gemm")
    return dict(sorted(pointer.items())), cublas, where


def copy_loop_variants(x, y):
    v = {"torch_copy": lambda: y.copy_(x), "copy_tile": lambda: copy.copy_tile(x, out=y)}
    for s in STAGES:
        v[f"copy_loop_s{s}"] = (lambda s=s: copy.copy_loop(x, out=y, STAGES=s))
    return v


def measure_copy_loop():
    x = bench.randn(*COPY_SHAPE)
    y = torch.empty_like(x)
    ms = bench.checked_interleaved(copy_loop_variants(x, y), y, x)
    return [bench.record("02", n, t, shape=COPY_SHAPE, nbytes=copy_bytes(x),
                         config={"STAGES": int(n[-1])} if n.startswith("copy_loop") else {},
                         baseline=None if n == "torch_copy" else "torch_copy") for n, t in ms.items()]


def copy_loop_result():
    if MODE != "cpu":
        recs, where = measure_copy_loop(), f"measured live on {device_name()}"
    else:
        rec = bench.Recorded()
        recs, where = [r for r in rec.all("02") if r["shape"] == list(COPY_SHAPE)], rec.label
    return {r["name"]: r["gbps"] for r in recs}, where


@sliders(defaults=dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, stages=3),
         BLOCK_M=[64, 128], BLOCK_N=[64, 128, 256], BLOCK_K=[32, 64, 128], stages=[1, 2, 3, 4])
def gemm_stages(BLOCK_M, BLOCK_N, BLOCK_K, stages):
    """Widget: shared-memory budget, the async copies in the code, and TFLOP/s against cuBLAS."""
    compiled = compile_gemm(BLOCK_M, BLOCK_N, BLOCK_K, stages)
    b = budget(BLOCK_M, BLOCK_N, BLOCK_K, stages, compiled)
    print(b.text())
    b.require()
    counts = compiled.counts()
    print(f"sm_90 code: {counts['cp.async']} cp.async (LDGSTS), {counts['ld.global']} plain ld.global, "
          f"{counts['cp.async.wait_group']} cp.async.wait_group, {counts['wgmma.mma_async']} wgmma.mma_async")
    config = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, stages=stages)
    a, b_, c = bench.gemm_operands(*SHAPE) if MODE != "cpu" else (None, None, None)
    rate, base, where = bench.versus(lambda: gemm.matmul(a, b_, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=c),
                                     lambda: torch.matmul(a, b_, out=c),
                                     rate=lambda ms: bench.tflops(gemm_flops(*SHAPE), ms), lesson="02",
                                     name="gemm_sweep", config=config, shape=SHAPE, base_name="cublas_gemm",
                                     unit="tflops")
    plots.report_versus("8192^3 fp16", f"{BLOCK_M}x{BLOCK_N}x{BLOCK_K}, {stages} stages", rate, "cuBLAS", base,
                        "TFLOP/s", where)


def sweep_configs():
    from .lab.widgets import combinations
    return list(combinations(gemm_stages))


def benchmarks():
    """Lesson 02's records: the stage comparison (interleaved with cuBLAS), the copy loop, the sweep."""
    records = measure_stages() + measure_copy_loop()
    a, b, c = bench.gemm_operands(*SHAPE)
    lim = smem.limit()
    for cfg in sweep_configs():
        compiled = compile_gemm(**cfg)
        if compiled.shared > lim:
            continue  # refused by the widget with the budget message; nothing to time
        ms = bench.median_ms(lambda: gemm.matmul(a, b, cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["stages"],
                                                 out=c))
        records.append(bench.record("02", "gemm_sweep", ms, shape=SHAPE, config=cfg, flops=gemm_flops(*SHAPE),
                                    baseline="cublas_gemm"))
    return records


def plot_stages(pointer, cublas, where):
    ax = plots.throughput(list(pointer), {"pointer GEMM 128x256x64": list(pointer.values())}, "num_stages",
                          "TFLOP/s", baseline=("cuBLAS", cublas), title=f"8192^3 fp16 - {where}")
    ax.set_ylim(0, cublas * 1.15)
    plt.show()
