"""Lesson 00: the two ceilings of the GPU (copy bandwidth, fp16 matmul rate), the roofline they
draw, and where a GEMM tile lands on it."""
import functools

import matplotlib.pyplot as plt
import torch

from . import MODE, device_name, gemm, latency
from .lab import aot, bench, plots, smem
from .lab.widgets import sliders

# NVIDIA datasheets (H100 Tensor Core GPU datasheet; H200 product brief): HBM bandwidth in TB/s
# and dense fp16 tensor-core TFLOP/s without sparsity. The H200 keeps the H100's compute.
DATASHEET = {"H100 SXM": {"tbps": 3.35, "tflops": 989}, "H200": {"tbps": 4.8, "tflops": 989}}

COPY_SHAPE = (16384, 16384)   # 512 MiB per fp16 tensor: many times the 50-60 MB of L2
GEMM_SHAPE = (8192, 8192, 8192)
SWEEP_SHAPE = (4096, 4096, 4096)  # the widget's GEMM: big enough to fill 132 SMs, quick to time
HBM_FOOTPRINT, L2_FOOTPRINT = 1 << 30, 4 << 20


def copy_bytes(x):
    """A copy reads every byte once and writes it once."""
    return 2 * x.numel() * x.element_size()


def gemm_flops(M, N, K):
    return 2 * M * N * K


def tile_intensity(BLOCK_M, BLOCK_N, elem_bytes=2):
    """FLOP per byte of one output tile if every A and B tile it reads came from HBM: per K step it
    loads (BM + BN) * BK elements and does 2 * BM * BN * BK FLOP; BK cancels."""
    return 2 * BLOCK_M * BLOCK_N / ((BLOCK_M + BLOCK_N) * elem_bytes)


def gemm_intensity(M, N, K, elem_bytes=2):
    """FLOP per byte when each input is read once and the output written once (the best case)."""
    return gemm_flops(M, N, K) / ((M * K + K * N + M * N) * elem_bytes)



def measure():
    """Measure both ceilings, interleaved, on this GPU. Returns (Ceilings, records)."""
    x = bench.randn(*COPY_SHAPE)
    y = torch.empty_like(x)
    M, N, K = GEMM_SHAPE
    a, b, c = bench.gemm_operands(M, N, K)
    ms = bench.interleaved_ms({"copy": lambda: y.copy_(x), "gemm": lambda: torch.matmul(a, b, out=c)})
    assert torch.equal(y, x), "torch copy produced a wrong result"
    records = [bench.record("00", "torch_copy", ms["copy"], shape=COPY_SHAPE, nbytes=copy_bytes(x)),
               bench.record("00", "cublas_gemm", ms["gemm"], shape=GEMM_SHAPE, flops=gemm_flops(M, N, K))]
    ceil = bench.Ceilings(records[0]["gbps"] / 1000, records[1]["tflops"], f"measured live on {device_name()}")
    return ceil, records


@functools.lru_cache(maxsize=None)
def ceilings():
    """This GPU's ceilings, measured once per session; in CPU mode, the recorded ones, labelled."""
    if MODE != "cpu":
        return measure()[0]
    rec = bench.Recorded()
    copy, mm = rec.find("00", "torch_copy"), rec.find("00", "cublas_gemm", shape=GEMM_SHAPE)
    if copy is None or mm is None:
        return bench.Ceilings(DATASHEET["H200"]["tbps"], DATASHEET["H200"]["tflops"], "H200 datasheet (no record yet)")
    return bench.Ceilings(copy["gbps"] / 1000, mm["tflops"], rec.label)


def latencies():
    """ns per dependent load for an HBM-sized and an L2-sized footprint, the max SM clock (MHz) to
    turn them into cycles, and a label saying where the figures come from."""
    if MODE != "cpu":
        return ({"HBM": latency.ns_per_hop(HBM_FOOTPRINT), "L2": latency.ns_per_hop(L2_FOOTPRINT)},
                bench.max_sm_clock_mhz(), f"measured live on {device_name()}")
    rec = bench.Recorded()
    found = {k: rec.find("00", f"latency_{k.lower()}") for k in ("HBM", "L2")}
    ns = {k: r["ms"] * 1e6 / r["config"]["steps"] for k, r in found.items() if r}
    clock = next((r["config"].get("max_sm_mhz") for r in found.values() if r), None)
    return ns, clock, rec.label


def zeros_vs_random():
    """ms of the same cuBLAS GEMM on random inputs and on zeros, interleaved (or recorded)."""
    if MODE == "cpu":
        rec = bench.Recorded()
        r, z = rec.find("00", "cublas_gemm", shape=GEMM_SHAPE), rec.find("00", "cublas_gemm_zeros")
        return (r["ms"], z["ms"], rec.label) if r and z else (None, None, rec.label)
    M, N, K = GEMM_SHAPE
    a, b, c = bench.gemm_operands(M, N, K)
    za, zb = torch.zeros_like(a), torch.zeros_like(b)
    ms = bench.interleaved_ms({"random": lambda: torch.matmul(a, b, out=c), "zeros": lambda: torch.matmul(za, zb, out=c)})
    return ms["random"], ms["zeros"], f"measured live on {device_name()}"


def stage_sweep(tiles=((64, 64, 32), (128, 128, 64), (128, 256, 64)), stages=(1, 2, 3, 4)):
    """TFLOP/s of the pointer GEMM for some tiles over stage counts: live, or recorded."""
    M, N, K = SWEEP_SHAPE
    out = {}
    if MODE == "cpu":
        rec = bench.Recorded()
        for BM, BN, BK in tiles:
            rs = [rec.find("00", "gemm_pointer", shape=SWEEP_SHAPE,
                           config=dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, stages=s)) for s in stages]
            out[f"{BM}x{BN}x{BK}"] = [r["tflops"] if r else float("nan") for r in rs]
        base = rec.find("00", "cublas_gemm", shape=SWEEP_SHAPE)
        return out, (base["tflops"] if base else float("nan")), rec.label
    a, b, c = bench.gemm_operands(M, N, K)
    base = bench.tflops(gemm_flops(M, N, K), bench.median_ms(lambda: torch.matmul(a, b, out=c)))
    for BM, BN, BK in tiles:
        out[f"{BM}x{BN}x{BK}"] = [bench.tflops(gemm_flops(M, N, K), run_tile(a, b, c, BM, BN, BK, s)) for s in stages]
    return out, base, f"measured live on {device_name()}"


def run_tile(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages):
    """Median ms of the pointer GEMM at one tile configuration."""
    return bench.median_ms(lambda: gemm.matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=c))


@sliders(defaults=dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3),
         BLOCK_M=[64, 128], BLOCK_N=[64, 128, 256], BLOCK_K=[32, 64], stages=[1, 2, 3, 4])
def tile_on_roofline(BLOCK_M, BLOCK_N, BLOCK_K, stages):
    """Widget: a GEMM tile's shared-memory budget, its place on the roofline, and its speed."""
    M, N, K = SWEEP_SHAPE
    live = MODE != "cpu"
    a, b, c = bench.gemm_operands(M, N, K) if live else (  # compiling reads only shapes and alignment
        torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16), torch.empty(M, N, dtype=torch.float16))
    _, args, meta = gemm.launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    compiled = aot.compile_sm90(gemm.matmul_kernel, *args, **meta)
    budget = smem.Budget(stages, smem.gemm_stage_bytes(BLOCK_M, BLOCK_N, BLOCK_K), compiled=compiled.shared)
    print(budget.text())
    budget.require()
    ceil = ceilings()
    if live:
        rate, where = bench.tflops(gemm_flops(M, N, K), run_tile(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages)), "live"
    else:
        config = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, stages=stages)
        r = bench.Recorded().find("00", "gemm_pointer", config=config, shape=SWEEP_SHAPE)
        rate, where = (r["tflops"], bench.Recorded().label) if r else (None, "no record")
    intensity = tile_intensity(BLOCK_M, BLOCK_N)
    print(f"tile {BLOCK_M}x{BLOCK_N}: {intensity:.0f} FLOP/B if every tile load came from HBM "
          f"(ridge {ceil.ridge:.0f}); roof there: {min(ceil.tflops, intensity * ceil.tbps):.0f} TFLOP/s")
    if rate is None:
        print("no recorded measurement for this configuration")
        return
    print(f"{M}x{N}x{K} fp16 GEMM: {rate:.0f} TFLOP/s ({where}), {rate / ceil.tflops:.0%} of the matmul ceiling")
    label = f"{BLOCK_M}x{BLOCK_N}x{BLOCK_K}, {stages} stages ({where})"
    ax = plots.roofline(ceil, [(label, intensity, rate)])
    ax.figure.tight_layout()
    plt.show()


def benchmarks():
    """Everything lesson 00 records on a GPU: ceilings, zeros vs random, latencies, the widget's sweep."""
    ceil, records = measure()
    random_ms, zeros_ms, _ = zeros_vs_random()
    records.append(bench.record("00", "cublas_gemm_zeros", zeros_ms, shape=GEMM_SHAPE, flops=gemm_flops(*GEMM_SHAPE),
                                baseline="cublas_gemm", config={"inputs": "zeros", "random_ms": round(random_ms, 5)}))
    clock = bench.max_sm_clock_mhz()
    for name, footprint in (("latency_hbm", HBM_FOOTPRINT), ("latency_l2", L2_FOOTPRINT)):
        steps = 20_000
        ns = latency.ns_per_hop(footprint, steps)
        records.append(bench.record("00", name, ns * steps / 1e6, shape=[footprint // 4], dtype="int32",
                                    config={"steps": steps, "max_sm_mhz": clock}))
    M, N, K = SWEEP_SHAPE
    a, b, c = bench.gemm_operands(M, N, K)
    ref_ms = bench.median_ms(lambda: torch.matmul(a, b, out=c))
    records.append(bench.record("00", "cublas_gemm", ref_ms, shape=SWEEP_SHAPE, flops=gemm_flops(M, N, K)))
    for cfg in _sweep_configs():
        try:
            ms = run_tile(a, b, c, **cfg)
        except Exception as e:  # a configuration this GPU cannot run is skipped, and said
            print(f"skipped {cfg}: {e}")
            continue
        records.append(bench.record("00", "gemm_pointer", ms, shape=SWEEP_SHAPE, config=cfg,
                                    flops=gemm_flops(M, N, K), baseline="cublas_gemm"))
    return records


def _sweep_configs():
    from .lab.widgets import combinations
    return list(combinations(tile_on_roofline))
