"""COURSE_RECORDED=1, the room's switch: on a GPU every figure is the recorded one, labelled so, and
nothing is timed; without it a GPU measures as before. The GPU is faked (measure.LIVE / MODE), so
this runs anywhere; no kernel is launched on a device."""
import contextlib
import io
import re
from pathlib import Path

import matplotlib.pyplot as plt
import nbformat
import pytest
import torch

import kernels
from kernels.lab import bench, measure, results
from kernels.lab.errors import CourseError
from kernels.lab.widgets import REGISTRY
from kernels.lessons import LESSONS

from conftest import own_process_on_gpu

for _module in LESSONS.values():  # importing a lesson registers its widget
    __import__(f"kernels.lessons.{_module}")

ROOT = Path(__file__).resolve().parents[1]
TIMERS = re.compile(r"do_bench|interleaved_ms|median_ms|graph_ms|host_us")


@pytest.fixture
def hopper(monkeypatch):
    """A faked Hopper GPU for the measurement source and the timers (nothing reaches a device: the
    measure functions below fail the test if called, and the timers refuse before touching CUDA)."""
    for module in (measure, bench):
        monkeypatch.setattr(module, "MODE", "hopper")
    monkeypatch.setattr(measure, "LIVE", True)
    return monkeypatch


def test_switch_on_a_gpu_shows_the_recorded_figures_labelled(hopper):
    hopper.setenv("COURSE_RECORDED", "1")
    assert not measure.can_run() and not measure.can_run("hopper") and not kernels.times_here("hopper")
    run = measure.run("00", "ceilings", lambda: pytest.fail("timed on the GPU with COURSE_RECORDED=1"))
    store = results.recorded()
    assert len(run) == 2 and run.label.startswith(store.label_of(run.records))
    assert "COURSE_RECORDED=1" in run.label, "on a GPU the label must say why the figures are not this GPU's"
    assert measure.sm_count() == store.sm_count, "the SM count must be the recording device's, like its figures"
    for timer in (bench.median_ms, bench.graph_ms, bench.host_us):
        with pytest.raises(CourseError, match="COURSE_RECORDED=1"):
            timer(lambda: pytest.fail("launched"))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_switch_on_a_gpu_every_widget_shows_its_recorded_figure(hopper, name):
    hopper.setenv("COURSE_RECORDED", "1")
    widget = REGISTRY[name]
    hopper.setattr(measure.Query, "setup", lambda q: pytest.fail(f"{name} timed live with COURSE_RECORDED=1"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        shown = widget(**widget.defaults)
    plt.close("all")
    assert shown.figure is not None, f"{name} at its defaults showed no figure:\n{out.getvalue()}"
    assert shown.figure.label.startswith("recorded on ") and "COURSE_RECORDED=1" in shown.figure.label


def test_without_the_switch_a_gpu_measures_live(hopper):
    hopper.delenv("COURSE_RECORDED", raising=False)
    assert measure.can_run() and measure.can_run("hopper") and kernels.times_here()
    fake = [results.record("torch_copy", 1.0, shape=[4], nbytes=8)]
    run = measure.run("00", "ceilings", lambda: fake)
    assert run.records[0]["ms"] == 1.0 and run.label.startswith("measured live on ")
    hopper.setenv("COURSE_RECORDED", "0")  # "0" is off, as unset
    assert measure.can_run()


def test_banner_says_the_switch_is_on(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_RECORDED", "1")
    kernels.banner()
    assert "COURSE_RECORDED=1: every timing and widget figure is the recorded one" in capsys.readouterr().out
    monkeypatch.delenv("COURSE_RECORDED")
    kernels.banner()
    assert "COURSE_RECORDED" not in capsys.readouterr().out


def test_every_timer_passes_the_gate():
    """The switch holds only if nothing times around it: in kernels/, only bench.py calls Triton's timers,
    and every solution cell that times asks kernels.times_here() first (exercises are generated from them)."""
    for path in sorted((ROOT / "kernels").rglob("*.py")):
        if path.name != "bench.py":
            calls = re.findall(r"testing\.do_bench\w*\(", path.read_text())
            assert not calls, f"{path.relative_to(ROOT)} times with Triton directly: use kernels.lab.bench"
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in nbformat.read(path, 4).cells:
            if cell.cell_type == "code" and TIMERS.search(cell.source):
                assert "kernels.times_here(" in cell.source, \
                    f"{path.name}: a cell times without asking kernels.times_here():\n{cell.source[:300]}"


def test_a_run_recorded_again_replaces_the_whole_run(tmp_path, monkeypatch):
    """A re-recorded run whose winner changed must not leave the old winner's record beside the new one;
    the file's other runs stay as they were."""
    class Props:
        name, multi_processor_count = "Fake GPU", 132
    monkeypatch.setattr(results.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(results.torch.cuda, "get_device_properties", lambda _: Props())
    monkeypatch.setattr(results.bench, "driver", lambda: "0")
    path = tmp_path / "fake.json"
    rec = lambda run, name, **cfg: {"lesson": "07", "run": run, **results.record(name, 1.0, shape=(8, 8), config=cfg)}
    results.save([rec("best", "gemm_best", BLOCK_M=128), rec("best", "cublas_gemm"), rec("waves", "cublas_gemm")], path)
    results.save([rec("best", "gemm_best", BLOCK_M=64), rec("best", "cublas_gemm")], path)
    kept = results.Store("fake", __import__("json").loads(path.read_text()))
    assert [r["config"] for r in kept.select("07", "best", "gemm_best")] == [{"BLOCK_M": 64}]
    assert len(kept.select("07", "best")) == 2 and len(kept.select("07", "waves")) == 1


@own_process_on_gpu
def test_after_a_kernel_traps_nothing_times_and_the_label_says_why():
    """A learner's kernel that traps leaves this process no GPU: a timing cell after it must not launch (it would
    raise CUDA's error, not the course's), and recorded figures say why they are shown."""
    if kernels.MODE == "cpu":
        assert not measure.gpu_lost()
        return
    import triton
    import triton.language as tl

    @triton.jit
    def trap_kernel(x_ptr):
        v = tl.load(x_ptr)
        tl.store(x_ptr, tl.inline_asm_elementwise("trap; mov.u32 $0, $1;", "=r,r", [v], dtype=tl.int32,
                                                  is_pure=False, pack=1))

    x = torch.ones(1, dtype=torch.int32, device="cuda")
    assert not measure.gpu_lost() and kernels.times_here() == measure.can_run()
    trap_kernel[(1,)](x)
    with pytest.raises(Exception):
        torch.cuda.synchronize()
    assert measure.gpu_lost() and not kernels.times_here()
    assert "lost its GPU: restart the Jupyter kernel" in measure.recorded_label(results.recorded())
