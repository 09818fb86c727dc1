"""The seat check (kernels/tools/doctor.py): this machine's seat passes, and each problem the doctor
knows is found, as FAIL or WARN, with a fix that names what to run."""
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import cpu_only
from kernels.tools import doctor

ROOT = doctor.ROOT


def by_name(results, name):
    found = [r for r in results if r.name == name]
    assert len(found) == 1, [r.name for r in results]
    return found[0]


def installed_except(monkeypatch, **versions):
    """Pretend these packages have these versions (None: not installed); the rest as they are."""
    real = doctor._installed
    monkeypatch.setattr(doctor, "_installed", lambda name: versions[name] if name in versions else real(name))


# ---- a healthy seat -------------------------------------------------------------------------------

def test_this_seat_passes_as_make_doctor_runs_it():
    run = subprocess.run([sys.executable, str(ROOT / "kernels" / "tools" / "doctor.py")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    lines = run.stdout.splitlines()
    for name in ("python", "torch", "triton", "JupyterLab", "widgets extension", "mode", "interpreter",
                 "recorded figures", "nvcc", "sm_90 compile", "launch", "GPU to itself", "recorded results",
                 "test suite"):
        assert any(line[6:].startswith(name + " ") for line in lines), (name, run.stdout, run.stderr)
    fails = [line for line in lines if line.startswith("FAIL")]
    # a GPU box that runs the notebooks headless (no JupyterLab: the H200's test bundle) is no seat for a learner
    allowed = ("jupyterlab", "JupyterLab", "widgets extension") if doctor._installed("jupyterlab") is None else ()
    assert all(line[6:].split("  ")[0].strip() in allowed for line in fails), run.stdout
    assert run.returncode == (1 if fails else 0), run.stdout + run.stderr
    assert "OK    sm_90 compile" in run.stdout and "OK    launch" in run.stdout and "OK    mode" in run.stdout


def test_exit_status_is_1_on_any_fail(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "checks", lambda: iter([doctor.Result("a", "OK", "fine"),
                                                        doctor.Result("b", "WARN", "meh", "do x")]))
    assert doctor.main() == 0
    monkeypatch.setattr(doctor, "checks", lambda: iter([doctor.Result("b", "FAIL", "broken", "run y")]))
    assert doctor.main() == 1
    out = capsys.readouterr().out
    assert "FAIL  b" in out and "fix: run y" in out and "not ready" in out


def test_a_crashing_check_is_a_fail_not_a_traceback(monkeypatch):
    def boom():
        raise RuntimeError("surprise")
    monkeypatch.setattr(doctor, "check_nvcc", boom)
    r = by_name(list(doctor.checks()), "boom")
    assert r.status == "FAIL" and "surprise" in r.detail and r.fix


# ---- Python and the pins --------------------------------------------------------------------------

def test_old_python_fails():
    r = doctor.check_python((3, 10, 4))
    assert r.status == "FAIL" and "3.11" in r.fix and "make lab" in r.fix
    assert doctor.check_python((3, 12, 1)).status == "OK"


def test_a_wrong_triton_fails_with_the_pin_to_install(monkeypatch):
    installed_except(monkeypatch, triton="3.5.1")
    r = by_name(doctor.check_packages("cpu"), "triton")
    assert r.status == "FAIL" and "3.5.1" in r.detail and "pip install 'triton==3.6.0'" in r.fix


@pytest.mark.parametrize("version, mode, pin_file", [("2.11.0+cu130", "hopper", "environment.yml"),
                                                    ("2.13.0+cpu", "cpu", "requirements.txt")])
def test_torch_at_either_files_pin_passes_and_says_which(monkeypatch, version, mode, pin_file):
    installed_except(monkeypatch, torch=version)
    r = by_name(doctor.check_packages(mode), "torch")
    assert r.status == "OK" and pin_file in r.detail


def test_a_wrong_torch_on_a_gpu_fails_with_the_cuda_build(monkeypatch):
    installed_except(monkeypatch, torch="2.9.1+cu128")
    r = by_name(doctor.check_packages("hopper"), "torch")
    assert r.status == "FAIL" and "torch==2.11.0" in r.fix and "download.pytorch.org/whl/cu130" in r.fix


def test_another_matplotlib_only_warns(monkeypatch):
    installed_except(monkeypatch, matplotlib="3.9.0")
    r = by_name(doctor.check_packages("cpu"), "matplotlib")
    assert r.status == "WARN" and "pip install 'matplotlib==3.11.2'" in r.fix


def test_numpy_24_fails_in_cpu_mode_and_warns_on_a_gpu(monkeypatch):
    installed_except(monkeypatch, numpy="2.4.1")
    cpu = by_name(doctor.check_packages("cpu"), "numpy")
    assert cpu.status == "FAIL" and "interpreter" in cpu.detail and "numpy==2.3.5" in cpu.fix
    assert by_name(doctor.check_packages("hopper"), "numpy").status == "WARN"


def test_a_missing_package_fails_for_the_lessons_and_warns_for_the_tests(monkeypatch):
    installed_except(monkeypatch, ipywidgets=None, playwright=None)
    results = doctor.check_packages("cpu")
    widgets, playwright = by_name(results, "ipywidgets"), by_name(results, "playwright")
    assert widgets.status == "FAIL" and "not installed" in widgets.detail and "ipywidgets==8.1.9" in widgets.fix
    assert playwright.status == "WARN" and "playwright==1.65.2" in playwright.fix


def test_every_pin_of_both_files_is_checked():
    names = {r.name for r in doctor.check_packages("cpu")}
    req, env, _ = doctor._pin_files()
    assert names == set(req) | set(env)


# ---- JupyterLab and the widget extension ----------------------------------------------------------

def test_no_jupyterlab_fails(monkeypatch):
    installed_except(monkeypatch, jupyterlab=None)
    r = doctor.check_jupyterlab()
    assert r.status == "FAIL" and "jupyterlab==" in r.fix


def test_a_kernel_spec_for_another_python_warns(monkeypatch):
    if doctor._installed("jupyterlab") is None:
        pytest.skip("no JupyterLab here")
    monkeypatch.setattr(doctor, "_kernel_argv", lambda: (["/opt/other/bin/python", "-m", "ipykernel_launcher"],
                                                         "/home/me/.local/share/jupyter/kernels/python3"))
    r = doctor.check_jupyterlab()
    assert r.status == "WARN" and "/opt/other/bin/python" in r.detail and "ipykernel install" in r.fix


def test_no_widgets_package_fails(monkeypatch):
    installed_except(monkeypatch, jupyterlab_widgets=None)
    r = doctor.check_widgets()
    assert r.status == "FAIL" and "pip install --force-reinstall 'ipywidgets==8.1.9'" in r.fix


@pytest.fixture
def lab_dirs(tmp_path, monkeypatch):
    """A labextensions folder holding the widget manager, and a config folder, both under tmp_path."""
    ext = tmp_path / "labextensions" / doctor.WIDGETS_EXTENSION
    ext.mkdir(parents=True)
    (ext / "package.json").write_text(json.dumps({"name": doctor.WIDGETS_EXTENSION, "version": "5.0.16"}))
    page_config = tmp_path / "labconfig" / "page_config.json"
    page_config.parent.mkdir()
    installed_except(monkeypatch, jupyterlab_widgets="3.0.17")
    monkeypatch.setattr(doctor, "_labextension_dirs", lambda: [tmp_path / "labextensions"])
    monkeypatch.setattr(doctor, "_page_config_files", lambda: [page_config])
    return SimpleNamespace(ext=ext, page_config=page_config)


def test_the_widget_extension_found_and_enabled_passes(lab_dirs):
    r = doctor.check_widgets()
    assert r.status == "OK" and "5.0.16" in r.detail


def test_a_widget_extension_jupyterlab_cannot_see_fails(lab_dirs):
    (lab_dirs.ext / "package.json").unlink()
    r = doctor.check_widgets()
    assert r.status == "FAIL" and "cannot see" in r.detail and "--force-reinstall" in r.fix


@pytest.mark.parametrize("disabled", [{doctor.WIDGETS_EXTENSION: True}, [doctor.WIDGETS_EXTENSION],
                                      {"@jupyter-widgets/.*": True}])
def test_a_disabled_widget_extension_fails(lab_dirs, disabled):
    lab_dirs.page_config.write_text(json.dumps({"disabledExtensions": disabled}))
    r = doctor.check_widgets()
    assert r.status == "FAIL" and "disabled" in r.detail
    assert f"jupyter labextension enable {doctor.WIDGETS_EXTENSION}" in r.fix


def test_an_extension_marked_not_disabled_passes(lab_dirs):
    lab_dirs.page_config.write_text(json.dumps({"disabledExtensions": {doctor.WIDGETS_EXTENSION: False}}))
    assert doctor.check_widgets().status == "OK"


# ---- mode, interpreter, recorded figures ----------------------------------------------------------

def test_mode_names_the_machine():
    import kernels
    r = doctor.check_mode()
    assert r.detail.startswith(kernels.MODE)
    if kernels.MODE != "cpu":
        assert "compute capability" in r.detail and "TMA" in r.detail


@cpu_only
def test_cpu_mode_on_a_machine_with_a_driver_warns(monkeypatch):
    monkeypatch.setattr(doctor, "_which", lambda cmd: "/usr/bin/nvidia-smi" if cmd == "nvidia-smi" else None)
    r = doctor.check_mode()
    assert r.status == "WARN" and "NVIDIA driver" in r.detail and r.fix


@cpu_only
def test_the_interpreter_off_in_cpu_mode_fails(monkeypatch):
    import kernels.ops.scale as scale
    monkeypatch.setattr(scale, "scale_kernel", type("JITFunction", (), {})())
    r = doctor.check_interpreter()
    assert r.status == "FAIL" and "import kernels before triton" in r.fix


@pytest.mark.parametrize("env, kernel", [("1", "JITFunction"), ("0", "InterpretedFunction")])
def test_the_interpreter_on_a_gpu_fails(monkeypatch, env, kernel):
    import kernels.ops.scale as scale
    monkeypatch.setattr(doctor, "_mode", lambda: SimpleNamespace(MODE="hopper"))
    monkeypatch.setattr(scale, "scale_kernel", type(kernel, (), {})())
    monkeypatch.setenv("TRITON_INTERPRET", env)
    r = doctor.check_interpreter()
    assert r.status == "FAIL" and "unset TRITON_INTERPRET" in r.fix
    monkeypatch.setattr(scale, "scale_kernel", type("JITFunction", (), {})())
    monkeypatch.delenv("TRITON_INTERPRET")
    assert doctor.check_interpreter().status == "OK"


def test_the_interpreter_is_right_for_this_mode_here():
    assert doctor.check_interpreter().status == "OK"


@pytest.mark.parametrize("value, status, word", [(None, "OK", "off"), ("1", "OK", "on"), ("yes", "WARN", "neither")])
def test_the_recorded_figures_switch_is_reported(monkeypatch, value, status, word):
    if value is None:
        monkeypatch.delenv("COURSE_RECORDED", raising=False)
    else:
        monkeypatch.setenv("COURSE_RECORDED", value)
    monkeypatch.setattr(doctor, "_mode", lambda: SimpleNamespace(MODE="hopper"))
    r = doctor.check_recorded()
    assert r.status == status and word in r.detail
    assert status == "OK" or "COURSE_RECORDED=1" in r.fix


@pytest.mark.parametrize("value", [None, "1"])
def test_without_a_gpu_every_figure_is_said_to_be_recorded(monkeypatch, value):
    """Not "off": without a GPU nothing is timed, whatever COURSE_RECORDED says."""
    monkeypatch.setattr(doctor, "_mode", lambda: SimpleNamespace(MODE="cpu"))
    if value is None:
        monkeypatch.delenv("COURSE_RECORDED", raising=False)
    else:
        monkeypatch.setenv("COURSE_RECORDED", value)
    r = doctor.check_recorded()
    assert r.status == "OK" and r.detail.startswith("always, with no GPU") and "off" not in r.detail


# ---- nvcc, the sm_90 compile, a launch, the recorded results -------------------------------------

def test_no_nvcc_warns_with_where_to_get_it(monkeypatch):
    monkeypatch.setattr(doctor, "_which", lambda cmd: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    r = doctor.check_nvcc()
    assert r.status == "WARN" and "lesson 05" in r.detail
    assert "PATH" in r.fix and ("CUDA toolkit" in r.fix or "export PATH=" in r.fix)


def test_nvcc_off_path_but_in_cuda_home_says_export_path(monkeypatch, tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    monkeypatch.setattr(doctor, "_which", lambda cmd: None)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    r = doctor.check_nvcc()
    assert r.status == "WARN" and r.fix == f"export PATH={tmp_path / 'bin'}:$PATH"


def test_an_old_nvcc_warns(monkeypatch):
    monkeypatch.setattr(doctor, "_which", lambda cmd: "/usr/bin/nvcc")
    monkeypatch.setattr(doctor, "_run", lambda cmd: "Cuda compilation tools, release 11.8, V11.8.89")
    r = doctor.check_nvcc()
    assert r.status == "WARN" and "11.8" in r.detail and "12 or newer" in r.fix


def test_a_current_nvcc_passes(monkeypatch):
    monkeypatch.setattr(doctor, "_which", lambda cmd: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(doctor, "_run", lambda cmd: "Cuda compilation tools, release 13.0, V13.0.88")
    assert doctor.check_nvcc().status == "OK"


def test_a_failed_compile_fails_with_the_triton_fix():
    from kernels.lab.aot import CompileError

    def broken():
        raise CompileError("compiling copy_tma_host_loop_kernel for sm_90 failed: PTXASError: ptxas not found")
    r = doctor.check_compile(broken)
    assert r.status == "FAIL" and "ptxas not found" in r.detail and "triton==3.6.0" in r.fix


@pytest.mark.parametrize("counts", [{"ld.global": 2, "LDG": 2},                      # no TMA at all
                                    {"cp.async.bulk.tensor load": 2, "LDG": 2}])   # PTX has it, SASS not
def test_a_compile_without_tma_fails(counts):
    compiled = SimpleNamespace(origin="x", counts=lambda: counts)
    r = doctor.check_compile(lambda: compiled)
    assert r.status == "FAIL" and "without TMA" in r.detail and r.fix


def test_a_launch_that_copies_wrong_values_fails():
    r = doctor.check_launch(lambda: ("hopper", [("copy_loop", True), ("copy_tma_loop", False)]))
    assert r.status == "FAIL" and "copy_tma_loop" in r.detail and "nvidia-smi" in r.fix


def test_a_launch_that_raises_fails():
    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    r = doctor.check_launch(broken)
    assert r.status == "FAIL" and "illegal memory access" in r.detail and r.fix


def test_the_recorded_results_are_read():
    r = doctor.check_results()
    assert r.status == "OK" and "NVIDIA H200" in r.detail and "recorded 20" in r.detail


def test_missing_results_fail_with_git_checkout(tmp_path):
    r = doctor.check_results(tmp_path / "nvidia-h200.json")
    assert r.status == "FAIL" and r.detail.startswith("nvidia-h200.json is missing") and "git checkout --" in r.fix


def test_unreadable_results_fail(tmp_path):
    (tmp_path / "nvidia-h200.json").write_text('{"records": [')
    r = doctor.check_results(tmp_path / "nvidia-h200.json")
    assert r.status == "FAIL" and r.detail.startswith("nvidia-h200.json is unreadable") and "git checkout --" in r.fix


# ---- a GPU box: other processes on the card, the suite's expected time ----------------------------------

def test_another_process_on_the_gpu_is_named_with_what_it_costs():
    r = doctor.check_gpu_alone(processes=[(4242, 3100), (4343, 500)])
    assert r.status == "WARN" and r.detail.startswith("2 other process(es) compute on this GPU: pid 4242 (3100 MiB)")
    assert "timing tests" in r.detail and "COURSE_RECORDED=1" in r.fix
    assert doctor.check_gpu_alone(processes=[]).status == "OK"


def test_nvml_that_cannot_answer_is_a_warning_not_a_crash(monkeypatch):
    from kernels.lab import clocks
    monkeypatch.setattr(doctor, "_mode", lambda: SimpleNamespace(MODE="hopper"))
    monkeypatch.setattr(clocks, "_nvml", lambda: None)  # no binding, or no driver
    r = doctor.check_gpu_alone()
    assert r.status == "WARN" and "pynvml is missing or finds no NVIDIA driver" in r.detail and "nvidia-ml-py" in r.fix
    monkeypatch.setattr(doctor, "_gpu_processes", lambda: 1 / 0)
    r = doctor.check_gpu_alone()
    assert r.status == "WARN" and "ZeroDivisionError" in r.detail


def test_the_suite_line_gives_the_gpu_time_on_a_gpu_and_the_makefile_takes_its_workers(monkeypatch):
    # the Makefile's default JOBS is the doctor's count (a make above this one may pass its own: not here)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "JOBS")}
    dry = subprocess.run(["make", "-s", "-n", "test-here"], cwd=ROOT, capture_output=True, text=True, env=env).stdout
    assert f" -n {doctor._jobs()} " in dry, dry
    monkeypatch.setattr(doctor, "_mode", lambda: SimpleNamespace(MODE="hopper"))
    monkeypatch.setattr(doctor, "_jobs", lambda: 4)
    r = doctor.check_suite()
    minutes = " and ".join(f"{t // 60} min {t % 60:02d} s" for t in doctor.SUITE_GPU["seconds"])
    assert r.detail.startswith("make test-here runs 4 workers here") and minutes in r.detail
    assert "expect longer here, up to 4.0x" in r.detail
    assert minutes in (ROOT / "README.md").read_text().replace("\n", " ")  # README states the same measurement
