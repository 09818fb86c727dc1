"""Nsight Compute's view of one kernel per lesson (lessons 01, 02, 03, 04 and 06), beside what the course's own
model says of it.

Each target is one launch of a course kernel (or its vendor baseline) at one configuration, on fresh random data,
its output poisoned and checked against torch before anything is profiled. ``figures(lesson)`` profiles that
lesson's targets now where ncu can (a Hopper GPU with ncu on the PATH), else reads the records of the run "ncu"
(``python -m kernels.tools.profile`` makes them): ``ms`` is ncu's duration of the one launch (not a ``do_bench``
median), ``ncu`` holds the counters by the short names of ``lab.ncu.METRICS``, ``date`` the day they were taken.
``show(lesson)`` prints them as that lesson reads them."""
import datetime
import re
import sys
from dataclasses import dataclass, field

from ..lab import bench, measure, ncu, results
from ..lab.errors import ArgumentError
from ..lab.swizzle import column_read as derived_read

COPY = (16384, 16384)   # lessons 01, 03 and 06's copies: fp16, 512 MiB a tensor
GEMM = (8192, 8192, 8192)
GEMM_TILE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}  # lessons 02-04's tile
READ_BLOCKS = 16 * 132  # lesson 06's column reads: 16 blocks per SM of the H200, as its banks run
READ = dict(rows=32, threads=256, iters=1024)  # as kernels.ops.banks_cuda: 32-row tiles, 8 warps, 1024 reads each


@dataclass(frozen=True, eq=False)
class Target:
    """One launch to profile: its lesson, its record's name, shape and config, and the ncu kernel name it must
    show (a regex). ``kind`` says what its work is counted in: "copy" (bytes read and written), "gemm" (FLOPs),
    "read" (lesson 06's column reads: the bytes the threads read from shared memory)."""
    lesson: str
    name: str
    shape: tuple
    kernel: str
    config: dict = field(default_factory=dict)
    baseline: str = None
    kind: str = "copy"

    def work(self):
        if self.kind == "copy":
            return {"nbytes": 2 * self.shape[0] * self.shape[1] * 2}  # every fp16 element read once, written once
        if self.kind == "read":
            return {"nbytes": READ_BLOCKS * READ["threads"] * self.config["iters"] * self.config["width"]}
        return {"flops": bench.gemm_flops(*self.shape)}


def _read(width, swizzled):
    return Target("06", f"read{width}_{'swizzled' if swizzled else 'plain'}", (READ_BLOCKS * READ["rows"], 64),
                  rf"column_read<{width}, {int(swizzled)}>",
                  {"width": width, "swizzle": "128B" if swizzled else "none", "iters": READ["iters"],
                                   **derived_read(128 if swizzled else 0, width)}, kind="read")


TARGETS = [
    # lesson 01: the 2D-tile copy (16-byte vector loads, coalesced) and the strided column walk
    Target("01", "copy_tile", COPY, r"^copy_tile_kernel", {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4}),
    Target("01", "copy_cols", COPY, r"^copy_cols_kernel", {"BLOCK": 1024}),
    # lesson 02: the pointer GEMM (cp.async) with one stage and with three
    Target("02", "gemm_pointer", GEMM, r"^matmul_kernel", {**GEMM_TILE, "stages": 1}, kind="gemm"),
    Target("02", "gemm_pointer", GEMM, r"^matmul_kernel", {**GEMM_TILE, "stages": 3}, kind="gemm"),
    # lesson 03: the TMA copy, one 64 x 128 tile per program (memory-bound)
    Target("03", "copy_tma", COPY, r"^copy_tma_kernel", {"BLOCK_M": 64, "BLOCK_N": 128}),
    # lesson 04: the persistent TMA GEMM (compute-bound), and cuBLAS at the same shape
    Target("04", "matmul_tma_persistent", GEMM, r"^matmul_tma_persistent_kernel", {**GEMM_TILE, "stages": 3},
           baseline="cublas", kind="gemm"),
    Target("04", "cublas", GEMM, r".", kind="gemm"),
    # lesson 04: the model's GEMM (the probe with loads and math on) at each stage count, as Proton traces it
    *[Target("04", "gemm_tma_probe", GEMM, r"^matmul_tma_probe_kernel", {**GEMM_TILE, "stages": s, "probe": "full"},
             kind="gemm") for s in (1, 2, 3, 4)],
    # lesson 06: the hand-written ring copy, and the column reads of a plain and a swizzled tile
    Target("06", "cuda_ring", COPY, r"^tma_ring_2", {"BLOCK_M": 64, "BLOCK_N": 128, "stages": 2, "ctas_per_sm": 4,
                                                     "swizzle": False}),
    *[_read(w, s) for w in (4, 16) for s in (False, True)],
]
LESSONS = sorted({t.lesson for t in TARGETS})
WRONG = 3  # the child's exit code when a target's output is wrong


def targets(lesson=None):
    if lesson is not None and lesson not in LESSONS:
        raise ArgumentError(f"no ncu targets for lesson {lesson!r}: the lessons profiled are {', '.join(LESSONS)}")
    return [t for t in TARGETS if lesson is None or t.lesson == lesson]


def target_of(r):
    """The target a record was made from."""
    return next(t for t in TARGETS if (t.lesson, t.name, t.config) == (r["lesson"], r["name"], r["config"]))


# ---- in the process ncu watches --------------------------------------------------------------------------

def launch(target):
    """(launch, its output, the reference that output must equal) of ``target`` on fresh random data, the output
    poisoned (NaN, or 0xDEADBEEF for the int32 reads) so that a launch that writes nothing is seen."""
    import torch

    from ..ops import banks_cuda as bc, copy, gemm, tma_cuda
    cfg, t = target.config, target
    if t.kind == "read":
        x = bc.tile(READ_BLOCKS)
        out = torch.full((READ_BLOCKS * bc.THREADS,), -559038737, dtype=torch.int32, device=x.device)
        return (lambda: bc.column_read(x, cfg["width"], cfg["swizzle"] != "none", cfg["iters"], out)), out, \
            bc.reference(x, cfg["width"], cfg["iters"])
    if t.kind == "copy":
        x = bench.randn(*t.shape)
        y = torch.full_like(x, float("nan"))
        fns = {"copy_tile": lambda: copy.copy_tile(x, out=y, **cfg),
               "copy_cols": lambda: copy.copy_cols(x, out=y, **cfg),
               "copy_tma": lambda: copy.copy_tma(x, out=y, **cfg),
               "cuda_ring": lambda: tma_cuda.ring(x, out=y, box=(cfg["BLOCK_M"], cfg["BLOCK_N"]),
                                                  stages=cfg["stages"], ctas_per_sm=cfg["ctas_per_sm"],
                                                  swizzle=cfg["swizzle"], check=False)}
        return fns[t.name], y, x
    a, b, c = bench.gemm_operands(*t.shape)
    c.fill_(float("nan"))
    tile = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "stages") if k in cfg}
    fns = {"cublas": lambda: torch.matmul(a, b, out=c),
           "gemm_pointer": lambda: gemm.matmul(a, b, out=c, **tile),
           "matmul_tma_persistent": lambda: gemm.matmul_tma_persistent(a, b, out=c, **tile),
           "gemm_tma_probe": lambda: gemm.matmul_tma_probe(a, b, out=c, **tile)}
    return fns[t.name], c, torch.matmul(a, b)


def agrees(target, out, ref):
    """Copies and reads exactly; a GEMM at fp16's tolerance (the course's 1e-2 relative error)."""
    import torch

    from ..lab.check import rel_err
    return torch.equal(out, ref) if target.kind != "gemm" else rel_err(out, ref) < 1e-2


def checked_launches(chosen):
    """{target: launch} of the ``chosen`` targets, each launched once and its output checked first (it compiles
    too); a wrong output stops the process before anything is profiled or timed."""
    launches = {}
    for t in chosen:
        fn, out, ref = launch(t)
        fn()
        if not agrees(t, out, ref):
            print(f"{t.name} {t.config}: output differs from torch's; nothing profiled or timed", file=sys.stderr)
            sys.exit(WRONG)
        launches[t] = fn
    return launches


def child(lesson=None):
    """Check each target's output, then launch each once inside a profiler range (what ncu profiles)."""
    import torch
    launches = checked_launches(targets(lesson))
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    for fn in launches.values():
        cudart.cudaProfilerStart()
        fn()
        torch.cuda.synchronize()
        cudart.cudaProfilerStop()


# ---- records -----------------------------------------------------------------------------------------------

def records(kernels, targets=TARGETS):
    """The course's records of ``kernels`` (``ncu.parse``d, one per target in order): each row checked to be its
    target's kernel, the duration as ``ms`` with the rate it gives."""
    if len(kernels) != len(targets):
        raise ncu.ProfiledError(f"ncu profiled {len(kernels)} kernels for {len(targets)} targets (a target launched "
                                "more or fewer than one kernel in its profiler range)")
    out = []
    for t, k in zip(targets, kernels):
        if not re.search(t.kernel, k["kernel"]):
            raise ncu.ProfiledError(f"{t.name}: ncu's kernel is {k['kernel']!r}, expected {t.kernel!r}")
        r = results.record(t.name, k["duration_ns"] / 1e6, shape=t.shape, config=t.config, baseline=t.baseline,
                           **t.work())
        r["ncu"] = {key: v for key, v in k.items() if key != "duration_ns"}
        r["date"] = datetime.date.today().isoformat()  # its own: recording it leaves the file's date alone
        out.append({"lesson": t.lesson, "run": "ncu", **r})
    return out


def profile(lesson=None, raw=None):
    """Profile ``lesson``'s targets (every target: None) under ncu now; their records."""
    return records(ncu.parse(ncu.profile("kernels.lessons.profiled", *(["--lesson", lesson] if lesson else []),
                                         raw=raw)), targets(lesson))


def figures(lesson):
    """The run "ncu" of ``lesson``: profiled now where ncu can, else recorded; where ncu was there and could not
    profile (no permission to read the counters, in a room), the recorded records, and the label says why. A wrong
    output or an unreadable table (``ncu.ProfiledError``) is raised, never covered by recorded figures."""
    try:
        return measure.run(lesson, "ncu", lambda: profile(lesson), needs="ncu")
    except ncu.NcuError as e:
        store = results.recorded()
        found = store.select(lesson, "ncu")
        why = f"ncu could not profile here: {ncu.reason(e)}"
        return measure.Run(found, f"{measure.recorded_label(store, found)} ({why})")


# ---- what each lesson reads ------------------------------------------------------------------------------

def _per(n, key, by):
    return n[key] / n[by] if n[by] else float("nan")


def name_of(r):
    return r["name"] + (f", {r['config']['stages']} stage{'s' * (r['config']['stages'] > 1)}"
                        if "stages" in r["config"] and r["name"] in ("gemm_pointer", "gemm_tma_probe") else "")


def counter(header, key, fmt, scale=1.0, only=None):
    """A column of one ncu counter: (header, record -> text); ``only``: rows of that kind, the others blank."""
    return header, lambda r: fmt.format(r["ncu"][key] / scale) if only in (None, r["kind"]) else ""


def ratio(header, key, by, fmt="{:.1f}", only=None):
    """A column of one counter per another (sectors per request, wavefronts per instruction)."""
    return header, lambda r: fmt.format(_per(r["ncu"], key, by)) if only in (None, r["kind"]) else ""


DRAM = [counter("DRAM TB/s", "dram_bytes_per_s", "{:.2f}", 1e12, "copy"),
        counter("DRAM % of peak", "dram_pct", "{:.0f}%", only="copy")]
CLOCK = counter("SM clock", "sm_hz", "{:.2f} GHz", 1e9)
TFLOPS = ("TFLOP/s", lambda r: f"{r['tflops']:.0f}")
# what each lesson's table shows, after the kernel and its duration: (header, record -> text)
COLUMNS = {
    "01": [*DRAM, ratio("sectors per request", "gld_sectors", "gld_requests", "{:.0f}"),
           ("model", lambda r: f"{expected_sectors(r['name'])}"),
           ("DRAM bytes / bytes copied", lambda r: f"{dram_bytes(r) / copied(r):.2f}"),
           counter("long-scoreboard stalls", "stall_long_scoreboard", "{:.1f}")],
    "02": [TFLOPS, counter("tensor pipe", "tensor_pct", "{:.0f}%"), counter("issue", "issue_pct", "{:.0f}%"),
           counter("long scoreboard", "stall_long_scoreboard", "{:.2f}"), counter("barrier", "stall_barrier", "{:.2f}"),
           counter("fixed wait", "stall_wait", "{:.2f}"), CLOCK],
    "03": [*DRAM, counter("L2 % of peak", "l2_pct", "{:.0f}%"), counter("SM % of peak", "sm_pct", "{:.0f}%"),
           counter("warps active", "warps_active_pct", "{:.0f}%"), counter("issue", "issue_pct", "{:.0f}%"),
           counter("long scoreboard", "stall_long_scoreboard", "{:.0f}"),
           counter("barrier", "stall_barrier", "{:.0f}")],
    "04": [TFLOPS, counter("tensor pipe", "tensor_pct", "{:.1f}%"), counter("DRAM % of peak", "dram_pct", "{:.0f}%"),
           CLOCK, counter("warps active", "warps_active_pct", "{:.1f}%"), counter("issue", "issue_pct", "{:.0f}%"),
           counter("barrier", "stall_barrier", "{:.2f}"), counter("wgmma", "stall_gmma", "{:.2f}")],
    "06": [*DRAM, ratio("passes per read (ncu)", "sld_wavefronts", "sld_insts", only="read"),
           ("course", lambda r: f"{r['config']['passes']}" if r["kind"] == "read" else ""),
           ratio("conflict passes (ncu)", "sld_conflicts", "sld_insts", only="read"),
           ("course", lambda r: f"{r['config']['passes'] - r['config']['ideal']}" if r["kind"] == "read" else ""),
           counter("short scoreboard", "stall_short_scoreboard", "{:.1f}")],
}


def expected_sectors(name):
    """32-byte sectors a warp's load asks for, from its access pattern (lesson 01): the tile copy's threads read
    16 bytes each, side by side (32 x 16 / 32); each thread of the column walk reads 2 bytes of its own row."""
    return {"copy_tile": 32 * 16 // 32, "copy_cols": 32}[name]


def copied(r):
    return target_of(r).work()["nbytes"]


def dram_bytes(r):
    return r["ncu"]["dram_bytes_per_s"] * r["ms"] * 1e-3


def table(lesson, recs):
    """The lesson's records as rows of text under its COLUMNS."""
    cols = COLUMNS[lesson]
    rows = [[name_of(r), f"{r['ms'] * 1e3:.0f}"] + [fn({**r, "kind": target_of(r).kind}) for _, fn in cols]
            for r in recs]
    heads = ["kernel (one launch)", "us"] + [h for h, _ in cols]
    widths = [max(len(x) for x in col) for col in zip(heads, *rows)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(heads)] + [line(r) for r in rows])


def show(lesson):
    """Print ``lesson``'s profile (stall figures: warps waiting for that reason per cycle a warp issued) and where
    it comes from."""
    run = figures(lesson)
    if not run.records:
        print(f"no ncu records for lesson {lesson}: {run.label}")
        return
    print(table(lesson, run.records))
    print(f"ncu --clock-control none, one launch each; {run.label}")


if __name__ == "__main__":
    argv = sys.argv[1:]
    opts = dict(zip(argv[1::2], argv[2::2]))
    child(opts.get("--lesson"))
