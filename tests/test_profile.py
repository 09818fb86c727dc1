"""Nsight Compute's view (kernels/lab/ncu.py, kernels/lessons/profiled.py, kernels/tools/profile.py): ncu's table
read back (a real one, from the H200), each row checked to be its target's kernel, the records it makes, what each
lesson prints of them and what its prose says; and on a GPU with ncu, the whole run, whose figures must say what
the lessons say of them."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import prose

import kernels
from kernels.lab import measure, ncu, results
from kernels.lab.errors import ArgumentError
from kernels.lessons import profiled

# ncu's own output on the H200 (python -m kernels.tools.profile --raw ...), cut to the columns the tool reads
TABLE = Path(__file__).parent / "data" / "ncu_h200.csv"


def test_ncu_table_is_read_into_one_record_per_target():
    seen = ncu.parse(TABLE.read_text())
    assert [k["kernel"].split("(")[0].split("<")[0].strip() for k in seen] == [
        "copy_tile_kernel", "copy_cols_kernel", "matmul_kernel", "matmul_kernel", "copy_tma_kernel",
        "matmul_tma_persistent_kernel", seen[6]["kernel"], *["matmul_tma_probe_kernel"] * 4, "tma_ring_2",
        *["void banks::column_read"] * 4]
    recs = profiled.records(seen)
    assert [(r["lesson"], r["run"], r["name"]) for r in recs] == [(t.lesson, "ncu", t.name) for t in profiled.TARGETS]
    for r, k in zip(recs, seen):
        assert r["ms"] == round(k["duration_ns"] / 1e6, 5)
        assert set(r["ncu"]) == set(ncu.METRICS) - {"duration_ns"} | {"kernel"}
        assert all(isinstance(v, float) for n, v in r["ncu"].items() if n != "kernel"), r["ncu"]
    by = {(r["name"], r["config"].get("stages")): r for r in recs}
    assert by["copy_tma", None]["gbps"] == round(2 * 16384 * 16384 * 2 / (by["copy_tma", None]["ms"] * 1e-3) / 1e9, 1)
    assert by["matmul_tma_persistent", 3]["tflops"] > 100 and by["matmul_tma_persistent", 3]["baseline"] == "cublas"


def test_a_row_of_another_kernel_or_a_missing_counter_is_refused():
    seen = ncu.parse(TABLE.read_text())
    with pytest.raises(ncu.ProfiledError, match="expected"):
        profiled.records([seen[1], seen[0], *seen[2:]])  # launches out of order
    reads = [i for i, t in enumerate(profiled.TARGETS) if t.name.startswith("read")]
    swapped = list(seen)
    swapped[reads[0]], swapped[reads[-1]] = seen[reads[-1]], seen[reads[0]]
    with pytest.raises(ncu.ProfiledError, match="read4_plain: ncu's kernel is"):
        profiled.records(swapped)  # the 4-byte plain read's row given to the 16-byte swizzled one
    with pytest.raises(ncu.ProfiledError, match=f"{len(profiled.TARGETS)} targets"):
        profiled.records(seen[:2])
    text = TABLE.read_text()
    cut = text.replace("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "something_else")
    with pytest.raises(ncu.ProfiledError, match="did not report gpu__dram_throughput"):
        ncu.parse(cut)
    with pytest.raises(ncu.ProfiledError, match="no ncu table"):
        ncu.parse("==PROF== nothing profiled\n")
    lines = text.splitlines()
    units = next(i for i, line in enumerate(lines) if line.startswith('"ID"')) + 1
    scaled = "\n".join(lines[:units] + [lines[units].replace('"ns"', '"us"', 1)] + lines[units + 1:])
    with pytest.raises(ncu.ProfiledError, match="in 'us', the course reads 'ns'"):
        ncu.parse(scaled)  # a duration in another unit would be off by 1000 in every figure
    with pytest.raises(ncu.ProfiledError, match="no value of"):
        ncu.parse("\n".join(lines[:-1] + [re.sub(r'"[0-9.,]+"$', '"n/a"', lines[-1])]))
    assert ncu.parse(text + "\n==PROF== Report: done\n\n") == seen  # lines after the table are not rows


def test_recording_the_profile_keeps_the_files_date(tmp_path, monkeypatch):
    """The file's date is the lessons' recording; the profile's records carry their own."""
    monkeypatch.setattr(results, "_this_gpu", lambda: {"device": "NVIDIA H200"})
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"date": "2026-01-01", "records": [{"lesson": "00", "run": "x"}]}))
    results.save(profiled.records(ncu.parse(TABLE.read_text())), path, keep_date=True)
    data = json.loads(path.read_text())
    assert data["date"] == "2026-01-01" and len(data["records"]) == 1 + len(profiled.TARGETS)
    assert all(r["date"] for r in data["records"][1:])
    path.write_text(json.dumps({**json.loads(path.read_text()),
                                "records": json.loads(path.read_text())["records"] + [{"lesson": "01", "run": "z"}]}))
    results.save([{"lesson": "00", "run": "x", "name": "y", "config": {}, "shape": [1], "dtype": "float16"}], path)
    data = json.loads(path.read_text())
    assert data["date"] != "2026-01-01"  # a lesson recorded again dates the file
    # and the records the old date dated keep it: runs taken on 2026-11-30 were labelled 2026-12-01 when it moved
    assert [r.get("date") for r in data["records"] if r["run"] == "z"] == ["2026-01-01"]
    assert [r.get("date") for r in data["records"] if r["run"] == "x"] == [None]


def _recorded(lesson):
    return {(r["name"], r["config"].get("stages")): r for r in results.recorded().select(lesson, "ncu")}


def test_the_recorded_profile_says_what_the_course_derived():
    """Lesson 01's sectors per request and lesson 06's passes per shared read, as ncu counted them, are the course's
    own figures: the access pattern's, and ``swizzle.column_read``'s."""
    for name in ("copy_tile", "copy_cols"):
        n = _recorded("01")[name, None]["ncu"]
        assert n["gld_sectors"] / n["gld_requests"] == profiled.expected_sectors(name)
    for (name, _), r in _recorded("06").items():
        if name.startswith("read"):
            n, cfg = r["ncu"], r["config"]
            assert round(n["sld_wavefronts"] / n["sld_insts"], 2) == cfg["passes"], name
            assert round(n["sld_conflicts"] / n["sld_insts"], 2) == cfg["passes"] - cfg["ideal"], name


def test_each_lesson_prints_its_profile_with_where_it_comes_from(capsys, monkeypatch):
    monkeypatch.setattr(measure, "can_run", lambda needs="gpu": False)
    for lesson in profiled.LESSONS:
        profiled.show(lesson)
        out = capsys.readouterr().out
        run = profiled.figures(lesson)
        assert len(run.records) == len(profiled.targets(lesson))
        assert results.recorded().label_of(run.records) in out and "H200" in out
        for r in run.records:
            assert profiled.name_of(r) in out
    profiled.show("06")
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:6]}
    assert rows["read4_plain"][2:6] == ["32.0", "32", "31.0", "31"] and rows["read16_swizzled"][2:6] == ["4.0", "4",
                                                                                                      "0.0", "0"]


def test_ncu_that_cannot_profile_falls_back_to_the_records_and_says_why(monkeypatch):
    """In a room, ncu is there but the counters are the administrator's (ERR_NVGPUCTRPERM): the lesson still shows
    the recorded figures, labelled with why they are not this GPU's."""
    monkeypatch.setattr(measure, "can_run", lambda needs="gpu": needs == "ncu")

    def refused(*a, **k):
        raise ncu.NcuError("ncu failed (1):\n==ERROR== ERR_NVGPUCTRPERM - no permission")
    monkeypatch.setattr(ncu, "profile", refused)
    run = profiled.figures("03")
    assert run.records and "(ncu could not profile here: ERR_NVGPUCTRPERM)" in run.label and "2026-12-02" in run.label


def test_a_wrong_output_or_an_unknown_lesson_is_said_not_covered_by_records(monkeypatch):
    """ncu ran and the child refused a wrong output: that is raised with the child's words, never answered with the
    recorded figures as if ncu had only been refused; a lesson without targets is named."""
    monkeypatch.setattr(measure, "can_run", lambda needs="gpu": needs == "ncu")

    def wrong(*a, **k):
        raise ncu.ProfiledError("the profiled process failed (3): copy_tma {}: output differs from torch's")
    monkeypatch.setattr(ncu, "profile", wrong)
    with pytest.raises(ncu.ProfiledError, match="output differs"):
        profiled.figures("03")
    with pytest.raises(ArgumentError, match="lessons profiled are 01, 02, 03, 04, 06"):
        profiled.targets("05")


def test_the_rooms_live_figures_are_the_three_the_guide_names():
    from kernels.tools import room
    assert [t.name for t in profiled.TARGETS if t.name in room.LIVE] == list(room.LIVE)


def test_the_ncu_command_profiles_only_the_ranges_at_the_cards_clock():
    cmd = ncu.command("kernels.lessons.profiled", "--lesson", "06")
    assert cmd[1:5] == ["--clock-control", "none", "--profile-from-start", "off"]
    assert cmd[-5:] == ["-m", "kernels.lessons.profiled", "--child", "--lesson", "06"]
    assert set(cmd[cmd.index("--metrics") + 1].split(",")) == set(ncu.METRICS.values())


@pytest.mark.timing
@pytest.mark.skipif(kernels.MODE == "cpu" or not shutil.which("ncu"), reason="needs a CUDA GPU and ncu")
def test_profiling_on_the_gpu_finds_what_the_lessons_say(tmp_path):
    out = tmp_path / "gpu.json"
    run = subprocess.run([sys.executable, "-m", "kernels.tools.profile", "--out", str(out)], text=True,
                         capture_output=True, timeout=500, cwd=ncu.ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    recs = {(r["name"], r["config"].get("stages")): r for r in json.loads(out.read_text())["records"]}
    copy_n, gemm_n = recs["copy_tma", None]["ncu"], recs["matmul_tma_persistent", 3]["ncu"]
    assert copy_n["dram_pct"] > 50 and copy_n["sm_pct"] < 30 and copy_n["tensor_pct"] == 0, copy_n
    assert gemm_n["tensor_pct"] > 70 and gemm_n["dram_pct"] < 50, gemm_n
    one, three = recs["gemm_pointer", 1]["ncu"], recs["gemm_pointer", 3]["ncu"]
    assert one["stall_long_scoreboard"] > 3 * three["stall_long_scoreboard"] and three["tensor_pct"] > one["tensor_pct"]
    for name, want in (("read4_plain", 32), ("read4_swizzled", 4), ("read16_plain", 32), ("read16_swizzled", 4)):
        n = recs[name, None]["ncu"]
        assert round(n["sld_wavefronts"] / n["sld_insts"]) == want, (name, n)
    for name in ("copy_tile", "copy_cols"):
        n = recs[name, None]["ncu"]
        assert n["gld_sectors"] / n["gld_requests"] == profiled.expected_sectors(name)


def test_the_lessons_prose_quotes_the_recorded_profile():
    """Every ncu figure a lesson's prose states is the recorded one, rounded as printed."""
    text = {n: prose(n) for n in ("01_naive_loads", "02_cp_async", "03_tma_descriptors", "04_pipelining",
                                  "06_tma_by_hand")}
    l01, l02 = _recorded("01"), _recorded("02")
    tile, cols = l01["copy_tile", None], l01["copy_cols", None]
    assert f"{profiled.dram_bytes(cols) / profiled.copied(cols):.1f} times" in text["01_naive_loads"]
    assert f"{cols['ncu']['dram_pct']:.0f}%" in text["01_naive_loads"]
    assert f"{tile['ncu']['dram_pct']:.0f}%" in text["01_naive_loads"]
    assert f"was {cols['ncu']['l2_pct']:.0f}% of its peak for the column walk" in text["01_naive_loads"]
    one, three = l02["gemm_pointer", 1]["ncu"], l02["gemm_pointer", 3]["ncu"]
    for figure in (f"{one['stall_long_scoreboard']:.0f}", f"{three['stall_long_scoreboard']:.1f}",
                   f"{one['tensor_pct']:.0f}%", f"{three['tensor_pct']:.0f}%"):
        assert figure in text["02_cp_async"], figure
    c = _recorded("03")["copy_tma", None]["ncu"]
    for figure in (f"{c['dram_pct']:.0f}%", f"{c['issue_pct']:.0f}%", f"{c['warps_active_pct']:.0f}%"):
        assert figure in text["03_tma_descriptors"], figure
    l06 = _recorded("06")
    assert f"{l06['cuda_ring', 2]['ncu']['dram_pct']:.0f}%" in text["06_tma_by_hand"]
    per = lambda name, key: l06[name, None]["ncu"][key] / l06[name, None]["ncu"]["sld_insts"]
    assert (f"{per('read4_plain', 'sld_wavefronts'):.0f} passes per read unswizzled, "
            f"{per('read4_swizzled', 'sld_wavefronts'):.0f} swizzled") in text["06_tma_by_hand"]
    assert (f"{per('read4_plain', 'sld_conflicts'):.0f} and {per('read16_plain', 'sld_conflicts'):.0f} added by "
            f"conflicts unswizzled, {per('read4_swizzled', 'sld_conflicts'):.0f} and "
            f"{per('read16_swizzled', 'sld_conflicts'):.0f} swizzled") in text["06_tma_by_hand"]
    # lesson 04, section 8: the copy and the GEMM read side by side, and the traps' figures
    l04, l03 = _recorded("04"), _recorded("03")["copy_tma", None]["ncu"]
    g = l04["matmul_tma_persistent", 3]["ncu"]
    for figure in (f"DRAM at {l03['dram_pct']:.0f}% of its peak, the SMs at {l03['sm_pct']:.0f}%",
                   f"the tensor pipe busy {g['tensor_pct']:.0f}% of the cycles, DRAM at {g['dram_pct']:.0f}%",
                   f"keeps {g['warps_active_pct']:.1f}% of the SM's warp slots busy and issues in "
                   f"{g['issue_pct']:.0f}%",
                   f"{g['registers']:.0f} registers a thread",
                   f"{l04['gemm_tma_probe', 1]['ncu']['sm_hz'] / 1e9:.2f} GHz",
                   f"{l04['gemm_tma_probe', 3]['ncu']['sm_hz'] / 1e9:.2f} GHz",
                   f"L2 near its peak ({_recorded('01')['copy_cols', None]['ncu']['l2_pct']:.0f}%)",
                   f"the one-stage probe above, tensor pipe {l04['gemm_tma_probe', 1]['ncu']['tensor_pct']:.0f}%, DRAM "
                   f"{l04['gemm_tma_probe', 1]['ncu']['dram_pct']:.0f}%",
                   f"tensor pipe busy {l04['gemm_tma_probe', 3]['ncu']['tensor_pct']:.0f}% of the cycles of this GEMM"):
        assert figure in text["04_pipelining"], figure


def test_sectors_are_what_l2_serves_and_dram_is_counted_apart():
    """Lesson 01's misconception 5 and the glossary's "sector" said whole sectors cross HBM (16x for a column walk);
    the recorded profile has DRAM at 2.9x the bytes copied. Both now say L2 serves sectors and quote DRAM's figure."""
    from pathlib import Path
    cols = _recorded("01")["copy_cols", None]
    ratio = f"{profiled.dram_bytes(cols) / profiled.copied(cols):.1f}"
    text = prose("01_naive_loads")
    glossary = " ".join((Path(__file__).parents[1] / "notebooks" / "glossary.md").read_text().split())
    assert f"DRAM moved {ratio} times the bytes copied in the recorded profile, not 16" in text
    assert "the bytes that cross HBM are whole sectors" not in text
    assert f"16 times the useful bytes in sectors; DRAM traffic {ratio} times the bytes copied" in glossary
    assert "The 32-byte unit in which memory moves between HBM, L2 and the SM" not in glossary


def test_lesson_06_quotes_the_recorded_mio_throttle():
    text = prose("06_tma_by_hand")
    l06 = _recorded("06")
    four, sixteen = l06["read4_plain", None]["ncu"], l06["read16_plain", None]["ncu"]
    assert f"({four['stall_mio_throttle']:.0f} and {sixteen['stall_mio_throttle']:.0f} per issue" in text
    assert four["stall_mio_throttle"] > four["stall_short_scoreboard"]
