"""What the course states, checked on its records: the findings written once (``kernels.lessons.findings``),
each held to the records it rests on, kept out of second, older wordings; and the H200 bars the issues set
(one run each), read through the same functions the notebooks call."""
import json
import math
from pathlib import Path

import pytest

from kernels.lab import results
from kernels.lessons import findings
from kernels.lessons import l01_naive_loads as l01, l02_cp_async as l02, l03_tma_descriptors as l03
from kernels.lessons import l04_pipelining as l04, l05_tilelang as l05

store = results.recorded()
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("key", sorted(findings.FINDINGS))
def test_each_finding_holds_on_its_records(key):
    for lesson, run in findings.FINDINGS[key].rests_on:
        assert store.select(lesson, run), f"finding {key}: no records of lesson {lesson}, run {run}"
    assert findings.check(key, store) == [], f"finding {key} no longer holds: {findings.check(key, store)}"
    text = findings.text(key, store)
    assert "{" not in text and f"(recorded on {store.device}, " in text or not findings.FINDINGS[key].rests_on


def test_a_finding_fails_when_its_records_say_otherwise():
    # the records of the host-maps finding with host maps built per call made cheaper than device maps
    data = json.loads(json.dumps(store.data))
    for r in data["records"]:
        if r["lesson"] == "03" and r["run"] == "small" and r["config"] == {"stages": 4, "descriptor": "host"}:
            r["host_us"] = 1.0
    assert findings.check("host-maps", results.Store("mutated", data)) != []


def _written_places():
    """Every place the course states something in words: lessons' markdown, the glossary, the pack's sources,
    the workshop guide, the README."""
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        yield nb.name, "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for path in [ROOT / "notebooks" / "glossary.md", ROOT / "README.md", *sorted((ROOT / "workshop").glob("*.md")),
                 *sorted((ROOT / "kernels" / "pack").glob("*.py"))]:
        if path.exists():
            yield path.name, path.read_text()


@pytest.mark.parametrize("key", sorted(findings.RETIRED))
def test_no_place_states_a_retired_verdict(key):
    for name, text in _written_places():
        flat = " ".join(text.split())
        for phrase in findings.RETIRED[key]:
            assert phrase not in flat, f"{name} still says {phrase!r}, which finding {key} replaced"


def _ratio(lesson, run, name, unit, **config):
    r = next(r for r in store.select(lesson, run, name) if all(r["config"].get(k) == v for k, v in config.items()))
    return r[unit] / store.baseline_of(r)[unit]


def test_lesson01_vectorised_tile_copy_near_torch_copy():
    assert _ratio(l01.LESSON, "copies", "copy_tile", "gbps") >= 0.90


def test_lesson02_stages_and_cublas():
    runs = {r["config"]["stages"]: r["tflops"] for r in store.select(l02.LESSON, "stages", "gemm_pointer")}
    cublas = store.find(l02.LESSON, "stages", "cublas_gemm")["tflops"]
    assert max(runs.values()) >= 1.8 * runs[1]
    assert max(runs.values()) >= 0.90 * cublas


def test_lesson03_best_tma_copy_near_torch_copy():
    copies = store.select(l03.LESSON, "copies")
    torch_copy = next(r["gbps"] for r in copies if r["name"] == "torch_copy")
    assert max(r["gbps"] for r in copies if r["name"].startswith("copy_tma")) >= 0.95 * torch_copy


def test_lesson03_tma_gemm_beats_pointer_at_two_and_three_stages():
    # what the lesson states for its 128x256x64 tile, stage by stage
    runs = {(r["name"], r["config"]["stages"]): r["tflops"] for r in store.select(l03.LESSON, "stages")
            if r["name"] in ("gemm_pointer", "gemm_tma")}
    for stages in (2, 3):
        assert runs["gemm_tma", stages] >= 1.05 * runs["gemm_pointer", stages]
    assert runs["gemm_tma", 1] < runs["gemm_pointer", 1]


def test_lesson03_best_tma_against_best_pointer_per_tile():
    # the bar: TMA at its best stage count >= 1.05x the pointer GEMM (at its best) with the same tiles.
    # What the lesson claims from two H200 runs: a clear lead at 256x128x64 and 128x128x128, never a clear loss,
    # and a tie at 128x256x64, the best tile for both
    ratios = {tile: ratio for tile, _, _, ratio in l03.best_per_tile(store.select(l03.LESSON, "tiles"))}
    assert len(ratios) == len(l03.TILES)
    assert ratios[(256, 128, 64)] >= 1.05 and ratios[(128, 128, 128)] >= 1.05, ratios
    assert min(ratios.values()) >= 0.95, ratios
    assert 0.95 <= ratios[(128, 256, 64)] < 1.05, ratios


def test_lesson04_against_cublas():
    # one run: the best course GEMM at 8192^3 and the geometric mean over six shapes, each against cuBLAS
    # timed in the same rounds
    rows = l04.versus_cublas(store.select(l04.LESSON, "shapes"))
    ratios = {tuple(shape): cublas["ms"] / best["ms"] for shape, best, cublas in rows}
    assert len(ratios) >= 6
    assert ratios[(8192, 8192, 8192)] >= 1.00
    assert math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios)) >= 0.95


def test_lesson04_model_within_20_percent():
    rows = l04.model_table(store.select(l04.LESSON, "model"))
    assert [s for s, *_ in rows] == l04.STAGES
    for stages, predicted, measured, err in rows:
        assert abs(err) <= 0.20, f"{stages} stages: predicted {predicted:.3f} ms, measured {measured:.3f} ms"


def test_lesson05_tilelang_gemm_near_cublas_and_the_table_recorded():
    gemms, copies = store.select(l05.LESSON, "gemm"), store.select(l05.LESSON, "copy")
    assert {"cublas_gemm", "tilelang_gemm", "triton_gemm_pointer", "triton_gemm_tma",
            "triton_gemm_tma_persistent"} <= {r["name"] for r in gemms}
    assert {"torch_copy", "tilelang_copy", "triton_copy_tile"} <= {r["name"] for r in copies}
    cublas = next(r for r in gemms if r["name"] == "cublas_gemm")
    assert max(r["tflops"] for r in gemms if r["name"] == "tilelang_gemm") >= 0.95 * cublas["tflops"]


@pytest.mark.timing  # on a GPU the walks are timed now: another kernel on the card would be timed with them
def test_lesson00_three_rungs_and_the_flush_trap():
    # what section 2 states: each rung several times farther than the one above; the L2 walk timed
    # through a flushing harness reports nearly HBM's latency
    from kernels.lessons import l00_memory_wall as l00
    ns, mhz, _ = l00.latencies()
    assert 3 * ns["shared"] < ns["L2"] and 2 * ns["L2"] < ns["HBM"], ns
    assert ns["L2 flushed"] >= 1.5 * ns["L2"] and ns["L2 flushed"] >= 0.8 * ns["HBM"], ns
    assert mhz and 1000 < mhz < 2200


def test_lesson03_small_copies_time_host_and_gpu_apart():
    # section 7's verdict: at 256 x 256 the host's launch costs more than the GPU's work, for every copy
    small = store.select(l03.LESSON, "small")
    assert small and all(r["host_us"] > 3 * r["graph_ms"] * 1000 for r in small), small


def test_lesson07_gemm_bars_and_the_copy_study():
    from kernels.lab.measure import Run
    from kernels.lessons import l07_shapes_and_waves as l07
    g, (_, low), below, _ = l07.bars(Run(store.select(l07.LESSON, "best"), "recorded"))
    assert g >= l07.BAR_GEOMEAN and low >= l07.BAR_MIN and not below
    recs = store.select(l07.LESSON, "copy")
    best, _ = l07.copy_bar(recs)
    assert best >= l07.BAR_COPY
    # what section 6 states: latency-bound at 16 KiB in flight per SM, flat past 48 KiB; hints change nothing;
    # the ring loses to one tile per program in both languages, and only the CUDA one-tile copy reaches the bar
    sweep = {(l07.in_flight_kib(r["config"]), tuple(sorted(r["config"].items()))): x for r, x in l07.sweep(recs)}
    at = lambda kib: [x for (k, _), x in sweep.items() if k == kib]
    assert max(at(16)) < 0.65 and max(x for (k, _), x in sweep.items() if k > 48) <= max(at(48)) + 0.005
    paths = {(r["config"]["load"], r["config"]["store"], r["config"]["hints"]): x
             for r, x in l07.copies(recs) if r["name"] == "copy_paths"}
    assert all(abs(paths[(lo, st, True)] - paths[(lo, st, False)]) < 0.005 for lo, st, _ in paths)
    assert paths[("pointer", "tma", False)] < 0.7
    q = {k: x for k, (_, x) in l07.copy_questions(recs).items()}
    for regs in ("registers", "no registers"):
        assert q[(regs, "persistent ring")] < q[(regs, "one tile per program")]
    assert q[("no registers", "one tile per program")] >= l07.BAR_COPY > max(
        x for k, x in q.items() if k != ("no registers", "one tile per program"))
    one_way = {r["name"]: r["ms"] for r in l07._copy_groups(recs)[1]}
    assert one_way["read_tma"] < one_way["torch_sum"] and one_way["fill_tma"] < one_way["torch_fill"]
    assert abs(one_way["read_tma"] + one_way["fill_tma"] - one_way["torch_copy"]) < 0.05 * one_way["torch_copy"]


def test_lesson08_fp8_bars():
    from kernels.lessons import l08_fp8_capstone as l08
    at_bar, geo, n, held = l08.bars(store.select(l08.LESSON, "best"))
    assert n == 6 and at_bar >= 1.0 and geo >= 0.9 and held


def test_a_finding_names_the_days_of_the_runs_it_rests_on():
    """A finding on lesson 07's copy study (2026-11-30) was labelled with the results file's date (2026-12-01); one on
    runs of two days names both."""
    from kernels.lab import results
    store = results.recorded()
    for key, finding in findings.FINDINGS.items():
        if not finding.rests_on:
            continue
        days = {r.get("date") or store.data["date"] for lesson, run in finding.rests_on
                for r in store.select(lesson, run)}
        label = findings.text(key).rsplit(" (", 1)[1]
        assert all(day in label for day in days), (key, days, label)
        assert len(days) > 1 or f"{store.device}, {days.pop()})" in label, (key, label)
