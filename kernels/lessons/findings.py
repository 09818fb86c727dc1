"""Findings: each verdict the course states in more than one place, written once.

A finding is its words (a template filled with figures), the records it rests on (lesson, run), how the
figures are read from them, and the condition the words assume. Lessons show a finding with
``show(key)``; the interview pack quotes ``text(key)``; ``tests/test_findings.py`` checks every condition
on the recorded results, so new records that contradict the words turn the suite red instead of leaving a
stale sentence behind. A lesson may add context around a finding, never a second verdict. ``RETIRED``
holds the sentences earlier versions stated and the records refuted; the test keeps them out of the
lessons, the pack, the glossary and the workshop guide."""
from dataclasses import dataclass, field
from typing import Callable

from ..lab import results

@dataclass
class Finding:
    words: str                      # the statement, with {figures} from ``figures``
    rests_on: list                  # [(lesson, run)]: the records the figures are read from
    figures: Callable = field(repr=False)   # store -> {name: value}
    holds: Callable = field(repr=False)     # figures -> [what fails] (empty: the words hold)


def _small(store, **config):
    r = store.find("03", "small", "copy_tma_loop", config=config)
    return r["host_us"], r["graph_ms"] * 1000


def _host_maps(store):
    dev, dev_gpu = _small(store, stages=4, descriptor="device")
    per_call, host_gpu = _small(store, stages=4, descriptor="host")
    once, _ = _small(store, stages=4, descriptor="host", maps="built once")
    plan, _ = _small(store, stages=4, descriptor="host", maps="built once", plan=True)
    dev_plan, _ = _small(store, stages=4, descriptor="device", plan=True)
    return dict(dev=dev, per_call=per_call, once=once, plan=plan, dev_plan=dev_plan, dev_gpu=dev_gpu, host_gpu=host_gpu)


def _one_tile(store):
    copies = {(r["name"], tuple(sorted(r["config"].items()))): r for r in store.select("03", "copies")}
    x = lambda *key: copies[key]["gbps"] / copies[("torch_copy", ())]["gbps"]
    one_tile = ("copy_tma_loop", (("descriptor", "host"), ("programs", "one per tile"), ("stages", 1)))
    from . import l07_shapes_and_waves as l07
    l07_copies = l07.copy_questions(store.select("07", "copy"))
    q = {k: ratio for k, (_, ratio) in l07_copies.items()}
    return dict(device=x("copy_tma", ()), host=x(*one_tile),
                ring=x("copy_tma_loop", (("descriptor", "host"), ("stages", 4))),
                ms03=copies[one_tile]["ms"], ms07=l07_copies[("registers", "one tile per program")][0]["ms"],
                l07_triton=q[("registers", "one tile per program")],
                l07_triton_ring=q[("registers", "persistent ring")], l07_cuda=q[("no registers", "one tile per program")],
                l07_cuda_ring=q[("no registers", "persistent ring")])


def _in_flight(store):
    from . import l07_shapes_and_waves as l07
    sweep = [(l07.in_flight_kib(r["config"]), x) for r, x in l07.sweep(store.select("07", "copy"))]
    at = lambda kib: max(x for k, x in sweep if k == kib)
    return dict(at16=at(16), at48=at(48), beyond=max(x for k, x in sweep if k > 48))


def _default(store):
    from . import l07_shapes_and_waves as l07
    recs = store.select("07", "default")
    called, plan = l07.ratios(recs, "gemm_lesson04"), l07.ratios(recs, "gemm_lesson04_plan")
    at = lambda got, shape: min(got[(shape, d)] for d in l07.DTYPES)
    return dict(c2048=at(called, (2048, 2048, 2048)), p2048=at(plan, (2048, 2048, 2048)),
                p1024=max(plan[((1024,) * 3, d)] for d in l07.DTYPES),
                p16=max(plan[((16, 4096, 4096), d)] for d in l07.DTYPES),
                big=min(plan[((8192,) * 3, d)] for d in l07.DTYPES))


def _warp_specialize(store):
    """The sm_90 PTX of lesson 04's kernel (128x256x64, 3 stages) and of lesson 07's host-map kernel at its two
    formerly warp-specialised configurations, each compiled with and without ``warp_specialize`` (ahead of time:
    no GPU needed, the code a launch gets)."""
    import torch
    from ..lab import aot
    from ..ops import gemm
    same = []
    same.append(len({gemm.compile_sm90(gemm.matmul_tma_persistent_kernel, 128, 256, 64, 3, TMA_STORE=True,
                                       WARP_SPECIALIZE=ws).ptx for ws in (False, True)}) == 1)
    a, b, c = (torch.empty(*s, dtype=torch.float16) for s in ((8192, 8192),) * 3)
    for bn, stages in ((256, 3), (128, 4)):
        codes = set()
        for ws in (False, True):
            kernel, _, args, kw = gemm._host_launch(a, b, c, BLOCK_M=128, BLOCK_N=bn, BLOCK_K=64, stages=stages,
                                                    num_warps=8, warp_specialize=ws)
            codes.add(aot.compile_sm90(kernel, *args, **kw).ptx)
        same.append(len(codes) == 1)
    return dict(same=sum(same), kernels=len(same))


def _multicast(store):
    from . import l06_tma_by_hand as l06
    recs = store.select("06", "multicast_limits")
    per_tile = lambda **want: [r["per_tile_ns"] for r in l06.own_copies(recs, cluster=2, **want)]
    ratios = [own["ms"] / mc["ms"] for own, mc in l06.multicast_pairs(recs)]
    base = dict(rows=128, stages=4)
    return dict(t8=min(per_tile(blocks=8, **base)), t8_hi=max(per_tile(blocks=8, **base)),
                t128=min(per_tile(blocks=128, **base)), t128_hi=max(per_tile(blocks=128, **base)),
                t4k=max(per_tile(blocks=128, rows=32, stages=4)),
                slots=[max(per_tile(blocks=128, rows=64, stages=s)) for s in (2, 4, 8)],
                peak=max(r["gbps"] for r in recs) / 1000, lo=min(ratios), hi=max(ratios), pairs=len(ratios))


FINDINGS = {
    "host-maps": Finding(
        "**Where a tensor map is built, and what a call costs.** Lesson 03's persistent TMA copy at 256 x 256, one "
        "kernel and one configuration, its two tensor maps built three ways. Host time per call: built on the "
        "device by every program {dev:.0f} µs; built on the host at every call {per_call:.0f} µs; built on the host "
        "once and reused {once:.0f} µs. GPU time (CUDA graph): {dev_gpu:.1f} µs with device-side maps, "
        "{host_gpu:.1f} µs with host-side ones. So host-side maps save GPU time, since no program writes a map, and "
        "save host time only when they are built once. A plan (Triton's dispatch and the course's checks done "
        "once, the launch replayed) cut the recorded call to {dev_plan:.0f} µs with device-side maps and {plan:.0f} "
        "µs with host-side maps built once; against maps built once alone that difference is within the "
        "run-to-run spread of host times (several µs). The order of the first three is what held.",
        [("03", "small")], _host_maps,
        lambda f: [m for m, ok in (("host maps per call cost more host time than device maps", f["per_call"] > f["dev"]),
                                   ("maps built once cost less than device maps", f["once"] < f["dev"]),
                                   ("a plan cuts the call", f["dev_plan"] < 0.7 * f["dev"] and f["plan"] < f["per_call"]),
                                   ("host maps save GPU time", f["host_gpu"] < 0.8 * f["dev_gpu"])) if not ok]),
    "one-tile": Finding(
        "**One tile per program, with TMA.** In lesson 03's copy run (16384² fp16, against torch's copy in the same "
        "run), one 64 x 128 tile per program reaches {device:.3f}x with tensor maps built on the device by every "
        "program, and {host:.3f}x with host-side maps, against {ring:.3f}x for the persistent ring (4 stages, host "
        "maps). Lesson 07's copy study has one tile per program as the fastest TMA copy in Triton ({l07_triton:.3f}x, "
        "ring {l07_triton_ring:.3f}x) and in CUDA ({l07_cuda:.3f}x, ring {l07_cuda_ring:.3f}x); its Triton one-tile "
        "record holds the same time as lesson 03's ({ms07:.5f} ms and {ms03:.5f} ms), so that figure is not a second "
        "timing of the copy, only the same one over lesson 07's own torch copy: the CUDA copy is the independent "
        "agreement. The two one-tile copies of lesson 03 differ in where their maps are built: a map written by every "
        "program costs, the schedule does not.",
        [("03", "copies"), ("07", "copy")], _one_tile,
        lambda f: [m for m, ok in (("device maps lose", f["device"] < f["host"] - 0.05),
                                   ("one tile per program beats the ring in lesson 03", f["host"] >= f["ring"]),
                                   ("and in both languages in lesson 07", f["l07_triton"] > f["l07_triton_ring"]
                                    and f["l07_cuda"] > f["l07_cuda_ring"]),
                                   ("one timing behind both Triton one-tile figures", f["ms03"] == f["ms07"]))
                   if not ok]),
    "in-flight": Finding(
        "**Bytes in flight for a copy.** Lesson 07's sweep of the TMA copy (16384² fp16): with 16 KiB of loads in "
        "flight per SM it reaches {at16:.2f}x torch's copy; near 48 KiB it reaches {at48:.3f}x, and past 48 KiB at "
        "most {beyond:.3f}x: the plateau starts near 48 KiB per SM. Little's law with lesson 00's idle latency "
        "predicts less; the gap is the latency under load, longer than idle (a hypothesis: the course does not "
        "time a loaded access).",
        [("07", "copy")], _in_flight,
        lambda f: [m for m, ok in (("latency-bound at 16 KiB", f["at16"] < 0.65),
                                   ("flat past 48 KiB", f["beyond"] <= f["at48"] + 0.005)) if not ok]),
    "default-config": Finding(
        "**Configuration or call?** Lesson 04's default configuration timed in turn with cuBLAS, called as lesson 04 "
        "calls it and through a plan. Planned, it is {p1024:.2f}x at 1024³ (32 tiles for 132 SMs) and {p16:.2f}x at "
        "M = 16: there the configuration is wrong for the shape, and at 8192³ at least {big:.2f}x. Called, the "
        "figure also carries the host's work per call whenever that outlasts `do_bench`'s L2 clearing (section 4), "
        "so, we suppose (the run does not time the host), it moves with how fast the host is during the run: at "
        "2048³ the recorded run has {c2048:.2f}x called against {p2048:.2f}x planned, and a live run may show no "
        "gap at all. The plan's figure is the "
        "configuration's own.",
        [("07", "default")], _default,
        lambda f: [m for m, ok in (("the call costs at 2048^3", f["p2048"] > f["c2048"] + 0.3),
                                   ("the configuration costs at 1024^3 and M=16", f["p1024"] < 0.6 and f["p16"] < 0.6),
                                   ("near cuBLAS at 8192^3", f["big"] >= 0.95)) if not ok]),
    "warp-specialize": Finding(
        "**`warp_specialize=True` on the course's GEMMs.** Compiled for sm_90 with Triton 3.6, with and without the "
        "flag, lesson 04's persistent kernel and lesson 07's host-map kernel at 128 x 256 x 64 (3 stages) and "
        "128 x 128 x 64 (4 stages), all with 8 warps and the flattened persistent loop: the PTX is the same in "
        "{same} of {kernels}. The flag is dropped without a warning: no producer and consumer warps, no "
        "`setmaxnreg`. (Checked by the course on 2026-12-01, also for lesson 08's FP8 kernel: the same. Compiled "
        "without `flatten` and with 4 warps, a one-tile-per-program GEMM with pointer stores did split into a "
        "producer and two consumer warp groups with `setmaxnreg`.) So the search tries no warp-specialised "
        "configuration: it would time the same code twice under two names. The recorded screens of lessons 07 and "
        "08 predate this and still hold such entries, which the search leaves out; against their twins, on identical "
        "code, they differ by up to 17% (FP8 at 8192 x 8192 x 4096: 1247 against 1499 TFLOP/s; they were timed "
        "last): a measure of how far one short timing moves.",
        [], _warp_specialize,
        lambda f: [] if f["same"] == f["kernels"] else [f"the flag changed the code of {f['kernels'] - f['same']}"]),
    "multicast": Finding(
        "**What bounds lesson 06's multicast loop.** One block's time per 16 KiB tile is {t8:.0f}-{t8_hi:.0f} ns "
        "with 8 blocks and {t128:.0f}-{t128_hi:.0f} ns with 128 (one per SM), on the tensor read from HBM and on "
        "the one that stays in L2 alike; with 4 KiB tiles it is still {t4k:.0f} ns, and 2, 4 or 8 slots in the "
        "ring change it by a few percent. So each block's own turnaround per tile sets the pace, not a bandwidth "
        "the blocks share. With three blocks per SM the blocks take in up to {peak:.1f} TB/s, and multicast, which "
        "halves or quarters the L2 reads, leaves the time at {lo:.2f}x to {hi:.2f}x of own copies over {pairs} "
        "pairs. This loop cannot show what multicast does to time: that needs a loop limited by L2's bandwidth, "
        "which the course has not built. (What the turnaround is made of is a hypothesis: the block reading and "
        "summing its tile, then the barrier handover and refill.)",
        [("06", "multicast_limits")], _multicast,
        lambda f: [m for m, ok in (("per-tile time flat from 8 to 128 blocks", f["t128_hi"] < 1.15 * f["t8"]),
                                   ("2 to 8 slots within a few percent", max(f["slots"]) < 1.05 * min(f["slots"])),
                                   ("multicast within 5% of own copies", 0.95 < f["lo"] and f["hi"] < 1.05))
                   if not ok]),
}

# sentences earlier versions stated that the records above refute (the test keeps them out)
RETIRED = {
    "host-maps": ["host-side maps are the cure", "tensor maps built on the host, no allocation"],
    "one-tile": ["does not pay for one tile per program", "for one tile per program (the load waits",
                 "Lesson 07's copy study agrees"],
    "in-flight": ["about ten kilobytes per SM"],
    "default-config": ["it is not that the kernel is slow"],
    "warp-specialize": ["gives loading and computing to different warps"],
    "multicast": ["limited elsewhere: by HBM when the data is split"],
}


def figures(key, store=None):
    return FINDINGS[key].figures(store or results.recorded())


def text(key, store=None):
    """The finding's words with its figures, and where they were recorded."""
    store = store or results.recorded()
    runs = FINDINGS[key].rests_on
    # the days of the runs it rests on (lesson 07's copy study of 2026-11-30 was labelled with the file's 2026-12-01)
    where = store.label_of([r for lesson, run in runs for r in store.select(lesson, run)]) if runs else \
        "compiled for sm_90 here, no GPU needed"
    return FINDINGS[key].words.format(**figures(key, store)) + f" ({where})"


def show(key):
    """The finding as Markdown, for a lesson's cell."""
    from IPython.display import Markdown
    return Markdown(f"{text(key)}\n\n*[finding `{key}`, written once in `kernels/lessons/findings.py`]*")


def check(key, store=None):
    """What of the finding fails on the records (empty: it holds)."""
    return FINDINGS[key].holds(figures(key, store))
