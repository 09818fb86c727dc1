"""The lab library: sm_90 compilation with a launch's specialisation, instruction counts, budgets,
results files, the one measurement source, exercise generation."""
import json
import re
import shutil

import pytest

import kernels
import torch

from kernels.lab import aot, isa, measure, results, smem
from kernels.lab.errors import CourseError, NoGPUError, SharedMemoryError
from kernels.lessons import LESSONS
from kernels.ops import copy, gemm

from conftest import cpu_only


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
    counts = {stages: gemm.compile_sm90(gemm.matmul_kernel, 128, 256, 64, stages).counts() for stages in (1, 3)}
    assert counts[1]["cp.async"] == 0 and counts[1]["ld.global 128-bit"] > 0
    assert counts[3]["cp.async"] > 0 and counts[3]["LDGSTS"] > 0
    assert counts[3]["wgmma.mma_async"] > 0 and counts[3]["HGMMA"] > 0


def test_aot_reports_compile_errors_clearly():
    import triton
    import triton.language as tl

    @triton.jit
    def broken(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

    # Triton's own reason, not the kernel's name, which any message about it would contain
    with pytest.raises(aot.CompileError, match="arange's range must be a power of 2"):
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


@pytest.mark.parametrize("families", [None, ["cp.async", "cp.async.bulk.tensor load", "st.global",
                                             "cp.async.bulk.tensor store", "UTMALDG"]])
def test_isa_table_columns_line_up_whatever_the_labels(families):
    """Every number ends under the end of its kernel's name: a label longer than the label column
    ("  cp.async.bulk.tensor store", 28 characters against 24) used to push its row 4 characters right."""
    from collections import Counter

    class Compiled:
        def __init__(self, name, counts):
            self.name, self._counts = name, Counter(counts)

        def counts(self):
            return self._counts

    tma = {"cp.async.bulk.tensor": 3, "cp.async.bulk.tensor load": 2, "cp.async.bulk.tensor store": 1,
           "mbarrier": 8, "UTMALDG": 2, "UTMASTG": 1}
    ptr = {"ld.global": 8, "ld.global 128-bit": 8, "st.global": 8, "st.global 128-bit": 8, "cp.async": 24, "LDGSTS": 24}
    kernels_ = [Compiled("pointer, 1 stage", ptr), Compiled("TMA", tma)]
    text = isa.table(kernels_, families)
    header, *rows = text.splitlines()
    ends = [len(header) - 18 * k for k in range(2)][::-1]  # two columns of max(12, 16) + 2 characters
    assert header.endswith(" pointer, 1 stage" + " " * 15 + "TMA")
    shown = families or [f for f in isa.PTX_FAMILIES + isa.SASS_FAMILIES if any(f in c for c in (tma, ptr))]
    assert len(rows) >= len(shown)
    for row in rows:
        assert len(row) == len(header), f"row out of line with the header:\n{header}\n{row}"
        numbers = [m.end() for m in re.finditer(r"(?<= )\d+", row) if m.start() >= ends[0] - 18]
        assert numbers == ends, f"numbers end at {numbers}, the names at {ends}:\n{header}\n{row}"
        label = row[:ends[0] - 18]
        assert label.endswith("  "), f"the label runs into the first column: {row!r}"
    if families:  # a width row is indented only under its own family
        assert [r.split("  ")[0] for r in rows][:2] == ["cp.async", "cp.async.bulk.tensor load"]


def test_smem_budget_matches_the_compiler_and_refuses_overflow():
    compiled = gemm.compile_sm90(gemm.matmul_kernel, 128, 256, 64, 3)
    budget = smem.Budget(3, smem.gemm_stage_bytes(128, 256, 64), compiled=compiled.shared)
    assert budget.model == compiled.shared == 3 * 48 * 1024
    with pytest.raises(SharedMemoryError, match="KiB of shared memory needed.*fewer stages"):
        smem.Budget(4, smem.gemm_stage_bytes(256, 256, 128)).require()


def test_smem_model_counts_the_output_tile_the_persistent_kernel_stages():
    # the persistent TMA GEMM keeps its output tile apart from the ring (the next tile's loads are in flight)
    compiled = gemm.compile_sm90(gemm.matmul_tma_persistent_kernel, 128, 256, 64, 3, TMA_STORE=True)
    budget = smem.Budget(3, smem.gemm_stage_bytes(128, 256, 64), output_tile=128 * 256 * 2, compiled=compiled.shared)
    assert budget.model == 208 * 1024 and 0 <= compiled.shared - budget.model < 1024, compiled.shared
    with pytest.raises(SharedMemoryError, match=r"4 x 48.0 KiB \+ 64.0 KiB output tile"):
        smem.Budget(4, smem.gemm_stage_bytes(128, 256, 64), output_tile=128 * 256 * 2).require()


def test_results_records_are_keyed_by_structure_with_resolvable_baselines():
    for path in sorted(results.RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        for key in ("device", "sm_count", "driver", "torch", "triton", "date", "records"):
            assert key in data, f"{path.name} lacks {key}"
        store = results.Store(path.stem, data)
        keys = [results.key(r) for r in data["records"]]
        assert len(keys) == len(set(keys)), f"{path.name}: two records share a key"
        for r in data["records"]:
            assert {"lesson", "run", "name", "config", "shape", "dtype", "ms"} <= set(r), r
            # "ms" None: an outcome counted, not a time (lesson 06's short_count), so no rate either
            assert len(r["lesson"]) == 2 and (r["ms"] > 0 if r["ms"] is not None else not {"gbps", "tflops"} & set(r))
            assert not any(s in r["name"] for s in ("_s1", "_s2", "_s3", "_s4", "@", "_shapes", "_small", "_sweep",
                                                    "_tiles")), f"meaning in a name's suffix: {r['name']}"
            assert "STAGES" not in r["config"] and "num_stages" not in r["config"], r
            if "baseline" in r:
                assert store.baseline_of(r) is not None, f"{path.name}: {r['name']} names baseline {r['baseline']} " \
                                                         "with no record of its lesson and shape"


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_every_run_of_every_lesson_is_recorded(lesson):
    import importlib
    module = importlib.import_module(f"kernels.lessons.{LESSONS[lesson]}")
    store = results.recorded()
    for run in module.RUNS:
        assert store.select(lesson, run), f"results/{results.REFERENCE_DEVICE}.json has no lesson {lesson} run {run}"


@cpu_only  # the file CPU mode reads; on a GPU the widgets measure live, and compiling every setting costs minutes
def test_recorded_sweeps_cover_every_widget_setting_that_fits():
    # what CPU mode shows for a setting is the record of exactly that query; a setting the widget
    # refuses has none. Checked through the widgets' own query and fits, so a lookup that drifts from
    # what was recorded (a key the sweep never wrote) fails here
    from kernels.lab.widgets import REGISTRY
    for module in LESSONS.values():
        __import__(f"kernels.lessons.{module}")
    store = results.recorded()
    for name, widget in REGISTRY.items():
        for cfg in widget.settings():
            q = widget.query(cfg)
            found = store.find(q.lesson, q.run, q.name, q.shape, q.config)
            assert bool(found) == widget.fits(cfg), f"{name} {cfg}: recorded {bool(found)}, fits {widget.fits(cfg)}"
            assert found is None or store.baseline_of(found)["name"] == q.base


def test_a_run_reads_the_results_file_once_per_session(monkeypatch):
    reads = []
    real = results.Path.read_text
    monkeypatch.setattr(results.Path, "read_text", lambda self, *a, **k: reads.append(self) or real(self, *a, **k))
    results.recorded.cache_clear()
    for _ in range(3):
        results.recorded().select("00")
    assert len(reads) == 1


def test_measure_labels_recorded_figures_with_device_and_date(monkeypatch):
    monkeypatch.setattr(measure, "can_run", lambda needs="gpu": False)
    run = measure.run("00", "ceilings", lambda: pytest.fail("measured in CPU mode"))
    store = results.recorded()
    dated = {r.get("date", store.data["date"]) for r in run.records}  # a run's records carry the day it was taken
    assert len(dated) == 1 and run.label == f"recorded on {store.device}, {dated.pop()}" and len(run) == 2
    with pytest.raises(measure.NoRecord):
        measure.versus(measure.Query("00", "sweep", "gemm_pointer", {"BLOCK_M": 3}, (4096, 4096, 4096), launch=None))


def test_exercises_are_generated_from_solutions():
    pytest.importorskip("nbgrader")  # the GPU machine's offline bundle has none: CI checks this
    from kernels.tools import exercises
    generated = exercises.generate()
    assert len(generated) == len(LESSONS), "one exercise per lesson"
    for path, text in generated.items():
        assert path.exists(), f"{path.name} missing: run `make exercises`"
        assert path.read_text() == text, f"{path.name} differs from a fresh generation: run `make exercises`"
        assert "### BEGIN SOLUTION" not in text and "YOUR CODE HERE" in text and "HIDDEN TESTS" not in text


def test_nbgrader_stub_keeps_indentation_and_drops_hidden_tests():
    pytest.importorskip("nbgrader")
    import nbformat
    from kernels.tools import exercises
    solution = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("@jit\ndef k():\n    ### BEGIN SOLUTION\n    x = 1\n    ### END SOLUTION\n",
                                  metadata={"nbgrader": {"solution": True, "grade": False, "grade_id": "a",
                                                         "locked": False, "schema_version": 3}}),
        nbformat.v4.new_code_cell("passed = check()\n### BEGIN HIDDEN TESTS\nassert passed\n### END HIDDEN TESTS",
                                  metadata={"nbgrader": {"solution": False, "grade": True, "grade_id": "b", "points": 1,
                                                         "locked": True, "schema_version": 3}})])
    solution.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    out = exercises.exercise_from(solution)
    assert out.cells[0].source == "@jit\ndef k():\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
    assert out.cells[1].source.strip() == "passed = check()"


def test_clock_samples_are_summarised_and_described():
    from kernels.lab import clocks
    line = lambda mhz, w, cap, t=0.0: {"t": t, "sm_mhz": mhz, "below_max_mhz": 1980.0 - mhz, "power_w": w,
                                       "limit_w": 700.0, "temp_c": 50.0, "power_cap": cap, "hw_slowdown": False,
                                       "thermal": False}
    s = clocks.Sampler()
    s.max_mhz = 1980
    s.samples = [line(1980.0, 300.0, False), line(1500.0, 699.0, True), line(1400.0, 701.0, True), line(1980.0, None, False)]
    got = s.summary()
    assert (got["sm_mhz_median"], got["sm_mhz_min"], got["power_w_max"], got["power_cap_share"]) == (1740.0, 1400.0, 701.0, 0.5)
    # the flag alone does not say how much the cap cost: the clock's distance below its maximum while flagged does
    assert got["power_cap_below_mhz"] == 530.0
    assert ("the power cap flagged in 50% of 4 samples (the clock 530 MHz below its 1980 MHz maximum there, median)"
            in clocks.describe(got)), clocks.describe(got)
    s.samples = [line(1980.0, 300.0, False, t=1.0), line(1400.0, 700.0, True, t=2.0), line(1300.0, 700.0, True, t=3.0)]
    assert s.summary(windows=[(1.5, 2.5), (2.9, 3.1)])["sm_mhz_median"] == 1350.0  # only the kernel's own samples
    # a record sampled through nvidia-smi before (results/) has no cost kept: the line says the share alone
    old = {k: v for k, v in got.items() if k not in ("power_cap_below_mhz", "sm_mhz_limit")}
    assert clocks.describe(old).endswith("the power cap flagged in 50% of 4 samples")
    with clocks.Sampler() as none:  # no GPU here (or no NVML): an empty summary, said in words
        pass
    if not none.samples:
        assert none.summary() == {} and "not sampled" in clocks.describe({})


def test_the_sampler_reads_nvml_in_a_thread(monkeypatch):
    """The binding's calls as the sampler makes them, on a fake NVML: clock, reasons decoded by name (the
    binding's constants), power in watts, and the sampling thread stopped when the block ends."""
    import types
    from kernels.lab import clocks
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0, nvmlClocksEventReasonSwPowerCap=0x4,
        nvmlClocksEventReasonHwSlowdown=0x8, nvmlClocksEventReasonHwPowerBrakeSlowdown=0x80,
        nvmlClocksEventReasonSwThermalSlowdown=0x20, nvmlClocksEventReasonHwThermalSlowdown=0x40,
        nvmlDeviceGetClockInfo=lambda h, c: 1958, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 | 0x1,  # power cap, and idle (not reported)
        nvmlDeviceGetPowerUsage=lambda h: 690_500, nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetTemperature=lambda h, s: 61)
    monkeypatch.setattr(clocks, "_nvml", lambda: fake)
    monkeypatch.setattr(clocks, "_handle", lambda nvml: "gpu0")
    with clocks.Sampler(every_ms=5) as s:
        while len(s.samples) < 3:
            pass
    n = len(s.samples)
    assert not s._thread.is_alive() and len(s.samples) == n
    got = s.summary()
    assert got["power_cap_share"] == 1.0 and got["thermal_share"] == got["hw_slowdown_share"] == 0.0
    assert (got["power_w_max"], got["limit_w"], got["sm_mhz_limit"], got["power_cap_below_mhz"]) == (690.5, 700.0, 1980, 22.0)


def test_latency_walks_check_their_arguments_and_compile_the_l2_load_as_cg():
    from kernels.lab import aot, isa
    from kernels.ops import latency
    chain = latency.random_cycle(256)
    assert latency.chase(chain, 5, 300, cache=".cg").item() == latency.chase_reference(chain, 5, 300)
    out = chain[:1].clone()
    ptx = aot.compile_sm90(latency.chase_kernel, chain, out, 0, 10, CACHE=".cg", num_warps=1).ptx
    assert isa.lines(ptx, "ld.global") and all(".cg" in l for l in isa.lines(ptx, "ld.global"))
    smem = aot.compile_sm90(latency.smem_chase_kernel, latency.random_cycle(latency.SMEM_SLOTS), out, 10, num_warps=1)
    assert smem.counts()["LDS"] > 0 and smem.counts()["ld.shared"] == 1
    if kernels.MODE == "cpu":
        with pytest.raises(NoGPUError, match="inline PTX"):
            latency.chase_shared(latency.random_cycle(latency.SMEM_SLOTS), 10)


@pytest.mark.skipif(not shutil.which("nvcc"), reason="no nvcc on PATH")
def test_hand_written_cuda_compiles_for_sm90a_and_reads_like_triton_code(tmp_path, monkeypatch):
    from kernels.lab import cuda
    monkeypatch.setattr(cuda, "CACHE", tmp_path)
    src = """#include <cstdint>
    __global__ void arm(uint64_t *flag) {
      __shared__ alignas(8) uint64_t bar;
      uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(16));
      *flag = b;
    }"""
    code = cuda.compile_sm90a("arm", src)
    assert code.counts()["mbarrier"] == 2 and code.counts()["SYNCS"] >= 1
    with pytest.raises(CourseError, match="nvcc -ptx of broken failed"):
        cuda.compile_sm90a("broken", src.replace("uint32_t b", "uint32_t"))


def test_a_run_recorded_after_the_file_is_labelled_with_its_own_date():
    from kernels.lab.results import Store
    store = Store("nvidia-h200", {"device": "NVIDIA H200", "date": "2026-12-01", "records": [{"lesson": "07"}]})
    assert store.label_of([{"date": "2026-12-02"}, {"date": "2026-12-02"}]) == "recorded on NVIDIA H200, 2026-12-02"
    assert store.label == "recorded on NVIDIA H200, 2026-12-01"
    # records of several days name them all (a finding on two runs): the file's date stands for undated records
    assert store.label_of([{"date": "2026-12-02"}, {}]) == "recorded on NVIDIA H200, 2026-12-01 and 2026-12-02"
    assert store.label_of([{"date": "2026-11-30"}]) == "recorded on NVIDIA H200, 2026-11-30"


def test_a_screen_keeps_the_entries_that_run_right_and_says_why_it_left_one_out(capsys):
    import functools

    import pytest
    import torch

    from kernels.lab import measure
    from kernels.lab.errors import CourseError
    from kernels.lab.mode import DEVICE
    from kernels.ops import gemm_splitk
    a = torch.randn(16, 64, dtype=torch.float16, device=DEVICE)
    b = torch.randn(64, 64, dtype=torch.float16, device=DEVICE)
    c = torch.empty(16, 64, dtype=torch.float16, device=DEVICE)
    good = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, stages=2)
    small = dict(BLOCK_M=8, BLOCK_N=64, BLOCK_K=32, stages=2)  # refused: under the MMA's 16 rows
    entries = [("gemm_splitk", cfg, functools.partial(gemm_splitk.plan, a, b, c, **cfg)) for cfg in (small, good)]
    fns, cfgs = measure.screened(entries, c, a @ b, 1e-2, CourseError, " at 16x64x64")
    assert list(fns) == [1] and cfgs == {1: ("gemm_splitk", good)}
    assert "left out at 16x64x64: gemm_splitk BLOCK_M=8" in capsys.readouterr().out
    wrong = [("wrong", {}, lambda: lambda: c.fill_(1.0))]  # writes, but not the product: the check stops the screen
    with pytest.raises(AssertionError):
        measure.screened(wrong, c, a @ b, 1e-2, CourseError)


@pytest.mark.skipif(not __import__("kernels").INTERPRET, reason="the interpreter's patch")
def test_a_loop_bound_is_read_on_numpy_2_4():
    """NumPy 2.4 refuses int() of a one-element array of one dimension, which Triton 3.6's interpreter did for every
    runtime loop bound: its __index__, patched (triton_internals), reads the element instead."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    class Strict(np.ndarray):  # NumPy 2.4's rule on any NumPy
        def __int__(self):
            if self.ndim:
                raise TypeError("only 0-dimensional arrays can be converted to Python scalars")
            return int(self.item())

    scope = interpreter._LangPatchScope()
    interpreter._patch_lang_tensor(tl.tensor, scope)
    try:
        bound = tl.tensor(interpreter.TensorHandle(np.array([96], dtype=np.int32).view(Strict), tl.int32), tl.int32)
        assert range(0, bound, 32) == range(0, 96, 32)
    finally:
        scope.restore()
