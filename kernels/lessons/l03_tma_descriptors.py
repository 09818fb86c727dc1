"""Lesson 03: TMA tensor descriptors. Copies, a transpose and a GEMM through tensor maps, against
torch, cuBLAS and the pointer kernels of lessons 01-02; the seed article's GEMM as a case study;
and where TMA does not pay."""
import math
import re

import matplotlib.pyplot as plt
import torch
import triton
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

from ..lab import aot, bench, measure, smem
from ..lab.errors import SharedMemoryError
from ..lab.mode import DEVICE
from ..lab.plan import Plan
from ..lab.widgets import Widget
from ..ops import copy, gemm, seed_gemm, transpose

LESSON = "03"
COPY_SHAPE = (16384, 16384)
GEMM_SHAPE = (8192, 8192, 8192)
SMALL_SHAPE = (256, 256)
GEMM_TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
STAGES = [1, 2, 3, 4]
TILES = [(128, 128, 64), (128, 256, 64), (256, 128, 64), (128, 128, 128), (64, 128, 64)]  # BLOCK_M, N, K
TILE_STAGES = [2, 3, 4]  # one stage loses to two at 128x256x64 (section 5): the sweep starts at two
SEED_CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3, num_warps=4)


def copy_variants(x, y):
    """[(name, config, launch)]: every copy of the lesson, each copying all of x into y."""
    v = [("torch_copy", {}, lambda: y.copy_(x)),
         ("copy_tile", {}, lambda: copy.copy_tile(x, out=y)),
         ("copy_tma", {}, lambda: copy.copy_tma(x, out=y)),
         ("copy_loop", {"stages": 4}, lambda: copy.copy_loop(x, out=y, stages=4))]
    v += [("copy_tma_loop", {"stages": s, "descriptor": "device"},
           (lambda s=s: copy.copy_tma_loop(x, out=y, stages=s))) for s in STAGES]
    v.append(("copy_tma_loop", {"stages": 4, "descriptor": "host"},
              lambda: copy.copy_tma_loop(x, out=y, stages=4, descriptor="host")))
    # copy_tma's schedule (one 64 x 128 tile per program) with host maps: which of the two costs, the schedule
    # or the maps every program of copy_tma writes?
    tiles = math.prod(triton.cdiv(n, b) for n, b in zip(x.shape, (64, 128)))
    v.append(("copy_tma_loop", {"stages": 1, "descriptor": "host", "programs": "one per tile"},
              lambda: copy.copy_tma_loop(x, out=y, stages=1, descriptor="host", programs=tiles)))
    return v


def launch_variants(x, y, stages=4):
    """The persistent TMA copy of ``copy_variants`` (device-side maps, and host-side maps built at every call) two
    more ways, the kernel and its configuration the same: host-side maps built once and reused, and each kind of
    map launched through a plan (``lab.plan``: Triton's dispatch and the course's checks skipped too)."""
    device = copy.tma_loop_launch(x, y, stages=stages)
    kernel, grid, args, meta = host = copy.tma_loop_launch(x, y, stages=stages, descriptor="host")
    return [("copy_tma_loop", {"stages": stages, "descriptor": "host", "maps": "built once"},
             lambda: kernel[grid](*args, **meta)),
            ("copy_tma_loop", {"stages": stages, "descriptor": "host", "maps": "built once", "plan": True}, Plan(*host)),
            ("copy_tma_loop", {"stages": stages, "descriptor": "device", "plan": True}, Plan(*device))]


def measure_copies(shape=COPY_SHAPE):
    x = bench.randn(*shape)
    y = torch.empty_like(x)
    return measure.timed(copy_variants(x, y), y, x, shape=shape, nbytes=bench.copy_bytes(x))


def measure_transpose():
    x = bench.randn(*COPY_SHAPE)
    y = x.new_empty(x.shape[::-1])
    variants = [("torch_transpose", {}, lambda: y.copy_(x.t())),
                ("transpose_tile", {}, lambda: transpose.transpose_tile(x, out=y)),
                ("transpose_tma", {}, lambda: transpose.transpose_tma(x, out=y))]
    return measure.timed(variants, y, x.t(), shape=COPY_SHAPE, nbytes=bench.copy_bytes(x))


def measure_stages(tile=GEMM_TILE):
    """cuBLAS, the pointer GEMM and the TMA GEMM at each stage count, one tile, interleaved."""
    a, b, c = bench.gemm_operands(*GEMM_SHAPE)
    variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c))]
    for s in STAGES:
        variants.append(("gemm_pointer", {**tile, "stages": s}, lambda s=s: gemm.matmul(a, b, stages=s, out=c, **tile)))
        variants.append(("gemm_tma", {**tile, "stages": s}, lambda s=s: gemm.matmul_tma(a, b, stages=s, out=c, **tile)))
    return measure.timed(variants, c, torch.matmul(a, b), 1e-2, watch={}, shape=GEMM_SHAPE,
                         flops=bench.gemm_flops(*GEMM_SHAPE))


def measure_small(shape=SMALL_SHAPE):
    """The copies at a size where launching is most of the work: each timed three ways - ``do_bench``
    (events around one launch, after an L2 flush), its host time per call, and its GPU time per call
    replayed from a CUDA graph (no host cost, no flush)."""
    x = bench.randn(*shape)
    y = torch.empty_like(x)
    variants = copy_variants(x, y) + launch_variants(x, y)
    records = measure.timed(variants, y, x, shape=shape, nbytes=bench.copy_bytes(x))
    for r, (_, _, launch) in zip(records, variants):
        r["host_us"] = round(bench.host_us(launch), 2)
        r["graph_ms"] = round(bench.graph_ms(launch), 5)
    return records


def measure_tiles():
    """Pointer and TMA GEMM at each tile of TILES and each stage count of TILE_STAGES, with cuBLAS timed in
    every tile's round: a tie at one tile says nothing about the others."""
    a, b, c = bench.gemm_operands(*GEMM_SHAPE)
    ref, records = torch.matmul(a, b), []
    for tile in TILES:
        cfg, name = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), tile)), "x".join(map(str, tile))
        variants = [("cublas_gemm", {"round": name}, lambda: torch.matmul(a, b, out=c))]
        for s in TILE_STAGES:
            variants.append(("gemm_pointer", {**cfg, "stages": s},
                             lambda s=s, cfg=cfg: gemm.matmul(a, b, stages=s, out=c, **cfg)))
            variants.append(("gemm_tma", {**cfg, "stages": s},
                             lambda s=s, cfg=cfg: gemm.matmul_tma(a, b, stages=s, out=c, **cfg)))
        fitting = []
        for v in variants:
            try:  # a tile whose stages do not fit shared memory fails at its first launch, not while timed
                v[2]()
                fitting.append(v)
            except (SharedMemoryError, OutOfResources):
                pass  # the lesson's text says that such stage counts are left out
        records += measure.timed(fitting, c, ref, 1e-2, watch={"round": name}, shape=GEMM_SHAPE,
                                 flops=bench.gemm_flops(*GEMM_SHAPE))
    return records


def measure_seed():
    """The seed article's GEMM as written (row-major tile order) against the grouped-order kernel with
    the same tile, warps and stages."""
    a, b, c = bench.gemm_operands(*GEMM_SHAPE)
    grouped = {k: v for k, v in SEED_CONFIG.items() if k != "stages"}
    variants = [("cublas_gemm", {}, lambda: torch.matmul(a, b, out=c)),
                ("seed_gemm", SEED_CONFIG, lambda: c.copy_(seed_gemm.seed_gemm(a, b))),
                ("seed_gemm_grouped", SEED_CONFIG,
                 lambda: gemm.matmul_tma(a, b, stages=SEED_CONFIG["stages"], out=c, **grouped))]
    return measure.timed(variants, c, torch.matmul(a, b), 1e-2, shape=GEMM_SHAPE, flops=bench.gemm_flops(*GEMM_SHAPE))


# CUtensorMapSwizzle (CUDA Driver API, cuTensorMapEncodeTiled): the value a tensor map stores -> the span in bytes
SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}


def tensor_maps(ptx):
    """The tensor maps a kernel writes on the device, read off its PTX (``tensormap.replace`` lines), in
    the order it writes them: [{"box": (rows, cols), "swizzle": bytes}]. A box dimension comes as a
    register set by ``mov.b32 %rN, value`` or as an immediate."""
    values = dict(re.findall(r"mov\.b32\s+(%r\d+), (\d+);", ptx))
    maps, box = [], {}
    for dim, arg in re.findall(r"tensormap\.replace\.tile\.box_dim\S*\s+\[[^]]*\], (0x\d+), ([^;]+);", ptx):
        box[int(dim, 16)] = int(values.get(arg.strip(), arg.strip()), 0)
        if len(box) == 2:  # dim 0 is the innermost (the columns of a row-major tile)
            maps.append({"box": (box[1], box[0])})
            box = {}
    swizzles = re.findall(r"tensormap\.replace\.tile\.swizzle_mode\S*\s+\[[^]]*\], (0x\d+);", ptx)
    for m, sw in zip(maps, swizzles):
        m["swizzle"] = SWIZZLE_BYTES[int(sw, 16)]
    return maps


def swizzle_choices(widths=(128, 64, 32, 16), rows=64):
    """What Triton 3.6 puts in the input's tensor map of the course's TMA copy (device side) for a
    ``rows`` x width fp16 tile: [(width, swizzle bytes, hardware box)], read off the sm_90 code."""
    x = torch.empty(4, dtype=torch.float16, device=DEVICE)
    found = []
    for w in widths:
        comp = aot.compile_sm90(copy.copy_tma_kernel, x, x, 16384, 16384, 16384, 16384,
                                BLOCK_M=rows, BLOCK_N=w, num_warps=4)
        m = tensor_maps(comp.ptx)[0]
        found.append((w, m["swizzle"], m["box"]))
    return found


def ragged_store(M=300, N=200, box=(128, 64)):
    """The course's TMA copy of an M x N fp16 tensor into the top-left corner of a NaN-filled buffer as
    large as the boxes reach (a view with the buffer's row stride): (inside exact, outside untouched).
    The edge boxes reach past the tensor map's shape; TMA must write nothing there."""
    rows, cols = -(-M // box[0]) * box[0], -(-N // box[1]) * box[1]
    x = torch.randn(M, N, device=DEVICE, dtype=torch.float16)
    buf = torch.full((rows, cols), float("nan"), device=DEVICE, dtype=torch.float16)
    copy.copy_tma(x, out=buf[:M, :N], BLOCK_M=box[0], BLOCK_N=box[1])
    outside = torch.ones_like(buf, dtype=torch.bool)
    outside[:M, :N] = False
    return torch.equal(buf[:M, :N], x), bool(buf[outside].isnan().all())


def draw_ragged(M=300, N=200, box=(128, 64)):
    """The grid of TMA boxes over an M x N tensor, the part of each edge box outside the tensor shaded."""
    bm, bn = box
    rows, cols = -(-M // bm), -(-N // bn)
    _, ax = plt.subplots(figsize=(6, 3.4))
    ax.add_patch(plt.Rectangle((0, 0), cols * bn, rows * bm, fc="0.92", ec="0.55", hatch="///", lw=0))
    ax.add_patch(plt.Rectangle((0, 0), N, M, fc="#9ecae1", ec="C0", lw=2))
    for i in range(rows + 1):
        ax.plot([0, cols * bn], [i * bm] * 2, color="k", lw=0.8)
    for j in range(cols + 1):
        ax.plot([j * bn] * 2, [0, rows * bm], color="k", lw=0.8)
    for i in range(rows):
        for j in range(cols):
            ax.text((j + 0.5) * bn, (i + 0.5) * bm, f"({i * bm},\n{j * bn})", ha="center", va="center", fontsize=6)
    ax.set(xlim=(0, cols * bn), ylim=(rows * bm, 0), aspect="equal", xticks=[0, N, cols * bn],
           yticks=[0, M, rows * bm], xlabel="column", ylabel="row")
    ax.tick_params(labelsize=7)
    note = dict(fontsize=8, xycoords="data", textcoords="axes fraction", arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.annotate(f"the tensor: {M} x {N} fp16\n(the map's shape)", (N / 2, M / 2), (1.15, 0.85), **note)
    # the arrow ends below the corner box's label, not on it
    ax.annotate("outside the tensor:\nfilled with zeros on load,\ndropped on store",
                ((N + cols * bn) / 2, rows * bm - 0.12 * bm), (1.15, 0.25), **note)
    ax.set_title(f"{bm} x {bn} boxes: {rows} x {cols} = {rows * cols} box coordinates, "
                 "each one TMA load and one store", fontsize=8)
    plt.show()


def results(run):
    """A run of this lesson (see RUNS): measured now on a GPU, recorded otherwise, with its label."""
    return measure.run(LESSON, run, RUNS[run])


def best_per_tile(records):
    """[(tile, best pointer record, best TMA record, pointer ms / TMA ms)] in TILES order, best = fewest ms
    over the stage counts; tiles lacking either kernel are left out."""
    rows = []
    for tile in TILES:
        cfg = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), tile))
        best = {kind: min((r for r in records if r["name"] == kind
                           and all(r["config"].get(k) == v for k, v in cfg.items())), key=lambda r: r["ms"], default=None)
                for kind in ("gemm_pointer", "gemm_tma")}
        p, t = best["gemm_pointer"], best["gemm_tma"]
        if p and t:
            rows.append((tile, p, t, p["ms"] / t["ms"]))
    return rows


class TmaCopy(Widget):
    """A persistent TMA copy - its box, its code, its shared memory, its bandwidth."""
    lesson = LESSON
    sliders = dict(BLOCK_M=[32, 64, 128, 256], BLOCK_N=[64, 128, 256], stages=STAGES, descriptor=["device", "host"])
    defaults = dict(BLOCK_M=64, BLOCK_N=128, stages=4, descriptor="device")
    title, base_label = "16384^2 fp16 copy", "torch copy"

    def compile(self, cfg):
        x = torch.empty(4, dtype=torch.float16, device=DEVICE)
        M, N = COPY_SHAPE
        meta = dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], stages=cfg["stages"], num_warps=4)
        if cfg["descriptor"] == "host":
            xd = TensorDescriptor(x, [M, N], [N, 1], [cfg["BLOCK_M"], cfg["BLOCK_N"]])
            return aot.compile_sm90(copy.copy_tma_host_loop_kernel, xd, xd, M, N, **meta)
        return aot.compile_sm90(copy.copy_tma_loop_kernel, x, x, M, N, N, N, **meta)

    def budget(self, cfg, compiled):
        return smem.Budget(cfg["stages"], cfg["BLOCK_M"] * cfg["BLOCK_N"] * 2, compiled=compiled.shared)

    def evidence(self, cfg, compiled):
        n = compiled.counts()
        block = f"block {cfg['BLOCK_M']}x{cfg['BLOCK_N']} fp16 = {cfg['BLOCK_M'] * cfg['BLOCK_N'] * 2 // 1024} KiB per stage"
        maps = tensor_maps(compiled.ptx)  # a device-side map is written by the kernel, so its box shows in the PTX
        if maps:
            (rows, cols), swizzle = maps[0]["box"], maps[0]["swizzle"]
            block += (f", moved as {cfg['BLOCK_N'] // cols} TMA box(es) of {rows}x{cols} ({swizzle}-byte swizzle); "
                      "device-side tensor map")
        else:  # a host-side map is encoded at launch, from the box and swizzle the compiler chose
            block += "; host-side tensor map (box and swizzle encoded at launch: section 6)"
        return [block,
                f"sm_90 code: {n['cp.async.bulk.tensor load']} TMA load(s) and {n['cp.async.bulk.tensor store']} "
                f"TMA store(s) in the code, {n['mbarrier']} mbarrier operations, {n['ld.global']} ld.global"]

    def query(self, cfg):
        return measure.Query(LESSON, "sweep", "copy_tma_loop", cfg, COPY_SHAPE,
                             lambda x, y: copy.copy_tma_loop(x, out=y, **cfg), against="torch_copy")

    def label(self, cfg):
        return f"TMA {cfg['BLOCK_M']}x{cfg['BLOCK_N']}, {cfg['stages']} stages, {cfg['descriptor']}"


tma_copy = TmaCopy()

RUNS = {"copies": measure_copies, "small": measure_small, "transpose": measure_transpose,
        "stages": measure_stages, "tiles": measure_tiles, "seed": measure_seed, "sweep": tma_copy.sweep}
