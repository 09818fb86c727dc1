"""Lesson 01: what a plain load costs. The same copy as one element per thread, as 2D tiles whose
loads become 16-byte vectors, and as a coalesced against a strided walk; all against torch's copy."""
import matplotlib.pyplot as plt
import torch

from . import DEVICE, MODE, copy, device_name
from .lab import aot, bench, plots
from .lab.widgets import sliders
from .roofline import copy_bytes

SHAPE = (16384, 16384)  # fp16: 512 MiB a tensor, the lesson-00 copy ceiling's shape
DEFAULT_TILE = dict(BLOCK_M=64, BLOCK_N=128, num_warps=4)


def variants(x, y):
    """name -> launch, every one copying all of x into y."""
    return {"torch_copy": lambda: y.copy_(x),
            "copy_tile": lambda: copy.copy_tile(x, out=y, **DEFAULT_TILE),
            "copy_elem": lambda: copy.copy_elem(x, out=y),
            "copy_rows": lambda: copy.copy_rows(x, out=y),
            "copy_cols": lambda: copy.copy_cols(x, out=y)}


CONFIGS = {"torch_copy": {}, "copy_tile": DEFAULT_TILE, "copy_elem": {"BLOCK": 128, "num_warps": 4},
           "copy_rows": {"BLOCK": 1024}, "copy_cols": {"BLOCK": 1024}}


def measure():
    """Every variant on 16384^2 fp16, interleaved, each checked first. Returns records."""
    x = bench.randn(*SHAPE)
    y = torch.empty_like(x)
    ms = bench.checked_interleaved(variants(x, y), y, x)
    return [bench.record("01", name, t, shape=SHAPE, config=CONFIGS[name], nbytes=copy_bytes(x),
                         baseline=None if name == "torch_copy" else "torch_copy") for name, t in ms.items()]


def copies():
    """GB/s of every variant: measured now (GPU) or recorded (CPU); and where the numbers come from."""
    if MODE != "cpu":
        return {r["name"]: r["gbps"] for r in measure()}, f"measured live on {device_name()}"
    rec = bench.Recorded()
    return {n: rec.find("01", n, config=CONFIGS[n], shape=SHAPE)["gbps"] for n in CONFIGS
            if rec.find("01", n, config=CONFIGS[n], shape=SHAPE)}, rec.label


def compile_tile(BLOCK_M, BLOCK_N, num_warps, stages=1, dtype=torch.float16, shape=SHAPE):
    x = torch.empty(4, dtype=dtype, device=DEVICE)
    M, N = shape
    return aot.compile_sm90(copy.copy_tile_kernel, x, x, M, N, N, N, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                            num_warps=num_warps, num_stages=stages)


def thread_loads(compiled):
    """Thread-level global loads one program issues (the kernel has no loop: static = dynamic)."""
    return compiled.counts()["ld.global"] * 32 * compiled.num_warps


def load_width(compiled):
    widths = [k.split()[1] for k, v in compiled.counts().items() if k.startswith("ld.global ") and v]
    return ", ".join(widths)


@sliders(defaults=dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, stages=1),
         BLOCK_M=[16, 32, 64, 128], BLOCK_N=[32, 64, 128, 256], num_warps=[1, 2, 4, 8], stages=[1, 2, 3])
def tile_copy(BLOCK_M, BLOCK_N, num_warps, stages):
    """Widget: loads per thread and their width for a tile shape, and the bandwidth it reaches."""
    compiled = compile_tile(BLOCK_M, BLOCK_N, num_warps, stages)
    per_thread, threads = compiled.counts()["ld.global"], 32 * num_warps
    print(f"tile {BLOCK_M}x{BLOCK_N} fp16 over {threads} threads: {per_thread} ld.global per thread, "
          f"{load_width(compiled)} wide; {thread_loads(compiled)} thread-level loads per tile")
    if stages > 1:
        same = compiled.ptx == compile_tile(BLOCK_M, BLOCK_N, num_warps, 1).ptx
        print(f"num_stages={stages}: the PTX is {'identical to' if same else 'different from'} num_stages=1. "
              "One tile per program, no loop: plain loads give the pipeliner nothing to overlap (lesson 02).")
    config = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps)
    x = bench.randn(*SHAPE) if MODE != "cpu" else None
    y = torch.empty_like(x) if x is not None else None
    rate, base, where = bench.versus(lambda: copy.copy_tile(x, out=y, **config), lambda: y.copy_(x),
                                     rate=lambda ms: bench.gbps(copy_bytes(x), ms), lesson="01",
                                     name="copy_tile_sweep", config=config, shape=SHAPE, base_name="torch_copy")
    plots.report_versus("16384^2 fp16 copy", f"tile {BLOCK_M}x{BLOCK_N}, {num_warps} warps", rate, "torch copy",
                        base, "GB/s", where)


def sweep_configs():
    from .lab.widgets import combinations
    return [dict(BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], num_warps=c["num_warps"])
            for c in combinations(tile_copy) if c["stages"] == 1]


def tile_sweep():
    """GB/s of the tile copy over tile shapes and warps: live (GPU) or recorded (CPU)."""
    if MODE == "cpu":
        rec = bench.Recorded()
        return {tuple(c.values()): (r["gbps"] if (r := rec.find("01", "copy_tile_sweep", config=c, shape=SHAPE))
                                    else float("nan")) for c in sweep_configs()}, rec.label
    x = bench.randn(*SHAPE)
    y = torch.empty_like(x)
    return {tuple(c.values()): bench.gbps(copy_bytes(x), bench.median_ms(lambda: copy.copy_tile(x, out=y, **c)))
            for c in sweep_configs()}, f"measured live on {device_name()}"


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


def benchmarks():
    """Lesson 01's records: all copy variants interleaved with torch's, and the widget's sweep."""
    records = measure()
    x = bench.randn(*SHAPE)
    y = torch.empty_like(x)
    for c in sweep_configs():
        ms = bench.median_ms(lambda: copy.copy_tile(x, out=y, **c))
        records.append(bench.record("01", "copy_tile_sweep", ms, shape=SHAPE, config=c, nbytes=copy_bytes(x),
                                    baseline="torch_copy"))
    return records

