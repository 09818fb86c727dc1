"""Lesson 01: what a plain load costs. The same copy as one element per thread, as 2D tiles whose
loads become 16-byte vectors, and as a coalesced against a strided walk; all against torch's copy."""
import re

import matplotlib.pyplot as plt
import torch

from ..lab import aot, bench, measure, results as recorded_results
from ..lab.mode import DEVICE
from ..lab.results import record
from ..lab.widgets import Widget
from ..ops import copy

LESSON = "01"
SHAPE = (16384, 16384)  # fp16: 512 MiB a tensor, the lesson-00 copy ceiling's shape
DEFAULT_TILE = dict(BLOCK_M=64, BLOCK_N=128, num_warps=4)
CONFIGS = {"torch_copy": {}, "copy_tile": DEFAULT_TILE, "copy_elem": {"BLOCK": 128, "num_warps": 4},
           "copy_rows": {"BLOCK": 1024}, "copy_cols": {"BLOCK": 1024}}


def variants(x, y):
    """name -> launch, every one copying all of x into y."""
    return {"torch_copy": lambda: y.copy_(x),
            "copy_tile": lambda: copy.copy_tile(x, out=y, **DEFAULT_TILE),
            "copy_elem": lambda: copy.copy_elem(x, out=y),
            "copy_rows": lambda: copy.copy_rows(x, out=y),
            "copy_cols": lambda: copy.copy_cols(x, out=y)}


def measure_copies():
    """Every variant on 16384^2 fp16, interleaved, each checked first."""
    x = bench.randn(*SHAPE)
    y = torch.empty_like(x)
    ms = bench.checked_interleaved(variants(x, y), y, x)
    return [record(name, t, shape=SHAPE, config=CONFIGS[name], nbytes=bench.copy_bytes(x),
                   baseline=None if name == "torch_copy" else "torch_copy") for name, t in ms.items()]


def results(run):
    """A run of this lesson (see RUNS): measured now on a GPU, recorded otherwise, with its label."""
    return measure.run(LESSON, run, RUNS[run])


def copies():
    """GB/s of every variant, and where the numbers come from."""
    run = results("copies")
    return {r["name"]: r["gbps"] for r in run}, run.label


def article_copy_claim(rates, where):
    """The TMA article's "2-3x copy bandwidth" against the copies it could be measured from: this lesson's
    (``rates``, labelled ``where``) and lesson 03's TMA copies as recorded (one run, same baselines)."""
    def verdict(r):
        return "a 2x or larger gain" if r >= 2 else "no 2-3x"
    ratio = rates["copy_tile"] / rates["copy_elem"]
    lines = [f"16-byte pointer tile copy (no TMA) / one element per thread: {ratio:.2f}x -> {verdict(ratio)} ({where})"]
    store = recorded_results.recorded()
    run = store.select("03", "copies")
    tma = [r for r in run if r["name"].startswith("copy_tma")]
    if not tma:
        return "\n".join(lines + [f"lesson 03's TMA copies: {store.label}"])
    best = max(tma, key=lambda r: r["gbps"])
    for base, text in (("copy_tile", "16-byte pointer tile copy"), ("torch_copy", "torch's copy")):
        r = best["gbps"] / next(b["gbps"] for b in run if b["name"] == base)
        lines.append(f"best TMA copy / {text}: {r:.2f}x -> {verdict(r)} (lesson 03, {store.label})")
    lines.append(f"  (best TMA copy: {measure.describe(best['name'], best['config'])})")
    return "\n".join(lines)


def compile_tile(BLOCK_M, BLOCK_N, num_warps, stages=1, dtype=torch.float16, shape=SHAPE):
    x = torch.empty(4, dtype=dtype, device=DEVICE)
    M, N = shape
    return aot.compile_sm90(copy.copy_tile_kernel, x, x, M, N, N, N, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                            num_warps=num_warps, num_stages=stages)


def thread_loads(compiled):
    """Thread-level global loads one program issues (the kernel has no loop: static = dynamic)."""
    return compiled.counts()["ld.global"] * 32 * compiled.num_warps


def spill_stores(compiled):
    """STL instructions in the SASS: registers spilled to local memory."""
    return len(re.findall(r"\bSTL\b", compiled.sass))


def load_width(compiled):
    widths = [k.split()[1] for k, v in compiled.counts().items() if k.startswith("ld.global ") and v]
    return ", ".join(widths)


class TileCopy(Widget):
    """Loads per thread and their width for a tile shape, and the bandwidth it reaches."""
    lesson = LESSON
    sliders = dict(BLOCK_M=[16, 32, 64, 128], BLOCK_N=[32, 64, 128, 256], num_warps=[1, 2, 4, 8], stages=[1, 2, 3])
    defaults = dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, stages=1)
    title, base_label = "16384^2 fp16 copy", "torch copy"

    def compile(self, cfg):
        return compile_tile(**cfg)

    def evidence(self, cfg, compiled):
        per_thread, threads = compiled.counts()["ld.global"], 32 * cfg["num_warps"]
        lines = [f"tile {cfg['BLOCK_M']}x{cfg['BLOCK_N']} fp16 over {threads} threads: {per_thread} ld.global per "
                 f"thread, {load_width(compiled)} wide; {thread_loads(compiled)} thread-level loads per tile"]
        if cfg["stages"] > 1:
            same = compiled.ptx == compile_tile(**{**cfg, "stages": 1}).ptx
            lines.append(f"num_stages={cfg['stages']}: the PTX is {'identical to' if same else 'different from'} "
                         "num_stages=1. One tile per program, no loop: plain loads give the pipeliner nothing "
                         "to overlap (lesson 02).")
        return lines

    def query(self, cfg):
        tile = {k: cfg[k] for k in DEFAULT_TILE}  # the stage count does not change this kernel (see above)
        return measure.Query(LESSON, "sweep", "copy_tile", tile, SHAPE,
                             lambda x, y: copy.copy_tile(x, out=y, **tile), against="torch_copy")

    def label(self, cfg):
        return f"tile {cfg['BLOCK_M']}x{cfg['BLOCK_N']}, {cfg['num_warps']} warps"


tile_copy = TileCopy()


def tile_sweep():
    """GB/s of the tile copy over tile shapes and warps, and the label (the widget's sweep)."""
    run = results("sweep")
    return {(r["config"]["BLOCK_M"], r["config"]["BLOCK_N"], r["config"]["num_warps"]): r["gbps"]
            for r in run.select("copy_tile")}, run.label


def plot_sweep(sweep, where, torch_gbps):
    warps = sorted({k[2] for k in sweep})
    fig, axes = plt.subplots(1, len(warps), figsize=(12, 3), sharey=True)
    for ax, w in zip(axes, warps):
        bns = sorted({k[1] for k in sweep})
        for bm in sorted({k[0] for k in sweep}):
            ax.plot(range(len(bns)), [sweep[(bm, bn, w)] for bn in bns], "o-", label=f"BLOCK_M={bm}")
        ax.axhline(torch_gbps, color="k", ls="--", lw=1, label="torch copy")
        ax.set(xticks=range(len(bns)), xticklabels=bns, xlabel="BLOCK_N", title=f"num_warps={w}")
    axes[0].set_ylabel("GB/s")
    axes[-1].legend(fontsize=7)
    fig.suptitle(f"tile copy 16384^2 fp16 - {where}", fontsize=10)
    fig.tight_layout()
    plt.show()


RUNS = {"copies": measure_copies, "sweep": tile_copy.sweep}
