"""Lesson 06: beneath the descriptor. The TMA copy and ring of lessons 03-04 written by hand in CUDA C++
(kernels/ops/tma_cuda.py), swizzle and bank conflicts measured (banks_cuda, lab/swizzle), registers and
setmaxnreg read from compiled code, and clusters with TMA multicast (cluster_cuda); every run against its
baseline in the same run."""
import functools
import math
import re

import torch

from ..lab import bench, isa, measure, plots, smem, swizzle
from ..lab.errors import CourseError
from ..lab.widgets import Widget, choices
from ..ops import banks_cuda as bc
from ..ops import cluster_cuda as cc
from ..ops import copy, gemm
from ..ops import tilelang_kernels as tk
from ..ops import tma_cuda as tc

LESSON = "06"
NEEDS = "hopper"  # the CUDA here is sm_90a (TMA, clusters, multicast): it runs on a Hopper GPU only
COPY_SHAPE = (16384, 16384)
BOX_N = 128  # the ring's inner box: 128 fp16 = 256 bytes, allowed without a swizzle (no thread reads the tile)
# ring configurations of the "copy" run (box rows x cols, slots, CTAs per SM, swizzle): the default first
RINGS = [dict(BLOCK_M=64, BLOCK_N=128, stages=2, ctas_per_sm=4, swizzle=False),
         dict(BLOCK_M=64, BLOCK_N=128, stages=2, ctas_per_sm=1, swizzle=False),
         dict(BLOCK_M=64, BLOCK_N=128, stages=4, ctas_per_sm=2, swizzle=False),
         dict(BLOCK_M=128, BLOCK_N=128, stages=3, ctas_per_sm=1, swizzle=False),
         dict(BLOCK_M=64, BLOCK_N=64, stages=4, ctas_per_sm=4, swizzle=True)]
# multicast: a 256 MiB tensor split between the clusters (each tile wanted by the blocks of one cluster,
# mostly from HBM) and a 4 MiB one every cluster reads whole (it stays in L2)
MULTICAST = {"split": ((131072, 1024), False), "shared": ((2048, 1024), True)}
CLUSTERS = (2, 4)
REG_TILE = (128, 256, 64, 3)  # BLOCK_M, BLOCK_N, BLOCK_K, stages: the tile of lessons 02-04's GEMMs


def _ring(x, y, cfg):
    return tc.ring(x, out=y, box=(cfg["BLOCK_M"], cfg["BLOCK_N"]), stages=cfg["stages"],
                   ctas_per_sm=cfg["ctas_per_sm"], swizzle=cfg.get("swizzle", False), check=False)


def _no_timeouts(x, what):
    gave_up = tc.timeouts(x)
    if gave_up:
        raise tc.BarrierTimeout(f"{what}: {gave_up} CTAs gave up waiting on a barrier while timed")


# ---- the runs ----------------------------------------------------------------------------------------

def measure_copy(shape=COPY_SHAPE):
    """torch's copy, lesson 03's Triton TMA loop, the hand-written one-tile copy and rings, interleaved."""
    x = bench.randn(*shape)
    y = torch.empty_like(x)
    tc.timeouts(x)  # start the counter at zero
    variants = [("torch_copy", {}, lambda: y.copy_(x)),
                ("copy_tma_loop", {"stages": 4}, lambda: copy.copy_tma_loop(x, out=y, stages=4)),
                ("cuda_copy_tile", {"BLOCK_M": 64, "BLOCK_N": 128}, lambda: tc.copy_tile(x, out=y, check=False))]
    variants += [("cuda_ring", cfg, (lambda cfg=cfg: _ring(x, y, cfg))) for cfg in RINGS]
    records = measure.timed(variants, y, x, shape=shape, nbytes=bench.copy_bytes(x))
    _no_timeouts(x, "copy run")
    return records


def measure_banks():
    """The four column reads (4 and 16 bytes per thread, plain and 128-byte swizzled) on fresh data, each
    checked against torch's reference, then timed; the plain read of each width is its baseline. The
    passes per warp read derived by the course are in each record's config."""
    blocks = 16 * measure.sm_count()
    x = bc.tile(blocks)
    out = torch.empty(blocks * bc.THREADS, dtype=torch.int32, device=x.device)
    records = []
    for width in bc.WIDTHS:
        variants = []
        for swizzled in (False, True):
            name = f"read{width}_{'swizzled' if swizzled else 'plain'}"
            d = bc.derived(width, swizzled)
            fn = (lambda w=width, s=swizzled: bc.column_read(x, w, s, bc.ITERS, out))
            out.fill_(-559038737)  # 0xDEADBEEF: a thread that writes nothing is seen
            fn()
            if not torch.equal(out, bc.reference(x, width, bc.ITERS)):
                raise CourseError(f"{name} read wrong values")
            variants.append((name, {"width": width, "swizzle": "128B" if swizzled else "none", "iters": bc.ITERS,
                                    "passes": d["passes"], "ways": d["ways"]}, fn))
        # an int32 output cannot be poisoned with NaN: checked above, not by timed
        records += measure.timed(variants, out, None, checked=lambda name, cfg: False, shape=tuple(x.shape),
                                 nbytes=blocks * bc.THREADS * bc.ITERS * width)
    bc.check_status(x.device)
    return records


def measure_multicast():
    """Per data set and cluster size: each block loading its own copy of every tile against one multicast
    per tile for the cluster, the same cluster shape and loop, checked, then timed in turn. The bytes
    read from L2 are derived (``cluster_cuda.traffic``), not counted."""
    records = []
    for setup, (shape, shared) in MULTICAST.items():
        x = torch.randn(*shape, device="cuda", dtype=torch.float16)
        timeouts = torch.zeros(1, dtype=torch.int32, device="cuda")
        for c in CLUSTERS:
            cfg = dict(cluster=c, clusters=128 // c, shared=shared, rows=128, stages=4)
            out = torch.empty(128, cc.COLS, device="cuda")
            ref = cc.tile_sums_reference(x, **cfg).float()
            variants = []
            for mc in (False, True):
                t = cc.traffic(shape, multicast=mc, **cfg)
                variants.append((f"{'multicast' if mc else 'own'}_c{c}",
                                 {**cfg, "data": setup, "multicast": mc, "l2_read_bytes": t["l2_reads"]},
                                 (lambda mc=mc: cc.tile_sums(x, multicast=mc, out=out, timeouts=timeouts, **cfg))))
            records += measure.timed(variants, out, ref, 1e-3, shape=shape,
                                     nbytes=cc.traffic(shape, **cfg)["delivered"])
        cc.check_timeouts(timeouts, f"multicast run ({setup})")
    return records


# what bounds tile_sums (section 7): (data, cluster, multicast, clusters, rows, stages), each timed in turn
LIMITS_BASE = dict(cluster=2, multicast=False, clusters=64, rows=128, stages=4)
LIMITS = ([dict(clusters=n) for n in (4, 16, 64, 132, 198)]                      # blocks: 8 to 396 (3 per SM)
          + [dict(rows=r) for r in (32, 64, 256)]                                # the tile's bytes, 4 stages
          + [dict(rows=64, stages=s) for s in (1, 2, 8)]                         # slots in the ring
          + [dict(cluster=c, multicast=m, clusters=n) for c in CLUSTERS for n in (64 // c * 2, 396 // c)
             for m in (False, True) if m or c != LIMITS_BASE["cluster"]])  # clusters of 2, own copies: above


def measure_multicast_limits():
    """What bounds ``tile_sums``: the same loop with more or fewer blocks, larger or smaller tiles, more or fewer
    slots, on the L2-resident data and the HBM one, and own copies against multicast at one and three blocks
    per SM. Each setting checked against torch once, then all timed in turn. A record's ``per_tile_ns`` is the
    time per tile of one block (every block streams ``tiles`` tiles): if it stays put while the blocks
    multiply, each block's own turnaround is the limit, not a bandwidth they share."""
    records = []
    for setup, (shape, shared) in MULTICAST.items():
        x = torch.randn(*shape, device="cuda", dtype=torch.float16)
        timeouts = torch.zeros(1, dtype=torch.int32, device="cuda")
        fns, cfgs = {}, {}
        for i, change in enumerate(LIMITS):
            cfg = {**LIMITS_BASE, **change, "shared": shared}
            mc = cfg.pop("multicast")
            out, _ = cc.tile_sums(x, multicast=mc, timeouts=timeouts, **cfg)
            ref = cc.tile_sums_reference(x, **cfg).float()
            if not torch.allclose(out, ref, rtol=1e-3, atol=1e-2):
                raise AssertionError(f"tile_sums {cfg} multicast={mc}: wrong sums")
            fns[i] = lambda mc=mc, cfg=cfg, out=out: cc.tile_sums(x, multicast=mc, out=out, timeouts=timeouts, **cfg)
            cfgs[i] = (mc, cfg)
        ms = bench.interleaved_ms(fns)
        cc.check_timeouts(timeouts, f"multicast limits ({setup})")
        for i, (mc, cfg) in cfgs.items():
            p, t = cc.plan(shape, **cfg), cc.traffic(shape, multicast=mc, **cfg)
            # clusters resident at once (CUDA's occupancy query): more than that run in a second wave
            waves = math.ceil(p["clusters"] / cc.module().max_active_clusters(cfg["cluster"], cfg["rows"], cfg["stages"]))
            rec = measure.results.record("tile_sums", ms[i], shape=shape, nbytes=t["delivered"],
                                  config={**cfg, "data": setup, "multicast": mc, "blocks": p["blocks"],
                                          "tiles": p["tiles"], "tile_bytes": p["tile_bytes"],
                                          "l2_read_bytes": t["l2_reads"], "waves": waves})
            rec["per_tile_ns"] = round(ms[i] * 1e6 / (p["tiles"] * waves), 1)
            records.append(rec)
    return records


def results(run):
    """A run of this lesson (see RUNS): measured now on a Hopper GPU, recorded otherwise, with its label."""
    return measure.run(LESSON, run, RUNS[run], NEEDS)


def print_copy(run):
    for r in run:
        extra = ", ".join(f"{k}={v}" for k, v in r["config"].items())
        base = run.find("torch_copy")
        print(f"{r['name']:15s} {extra:55s} {r['gbps']:6.0f} GB/s  {base['ms'] / r['ms']:5.3f}x torch")


def print_banks(run):
    """Each read beside the passes the course derived, and the measured ratio beside the derived one."""
    print(f"{'read':17s} {'ms':>7s} {'passes/read':>12s} {'ways':>5s}   (passes and ways derived by kernels.lab.swizzle)")
    for r in run:
        print(f"{r['name']:17s} {r['ms']:7.3f} {r['config']['passes']:12d} {r['config']['ways']:5d}")
    for w in bc.WIDTHS:
        p, s = run.find(f"read{w}_plain"), run.find(f"read{w}_swizzled")
        print(f"{w:2d}-byte reads: swizzled {p['ms'] / s['ms']:.1f}x faster measured; "
              f"{p['config']['passes'] / s['config']['passes']:.0f}x fewer passes derived")


def print_multicast(run):
    for data in MULTICAST:
        for c in CLUSTERS:
            own, mc = run.find(f"own_c{c}", data=data), run.find(f"multicast_c{c}", data=data)
            print(f"{data:6s} cluster {c}: own copies {own['ms'] * 1e3:7.1f} us, multicast {mc['ms'] * 1e3:7.1f} us "
                  f"-> multicast {own['ms'] / mc['ms']:.3f}x; L2 reads (derived) "
                  f"{own['config']['l2_read_bytes'] / 2**20:.0f} -> {mc['config']['l2_read_bytes'] / 2**20:.0f} MiB")


def own_copies(records, **want):
    """The limits run's own-copies records whose config has every ``want`` value."""
    return [r for r in records if not r["config"]["multicast"] and all(r["config"][k] == v for k, v in want.items())]


def multicast_pairs(records):
    """[(own copies, multicast)]: each multicast record of the limits run beside its own-copies twin (same data,
    cluster and blocks, 16 KiB tiles, 4 stages)."""
    return [(own_copies(records, data=c["data"], cluster=c["cluster"], blocks=c["blocks"], rows=128, stages=4)[0], r)
            for r in records if (c := r["config"])["multicast"]]


def print_multicast_limits(run):
    """The limits run, compactly: one block's time per tile (ns) as the blocks multiply, as the tile and the ring
    change, and multicast's time against own copies at one and three blocks per SM."""
    for data in MULTICAST:
        by = lambda key, **want: sorted(own_copies(run, data=data, cluster=2, **want), key=lambda r: r["config"][key])
        rows = by("blocks", rows=128, stages=4)
        print(f"{data:6s} 16 KiB tiles, 4 stages: "
              + ", ".join(f"{r['config']['blocks']} blocks {r['per_tile_ns']:.0f}" for r in rows)
              + f" ns per tile per block ({rows[0]['gbps'] / 1000:.2f} to {rows[-1]['gbps'] / 1000:.2f} TB/s "
              f"into shared memory)")
        print(f"{'':6s} 128 blocks, by tile: "
              + ", ".join(f"{r['config']['tile_bytes'] // 1024} KiB {r['per_tile_ns']:.0f}"
                          for r in by("tile_bytes", blocks=128, stages=4))
              + " ns; 8 KiB tiles by slots: "
              + ", ".join(f"{r['config']['stages']} {r['per_tile_ns']:.0f}" for r in by("stages", blocks=128, rows=64))
              + " ns")
        print(f"{'':6s} multicast against own copies (time): "
              + ", ".join(f"{mc['config']['blocks']} blocks in {mc['config']['cluster']}s {own['ms'] / mc['ms']:.2f}x"
                          for own, mc in multicast_pairs(run) if mc["config"]["data"] == data))


def measure_short_count(counts=(0, 16, 4096, 8192, 16368), trials=10, box=(64, 128)):
    """A TMA byte count BELOW the tile's bytes, run: 64 one-tile CTAs (``tma_cuda``'s copy) with each barrier
    armed for ``count`` bytes while every load delivers 16 KiB, every wait bounded (2 ms), the output poisoned
    with NaN first; ``trials`` launches per count. Per count: the CTAs whose wait gave up (their tile never
    stored), the tiles stored exactly, and the tiles stored wrong (the store read the buffer before the load had
    filled it). The tile's own count is run beside them as the control."""
    x = torch.randn(512, 1024, device="cuda", dtype=torch.float16)  # 8 x 8 tiles of 64 x 128
    p = tc.plan_copy(x.shape, x.element_size(), box)
    as_tiles = lambda t: t.view(8, 64, 8, 128).permute(0, 2, 1, 3).reshape(64, -1)
    records = []
    for count in (*counts, p.tile_bytes):
        gave_up = exact = 0
        for _ in range(trials):
            y = torch.full_like(x, float("nan"))
            tc.timeouts(x)
            tc.module().copy_tile(x, y, box[0], box[1], False, count, 2_000_000, p.smem, tc._counter(x))
            gave_up += tc.timeouts(x)
            exact += int((as_tiles(y) == as_tiles(x)).all(1).sum())
        ctas = trials * p.grid
        # an outcome, not a timing: "ms" is None (results' schema)
        records.append({"name": "short_count", "config": {"count": count, "tile_bytes": p.tile_bytes},
                        "shape": list(x.shape), "dtype": "float16", "ms": None, "ctas": ctas, "timed_out": gave_up,
                        "exact": exact, "wrong": ctas - gave_up - exact})
    return records


def print_short_count(run):
    for r in run:
        c = r["config"]
        print(f"count {c['count']:5d} B of a {c['tile_bytes']} B tile: of {r['ctas']} CTAs, {r['timed_out']:3d} waits gave up, "
              f"{r['exact']:3d} tiles stored right, {r['wrong']:3d} stored wrong")


# ---- reading the CUDA ------------------------------------------------------------------------------

def cuda_excerpt(src, first, last):
    """The lines of ``src`` from the first one holding ``first`` to the next one holding ``last``."""
    lines = src.splitlines()
    i = next(n for n, line in enumerate(lines) if first in line)
    j = next(n for n in range(i, len(lines)) if last in lines[n])
    return "\n".join(lines[i:j + 1])


def sass_protocol(code, name="tma_copy_tile", pattern=r"UTMALDG|UTMASTG|SYNCS|UBLKCP|ELECT"):
    """The SASS lines of one kernel that carry the protocol: TMA (UTMA*), the mbarrier unit (SYNCS)."""
    return [line.split("\t")[-1].strip() for line in code.kernel_sass(name).splitlines() if re.search(pattern, line)]


def registers(tile=REG_TILE):
    """{kernel: cuobjdump -res-usage of its cubin} for lesson 02's cp.async GEMM and lesson 03's TMA GEMM at
    the same tile and stage count, as a launch at 8192^3 compiles them."""
    found = {}
    for name, kernel in (("gemm_pointer (cp.async)", gemm.matmul_kernel), ("gemm_tma (TMA)", gemm.matmul_tma_kernel)):
        comp = gemm.compile_sm90(kernel, *tile)
        found[name] = {**isa.resources(comp.cubin), "warps": comp.num_warps, "LDGSTS": comp.counts()["LDGSTS"],
                       "UTMALDG": comp.counts()["UTMALDG"]}
    return found


def setmaxnreg_lines(stages=3):
    """The lines of lesson 05's TileLang GEMM (128 x 256 x 64) that move registers between warpgroups."""
    from . import l05_tilelang as l05
    src = tk.compile("gemm", M=8192, N=8192, K=8192, stages=stages, **l05.TILE).get_kernel_source()
    keep = ("warpgroup_reg_", "__launch_bounds__", "threadIdx.x) >= ", "threadIdx.x) < ")
    return [line.strip() for line in src.splitlines() if any(k in line for k in keep)]


def sm80_copy_counts():
    """Lesson 03's device-descriptor TMA copy (64 x 128) compiled by Triton for sm_80 (an A100) and for sm_90,
    instruction counts of each PTX; None where Triton's interpreter holds this process (CPU mode)."""
    from ..lab import aot
    from ..lab.mode import DEVICE, INTERPRET
    if INTERPRET:
        return None
    x = torch.empty(4, dtype=torch.float16, device=DEVICE)
    args, meta = (x, x, 16384, 16384, 16384, 16384), dict(BLOCK_M=64, BLOCK_N=128, num_warps=4)
    return {f"sm_{t[1]}": isa.count_ptx(aot.compile_here(copy.copy_tma_kernel, args, meta, target=t).asm["ptx"])
            for t in (("cuda", 80, 32), aot.SM90)}


def memory_rungs():
    """Lesson 00's three latency rungs (shared memory, L2, HBM), as recorded or measured there."""
    from . import l00_memory_wall as l00
    return l00.hierarchy()


def explore_swizzle():
    """The swizzle explorer: mode, rows, row bytes and dtype from dropdowns, drawn by ``swizzle.draw``; a box
    TMA refuses prints the reason instead."""
    def draw(mode, rows, row_bytes, dtype):
        try:
            plots.show(swizzle.draw(mode, rows, row_bytes, dtype))
        except CourseError as e:
            print(f"TMA refuses this box: {e}")
    return choices(draw, mode=["128B", "64B", "32B", "none"], rows=[8, 16, 4, 32], row_bytes=[128, 64, 32, 256],
                   dtype=["float16", "float32", "int8"])


@functools.lru_cache(maxsize=None)
def multicast_run():
    """The multicast run of section 7, measured once per session (or the recorded one)."""
    return results("multicast")


def explore_clusters():
    """Cluster size and data from dropdowns: own copies against multicast, the time and the L2 reads each
    asks for (derived), from one run measured this session on a Hopper GPU, or the recorded one."""
    def draw(cluster, data):
        run = multicast_run()
        own, mc = run.find(f"own_c{cluster}", data=data), run.find(f"multicast_c{cluster}", data=data)
        fig, (t, b) = plots.subplots((7.5, 2.2), ncols=2)
        names = ["own copies", "multicast"]
        t.barh(names, [own["ms"] * 1e3, mc["ms"] * 1e3], color=["grey", "tab:blue"])
        t.set(xlabel="time (us)", title=f"cluster of {cluster}, {data} data")
        b.barh(names, [r["config"]["l2_read_bytes"] / 2**20 for r in (own, mc)], color=["grey", "tab:blue"])
        b.set(xlabel="L2 reads, MiB (derived)", yticks=[])
        fig.suptitle(run.label, fontsize=8)
        plots.show(fig)
        print(f"multicast / own copies: {own['ms'] / mc['ms']:.3f}x in time, "
              f"{own['config']['l2_read_bytes'] / mc['config']['l2_read_bytes']:.0f}x fewer L2 reads ({run.label})")
    return choices(draw, cluster=list(CLUSTERS), data=list(MULTICAST))


# ---- the widget: the hand-written ring at each setting ---------------------------------------------

class TmaRing(Widget):
    """The hand-written TMA ring: its slots, CTAs per SM, its code and its shared memory."""
    lesson = LESSON
    sliders = dict(BLOCK_M=[64, 128], stages=list(tc.STAGES), ctas_per_sm=[1, 2, 4])
    defaults = dict(BLOCK_M=64, stages=2, ctas_per_sm=4)
    title, base_label = "16384^2 fp16 copy", "torch copy"

    def compile(self, cfg):
        return tc.compiled()  # nvcc, sm_90a: every ring is in this module (tma_ring_2 .. tma_ring_4)

    def budget(self, cfg, compiled):
        p = tc.plan_ring(COPY_SHAPE, 2, (cfg["BLOCK_M"], BOX_N), cfg["stages"], cfg["ctas_per_sm"],
                         measure.sm_count())  # refuses CTAs that do not all fit on an SM
        return smem.Budget(cfg["stages"], p.tile_bytes, compiled=p.smem)

    def evidence(self, cfg, compiled):
        name = f"tma_ring_{cfg['stages']}"
        n = compiled.counts(name=name)
        p = tc.plan_ring(COPY_SHAPE, 2, (cfg["BLOCK_M"], BOX_N), cfg["stages"], cfg["ctas_per_sm"], measure.sm_count())
        return [f"{p.text()}; {cfg['ctas_per_sm']} CTA(s) x {cfg['stages']} slots = "
                f"{cfg['ctas_per_sm'] * cfg['stages']} tiles in flight per SM",
                f"{name} (sm_90a, nvcc): {n['cp.async.bulk.tensor load']} TMA load(s), "
                f"{n['cp.async.bulk.tensor store']} TMA store(s), {n['mbarrier']} mbarrier operations in the PTX; "
                f"SASS {n['UTMALDG']} UTMALDG, {n['UTMASTG']} UTMASTG, {n['SYNCS']} SYNCS"]

    def query(self, cfg):
        config = {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": BOX_N, "stages": cfg["stages"], "ctas_per_sm": cfg["ctas_per_sm"]}
        return measure.Query(LESSON, "sweep", "cuda_ring", config, COPY_SHAPE,
                             lambda x, y: _ring(x, y, config), against="torch_copy", needs=NEEDS)

    def label(self, cfg):
        return f"ring {cfg['BLOCK_M']}x{BOX_N}, {cfg['stages']} slots, {cfg['ctas_per_sm']}/SM"


tma_ring = TmaRing()

RUNS = {"copy": measure_copy, "banks": measure_banks, "multicast": measure_multicast,
        "multicast_limits": measure_multicast_limits, "short_count": measure_short_count, "sweep": tma_ring.sweep}
