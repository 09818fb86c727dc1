"""Lesson 05: the TileLang equivalent. The copy and the GEMM of lessons 01-04 written in TileLang,
the CUDA it emits read line by line, and one run that times TileLang, the course's Triton kernels,
cuBLAS and torch on the same shapes."""
import difflib
import re
import time

import matplotlib.pyplot as plt
import torch

from ..lab import bench, measure, smem
from ..lab import swizzle as lab_swizzle
from ..lab.widgets import Widget
from ..ops import copy, gemm, tilelang_kernels as tk

LESSON = "05"
GEMM_SHAPE = (8192, 8192, 8192)
COPY_SHAPE = (16384, 16384)
TILE = dict(block_M=128, block_N=256, block_K=64)
STAGES = [1, 2, 3, 4]
NEEDS = "hopper"  # TileLang's code here is sm_90a: it runs on a Hopper GPU only

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
    """How many statements of the generated CUDA hold each marker: one per line, and a marker followed by
    a letter or ``_`` is another name (``tma_store`` is not ``tma_store_arrive``)."""
    return {m: sum(1 for line in src.splitlines() if re.search(re.escape(m) + r"(?![A-Za-z_])", line))
            for m in MARKERS}


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


# ---- the swizzle: how a tile lands in shared-memory banks ------------------------------------------

SWIZZLES = {lab_swizzle.ENUM[s]: lab_swizzle.NAMES[s] for s in lab_swizzle.SPANS}  # CUtensorMapSwizzle's values


def tensor_maps(host_src):
    """[(box dims, innermost first; swizzle name)] for each tensor map the host code encodes. TileLang 0.1.15
    passes cuTensorMapEncodeTiled's arguments in its order (map, data type, rank, address, the rank dims,
    the rank strides, the box, the element strides, interleave, swizzle, L2 promotion, OOB fill:
    ``src/cuda/runtime.cc``), one integer per stack slot; the last value written to a slot before each
    call is the one passed."""
    maps = []
    for chunk in host_src.split("TVMFFIFunctionCall(__tvm_tensormap_create_tiled_packed")[:-1]:
        args = {}
        for i, v in re.findall(r"stack_ffi_any\)\[(\d+)\]\.v_int64\) = \(\(int64_t\)(-?\d+)\)", chunk):
            args[int(i)] = int(v)
        rank = args[2]
        box = [args[4 + 2 * rank + i] for i in range(rank)]
        maps.append((box, SWIZZLES.get(args[4 + 4 * rank + 1], "another swizzle")))
    return maps


def bank_groups(rows=8, chunks=8, swizzle=True):
    """For a tile whose rows are ``chunks`` x 16 bytes (8 chunks: 64 fp16), the bank group (4 banks, 16 bytes)
    each 16-byte chunk of each row lands in: chunk c of row r at group c, or c XOR (r % 8) with the
    128-byte swizzle (``kernels.lab.swizzle``, which lesson 06 draws for every mode)."""
    return lab_swizzle.chunk_groups(128 if swizzle else 0, rows, chunks * lab_swizzle.CHUNK)


def plot_banks(rows=8):
    """Two grids side by side, unswizzled and with the 128-byte swizzle: a cell per 16-byte chunk of a
    row (8 per 128-byte row), coloured and numbered by the bank group it lands in; column 0 outlined,
    the chunks a column read takes from eight rows."""
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.9))
    for ax, sw in zip(axes, (False, True)):
        g = bank_groups(rows, swizzle=sw)
        ax.imshow(g, cmap="tab10", vmin=0, vmax=9, alpha=0.75)
        for r in range(rows):
            for c in range(8):
                ax.text(c, r, g[r][c], ha="center", va="center", fontsize=7)
        ax.add_patch(plt.Rectangle((-0.5, -0.5), 1, rows, fill=False, lw=2))
        hit = len({row[0] for row in g})
        ax.set(xticks=range(8), yticks=range(rows), xlabel="16-byte chunk of the row (8 fp16 each)",
               ylabel="row of the tile",
               title=f"{'128-byte swizzle' if sw else 'no swizzle'}: column 0 hits {hit} bank group{'s' * (hit > 1)}")
        ax.title.set_fontsize(9)
        ax.xaxis.label.set_fontsize(8)
        ax.yaxis.label.set_fontsize(8)
    fig.tight_layout()
    plt.show()


# ---- the run: TileLang against Triton, cuBLAS and torch ------------------------------------------

def gemm_variants(a, b, c):
    """[(name, config, launch)]: cuBLAS first, TileLang at each stage count and three ablations, the
    course's Triton GEMMs of lessons 02-04 at their tiles."""
    v = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c))]
    tilelang = [{"stages": s} for s in STAGES] + [{"stages": 3, "tma": False}] + \
        [{"stages": 3, "panel": p} for p in (0, 8)]  # block order: row by row, and narrower panels than 16
    v += [("tilelang_gemm", {**TILE, **cfg}, lambda cfg=cfg: tk.gemm(a, b, out=c, **TILE, **cfg)) for cfg in tilelang]
    t = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
    v += [("triton_gemm_pointer", {**t, "stages": 4}, lambda: gemm.matmul(a, b, stages=4, out=c, **t)),
          ("triton_gemm_tma", {**t, "stages": 3}, lambda: gemm.matmul_tma(a, b, stages=3, out=c, **t)),
          ("triton_gemm_tma_persistent", {**t, "stages": 3},
           lambda: gemm.matmul_tma_persistent(a, b, stages=3, out=c, **t))]
    return v


def measure_gemm():
    a, b, c = bench.gemm_operands(*GEMM_SHAPE)
    variants = gemm_variants(a, b, c)
    M, N, K = GEMM_SHAPE
    for name, cfg, _ in variants:
        if name.startswith("tilelang"):  # compile before the timed rounds, with progress
            timed_compile("gemm", M=M, N=N, K=K, **cfg)
    return measure.timed(variants, c, torch.matmul(a, b), 1e-2, shape=GEMM_SHAPE, flops=bench.gemm_flops(*GEMM_SHAPE))


def measure_copy():
    x = bench.randn(*COPY_SHAPE)
    y = torch.empty_like(x)
    timed_compile("copy", M=COPY_SHAPE[0], N=COPY_SHAPE[1])
    variants = [("torch_copy", {}, lambda: y.copy_(x)), ("tilelang_copy", {}, lambda: tk.copy(x, out=y)),
                ("triton_copy_tile", {}, lambda: copy.copy_tile(x, out=y)),
                ("triton_copy_tma_loop", {}, lambda: copy.copy_tma_loop(x, out=y, stages=4))]
    return measure.timed(variants, y, x, shape=COPY_SHAPE, nbytes=bench.copy_bytes(x))


def results(run):
    """A run of this lesson (see RUNS): measured now on a Hopper GPU, recorded otherwise, with its label."""
    return measure.run(LESSON, run, RUNS[run], needs=NEEDS)


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

def tilelang_config(cfg):
    """Slider values -> the TileLang GEMM's keyword arguments."""
    return dict(block_M=cfg["BLOCK_M"], block_N=cfg["BLOCK_N"], block_K=64, stages=cfg["stages"])


class TileLangGemm(Widget):
    """Compile the TileLang GEMM for this tile and stage count, show what the CUDA holds, and time it
    against cuBLAS (Hopper GPU) or show the recorded sweep (elsewhere)."""
    lesson = LESSON
    sliders = dict(BLOCK_M=[64, 128], BLOCK_N=[128, 256], stages=STAGES)
    defaults = dict(BLOCK_M=128, BLOCK_N=256, stages=3)
    title, base_label = "8192^3 fp16", "cuBLAS"

    def budget(self, cfg, compiled):  # TileLang reports no shared-memory figure here: the model alone
        return smem.Budget(cfg["stages"], smem.gemm_stage_bytes(cfg["BLOCK_M"], cfg["BLOCK_N"], 64))

    def evidence(self, cfg, compiled):
        M, N, K = GEMM_SHAPE
        src = timed_compile("gemm", M=M, N=N, K=K, **tilelang_config(cfg)).get_kernel_source()
        n = counts(src)
        threads = re.search(r"__launch_bounds__\((\d+)", src).group(1)
        return [f"CUDA: {n['tma_load']} tma_load, {n['.wait(']} barrier waits, {n['wgmma_ss']} wgmma call sites, "
                f"{threads} threads per block (256 asked + a producer warpgroup)",
                "buffers in dynamic shared memory (C_s reuses the ring once the K loop is done):",
                *("  " + line for line in shared_layout(src))]

    def query(self, cfg):
        kw = tilelang_config(cfg)
        return measure.Query(LESSON, "sweep", "tilelang_gemm", cfg, GEMM_SHAPE,
                             lambda a, b, c: tk.gemm(a, b, out=c, **kw), needs=NEEDS)

    def label(self, cfg):
        return f"TileLang {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x64, {cfg['stages']} stages"


tilelang_gemm = TileLangGemm()

RUNS = {"gemm": measure_gemm, "copy": measure_copy, "sweep": tilelang_gemm.sweep}
