"""The lab library: sm_90 compilation with a launch's specialisation, instruction counts, budgets,
results files, exercise generation."""
import json

import pytest
import torch

from kernels import copy, gemm
from kernels.lab import aot, bench, exercises, isa, smem
from kernels.lab.errors import SharedMemoryError


def _tile_copy(n_cols, **meta):
    x = torch.empty(8, 8, dtype=torch.float16)
    return aot.compile_sm90(copy.copy_tile_kernel, x, x, 16384, n_cols, n_cols, n_cols,
                            BLOCK_M=64, BLOCK_N=128, num_warps=4, **meta)


def test_aot_keeps_the_launch_specialisation():
    # strides divisible by 16 -> 16-byte vectors: a 64x128 fp16 tile over 128 threads is 8 per thread
    assert _tile_copy(16384).counts()["ld.global 128-bit"] == 8
    # an odd row length cannot be proven aligned: the same kernel falls back to scalar loads
    odd = _tile_copy(16383).counts()
    assert odd["ld.global 128-bit"] == 0 and odd["ld.global 16-bit"] == 64


def test_aot_sass_and_tma_families():
    x = torch.empty(8, 8, dtype=torch.float16)
    c = aot.compile_sm90(copy.copy_tma_kernel, x, x, 16384, 16384, 16384, 16384, BLOCK_M=64, BLOCK_N=128)
    counts = c.counts()
    assert counts["cp.async.bulk.tensor load"] >= 1 and counts["mbarrier"] >= 1
    assert counts["UTMALDG"] >= 1 and counts["UTMASTG"] >= 1 and counts["ld.global"] == 0


def test_aot_pipelined_gemm_uses_cp_async_and_wgmma():
    big = torch.empty(8192, 8192, dtype=torch.float16)
    counts = {}
    for stages in (1, 3):
        _, args, meta = gemm.launch_args(big, big, big, 128, 256, 64, stages)
        counts[stages] = aot.compile_sm90(gemm.matmul_kernel, *args, **meta).counts()
    assert counts[1]["cp.async"] == 0 and counts[1]["ld.global 128-bit"] > 0
    assert counts[3]["cp.async"] > 0 and counts[3]["LDGSTS"] > 0
    assert counts[3]["wgmma.mma_async"] > 0 and counts[3]["HGMMA"] > 0


def test_aot_reports_compile_errors_clearly():
    import triton
    import triton.language as tl

    @triton.jit
    def broken(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

    with pytest.raises(Exception, match="broken|power of 2|arange"):
        aot.compile_sm90(broken, torch.empty(4), BLOCK=3)


def test_isa_counts_ptx_by_width():
    ptx = """
    ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    @%p1 ld.global.b16 { %rs1 }, [ %rd2 + 0 ];
    cp.async.cg.shared.global [ %r5 + 0 ], [ %rd3 + 0 ], 0x10, %r6;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4];
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r7], %r8;
    """
    c = isa.count_ptx(ptx)
    assert c["ld.global 128-bit"] == 1 and c["ld.global 16-bit"] == 1 and c["ld.global"] == 2
    assert c["cp.async"] == 1 and c["cp.async.bulk.tensor load"] == 1 and c["mbarrier"] == 1


def test_smem_budget_matches_the_compiler_and_refuses_overflow():
    big = torch.empty(8192, 8192, dtype=torch.float16)
    _, args, meta = gemm.launch_args(big, big, big, 128, 256, 64, 3)
    compiled = aot.compile_sm90(gemm.matmul_kernel, *args, **meta)
    budget = smem.Budget(3, smem.gemm_stage_bytes(128, 256, 64), compiled=compiled.shared)
    assert budget.model == compiled.shared == 3 * 48 * 1024
    with pytest.raises(SharedMemoryError, match="KiB of shared memory needed.*fewer stages"):
        smem.Budget(4, smem.gemm_stage_bytes(256, 256, 128)).require()


def test_results_records_have_same_run_baselines():
    for path in sorted(bench.RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        for key in ("device", "driver", "torch", "triton", "date", "records"):
            assert key in data, f"{path.name} lacks {key}"
        names = {(r["lesson"], r["name"], tuple(r["shape"])) for r in data["records"]}
        for r in data["records"]:
            assert {"lesson", "name", "config", "shape", "dtype", "ms"} <= set(r), r
            assert len(r["lesson"]) == 2 and r["ms"] > 0
            if "baseline" in r:
                assert any(n == r["baseline"] and s == tuple(r["shape"]) for _, n, s in names), \
                    f"{path.name}: {r['name']} names baseline {r['baseline']} with no record of the same shape"


@pytest.mark.parametrize("lesson, names", [
    ("00", ["torch_copy", "cublas_gemm", "cublas_gemm_zeros", "latency_hbm", "latency_l2", "gemm_pointer"]),
    ("01", ["torch_copy", "copy_tile", "copy_elem", "copy_rows", "copy_cols", "copy_tile_sweep"]),
    ("02", ["cublas_gemm", "gemm_pointer", "torch_copy", "copy_loop_s1", "copy_loop_s4", "gemm_sweep"]),
    ("03", ["torch_copy", "copy_tma", "copy_tma_loop_s4", "copy_tma_host_loop_s4", "torch_copy_small",
            "transpose_tma", "gemm_tma", "gemm_pointer", "seed_gemm", "seed_gemm_grouped", "copy_tma_sweep",
            "gemm_tma_tiles", "gemm_pointer_tiles", "cublas_gemm_tiles"]),
    ("04", ["cublas_gemm", "probe_full", "probe_math_only", "probe_loads_only", "probe_consume_only",
            "gemm_tma_persistent", "gemm_tma_persistent_ptrstore", "cublas_gemm_shapes", "gemm_tma_persistent_shapes",
            "gemm_sweep"]),
    ("05", ["cublas_gemm", "tilelang_gemm", "tilelang_gemm_cp_async", "tilelang_gemm_panel0", "triton_gemm_pointer",
            "triton_gemm_tma", "triton_gemm_tma_persistent", "torch_copy", "tilelang_copy", "tilelang_gemm_sweep"])])
def test_reference_results_cover_each_lesson(lesson, names):
    rec = bench.Recorded()
    for name in names:
        assert rec.find(lesson, name), f"results/{bench.REFERENCE_DEVICE}.json has no lesson {lesson} record {name}"


def test_recorded_sweeps_cover_every_widget_setting():
    import kernels.cp_async
    import kernels.loads
    import kernels.roofline
    rec = bench.Recorded()
    lim = smem.limit()
    for lesson, name, configs in [("00", "gemm_pointer", kernels.roofline._sweep_configs()),
                                  ("01", "copy_tile_sweep", kernels.loads.sweep_configs())]:
        for cfg in configs:
            assert rec.find(lesson, name, config=cfg), f"no lesson {lesson} record for {cfg}"
    import kernels.descriptors
    for cfg in kernels.descriptors.sweep_configs():
        fits = cfg["stages"] * cfg["BLOCK_M"] * cfg["BLOCK_N"] * 2 <= lim
        assert bool(rec.find("03", "copy_tma_sweep", config=cfg)) == fits, cfg
    import kernels.pipeline
    for cfg in kernels.pipeline.sweep_configs():  # recorded exactly where the compiled kernel fits
        assert bool(rec.find("04", "gemm_sweep", config=cfg)) == kernels.pipeline.fits(cfg), cfg
    import kernels.side_by_side
    for cfg in kernels.side_by_side.sweep_configs():  # every TileLang setting offered fits and is recorded
        assert rec.find("05", "tilelang_gemm_sweep", config=cfg), cfg
    for cfg in kernels.cp_async.sweep_configs():
        fits = smem.Budget(cfg["stages"], smem.gemm_stage_bytes(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"])).fits
        assert bool(rec.find("02", "gemm_sweep", config=cfg)) == fits, cfg


def test_exercises_are_generated_from_solutions():
    generated = exercises.generate()
    assert generated, "no solution notebooks found"
    for path, text in generated.items():
        assert path.exists(), f"{path.name} missing: run `make exercises`"
        assert path.read_text() == text, f"{path.name} differs from a fresh generation: run `make exercises`"
        assert "### BEGIN SOLUTION" not in text and "YOUR CODE HERE" in text


def test_strip_solution_keeps_indentation_and_custom_stub():
    src = "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n\n" \
          "@jit\ndef k():\n    ### BEGIN SOLUTION pass\n    x = 1\n    ### END SOLUTION\n"
    out = exercises.strip_solution(src)
    assert "    raise NotImplementedError" in out and "    pass" in out and "return 1" not in out and "x = 1" not in out
