"""Nsight Compute's view (kernels/tools/profile.py): ncu's table read back (a real one, from the H200), each row
checked to be its target's kernel, the records it makes; and on a GPU with ncu, the whole run, whose figures
must say what the pack's profiler item says of them (the copy bound by memory, the GEMM by compute)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kernels
from kernels.lab import results
from kernels.tools import profile

# ncu's own output on the H200 (python -m kernels.tools.profile --raw ...), cut to the columns the tool reads
TABLE = Path(__file__).parent / "data" / "ncu_h200.csv"


def test_ncu_table_is_read_into_one_record_per_target():
    kernels_seen = profile.parse(TABLE.read_text())
    assert [k["kernel"].split("(")[0].strip() for k in kernels_seen][:2] == ["copy_tma_kernel",
                                                                             "matmul_tma_persistent_kernel"]
    recs = profile.records(kernels_seen)
    assert [(r["lesson"], r["run"], r["name"]) for r in recs] == [("03", "ncu", "copy_tma"),
                                                                 ("04", "ncu", "matmul_tma_persistent"),
                                                                 ("04", "ncu", "cublas")]
    for r, k in zip(recs, kernels_seen):
        assert r["ms"] == round(k["duration_ns"] / 1e6, 5) and set(r["ncu"]) == set(profile.METRICS) - {"duration_ns"} | {"kernel"}
        assert all(isinstance(v, float) for n, v in r["ncu"].items() if n != "kernel"), r["ncu"]
    copy_r, gemm_r, _ = recs
    assert copy_r["gbps"] == round(2 * 16384 * 16384 * 2 / (copy_r["ms"] * 1e-3) / 1e9, 1)
    assert gemm_r["tflops"] > 100 and gemm_r["baseline"] == "cublas"


def test_a_row_of_another_kernel_or_a_missing_counter_is_refused():
    kernels_seen = profile.parse(TABLE.read_text())
    with pytest.raises(ValueError, match="expected"):
        profile.records([kernels_seen[1], kernels_seen[0], kernels_seen[2]])  # launches out of order
    with pytest.raises(ValueError, match="3 targets"):
        profile.records(kernels_seen[:2])
    cut = TABLE.read_text().replace("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "something_else")
    with pytest.raises(ValueError, match="did not report gpu__dram_throughput"):
        profile.parse(cut)
    with pytest.raises(ValueError, match="no ncu table"):
        profile.parse("==PROF== nothing profiled\n")


def test_recording_the_profile_keeps_the_files_date(tmp_path, monkeypatch):
    """The file's date is the lessons' recording; the profile's records carry their own."""
    monkeypatch.setattr(results, "_this_gpu", lambda: {"device": "NVIDIA H200"})
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"date": "2026-01-01", "records": [{"lesson": "00", "run": "x"}]}))
    results.save(profile.records(profile.parse(TABLE.read_text())), path, keep_date=True)
    data = json.loads(path.read_text())
    assert data["date"] == "2026-01-01" and len(data["records"]) == 4
    assert all(r["date"] for r in data["records"][1:])
    results.save([{"lesson": "00", "run": "x", "name": "y", "config": {}, "shape": [1], "dtype": "float16"}], path)
    assert json.loads(path.read_text())["date"] != "2026-01-01"  # a lesson recorded again dates the file


@pytest.mark.timing
@pytest.mark.skipif(kernels.MODE == "cpu" or not shutil.which("ncu"), reason="needs a CUDA GPU and ncu")
def test_profiling_on_the_gpu_finds_the_copy_memory_bound_and_the_gemm_compute_bound(tmp_path):
    out = tmp_path / "gpu.json"
    run = subprocess.run([sys.executable, "-m", "kernels.tools.profile", "--out", str(out)], text=True,
                         capture_output=True, timeout=300, cwd=profile.ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    recs = {r["name"]: r for r in json.loads(out.read_text())["records"]}
    copy_n, gemm_n = recs["copy_tma"]["ncu"], recs["matmul_tma_persistent"]["ncu"]
    assert copy_n["dram_pct"] > 50 and copy_n["sm_pct"] < 30 and copy_n["tensor_pct"] == 0, copy_n
    assert gemm_n["tensor_pct"] > 70 and gemm_n["dram_pct"] < 50, gemm_n
