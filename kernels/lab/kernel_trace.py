"""Inside one launch: Proton's intra-kernel trace of where a Triton kernel's warps wait, step by step.

Proton (``triton.profiler``, in Triton 3.6) can record a timestamp when a warp enters and leaves a scope, inside the
kernel, and write the scopes of every CTA and warp as a Chrome trace. Marking scopes in the kernel's own source is
off for the Triton language in 3.6 (``triton/profiler/language.py``: the pipeliner reorders what the marks would
bracket); what Proton offers instead is to mark the kernel's TTGIR, the code after the pipeliner, and compile that
(Proton's intra-kernel tutorial, "TTGIR override"). The course does so:

1. the kernel is compiled as a launch with these arguments would compile it, and its TTGIR taken;
2. ``instrument`` puts ``proton.record start/end`` around three operations: ``ttng.wait_barrier`` (the warp waits
   for a TMA load's bytes: "tma_wait"), ``ttng.warp_group_dot`` (it issues the step's ``wgmma``: "mma_issue") and
   ``ttng.warp_group_dot_wait`` (it waits for an issued ``wgmma`` to finish: "mma_wait");
3. that TTGIR replaces the compiled one (``ir_override``, a compile option of Triton 3.6) for one launch under a
   Proton session with the instrumentation backend, recording warps 0 and 4 (one per warp group) of every CTA into
   a buffer in global memory;
4. ``steps`` reads the trace back: for one warp, a step (one K step of the loop) runs from one ``wgmma`` issue to
   the next. Not from one TMA wait to the next: unpipelined, the loop waits for A's tile and then for B's, two
   waits a step.

Durations are SM clock cycles (the trace writes them as microseconds of an assumed 1 GHz clock: ``CYCLES``).
The buffer is circular: each warp keeps its last ``kept`` records, so a long kernel shows its last steps (steady
state), not its first. The marks are instructions too (a clock read and a store each): the trace is of the
instrumented kernel, which ``measure`` compares with the plain one."""
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

SCOPES = (("ttng.wait_barrier ", "tma_wait"), ("ttng.warp_group_dot ", "mma_issue"),
          ("ttng.warp_group_dot_wait ", "mma_wait"))
STEP = "mma_issue"  # one per K step, pipelined or not
WARPS = "0,4"  # warp 0 of each warp group of an 8-warp CTA (lesson 04's GEMM)
CYCLES = 1000  # the trace's "us" at Proton's assumed 1 GHz: cycles per unit


class TraceError(RuntimeError):
    pass


def instrument(ttgir):
    """``ttgir`` with a Proton scope around each operation of SCOPES, and how many of each it marked. Refused if
    there is no TMA wait or no ``wgmma`` to mark (not a TMA GEMM) or the code is marked already."""
    if "proton.record" in ttgir:
        raise TraceError("this TTGIR already has proton.record marks")
    out, marked = [], {scope: 0 for _, scope in SCOPES}
    for line in ttgir.splitlines():
        indent = re.match(r"\s*", line).group(0)
        scope = next((s for op, s in SCOPES if op in line), None)
        if scope:
            out += [f'{indent}proton.record start "{scope}"', line, f'{indent}proton.record end "{scope}"']
            marked[scope] += 1
        else:
            out.append(line)
    missing = [op.strip() for op, scope in SCOPES[:2] if not marked[scope]]
    if missing:
        raise TraceError(f"no {' or '.join(missing)} in this TTGIR: not a TMA GEMM, nothing to mark a step by")
    return "\n".join(out) + "\n", marked


def trace(kernel, grid, args, meta, warps=WARPS):
    """Launch ``kernel[grid](*args, **meta)`` once, instrumented, under a Proton session; the trace's events
    (``name``, ``pid`` (the CTA), ``tid`` (the warp), ``ts``, ``dur``). The caller checks the output."""
    import triton.profiler as proton
    from triton.profiler import mode

    compiled = kernel.warmup(*args, grid=grid, **meta)
    marked, _ = instrument(compiled.asm["ttgir"])
    with tempfile.TemporaryDirectory(prefix="course_trace_") as tmp:
        ttgir = Path(tmp) / f"{kernel.fn.__name__}.ttgir"
        ttgir.write_text(marked)
        session = Path(tmp) / "trace"
        proton.start(str(session), data="trace", backend="instrumentation",
                     mode=mode.Default(buffer_type="global", granularity="warp", sampling_strategy="selective",
                                       sampling_options=warps))
        # Proton says per warp, from C++, that its first records were overwritten (by design here): not to the cell
        with quiet():
            try:
                kernel[grid](*args, ir_override=str(ttgir), **meta)
            finally:
                proton.finalize()
        files = list(Path(tmp).glob("trace*.chrome_trace"))
        if not files:
            raise TraceError(f"Proton wrote no trace ({sorted(p.name for p in Path(tmp).iterdir())})")
        events = json.loads(files[0].read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [{k: e[k] for k in ("name", "pid", "tid", "ts", "dur")} for e in events if e.get("ph") == "X"]


@contextlib.contextmanager
def quiet():
    """File descriptors 1 and 2 sent to /dev/null meanwhile (what C++ code writes there goes too)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def lanes(events):
    """{(CTA, warp): its events in time order}, from Proton's names ("<kernel> Core<sm> CTA<n>", "warp <w> ...")."""
    out = {}
    for e in events:
        cta, warp = re.search(r"\bCTA(\d+)$", str(e["pid"])), re.match(r"warp (\d+)\b", str(e["tid"]))
        if not (cta and warp):
            raise TraceError(f"an event of no CTA and warp the course can read: pid {e['pid']!r}, tid {e['tid']!r}")
        out.setdefault((int(cta.group(1)), int(warp.group(1))), []).append(e)
    return {k: sorted(v, key=lambda e: e["ts"]) for k, v in out.items()}


def steps(lane):
    """One warp's steps: from each ``wgmma`` issue to the next, its length and its time in each scope (cycles)."""
    starts = [i for i, e in enumerate(lane) if e["name"] == STEP]
    out = []
    for i, j in zip(starts, starts[1:]):
        waits = {scope: 0.0 for _, scope in SCOPES}
        for e in lane[i:j]:
            waits[e["name"]] += e["dur"] * CYCLES
        out.append({"period": round((lane[j]["ts"] - lane[i]["ts"]) * CYCLES, 1),
                    **{k: round(v, 1) for k, v in waits.items()}})
    return out


def summary(events):
    """Medians over every recorded step of every recorded warp (cycles; the mean step too: the first steps of a
    tile and the one holding its epilogue are longer), the share of all their time each scope took, and how many
    steps, CTAs and warps they come from."""
    per_lane = {k: steps(lane) for k, lane in lanes(events).items()}
    per_lane = {k: v for k, v in per_lane.items() if v}  # a warp with no complete step says nothing
    all_steps = [s for lane in per_lane.values() for s in lane]
    if not all_steps:
        raise TraceError("the trace holds no complete step (fewer than two wgmma issues per warp)")
    total = sum(s["period"] for s in all_steps)
    med = lambda k: round(statistics.median(s[k] for s in all_steps), 1)
    share = lambda k: round(sum(s[k] for s in all_steps) / total, 4)
    return {"cycles_per_step": med("period"), "cycles_per_step_mean": round(total / len(all_steps), 1),
            **{k: med(k) for _, k in SCOPES},
            **{f"{k}_share": share(k) for _, k in SCOPES},
            "steps": len(all_steps), "ctas": len({p for p, _ in per_lane}), "warps": len(per_lane)}


def window(events, n=6):
    """The events of the first CTA's recorded warps up to their ``n``-th wgmma issue: {warp: [[scope, start,
    cycles], ...]}, each start in cycles from that CTA's first record, for drawing."""
    per_lane = lanes(events)
    cta = min(c for c, _ in per_lane)
    mine = {w: lane for (c, w), lane in per_lane.items() if c == cta}
    t0 = min(lane[0]["ts"] for lane in mine.values())
    out = {}
    for w, lane in sorted(mine.items()):
        starts = [i for i, e in enumerate(lane) if e["name"] == STEP]
        end = starts[n] if len(starts) > n else len(lane)
        out[str(w)] = [[e["name"], round((e["ts"] - t0) * CYCLES), round(e["dur"] * CYCLES)] for e in lane[:end]]
    return out
