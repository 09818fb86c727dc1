"""Proton inside lesson 04's GEMM (kernels/lab/kernel_trace.py): the TTGIR marked where the loop waits, the trace
read back into steps, and on a Hopper GPU one traced launch that still computes A @ B."""
import json
import math
from pathlib import Path

import pytest
from conftest import prose

import kernels
from kernels.lab import kernel_trace as kt

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("stages", [1, 3])
def test_each_wait_and_each_wgmma_of_the_loop_is_marked(stages):
    """Lesson 04's probe as Triton 3.6 compiled it on the H200: unpipelined, the loop waits for A's tile, then for
    B's, then for its own wgmma; pipelined, it waits once for a stage and for the previous wgmma."""
    ttgir = (DATA / f"probe_s{stages}.ttgir").read_text()
    marked, counts = kt.instrument(ttgir)
    assert counts == {"tma_wait": ttgir.count("ttng.wait_barrier "), "mma_issue": 1,
                      "mma_wait": ttgir.count("ttng.warp_group_dot_wait ")}
    assert counts["tma_wait"] == (2 if stages == 1 else 1)
    lines = marked.splitlines()
    for i, line in enumerate(lines):
        for op, scope in kt.SCOPES:
            if op in line:
                assert lines[i - 1].strip() == f'proton.record start "{scope}"', lines[i - 1]
                assert lines[i + 1].strip() == f'proton.record end "{scope}"', lines[i + 1]
    assert marked.count("proton.record") == 2 * sum(counts.values())
    with pytest.raises(kt.TraceError, match="already"):
        kt.instrument(marked)
    with pytest.raises(kt.TraceError, match="not a TMA GEMM"):
        kt.instrument(ttgir.replace("ttng.wait_barrier ", "ttng.something_else "))


def _events(stages):
    return json.loads((DATA / f"trace_s{stages}.json").read_text())


def test_a_step_runs_from_one_wgmma_issue_to_the_next():
    lane = [{"name": n, "ts": t, "dur": d} for n, t, d in
            [("tma_wait", 0.0, 1.0), ("tma_wait", 1.5, 0.5), ("mma_issue", 2.0, 0.1), ("mma_wait", 2.2, 0.6),
             ("tma_wait", 3.0, 0.2), ("tma_wait", 3.3, 0.2), ("mma_issue", 3.6, 0.1), ("mma_wait", 3.8, 0.5),
             ("mma_issue", 4.5, 0.1)]]
    assert kt.steps(lane) == [{"period": 1600.0, "tma_wait": 400.0, "mma_issue": 100.0, "mma_wait": 600.0},
                              {"period": 900.0, "tma_wait": 0.0, "mma_issue": 100.0, "mma_wait": 500.0}]


@pytest.mark.parametrize("stages", [1, 3])
def test_the_h200_trace_reads_back_into_steps(stages):
    events = _events(stages)
    s = kt.summary(events)
    assert s["ctas"] == 2 and s["warps"] == 4 and s["steps"] > 4 * 20
    assert 0 < s["tma_wait_share"] + s["mma_issue_share"] + s["mma_wait_share"] < 1
    assert s["tma_wait"] < s["cycles_per_step"] and s["mma_wait"] < s["cycles_per_step"]
    w = kt.window(events, n=3)
    assert sorted(w) == ["0", "4"] and all(sum(e[0] == kt.STEP for e in lane) == 3 for lane in w.values())
    assert min(e[1] for lane in w.values() for e in lane) == 0


def test_one_stage_waits_mostly_for_its_tiles_and_three_stages_much_less():
    """What lesson 04 reads from the recorded trace, seen in the fixture too (2048^3): with one stage, waiting for
    the tiles is most of a step; with three a step is under a third as long and waits for tiles a quarter of it."""
    one, three = kt.summary(_events(1)), kt.summary(_events(3))
    assert one["tma_wait"] > one["cycles_per_step"] / 2 and one["tma_wait_share"] > 0.5
    assert three["cycles_per_step"] < one["cycles_per_step"] / 3 and three["tma_wait"] < three["cycles_per_step"] / 3


@pytest.mark.skipif(kernels.MODE != "hopper", reason="needs a Hopper GPU (TMA, wgmma, Proton's instrumentation)")
def test_a_traced_gemm_still_computes_a_times_b_every_cta_is_seen_and_nothing_is_printed(capfd):
    """Long enough that each warp's buffer overflows (Proton then prints a note per warp from C++, which must not
    reach a notebook's cell)."""
    import torch

    from kernels.lab import bench
    from kernels.ops import gemm
    a, b, c = bench.gemm_operands(4096, 4096, 8192)
    ref = torch.matmul(a, b)
    kernel, grid, args, kwargs = gemm.probe_launch(a, b, c, 3)
    c.fill_(float("nan"))
    capfd.readouterr()
    events = kt.trace(kernel, grid, args, kwargs)
    printed = capfd.readouterr()
    assert bench.rel_err(c, ref) < 1e-2
    s = kt.summary(events)
    assert s["ctas"] == grid[0] and s["warps"] == 2 * grid[0]
    walked = (4096 // 128) * (4096 // 256) / grid[0] * (8192 // 64)  # steps a CTA walks, on average
    assert s["steps"] / s["warps"] < 0.8 * walked  # each warp's buffer kept only its last steps
    assert printed.out == "" and printed.err == "", printed


def test_lesson_04_quotes_the_recorded_trace():
    """Every figure section 3 states of the trace is the recorded one, as printed."""
    from kernels.lab import results
    from kernels.lessons import l04_pipelining as lesson
    text = prose("04_pipelining")
    recs = results.recorded().select("04", "trace")
    t = lesson.probe_times(results.recorded().select("04", "model"))
    rows = {r["stages"]: r for r in lesson.trace_rows(recs, t)}
    one = rows[1]
    for figure in (one["cycles_per_step"], one["tma_wait"], one["mma_issue"], one["mma_wait"],
                   one["mma_issue"] + one["mma_wait"], rows[2]["cycles_per_step"], rows[2]["tma_wait"],
                   rows[3]["cycles_per_step"], rows[3]["tma_wait"], rows[4]["tma_wait"], rows[3]["mma_wait"]):
        assert f"{figure:,.0f}" in text, figure
    assert rows[3]["cycles_per_step"] == rows[4]["cycles_per_step"] and rows[3]["mma_wait"] == rows[4]["mma_wait"]
    kept = [r["steps"] / r["warps"] for r in rows.values()]
    assert "last 250 to 340 steps" in text and 250 <= min(kept) and max(kept) <= 340
    assert f"{rows[2]['model']:.2f} (model) and {rows[2]['traced']:.2f} (traced) at two stages" in text
    assert f"{rows[3]['model']:.2f} and {rows[3]['traced']:.2f} at three and four" in text
    for ratio in ("model", "traced"):  # "at three and four": one figure for both
        assert f"{rows[4][ratio]:.2f}" == f"{rows[3][ratio]:.2f}"
    ttgir = (DATA / "probe_s1.ttgir").read_text()
    assert ttgir.count("ttng.wait_barrier ") == 2 and "pendings = 1" in (DATA / "probe_s3.ttgir").read_text()


def test_lesson_04_compares_the_trace_with_the_plain_kernel_as_recorded():
    """Section 8's traps: the cycle ratio, the same in time at ncu's clocks, ncu's and do_bench's ratios, and the
    plain kernel's step (ncu's duration x its clock / the steps of the SMs that walk the most tiles) beside the
    traced median."""
    from kernels.lab import results
    from kernels.lessons import l04_pipelining as lesson
    text = prose("04_pipelining")
    store = results.recorded()
    tr = {r["config"]["stages"]: r for r in store.select("04", "trace")}
    nc = {r["config"]["stages"]: r for r in store.select("04", "ncu", "gemm_tma_probe")}
    c1, c3 = tr[1]["trace"]["cycles_per_step"], tr[3]["trace"]["cycles_per_step"]
    h1, h3 = nc[1]["ncu"]["sm_hz"], nc[3]["ncu"]["sm_hz"]
    assert f"0.{round(100 * c3 / c1)} of one stage's in cycles" in text
    assert f"makes the ratio {(c3 / h3) / (c1 / h1):.2f} in time" in text
    assert f"durations give {nc[3]['ms'] / nc[1]['ms']:.2f}" in text
    assert f"it was {nc[3]['ms']:.3f} ms" in text and f"`do_bench` at {tr[3]['ms']:.3f} ms" in text
    assert f"a ratio to one stage of {tr[3]['ms'] / tr[1]['ms']:.2f}" in text
    tiles = math.prod(n // b for n, b in zip(lesson.SHAPE[:2], (lesson.TILE["BLOCK_M"], lesson.TILE["BLOCK_N"])))
    steps = math.ceil(tiles / store.sm_count) * lesson.SHAPE[2] // lesson.TILE["BLOCK_K"]  # the SMs that set the time
    assert f"walk {math.ceil(tiles / store.sm_count)} tiles, {steps:,} steps" in text
    plain = [nc[s]["ms"] * 1e-3 * nc[s]["ncu"]["sm_hz"] / steps for s in lesson.STAGES]
    traced = [tr[s]["trace"]["cycles_per_step"] for s in lesson.STAGES]
    assert (", ".join(f"{c:,.0f}" for c in plain[:3]) + f" and {plain[3]:,.0f} cycles a step") in text
    assert ("medians of " + ", ".join(f"{c:,.0f}" for c in traced[:3]) + f" and {traced[3]:,.0f}") in text
    worst = max(abs(t / p - 1) for t, p in zip(traced, plain))
    assert f"within {math.ceil(100 * worst)}% either way" in text



def test_an_event_of_no_cta_or_warp_is_refused_and_a_warp_without_a_step_is_not_counted():
    events = _events(3)
    alone = [{"name": "tma_wait", "pid": "matmul_tma_probe_kernel Core7 CTA900", "tid": "warp 0 (line 0)", "ts": 1.0,
              "dur": 0.1}]
    assert kt.summary(events + alone)["warps"] == kt.summary(events)["warps"]
    with pytest.raises(kt.TraceError, match="no CTA and warp"):
        kt.lanes(events + [{**alone[0], "pid": "matmul_tma_probe_kernel CTA12 extra"}])
    split = [{**e, "tid": e["tid"].replace("line 0", "line 1")} if i % 2 else e for i, e in enumerate(events)]
    assert kt.summary(split) == kt.summary(events)  # one warp's records on two of Proton's lines are one warp
