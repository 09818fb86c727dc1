"""Lesson 03: TMA tensor descriptors. Copies, a transpose and a GEMM through tensor maps, against
torch, cuBLAS and the pointer kernels of lessons 01-02; the seed article's GEMM as a case study;
and where TMA does not pay."""
import torch
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

from . import DEVICE, MODE, copy, device_name, gemm, seed_gemm, transpose
from .lab import aot, bench, plots, smem
from .lab.errors import SharedMemoryError
from .lab.widgets import sliders
from .roofline import copy_bytes, gemm_flops

COPY_SHAPE = (16384, 16384)
GEMM_SHAPE = (8192, 8192, 8192)
SMALL_SHAPE = (256, 256)
GEMM_TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
STAGES = [1, 2, 3, 4]
TILES = [(128, 128, 64), (128, 256, 64), (256, 128, 64), (128, 128, 128), (64, 128, 64)]  # BLOCK_M, N, K
TILE_STAGES = [2, 3, 4]  # one stage loses to two at 128x256x64 (section 5): the sweep starts at two



def copy_variants(x, y):
    return {"torch_copy": lambda: y.copy_(x),
            "copy_tile": lambda: copy.copy_tile(x, out=y),
            "copy_tma": lambda: copy.copy_tma(x, out=y),
            "copy_loop_s4": lambda: copy.copy_loop(x, out=y, STAGES=4),
            **{f"copy_tma_loop_s{s}": (lambda s=s: copy.copy_tma_loop(x, out=y, STAGES=s)) for s in STAGES},
            "copy_tma_host_loop_s4": lambda: copy.copy_tma_loop(x, out=y, STAGES=4, descriptor="host")}


def measure_copies(shape=COPY_SHAPE, lesson_name=""):
    x = bench.randn(*shape)
    y = torch.empty_like(x)
    ms = bench.checked_interleaved(copy_variants(x, y), y, x)
    return [bench.record("03", n + lesson_name, t, shape=shape, nbytes=copy_bytes(x),
                         baseline=None if n == "torch_copy" else "torch_copy" + lesson_name) for n, t in ms.items()]


def measure_transpose():
    x = bench.randn(*COPY_SHAPE)
    y = x.new_empty(x.shape[::-1])
    fns = {"torch_transpose": lambda: y.copy_(x.t()), "transpose_tile": lambda: transpose.transpose_tile(x, out=y),
           "transpose_tma": lambda: transpose.transpose_tma(x, out=y)}
    ms = bench.checked_interleaved(fns, y, x.t())
    return [bench.record("03", n, t, shape=COPY_SHAPE, nbytes=copy_bytes(x),
                         baseline=None if n == "torch_transpose" else "torch_transpose") for n, t in ms.items()]


def measure_gemm(tile=GEMM_TILE):
    M, N, K = GEMM_SHAPE
    a, b, c = bench.gemm_operands(M, N, K)
    fns = {"cublas_gemm": lambda: torch.matmul(a, b, out=c)}
    for s in STAGES:
        fns[f"gemm_pointer_s{s}"] = (lambda s=s: gemm.matmul(a, b, num_stages=s, out=c, **tile))
        fns[f"gemm_tma_s{s}"] = (lambda s=s: gemm.matmul_tma(a, b, num_stages=s, out=c, **tile))
    ms = bench.checked_interleaved(fns, c, torch.matmul(a, b), tol=1e-2)
    return [bench.record("03", n if n == "cublas_gemm" else n.rsplit("_s", 1)[0], t, shape=GEMM_SHAPE,
                         flops=gemm_flops(M, N, K), baseline=None if n == "cublas_gemm" else "cublas_gemm",
                         config={} if n == "cublas_gemm" else {**tile, "stages": int(n.rsplit("_s", 1)[1])})
            for n, t in ms.items()]


def measure_tiles():
    """Pointer and TMA GEMM at each tile of TILES and each stage count of TILE_STAGES, with cuBLAS timed in
    every tile's round: a tie at one tile says nothing about the others."""
    M, N, K = GEMM_SHAPE
    a, b, c = bench.gemm_operands(M, N, K)
    ref, records = torch.matmul(a, b), []
    for tile in TILES:
        cfg, name = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), tile)), "x".join(map(str, tile))
        fns = {"cublas": lambda: torch.matmul(a, b, out=c)}
        for s in TILE_STAGES:
            fns[f"gemm_pointer_tiles_s{s}"] = (lambda s=s, cfg=cfg: gemm.matmul(a, b, num_stages=s, out=c, **cfg))
            fns[f"gemm_tma_tiles_s{s}"] = (lambda s=s, cfg=cfg: gemm.matmul_tma(a, b, num_stages=s, out=c, **cfg))
        for n in list(fns):
            try:  # a tile whose stages do not fit shared memory fails at its first launch, not while timed
                fns[n]()
            except (SharedMemoryError, OutOfResources):
                print(f"left out: {n} at {name} (does not fit shared memory)")
                del fns[n]
        ms = bench.checked_interleaved(fns, c, ref, tol=1e-2)
        records.append(bench.record("03", "cublas_gemm_tiles", ms.pop("cublas"), shape=GEMM_SHAPE,
                                    flops=gemm_flops(M, N, K), config={"round": name}))
        records += [bench.record("03", n.rsplit("_s", 1)[0], t, shape=GEMM_SHAPE, flops=gemm_flops(M, N, K),
                                 config={**cfg, "stages": int(n.rsplit("_s", 1)[1])}, baseline="cublas_gemm_tiles")
                    for n, t in ms.items()]
    return records


def best_per_tile(records):
    """[(tile, best pointer record, best TMA record, pointer ms / TMA ms)] in TILES order, best = fewest ms
    over the stage counts; tiles lacking either kernel are left out."""
    rows = []
    for tile in TILES:
        best = {}
        for kind in ("gemm_pointer_tiles", "gemm_tma_tiles"):
            runs = [r for r in records if r["name"] == kind
                    and (r["config"]["BLOCK_M"], r["config"]["BLOCK_N"], r["config"]["BLOCK_K"]) == tile]
            best[kind] = min(runs, key=lambda r: r["ms"], default=None)
        p, t = best["gemm_pointer_tiles"], best["gemm_tma_tiles"]
        if p and t:
            rows.append((tile, p, t, p["ms"] / t["ms"]))
    return rows


def measure_seed():
    """The seed article's GEMM as written (row-major tile order) against the grouped-order kernel with
    the same tile, warps and stages."""
    M, N, K = GEMM_SHAPE
    a, b, c = bench.gemm_operands(M, N, K)
    fns = {"seed_gemm": lambda: c.copy_(seed_gemm.seed_gemm(a, b)),
           "seed_gemm_grouped": lambda: gemm.matmul_tma(a, b, 128, 128, 64, num_stages=3, num_warps=4, out=c),
           "cublas_gemm": lambda: torch.matmul(a, b, out=c)}
    ms = bench.checked_interleaved(fns, c, torch.matmul(a, b), tol=1e-2)
    cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3, num_warps=4)
    return [bench.record("03", n if n != "cublas_gemm" else "cublas_gemm_seed_run", t, shape=GEMM_SHAPE,
                         flops=gemm_flops(M, N, K), config={} if n == "cublas_gemm" else cfg,
                         baseline=None if n == "cublas_gemm" else "cublas_gemm_seed_run") for n, t in ms.items()]


def _recorded(names=None, shape=None):
    rec = bench.Recorded()
    return {r["name"] + (f"_s{r['config']['stages']}" if "stages" in r["config"] and r["name"].startswith("gemm_")
                         else ""): r
            for r in rec.all("03") if (shape is None or r["shape"] == list(shape))}, rec.label


def results(kind):
    """{name: record} for 'copy', 'small', 'transpose', 'gemm' or 'seed', a list of records for 'tiles'
    (names ending in _tiles; see best_per_tile): measured now (GPU) or recorded (CPU), and a label."""
    if kind == "tiles":  # one name per kernel across tiles and stages: a list, not {name: record}
        if MODE != "cpu":
            return measure_tiles(), f"measured live on {device_name()}"
        rec = bench.Recorded()
        return [r for r in rec.all("03") if r["name"].endswith("_tiles")], rec.label
    measure = {"copy": measure_copies, "small": lambda: measure_copies(SMALL_SHAPE, "_small"),
               "transpose": measure_transpose, "gemm": measure_gemm, "seed": measure_seed}[kind]
    if MODE != "cpu":
        recs = measure()
        return {r["name"] + (f"_s{r['config']['stages']}" if r["name"] in ("gemm_pointer", "gemm_tma") else ""): r
                for r in recs}, f"measured live on {device_name()}"
    shape = {"copy": COPY_SHAPE, "small": SMALL_SHAPE, "transpose": COPY_SHAPE, "gemm": GEMM_SHAPE,
             "seed": GEMM_SHAPE}[kind]
    recs, label = _recorded(shape=shape)
    keep = {"copy": lambda n: n.startswith(("torch_copy", "copy_")) and not n.endswith("_small"),
            "small": lambda n: n.endswith("_small"), "transpose": lambda n: "transpose" in n,
            "gemm": lambda n: n == "cublas_gemm" or (n.startswith("gemm_") and "_tiles" not in n),
            "seed": lambda n: "seed" in n}[kind]
    return {n: r for n, r in recs.items() if keep(n)}, label


@sliders(defaults=dict(BLOCK_M=64, BLOCK_N=128, stages=4, descriptor="device"),
         BLOCK_M=[32, 64, 128, 256], BLOCK_N=[64, 128, 256], stages=STAGES, descriptor=["device", "host"])
def tma_copy(BLOCK_M, BLOCK_N, stages, descriptor):
    """Widget: a persistent TMA copy - its box, its code, its shared memory, its bandwidth."""
    x = torch.empty(4, dtype=torch.float16, device=DEVICE)
    M, N = COPY_SHAPE
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, STAGES=stages, num_warps=4)
    if descriptor == "host":
        xd = TensorDescriptor(x, [M, N], [N, 1], [BLOCK_M, BLOCK_N])
        compiled = aot.compile_sm90(copy.copy_tma_host_loop_kernel, xd, xd, M, N, **meta)
    else:
        compiled = aot.compile_sm90(copy.copy_tma_loop_kernel, x, x, M, N, N, N, **meta)
    box = BLOCK_M * BLOCK_N * 2
    budget = smem.Budget(stages, box, compiled=compiled.shared)
    print(f"box {BLOCK_M}x{BLOCK_N} fp16 = {box // 1024} KiB per TMA load; {descriptor}-side tensor map")
    print(budget.text())
    budget.require()
    counts = compiled.counts()
    print(f"sm_90 code: {counts['cp.async.bulk.tensor load']} TMA load(s) and {counts['cp.async.bulk.tensor store']} "
          f"TMA store(s) in the code, {counts['mbarrier']} mbarrier operations, {counts['ld.global']} ld.global")
    config = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, stages=stages, descriptor=descriptor)
    xs = bench.randn(M, N) if MODE != "cpu" else None
    ys = torch.empty_like(xs) if xs is not None else None
    rate, base, where = bench.versus(
        lambda: copy.copy_tma_loop(xs, out=ys, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, STAGES=stages, descriptor=descriptor),
        lambda: ys.copy_(xs), rate=lambda ms: bench.gbps(4 * M * N, ms), lesson="03", name="copy_tma_sweep",
        config=config, shape=COPY_SHAPE, base_name="torch_copy")
    plots.report_versus("16384^2 fp16 copy", f"TMA {BLOCK_M}x{BLOCK_N}, {stages} stages, {descriptor}", rate,
                        "torch copy", base, "GB/s", where)


def sweep_configs():
    from .lab.widgets import combinations
    return list(combinations(tma_copy))


def benchmarks():
    records = measure_copies() + measure_copies(SMALL_SHAPE, "_small") + measure_transpose() + measure_gemm() \
        + measure_tiles() + measure_seed()
    x = bench.randn(*COPY_SHAPE)
    y = torch.empty_like(x)
    lim = smem.limit()
    for cfg in sweep_configs():
        if cfg["stages"] * cfg["BLOCK_M"] * cfg["BLOCK_N"] * 2 > lim:
            continue  # refused by the widget: more than one block's shared memory
        ms = bench.median_ms(lambda: copy.copy_tma_loop(x, out=y, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                                                        STAGES=cfg["stages"], descriptor=cfg["descriptor"]))
        records.append(bench.record("03", "copy_tma_sweep", ms, shape=COPY_SHAPE, config=cfg, nbytes=copy_bytes(x),
                                    baseline="torch_copy"))
    return records
