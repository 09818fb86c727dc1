"""Lesson 00: the memory wall. Latency of a dependent load, the two ceilings of the GPU (copy
bandwidth, fp16 matmul rate), the roofline they draw, and where a GEMM tile lands on it."""
import functools
from dataclasses import dataclass

import torch

from ..lab import bench, clocks, measure, plots, smem
from ..lab.results import record
from ..lab.widgets import Widget
from ..ops import gemm, latency

LESSON = "00"
# NVIDIA datasheets (H100 Tensor Core GPU datasheet; H200 product brief): HBM bandwidth in TB/s
# and dense fp16 tensor-core TFLOP/s without sparsity. The H200 keeps the H100's compute.
DATASHEET = {"H100 SXM": {"tbps": 3.35, "tflops": 989}, "H200": {"tbps": 4.8, "tflops": 989}}

COPY_SHAPE = (16384, 16384)   # 512 MiB per fp16 tensor: many times the 50-60 MB of L2
GEMM_SHAPE = (8192, 8192, 8192)
SWEEP_SHAPE = (4096, 4096, 4096)  # the widget's GEMM: big enough to fill the SMs, quick to time
# the walks of section 3: footprint in bytes and hops per walk (each walk lasts milliseconds, so one
# launch's cost is lost in it); "L2 flushed" is the L2-sized walk timed the way HBM's is, as a warning
LATENCY_WALKS = {"HBM": (1 << 30, 20_000), "L2 flushed": (4 << 20, 20_000), "L2": (4 << 20, 20_000),
                 "shared": (latency.SMEM_SLOTS * 4, 200_000)}
L2_COPY_SHAPE = (4096, 1024)  # 8 MiB in, 8 MiB out: a copy that stays in L2 when replayed warm
# shared memory's bandwidth is not measured here: 32 banks x 4 bytes per clock per SM (NVIDIA, CUDA C++
# Programming Guide, "Shared Memory" of compute capability 9.0), times the SMs and the sampled clock
SMEM_BYTES_PER_CLOCK = 32 * 4


def tile_intensity(BLOCK_M, BLOCK_N, elem_bytes=2):
    """FLOP per byte of one output tile if every A and B tile it reads came from HBM: per K step it
    loads (BM + BN) * BK elements and does 2 * BM * BN * BK FLOP; BK cancels."""
    return 2 * BLOCK_M * BLOCK_N / ((BLOCK_M + BLOCK_N) * elem_bytes)


def gemm_intensity(M, N, K, elem_bytes=2):
    """FLOP per byte when each input is read once and the output written once (the best case)."""
    return bench.gemm_flops(M, N, K) / ((M * K + K * N + M * N) * elem_bytes)


@dataclass
class Ceilings:
    """The two ceilings of a GPU: copy bandwidth (bytes read + written) and fp16 matmul rate."""
    tbps: float
    tflops: float
    label: str  # "measured live on ..." or "recorded on ..., date"

    @property
    def ridge(self):
        """FLOP per byte above which a kernel can be compute-bound."""
        return self.tflops / self.tbps


# ---- the runs: measured now on a GPU, recorded otherwise (see results()) -------------------------

def measure_ceilings():
    """torch's copy and cuBLAS's GEMM, interleaved."""
    x = bench.randn(*COPY_SHAPE)
    y = torch.empty_like(x)
    a, b, c = bench.gemm_operands(*GEMM_SHAPE)
    ms = bench.interleaved_ms({"copy": lambda: y.copy_(x), "gemm": lambda: torch.matmul(a, b, out=c)})
    assert torch.equal(y, x), "torch copy produced a wrong result"
    return [record("torch_copy", ms["copy"], shape=COPY_SHAPE, nbytes=bench.copy_bytes(x)),
            record("cublas_gemm", ms["gemm"], shape=GEMM_SHAPE, flops=bench.gemm_flops(*GEMM_SHAPE))]


def measure_zeros():
    """The same cuBLAS GEMM on random inputs and on zeros, interleaved."""
    a, b, c = bench.gemm_operands(*GEMM_SHAPE)
    inputs = {"random": (a, b), "zeros": (torch.zeros_like(a), torch.zeros_like(b))}
    ms = bench.interleaved_ms({k: (lambda x=x, y=y: torch.matmul(x, y, out=c)) for k, (x, y) in inputs.items()})
    return [record("cublas_gemm", ms[k], shape=GEMM_SHAPE, flops=bench.gemm_flops(*GEMM_SHAPE),
                           config={"inputs": k}, baseline="cublas_gemm" if k == "zeros" else None) for k in inputs]


def measure_latency():
    """One pointer-chase walk per rung (LATENCY_WALKS), with the SM clock sampled meanwhile to turn
    nanoseconds into cycles."""
    with clocks.Sampler() as sampler:
        ms = {level: latency.ns_per_hop(level, footprint, steps) * steps / 1e6
              for level, (footprint, steps) in LATENCY_WALKS.items()}
        x = bench.randn(*L2_COPY_SHAPE)
        y = torch.empty_like(x)
        l2_copy = bench.graph_ms(lambda: y.copy_(x))
    records = [record("pointer_chase", ms[level], shape=[footprint // 4], dtype="int32",
                      config={"level": level, "steps": steps}) for level, (footprint, steps) in LATENCY_WALKS.items()]
    records.append(record("torch_copy", l2_copy, shape=L2_COPY_SHAPE, config={"level": "L2"}, nbytes=bench.copy_bytes(x)))
    return records + [{**record("gpu_state", sum(ms.values()), shape=[0], config={}), "state": sampler.summary()}]


def results(run):
    """A run of this lesson (see RUNS): measured now on a GPU, recorded otherwise, with its label."""
    return measure.run(LESSON, run, RUNS[run])


@functools.lru_cache(maxsize=None)
def ceilings():
    """This GPU's ceilings, measured once per session; in CPU mode the recorded ones, labelled."""
    run = results("ceilings")
    return Ceilings(run.find("torch_copy")["gbps"] / 1000, run.find("cublas_gemm")["tflops"], run.label)


@functools.lru_cache(maxsize=None)
def latency_run():
    """The walks of section 3, measured once per session (or the recorded ones)."""
    return results("latency")


def latencies():
    """ns per dependent load by rung (the keys of LATENCY_WALKS), the median SM clock (MHz) sampled
    while the walks ran, to turn them into cycles, and where the figures come from."""
    run = latency_run()
    ns = {}
    for level in LATENCY_WALKS:
        r = run.find("pointer_chase", level=level)
        ns[level] = r["ms"] * 1e6 / r["config"]["steps"]
    state = run.find("gpu_state").get("state", {})
    return ns, state.get("sm_mhz_median"), run.label


def hierarchy():
    """The three rungs of section 3 as one table: {rung: (ns per dependent load, TB/s, how the TB/s was
    had)}, the SM clock, the SM count and where the figures come from."""
    ns, mhz, label = latencies()
    run = latency_run()
    sms = measure.sm_count()
    rungs = {"shared": (ns["shared"], SMEM_BYTES_PER_CLOCK * sms * mhz * 1e6 / 1e12 if mhz else None,
                        "32 banks x 4 B per clock per SM (CUDA C++ Programming Guide)"),
             "L2": (ns["L2"], run.find("torch_copy", level="L2")["gbps"] / 1000, "torch copy of 8 MiB kept in L2: a lower bound, each copy lasts microseconds"),
             "HBM": (ns["HBM"], ceilings().tbps, "torch copy of 512 MiB")}
    return rungs, mhz, sms, label


def plot_hierarchy(rungs, mhz, label):
    """Latency and bandwidth of each rung side by side, nearest the SM on top (log scales: each rung
    down is several times slower to reach)."""
    import matplotlib.pyplot as plt
    names = list(rungs)
    fig, (lat, bw) = plt.subplots(1, 2, figsize=(7.5, 2.6), sharey=True)
    lat.barh(names, [rungs[n][0] for n in names], color="tab:red")
    bw.barh(names, [rungs[n][1] or 0 for n in names], color="tab:blue", hatch=["//" if n == "shared" else "" for n in names])
    for i, n in enumerate(names):
        t, tbps, _ = rungs[n]
        lat.text(t, i, f" {t:.0f} ns" + (f" = {t * mhz / 1000:.0f} cycles" if mhz else ""), va="center", fontsize=8)
        # shared memory's figure is the bank width times the clock; L2's copy is too short to fill the street
        how = {"shared": " (from the bank width)", "L2": " (a lower bound)"}.get(n, "")
        bw.text(tbps or 0, i, (f" {tbps:.1f} TB/s" if tbps else " ?") + how, va="center", fontsize=8)
    # room on the right for the labels: they must end inside the axes
    lat.set(xscale="log", xlim=(5, 50_000), xlabel="latency of one dependent load (ns)")
    bw.set(xscale="log", xlim=(1, 3000), xlabel="bandwidth, whole chip (TB/s)")
    lat.invert_yaxis()
    fig.suptitle(f"memory hierarchy - {label}", fontsize=9)
    fig.tight_layout()
    return fig


def zeros_vs_random():
    """ms of the same cuBLAS GEMM on random inputs and on zeros, and where the figures come from."""
    run = results("zeros")
    return run.find(inputs="random")["ms"], run.find(inputs="zeros")["ms"], run.label


STAGE_TILES = ((64, 64, 32), (128, 128, 64), (128, 256, 64))


def stage_sweep(tiles=STAGE_TILES, stages=(1, 2, 3, 4)):
    """TFLOP/s of the pointer GEMM for some tiles over stage counts, cuBLAS's, and the label:
    the widget's sweep, at these settings only when measured now."""
    settings = [dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, stages=s) for m, n, k in tiles for s in stages]
    run = measure.run(LESSON, "sweep", lambda: tile_on_roofline.sweep(settings))
    rates = {tuple(r["config"].values()): r["tflops"] for r in run.select("gemm_pointer")}
    out = {f"{m}x{n}x{k}": [rates.get((m, n, k, s), float("nan")) for s in stages] for m, n, k in tiles}
    return out, run.find("cublas_gemm")["tflops"], run.label


# ---- the widget ----------------------------------------------------------------------------------

class TileOnRoofline(Widget):
    """A GEMM tile's shared-memory budget, its place on the roofline, and its speed."""
    lesson = LESSON
    sliders = dict(BLOCK_M=[64, 128], BLOCK_N=[64, 128, 256], BLOCK_K=[32, 64], stages=[1, 2, 3, 4])
    defaults = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3)

    def compile(self, cfg):
        return gemm.compile_sm90(gemm.matmul_kernel, **cfg, shape=SWEEP_SHAPE)

    def budget(self, cfg, compiled):
        return smem.Budget(cfg["stages"], smem.gemm_stage_bytes(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]),
                           compiled=compiled.shared)

    def evidence(self, cfg, compiled):
        ceil, intensity = ceilings(), tile_intensity(cfg["BLOCK_M"], cfg["BLOCK_N"])
        return [f"tile {cfg['BLOCK_M']}x{cfg['BLOCK_N']}: {intensity:.0f} FLOP/B if every tile load came from HBM "
                f"(ridge {ceil.ridge:.0f}); roof there: {min(ceil.tflops, intensity * ceil.tbps):.0f} TFLOP/s"]

    def query(self, cfg):
        return measure.Query(LESSON, "sweep", "gemm_pointer", cfg, SWEEP_SHAPE,
                             lambda a, b, c: gemm.matmul(a, b, **cfg, out=c))

    def show(self, cfg, fig):
        ceil = ceilings()
        M, N, K = SWEEP_SHAPE
        print(f"{M}x{N}x{K} fp16 GEMM: {fig.rate:.0f} TFLOP/s ({fig.label}), {fig.rate / ceil.tflops:.0%} of the "
              f"matmul ceiling, {fig.ratio:.2f}x cuBLAS at this shape ({fig.base:.0f} TFLOP/s)")
        if fig.rate > ceil.tflops:  # the ceiling is cuBLAS at 8192^3, measured; this shape is another GEMM
            print(f"above the ceiling: it was measured with cuBLAS at {'x'.join(map(str, GEMM_SHAPE))}; at this shape "
                  f"cuBLAS itself reached {fig.base:.0f} TFLOP/s in the same run")
        intensity = tile_intensity(cfg["BLOCK_M"], cfg["BLOCK_N"])
        if fig.rate > intensity * ceil.tbps:  # the dot stands above the roof: the intensity counted is too low
            print(f"above the roof at {intensity:.0f} FLOP/B: that count has every tile load come from HBM, but "
                  "programs that share a row or column of tiles read the same A and B tiles, and those repeat reads "
                  "can come from the L2, so fewer bytes cross HBM than counted")
        label = f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}, {cfg['stages']} stages ({fig.label})"
        figure, ax = plots.subplots((6.4, 4), layout="tight")  # the widget's own figure, not pyplot's: see plots
        plots.roofline(ceil, [(label, intensity, fig.rate)], ax=ax)
        plots.show(figure)


tile_on_roofline = TileOnRoofline()

RUNS = {"ceilings": measure_ceilings, "zeros": measure_zeros, "latency": measure_latency,
        "sweep": tile_on_roofline.sweep}


# ---- the primer's picture and figures (section 2) and the masked kernel's PTX (section 6) ---------

def draw_machine(sms):
    """Who runs a kernel (left: a grid of programs, one program as a thread block of 4 warps of 32
    threads) and where its data lives (right: SMs with registers, shared memory's 32 banks and tensor
    cores, then the L2 and HBM that all SMs share). ``sms``: the SM count written on the picture."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, (left, right) = plt.subplots(1, 2, figsize=(7.2, 3.3), gridspec_kw={"width_ratios": [1, 1.1]})
    for ax in (left, right):
        ax.set(xlim=(0, 10), ylim=(0, 10), xticks=[], yticks=[])
        ax.set_frame_on(False)

    def box(ax, x, y, w, h, text="", color="white", size=7, **kw):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor=kw.pop("edge", "k"), lw=0.8, **kw))
        if text:
            ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size)

    # left: the grid, then one program = one thread block = 4 warps (one warpgroup) x 32 threads
    left.set_title("who runs the code", fontsize=9)
    left.text(0, 9.5, "grid: one launch, many programs", fontsize=7, va="center")
    for i in range(8):
        box(left, 0.2 + i * 1.2, 8.1, 1.0, 0.8, f"{i}", "C1" if i == 2 else "#fde2c4", size=6)
    left.annotate("", (4.6, 6.6), (2.9, 8.0), arrowprops=dict(arrowstyle="->", lw=0.8))
    box(left, 0.2, 1.0, 9.4, 5.5, edge="C1", color="#fff5ea")
    left.text(0.4, 6.05, "program 2 = thread block (CTA), on one SM", fontsize=7)
    for w in range(4):
        y = 5.0 - w * 1.0
        for t in range(32):
            box(left, 0.5 + t * 0.22, y, 0.2, 0.7, color="C0" if t % 2 else "#9ecae1", edge="none")
        left.text(7.7, y + 0.35, f"warp {w}", fontsize=6.5, va="center")
    left.text(0.5, 1.35, "4 warps x 32 threads = 1 warpgroup (128 threads)", fontsize=6.5)
    left.text(0.5, 0.3, "each small bar is one thread", fontsize=6.5, color="C0")

    # right: SMs (a cluster of two drawn dashed), then L2 and HBM, shared by all SMs
    right.set_title("where the data lives", fontsize=9)
    for s, x in enumerate((0.2, 5.2)):
        box(right, x, 4.2, 4.6, 5.3, color="#f0f0f0")
        right.text(x + 0.2, 9.0, f"SM {s}", fontsize=7, weight="bold")
        box(right, x + 0.3, 7.5, 4.0, 1.1, "registers (per thread)", "#c7e9c0", size=6.5)
        for b in range(32):  # 32 banks, 4 bytes wide each
            box(right, x + 0.3 + b * 0.125, 5.9, 0.125, 1.1, color="#fdd0a2" if b % 2 else "#fdae6b", edge="none")
        right.text(x + 2.3, 6.45, "shared memory: 32 banks", ha="center", va="center", fontsize=6.5)
        box(right, x + 0.3, 4.5, 4.0, 1.1, "tensor cores", "#dadaeb", size=6.5)
    box(right, 0.05, 3.9, 9.9, 5.75, color="none", edge="grey", linestyle="--")
    right.text(5.0, 3.55, f"2 of the {sms} SMs, here in one cluster (dashed)", ha="center", va="center",
               fontsize=6, color="grey")
    box(right, 0.2, 2.0, 9.6, 1.2, "L2 cache: shared by all SMs", "#fff7bc", size=7)
    box(right, 0.2, 0.1, 9.6, 1.3, "HBM (global memory): the storeroom across the street", "#fee391", size=7)  # inside ylim: bottom edge drawn
    for x in (1.2, 8.8):
        right.annotate("", (x, 3.2), (x, 3.9), arrowprops=dict(arrowstyle="<->", lw=0.8))
        right.annotate("", (x, 1.4), (x, 2.0), arrowprops=dict(arrowstyle="<->", lw=0.8))
    fig.tight_layout()
    return fig


def device_facts():
    """Lines of what one SM and one block may hold: this GPU's own figures where there is one
    (``torch.cuda.get_device_properties``), else the CUDA C++ Programming Guide's for compute capability
    9.0 with the recorded device's SM count."""
    from ..lab.mode import LIVE
    if LIVE:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        pick = lambda name: getattr(props, name, None)  # noqa: E731  (older torch lacks a few fields)
        facts = [("SMs", pick("multi_processor_count")), ("threads per warp", pick("warp_size")),
                 ("threads per SM, at most", pick("max_threads_per_multi_processor")),
                 ("32-bit registers per SM", pick("regs_per_multiprocessor")),
                 ("shared memory per block, bytes (opt-in)", pick("shared_memory_per_block_optin")),
                 ("shared memory per SM, bytes", pick("shared_memory_per_multiprocessor")),
                 ("L2 cache, bytes", pick("L2_cache_size"))]
        source = f"this GPU ({props.name}), from torch.cuda.get_device_properties"
    else:
        facts = [("SMs", measure.sm_count()), ("threads per warp", 32), ("threads per SM, at most", 2048),
                 ("32-bit registers per SM", 65536), ("shared memory per block, bytes (opt-in)", 227 * 1024),
                 ("shared memory per SM, bytes", 228 * 1024)]
        from ..lab import results
        source = (f"no GPU here: SMs {results.recorded().label}; the rest from the CUDA C++ Programming Guide, "
                  "compute capability 9.0")
    return [f"{name:40s} {value:>10,}" for name, value in facts if value is not None] + [source]


def masked_ptx(compiled, show=2):
    """The PTX lines of a masked 1D kernel that show its mechanism: threads per block (.reqntid), the
    block index (%ctaid) and thread index (%tid), the mask (setp), the `other` value moved into a load's
    registers before it (mov), and the predicated loads and stores (@%p). Of each of the last three
    kinds, the first ``show`` lines and a count of the rest."""
    lines = [" ".join(line.split()) for line in compiled.ptx.split("\n.section")[0].splitlines()]
    lines = [line for line in lines if line and not line.startswith(("//", ".loc"))]
    out, counts, tails = [], {}, {}
    for i, line in enumerate(lines):
        kind = next((k for k in ("setp", "ld.global", "st.global") if k in line), None)
        if kind is None:
            out += [line] if any(k in line for k in (".reqntid", "%ctaid", "%tid")) else []
            continue
        counts[kind] = counts.get(kind, 0) + 1
        if counts[kind] > show:
            continue
        if kind == "ld.global":  # the movs right before a load put `other` into its registers
            k = i
            while k > 0 and lines[k - 1].startswith("mov."):
                k -= 1
            out += lines[k:i]
        out.append(line)
        tails[kind] = len(out)  # where "... n more" goes
    for kind, at in sorted(tails.items(), key=lambda t: -t[1]):
        if counts[kind] > show:
            out.insert(at, f"... {counts[kind] - show} more {kind}")
    return out
