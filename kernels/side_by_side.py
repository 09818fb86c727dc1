"""Lesson 05: the TileLang equivalent. The copy and the GEMM of lessons 01-04 written in TileLang,
the CUDA it emits read line by line, and one run that times TileLang, the course's Triton kernels,
cuBLAS and torch on the same shapes."""
import difflib
import re
import time

import matplotlib.pyplot as plt
import torch

from . import MODE, copy, device_name, gemm, tilelang_kernels as tk
from .lab import bench, check, plots, smem
from .lab.widgets import sliders
from .roofline import copy_bytes, gemm_flops

GEMM_SHAPE = (8192, 8192, 8192)
COPY_SHAPE = (16384, 16384)
TILE = dict(block_M=128, block_N=256, block_K=64)
STAGES = [1, 2, 3, 4]

# what to look for in the emitted CUDA, and what each one is
MARKERS = {"tma_load": "TMA load (cp.async.bulk.tensor, global -> shared)",
           "tma_store": "TMA store (shared -> global)",
           "prefetch_tma_descriptor": "tensor map prefetched into the descriptor cache",
           ".wait(": "wait on an mbarrier phase",
           "expect_transaction": "barrier told how many bytes to expect",
           "cp_async_gs": "cp.async, 16 bytes per thread (lesson 02)",
           "cp_async_wait": "wait until at most N cp.async groups are in flight",
           "wgmma_ss": "wgmma, both operands from shared memory",
           "warpgroup_reg_dealloc": "producer warpgroup gives registers back (setmaxnreg)",
           "*(uint4*)": "plain 16-byte vector access"}


def counts(src):
    """{marker: occurrences} in emitted CUDA source (static counts, like isa.count_ptx for PTX)."""
    return {m: src.count(m) for m in MARKERS}


def shared_layout(src):
    """Lines that place buffers in dynamic shared memory: where each ring starts."""
    return [line.strip() for line in src.splitlines() if "buf_dyn_shmem" in line and "void*" in line]


def diff(a, b, names=("a", "b")):
    """Unified diff of two sources, only the lines that differ and two of context."""
    return "\n".join(difflib.unified_diff(a.splitlines(), b.splitlines(), *names, n=1, lineterm=""))


def timed_compile(kind, **cfg):
    """Compile (or fetch from this session's cache) with a line of progress: TileLang compiles take seconds."""
    if tk.is_compiled(kind, **cfg):
        print(f"{kind} {cfg}: compiled earlier in this session")
        return tk.compile(kind, **cfg)
    print(f"{kind} {cfg}: compiling for sm_90a ...", end=" ", flush=True)
    t = time.time()
    k = tk.compile(kind, **cfg)
    print(f"{time.time() - t:.1f} s")
    return k


# ---- the run: TileLang against Triton, cuBLAS and torch ------------------------------------------

def gemm_variants(a, b, c):
    """name -> (launch, config): TileLang at each stage count and two ablations, the course's Triton
    GEMMs of lessons 02-04 at their tiles, and cuBLAS."""
    v = {"cublas_gemm": (lambda: torch.matmul(a, b, out=c), {})}
    for s in STAGES:
        v[f"tilelang_gemm@{s}"] = (lambda s=s: tk.gemm(a, b, out=c, stages=s, **TILE), {**TILE, "stages": s})
    v["tilelang_gemm_cp_async@3"] = (lambda: tk.gemm(a, b, out=c, stages=3, tma=False, **TILE),
                                     {**TILE, "stages": 3, "tma": False})
    for p in (0, 8):  # block order: row by row, and narrower panels than the default 16
        v[f"tilelang_gemm_panel{p}@3"] = (lambda p=p: tk.gemm(a, b, out=c, stages=3, panel=p, **TILE),
                                          {**TILE, "stages": 3, "panel": p})
    t = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
    v["triton_gemm_pointer@4"] = (lambda: gemm.matmul(a, b, num_stages=4, out=c, **t), {**t, "stages": 4})
    v["triton_gemm_tma@3"] = (lambda: gemm.matmul_tma(a, b, num_stages=3, out=c, **t), {**t, "stages": 3})
    v["triton_gemm_tma_persistent@3"] = (lambda: gemm.matmul_tma_persistent(a, b, num_stages=3, out=c, **t),
                                         {**t, "stages": 3})
    return v


def measure_gemm():
    a, b, c = bench.gemm_operands(*GEMM_SHAPE)
    variants = gemm_variants(a, b, c)
    for name, (_, cfg) in variants.items():
        if name.startswith("tilelang"):  # compile before the timed rounds, with progress
            timed_compile("gemm", M=GEMM_SHAPE[0], N=GEMM_SHAPE[1], K=GEMM_SHAPE[2], **cfg)
    ms = bench.checked_interleaved({k: v[0] for k, v in variants.items()}, c, torch.matmul(a, b), tol=1e-2)
    return [bench.record("05", name.split("@")[0], t, shape=GEMM_SHAPE, flops=gemm_flops(*GEMM_SHAPE),
                         config=variants[name][1], baseline=None if name == "cublas_gemm" else "cublas_gemm")
            for name, t in ms.items()]


def measure_copy():
    x = bench.randn(*COPY_SHAPE)
    y = torch.empty_like(x)
    fns = {"torch_copy": lambda: y.copy_(x),
           "tilelang_copy": lambda: tk.copy(x, out=y),
           "triton_copy_tile": lambda: copy.copy_tile(x, out=y),
           "triton_copy_tma_loop": lambda: copy.copy_tma_loop(x, out=y, STAGES=4)}
    timed_compile("copy", M=COPY_SHAPE[0], N=COPY_SHAPE[1])
    ms = bench.checked_interleaved(fns, y, x)
    return [bench.record("05", n, t, shape=COPY_SHAPE, nbytes=copy_bytes(x),
                         baseline=None if n == "torch_copy" else "torch_copy") for n, t in ms.items()]


def results(kind):
    """Records of 'gemm' or 'copy': measured now (Hopper GPU) or recorded (elsewhere), and a label."""
    if MODE == "hopper":
        return {"gemm": measure_gemm, "copy": measure_copy}[kind](), f"measured live on {device_name()}"
    rec = bench.Recorded()
    shape = list(GEMM_SHAPE if kind == "gemm" else COPY_SHAPE)
    return [r for r in rec.all("05") if r["shape"] == shape and not r["name"].endswith(("_sweep", "_sweep_run"))], \
        rec.label


def table(records, unit):
    """Rows (name, config, rate, ratio to the baseline) sorted fastest first; the baseline included."""
    base = next(r for r in records if "baseline" not in r)
    rows = [(r["name"], r["config"], r[unit], r[unit] / base[unit]) for r in records]
    return sorted(rows, key=lambda row: -row[2])


def print_table(records, unit):
    label = {"tflops": "TFLOP/s", "gbps": "GB/s"}[unit]
    for name, cfg, rate, ratio in table(records, unit):
        extra = ", ".join(f"{k}={v}" for k, v in cfg.items() if k not in ("block_M", "block_N", "block_K",
                                                                          "BLOCK_M", "BLOCK_N", "BLOCK_K"))
        print(f"{name:30s} {extra:22s} {rate:7.0f} {label}  {ratio:5.2f}x")


def plot_table(records, unit, title):
    rows = table(records, unit)[::-1]
    names = [f"{n} {c.get('stages', '')}".strip() + ("" if c.get("tma", True) else " (no TMA)")
             + (f" panel {c['panel']}" if "panel" in c else "") for n, c, _, _ in rows]
    colors = ["grey" if n.startswith(("cublas", "torch")) else "C1" if n.startswith("tilelang") else "C0"
              for n, *_ in rows]
    _, ax = plt.subplots(figsize=(6.4, 0.28 * len(rows) + 1))
    ax.barh(names, [r[2] for r in rows], color=colors)
    ax.set(xlabel={"tflops": "TFLOP/s", "gbps": "GB/s"}[unit], title=title)
    ax.tick_params(axis="y", labelsize=8)
    plt.show()


# ---- the widget ----------------------------------------------------------------------------------

@sliders(defaults=dict(BLOCK_M=128, BLOCK_N=256, stages=3), BLOCK_M=[64, 128], BLOCK_N=[128, 256], stages=STAGES)
def tilelang_gemm(BLOCK_M, BLOCK_N, stages):
    """Widget: compile the TileLang GEMM for this tile and stage count, show what the CUDA holds, and
    time it against cuBLAS (Hopper GPU) or show the recorded sweep (elsewhere)."""
    cfg = sweep_config(dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, stages=stages))
    budget = smem.Budget(stages, smem.gemm_stage_bytes(BLOCK_M, BLOCK_N, 64))
    print(budget.text())
    budget.require()
    src = timed_compile("gemm", M=GEMM_SHAPE[0], N=GEMM_SHAPE[1], K=GEMM_SHAPE[2], **cfg).get_kernel_source()
    n = counts(src)
    threads = re.search(r"__launch_bounds__\((\d+)", src).group(1)
    print(f"CUDA: {n['tma_load']} tma_load, {n['.wait(']} barrier waits, {n['wgmma_ss']} wgmma call sites, "
          f"{threads} threads per block (256 asked + a producer warpgroup)")
    print("buffers in dynamic shared memory (C_s reuses the ring once the K loop is done):")
    print("\n".join("  " + line for line in shared_layout(src)))
    a, b, c = bench.gemm_operands(*GEMM_SHAPE) if MODE == "hopper" else (None, None, None)
    rate, base, where = bench.versus(lambda: tk.gemm(a, b, out=c, **cfg), lambda: torch.matmul(a, b, out=c),
                                     rate=lambda ms: bench.tflops(gemm_flops(*GEMM_SHAPE), ms), lesson="05",
                                     name="tilelang_gemm_sweep", config=cfg, shape=GEMM_SHAPE,
                                     base_name="cublas_gemm_sweep_run", unit="tflops")
    plots.report_versus("8192^3 fp16", f"TileLang {BLOCK_M}x{BLOCK_N}x64, {stages} stages", rate, "cuBLAS", base,
                        "TFLOP/s", where)


def sweep_config(slider_values):
    """Slider values -> the TileLang GEMM's keyword arguments (and the config its records carry)."""
    return dict(block_M=slider_values["BLOCK_M"], block_N=slider_values["BLOCK_N"], block_K=64,
                stages=slider_values["stages"])


def sweep_configs():
    from .lab.widgets import combinations
    return [sweep_config(c) for c in combinations(tilelang_gemm)]


def benchmarks():
    records = measure_gemm() + measure_copy()
    a, b, c = bench.gemm_operands(*GEMM_SHAPE)
    ref = torch.matmul(a, b)
    records.append(bench.record("05", "cublas_gemm_sweep_run", bench.median_ms(lambda: torch.matmul(a, b, out=c)),
                                shape=GEMM_SHAPE, flops=gemm_flops(*GEMM_SHAPE)))
    for cfg in sweep_configs():
        timed_compile("gemm", M=GEMM_SHAPE[0], N=GEMM_SHAPE[1], K=GEMM_SHAPE[2], **cfg)
        c.fill_(float("nan"))
        tk.gemm(a, b, out=c, **cfg)
        assert check.rel_err(c, ref) < 1e-2, f"tilelang_gemm {cfg} computed a wrong result"
        ms = bench.median_ms(lambda: tk.gemm(a, b, out=c, **cfg))
        records.append(bench.record("05", "tilelang_gemm_sweep", ms, shape=GEMM_SHAPE, config=cfg,
                                    flops=gemm_flops(*GEMM_SHAPE), baseline="cublas_gemm_sweep_run"))
    return records
