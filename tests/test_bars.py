"""The H200 bars the issues set, checked on the recorded results (one run each)."""
import math

from kernels.lab import bench

rec = bench.Recorded()


def _ratio(lesson, name, baseline, key, config=None):
    r = rec.find(lesson, name, config=config)
    b = rec.find(lesson, baseline, shape=r["shape"])
    return r[key] / b[key]


def test_lesson01_vectorised_tile_copy_near_torch_copy():
    assert _ratio("01", "copy_tile", "torch_copy", "gbps") >= 0.90


def test_lesson02_stages_and_cublas():
    runs = {r["config"]["stages"]: r["tflops"] for r in rec.all("02", "gemm_pointer")}
    cublas = rec.find("02", "cublas_gemm")["tflops"]
    assert max(runs.values()) >= 1.8 * runs[1]
    assert max(runs.values()) >= 0.90 * cublas


def test_lesson03_best_tma_copy_near_torch_copy():
    torch_copy = rec.find("03", "torch_copy", shape=[16384, 16384])["gbps"]
    best = max(r["gbps"] for r in rec.all("03") if r["name"].startswith("copy_tma") and r["shape"] == [16384, 16384])
    assert best >= 0.95 * torch_copy


def test_lesson03_tma_gemm_beats_pointer_at_two_and_three_stages():
    # what the lesson states for its 128x256x64 tile, stage by stage
    runs = {(r["name"], r["config"]["stages"]): r["tflops"] for r in rec.all("03") if r["name"] in ("gemm_tma", "gemm_pointer")}
    for stages in (2, 3):
        assert runs["gemm_tma", stages] >= 1.05 * runs["gemm_pointer", stages]
    assert runs["gemm_tma", 1] < runs["gemm_pointer", 1]


def test_lesson03_best_tma_against_best_pointer_per_tile():
    # the bar: TMA at its best stage count >= 1.05x the pointer GEMM (at its best) with the same tiles.
    # What the lesson claims from two H200 runs: a clear lead at 256x128x64 and 128x128x128, never a clear loss,
    # and a tie at 128x256x64, the best tile for both
    from kernels import descriptors
    ratios = {tile: ratio for tile, _, _, ratio in descriptors.best_per_tile(rec.all("03"))}
    assert len(ratios) == len(descriptors.TILES)
    assert ratios[(256, 128, 64)] >= 1.05 and ratios[(128, 128, 128)] >= 1.05, ratios
    assert min(ratios.values()) >= 0.95, ratios
    assert 0.95 <= ratios[(128, 256, 64)] < 1.05, ratios


def test_lesson04_against_cublas():
    # one run: the best course GEMM at 8192^3 and the geometric mean over six shapes, each against cuBLAS
    # timed in the same rounds
    from kernels import pipeline
    rows = pipeline.versus_cublas([r for r in rec.all("04") if r["name"].endswith("_shapes")])
    ratios = {tuple(shape): cublas["ms"] / best["ms"] for shape, best, cublas in rows}
    assert len(ratios) >= 6
    assert ratios[(8192, 8192, 8192)] >= 1.00
    assert math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios)) >= 0.95


def test_lesson04_model_within_20_percent():
    from kernels import pipeline
    rows = pipeline.model_table(rec.all("04"))
    assert [s for s, *_ in rows] == pipeline.STAGES
    for stages, predicted, measured, err in rows:
        assert abs(err) <= 0.20, f"{stages} stages: predicted {predicted:.3f} ms, measured {measured:.3f} ms"


def test_lesson05_tilelang_gemm_near_cublas_and_the_table_recorded():
    records = rec.all("05")
    names = {r["name"] for r in records}
    assert {"cublas_gemm", "tilelang_gemm", "triton_gemm_pointer", "triton_gemm_tma", "triton_gemm_tma_persistent",
            "torch_copy", "tilelang_copy", "triton_copy_tile"} <= names
    cublas = rec.find("05", "cublas_gemm", shape=[8192, 8192, 8192])
    best = max(r["tflops"] for r in records if "tilelang" in r["name"] and r.get("baseline") == "cublas_gemm")
    assert best >= 0.95 * cublas["tflops"]
