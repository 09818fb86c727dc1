"""The seat check: is this machine ready for the course? One line per check, OK / WARN / FAIL, and for
each problem the command that fixes it; exit status 1 when anything FAILs.

    python -m kernels.tools.doctor      # or: make doctor (the course's .venv), make doctor-here (this Python)

FAIL means a lesson will not run as written; WARN means it runs, but not as the course was tested
(a tool only the test suite needs, another version of a library, no nvcc for lesson 05).
Each check is a small function returning a ``Result``, so tests can call it with a broken seat.
Only the standard library is imported at the top: a seat without torch still gets its report."""
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS_FILE = ROOT / "results" / "nvidia-h200.json"
MIN_PYTHON = (3, 11)  # pyproject.toml's requires-python; environment.yml's GPU stack uses 3.12
# without these a lesson does not run; the other pins serve the test suite and the course's keepers
LEARNER = {"torch", "triton", "numpy", "matplotlib", "jupyterlab", "ipykernel", "ipywidgets", "tilelang"}
# another version of these breaks the course, not just differs from it: Triton's internals (aot) and
# torch's build are version-bound; numpy >= 2.4 breaks the interpreter's loops (CPU mode only)
STRICT = {"torch", "triton"}
WIDGETS_EXTENSION = "@jupyter-widgets/jupyterlab-manager"


@dataclass
class Result:
    name: str
    status: str        # "OK", "WARN" or "FAIL"
    detail: str
    fix: str = ""      # the command or step that fixes it (WARN and FAIL)

    def lines(self):
        yield f"{self.status:<5} {self.name:<18} {self.detail}"
        if self.fix and self.status != "OK":
            yield f"{'':<5} {'':<18} fix: {self.fix}"


def _python():
    """This interpreter as a learner would type it: .venv/bin/python inside the project."""
    exe = Path(sys.executable)
    try:
        return str(exe.relative_to(Path.cwd()))
    except ValueError:
        return str(exe)


def _installed(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def pins(text):
    """name -> version of every ``name==version`` line (requirements.txt and environment.yml alike)."""
    return dict(re.findall(r"^[\s-]*([A-Za-z0-9_.-]+)==([^\s#]+)", text, re.M))


def _pin_files():
    req = pins((ROOT / "requirements.txt").read_text())
    env_text = (ROOT / "environment.yml").read_text()
    index = re.search(r"--extra-index-url\s+(\S+)", env_text)
    return req, pins(env_text), index.group(1) if index else None


def _mode():
    """The course's mode, importing it the way a notebook does (kernels first, then triton)."""
    from kernels.lab import mode
    return mode


def _on_gpu():
    """Whether the course runs on a GPU here (False where its mode cannot even be imported)."""
    try:
        return _mode().MODE != "cpu"
    except ImportError:
        return False


# ---- the checks ----------------------------------------------------------------------------------

def check_python(version=None):
    version = tuple(version or sys.version_info[:3])
    text = ".".join(map(str, version))
    if version[:2] >= MIN_PYTHON:
        return Result("python", "OK", f"{text} (the course needs 3.11+; the GPU stack was tested on 3.12)")
    return Result("python", "FAIL", f"{text}: the course needs Python 3.11 or newer",
                  "install Python 3.11+ (e.g. apt-get install python3.11 python3.11-venv), then "
                  "rm -rf .venv && make lab PYTHON=python3.11")


def check_packages(mode=None):
    """One result per pinned package: installed, and at requirements.txt's or environment.yml's pin
    (torch 2.11.0+cu130 is environment.yml's, the GPU stack's; 2.13.0+cpu is requirements.txt's)."""
    req, env, index = _pin_files()
    py = _python()
    out = []
    for name in list(req) + [n for n in env if n not in req]:
        have = _installed(name)
        want = req.get(name) or env[name]
        gpu_torch = name == "torch" and mode in ("hopper", "gpu") and name in env
        if gpu_torch:
            want = env[name]
        fix = f"{py} -m pip install '{name}=={want}'"
        if gpu_torch and index:
            fix += f" --extra-index-url {index}"
        needed = name in LEARNER
        if have is None:
            role = "the lessons need it" if needed else "only the test suite or the course's keepers use it"
            out.append(Result(name, "FAIL" if needed else "WARN", f"not installed ({role})", fix))
            continue
        base = have.split("+")[0]
        matched = [f for f, pin in (("requirements.txt", req.get(name)), ("environment.yml", env.get(name)))
                   if pin in (have, base)]
        if matched:
            which = "both files' pin" if len(matched) == 2 else f"{matched[0]}'s pin"
            if name == "torch" and len(matched) == 1:
                which += ", the GPU stack" if matched[0] == "environment.yml" else ", the CPU stack"
            out.append(Result(name, "OK", f"{have}: {which}"))
            continue
        pinned = " / ".join(sorted({p for p in (req.get(name), env.get(name)) if p}))
        strict = name in STRICT or (name == "numpy" and mode == "cpu")
        why = {"torch": "the course was validated with these builds",
               "triton": "the course reads Triton's internals, which change between versions",
               "numpy": "Triton 3.6's interpreter fails loops over runtime bounds with numpy 2.4+"}.get(name)
        if name == "numpy" and mode in ("hopper", "gpu"):
            why = "the pin guards the interpreter, which a GPU never uses"
        detail = f"{have}, pinned {pinned}" + (f": {why}" if why else ": not the version the course was tested with")
        out.append(Result(name, "FAIL" if strict else "WARN", detail, fix))
    return out


def _labextension_dirs():
    from jupyter_core.paths import jupyter_path
    return [Path(p) for p in jupyter_path("labextensions")]


def _page_config_files():
    """The page_config.json files JupyterLab merges (disabledExtensions lives there)."""
    from jupyter_core.paths import jupyter_config_path
    app_dir = os.environ.get("JUPYTERLAB_DIR") or os.path.join(sys.prefix, "share", "jupyter", "lab")
    return [Path(d) / "labconfig" / "page_config.json" for d in jupyter_config_path()] + \
           [Path(app_dir) / "settings" / "page_config.json"]


def _disabled(name, files):
    """Whether any page_config.json disables ``name`` (a dict of patterns, or a list in old servers)."""
    for f in files:
        try:
            disabled = json.loads(f.read_text()).get("disabledExtensions", {})
        except (OSError, ValueError):
            continue
        if isinstance(disabled, list):
            disabled = dict.fromkeys(disabled, True)
        if any(v and (k == name or re.match(k, name)) for k, v in disabled.items()):
            return str(f)
    return None


def _kernel_argv():
    from jupyter_client.kernelspec import KernelSpecManager
    spec = KernelSpecManager().get_kernel_spec("python3")
    return spec.argv, spec.resource_dir


def check_jupyterlab():
    """JupyterLab, and the "Python 3" kernel it starts being this interpreter: a stray user-level
    kernel.json pointing at another Python gives the notebooks another stack."""
    py = _python()
    lab = _installed("jupyterlab")
    if lab is None:
        return Result("JupyterLab", "FAIL", "not installed: the lessons are JupyterLab notebooks",
                      f"{py} -m pip install 'jupyterlab=={_pin_files()[0].get('jupyterlab')}'")
    try:
        argv, where = _kernel_argv()
    except Exception as e:
        return Result("JupyterLab", "FAIL", f"no Python 3 kernel ({type(e).__name__}: {e})",
                      f"{py} -m pip install --force-reinstall 'ipykernel=={_pin_files()[0].get('ipykernel')}'")
    exe = argv[0]
    # jupyter_client runs a bare "python" / "python3" / "python3.X" as the server's own interpreter
    if exe in ("python", f"python{sys.version_info[0]}", "python%d.%d" % sys.version_info[:2]) or \
            os.path.realpath(exe) == os.path.realpath(sys.executable):
        return Result("JupyterLab", "OK", f"{lab}; its Python 3 kernel is this Python ({where})")
    return Result("JupyterLab", "WARN", f"{lab}; its Python 3 kernel runs {exe} ({where}), not this Python: "
                  "the notebooks would not see this stack", f"{py} -m ipykernel install --user")


def check_widgets():
    """The ipywidgets extension (jupyterlab_widgets) installed where JupyterLab looks for prebuilt
    extensions, and not disabled: without it every slider prints as text."""
    py = _python()
    reinstall = f"{py} -m pip install --force-reinstall 'ipywidgets=={_pin_files()[0].get('ipywidgets')}'"
    widgets = _installed("jupyterlab_widgets")
    if widgets is None:
        return Result("widgets extension", "FAIL", "jupyterlab_widgets is not installed: sliders would show as "
                                                   "text", reinstall)
    try:
        found = next((d / WIDGETS_EXTENSION for d in _labextension_dirs()
                      if (d / WIDGETS_EXTENSION / "package.json").exists()), None)
    except ImportError:  # jupyter_core comes with JupyterLab: the JupyterLab line says what to do
        found = None
    if found is None:
        return Result("widgets extension", "FAIL", f"jupyterlab_widgets {widgets} is installed but JupyterLab "
                                                   f"cannot see {WIDGETS_EXTENSION} in its labextensions folders",
                      reinstall)
    version = json.loads((found / "package.json").read_text()).get("version", "?")
    where = _disabled(WIDGETS_EXTENSION, _page_config_files())
    if where:
        return Result("widgets extension", "FAIL", f"{WIDGETS_EXTENSION} is disabled (in {where})",
                      f"{py} -m jupyter labextension enable {WIDGETS_EXTENSION}")
    return Result("widgets extension", "OK", f"{WIDGETS_EXTENSION} {version} enabled (jupyterlab_widgets {widgets})")


def _torch_hint(mode):
    """Why a machine with an NVIDIA driver ended up in CPU mode, and what to do."""
    import torch
    if torch.version.cuda is None:
        _, env, index = _pin_files()
        return (f"torch {torch.__version__} is a CPU build",
                f"{_python()} -m pip install 'torch=={env.get('torch', '2.11.0')}' --extra-index-url {index}")
    return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU",
            "check nvidia-smi and CUDA_VISIBLE_DEVICES; the CUDA 13 builds need driver 580 or newer")


def check_mode():
    try:
        mode = _mode()
    except ImportError as e:
        return Result("mode", "FAIL", f"cannot import the course: {e}",
                      "install the pinned packages above (the FAIL lines say how), then run this again")
    if mode.MODE == "cpu":
        detail = "cpu: no GPU; kernels run in Triton's interpreter, timings are the recorded ones"
        if _which("nvidia-smi"):
            why, fix = _torch_hint(mode)
            return Result("mode", "WARN", f"{detail}, but this machine has an NVIDIA driver: {why}", fix)
        return Result("mode", "OK", detail)
    import torch
    cap = torch.cuda.get_device_capability()
    tma = "yes" if mode.HAS_TMA else "no (TMA evidence is sm_90 code compiled ahead of time)"
    return Result("mode", "OK", f"{mode.MODE}: {mode.device_name()}, compute capability {cap[0]}.{cap[1]} "
                                f"(sm_{cap[0]}{cap[1]}), TMA {tma}")


def check_interpreter():
    """CPU mode needs Triton's interpreter on before Triton loads; a GPU must never have it on."""
    try:
        mode = _mode()
        from kernels.ops.scale import scale_kernel
    except ImportError as e:
        return Result("interpreter", "FAIL", f"cannot import the course: {e}", "fix the FAIL lines above first")
    interpreted = type(scale_kernel).__name__ == "InterpretedFunction"
    env = os.environ.get("TRITON_INTERPRET")
    if mode.MODE == "cpu":
        if interpreted:
            return Result("interpreter", "OK", "on (TRITON_INTERPRET=1), as CPU mode needs")
        return Result("interpreter", "FAIL", "off in CPU mode: Triton was imported before kernels",
                      "import kernels before triton (restart the Jupyter kernel), or start with TRITON_INTERPRET=1")
    if interpreted or env == "1":
        return Result("interpreter", "FAIL", f"TRITON_INTERPRET={env} on a GPU: kernels would run on the CPU, "
                      "slowly, and compile nothing", "unset TRITON_INTERPRET (and remove it from the kernel's "
                      "environment), then restart the Jupyter kernel")
    return Result("interpreter", "OK", "off: kernels compile and run on the GPU")


def check_recorded():
    """The recorded-figures switch: COURSE_RECORDED=1 makes widgets show results/ instead of timing live
    (a GPU shared by several people). Reported, never required."""
    value = os.environ.get("COURSE_RECORDED")
    if not _on_gpu() and value in (None, "", "0", "1"):
        return Result("recorded figures", "OK", "always, with no GPU: every figure and widget shows a recorded one "
                                                "(results/), labelled with its device and date")
    if value == "1":
        return Result("recorded figures", "OK", "on (COURSE_RECORDED=1): widgets show the recorded H200 "
                                                "figures, nothing is timed live")
    if value in (None, "", "0"):
        return Result("recorded figures", "OK", "off: on a GPU widgets time live (export COURSE_RECORDED=1 "
                                                "to show recorded figures, e.g. on a shared GPU)")
    return Result("recorded figures", "WARN", f"COURSE_RECORDED={value!r} is neither 1 nor unset",
                  "export COURSE_RECORDED=1 (recorded figures) or unset COURSE_RECORDED (live)")


def _which(cmd):
    return shutil.which(cmd)


def _run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout


def check_nvcc():
    """Lesson 05 compiles TileLang's CUDA with nvcc (CUDA 12+ for sm_90a); the GPU is not needed."""
    path = _which("nvcc")
    if path is None:
        home = next((Path(h) for h in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")
                     if h and (Path(h) / "bin" / "nvcc").exists()), None)
        fix = (f"export PATH={home / 'bin'}:$PATH" if home else
               "install the CUDA toolkit 12 or newer (NVIDIA's cuda-toolkit-13-0 package, or conda install "
               "-c nvidia cuda-nvcc) and put its bin/ on PATH")
        return Result("nvcc", "WARN", "not on PATH: lesson 05 cannot compile TileLang's CUDA "
                                      "(every other lesson runs)", fix)
    try:
        version = re.search(r"release (\d+)\.(\d+)", _run([path, "--version"]))
    except (OSError, subprocess.SubprocessError) as e:
        return Result("nvcc", "WARN", f"{path} does not run: {e}", "reinstall the CUDA toolkit (12 or newer)")
    if version is None:
        return Result("nvcc", "WARN", f"{path}: no version in `nvcc --version`", "reinstall the CUDA toolkit (12 or newer)")
    major, minor = int(version.group(1)), int(version.group(2))
    if major < 12:
        return Result("nvcc", "WARN", f"{path}: CUDA {major}.{minor}, too old for sm_90a (lesson 05)",
                      "install the CUDA toolkit 12 or newer and put its bin/ first on PATH")
    return Result("nvcc", "OK", f"{path}: CUDA {major}.{minor} (lesson 05 compiles TileLang's CUDA with it)")


def _compile_tma_copy():
    """A tiny TMA copy (host-side tensor maps) compiled for sm_90, as lesson 03 compiles it."""
    mode = _mode()
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from kernels.lab import aot
    from kernels.ops.copy import copy_tma_host_loop_kernel
    x = torch.zeros(64, 128, dtype=torch.float16, device=mode.DEVICE)
    xd, yd = (TensorDescriptor.from_tensor(t, [64, 128]) for t in (x, torch.empty_like(x)))
    return aot.compile_sm90(copy_tma_host_loop_kernel, xd, yd, 64, 128, BLOCK_M=64, BLOCK_N=128, stages=2,
                            num_warps=4)


def check_compile(compile=None):
    """An sm_90 compile of a tiny TMA copy; its PTX must hold the bulk tensor copy and its SASS UTMALDG."""
    fix = (f"{_python()} -m pip install --force-reinstall 'triton=={_pin_files()[0].get('triton', '3.6.0')}' "
           "(Triton ships ptxas and cuobjdump)")
    t = time.perf_counter()
    try:
        compiled = (compile or _compile_tma_copy)()
        counts = compiled.counts()
    except Exception as e:  # any failure is the finding: say what it was
        lines = f"{type(e).__name__}: {e}".strip().splitlines()
        return Result("sm_90 compile", "FAIL", f"a tiny TMA copy did not compile: {lines[-1] if lines else e}",
                      "fix the FAIL lines above first" if isinstance(e, ImportError) else fix)
    loads, utma = counts.get("cp.async.bulk.tensor load", 0), counts.get("UTMALDG", 0)
    if not loads or not utma:
        return Result("sm_90 compile", "FAIL", f"compiled, but without TMA: PTX cp.async.bulk.tensor loads {loads}, "
                                               f"SASS UTMALDG {utma}", fix)
    return Result("sm_90 compile", "OK", f"a TMA copy, {compiled.origin}: PTX cp.async.bulk.tensor x{loads}, "
                                         f"SASS UTMALDG x{utma} ({time.perf_counter() - t:.1f} s)")


def _launch():
    """Launch the course's small kernels and compare with torch: a tl.range loop over a runtime bound
    (what numpy 2.4 breaks in the interpreter) everywhere, a TMA copy on Hopper. Returns what ran."""
    mode = _mode()
    import torch

    from kernels.ops.copy import copy_loop, copy_tma_loop
    x = torch.randn(100, 136, device=mode.DEVICE).to(torch.float16)
    ran = []
    y = copy_loop(x, BLOCK_M=16, BLOCK_N=32, programs=3)
    ran.append(("copy_loop", torch.equal(x, y)))
    if mode.MODE == "hopper":
        y = copy_tma_loop(x, BLOCK_M=16, BLOCK_N=32, descriptor="host")
        ran.append(("copy_tma_loop", torch.equal(x, y)))
    if mode.MODE != "cpu":
        torch.cuda.synchronize()
    return mode.MODE, ran


def check_launch(launch=None):
    try:
        where, ran = (launch or _launch)()
    except Exception as e:
        lines = f"{type(e).__name__}: {e}".strip().splitlines()
        return Result("launch", "FAIL", f"a tiny kernel failed: {lines[-1] if lines else e}", _launch_fix())
    wrong = [name for name, ok in ran if not ok]
    names = ", ".join(name for name, _ in ran)
    how = "in Triton's interpreter" if where == "cpu" else "on the GPU"
    if wrong:
        return Result("launch", "FAIL", f"{', '.join(wrong)} ran {how} but copied wrong values", _launch_fix(where))
    return Result("launch", "OK", f"{names} ran {how}, output checked against the input")


def _launch_fix(where=None):
    try:
        where = where or _mode().MODE
    except ImportError:
        return "fix the FAIL lines above first"
    if where == "cpu":
        return (f"the interpreter needs numpy 2.3.5 ({_python()} -m pip install 'numpy==2.3.5') and "
                "kernels imported before triton")
    return ("check nvidia-smi (driver 580+ for the CUDA 13 build, free memory, no stuck process), "
            "then restart the Jupyter kernel: a faulted launch leaves the CUDA context unusable")


def check_results(path=None):
    """The recorded H200 figures every CPU seat shows (and every widget with COURSE_RECORDED=1)."""
    path = Path(path or RESULTS_FILE)
    fix = f"git checkout -- {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} (it is committed)"
    if not path.exists():
        return Result("recorded results", "FAIL", f"{path.name} is missing: CPU mode has no timings to show", fix)
    try:
        data = json.loads(path.read_text())
        date, device, n = data["date"], data["device"], len(data["records"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return Result("recorded results", "FAIL", f"{path.name} is unreadable ({type(e).__name__}: {e})", fix)
    return Result("recorded results", "OK", f"{path.name}: {device}, {n} records, recorded {date} "
                                            f"(torch {data.get('torch')}, triton {data.get('triton')})")


# the last whole `make test-here` timed on a GPU (16 cores, 16 workers), Triton's and torch's caches emptied first, in
# seconds, and what came after it (README, "Running on a GPU machine", says the same)
SUITE_GPU = {"device": "H100", "date": "2026-12-06", "seconds": (261,), "cores": 16,
             "since": "red, one test of exercise 06 racing another, fixed since and not yet timed on a GPU"}


def _jobs():
    """The Makefile's JOBS default: one worker per core, as many as memory holds at 2 GiB each."""
    return max(1, min(os.cpu_count(), os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 31))


def check_suite():
    """How many workers ``make test-here`` runs here and, on a GPU, what it took on the last GPU it was timed on."""
    jobs, h = _jobs(), SUITE_GPU
    detail = f"make test-here runs {jobs} workers here ({os.cpu_count()} cores)"
    if _on_gpu():
        runs = " and ".join(f"{t // 60} min {t % 60:02d} s" for t in h["seconds"])
        detail += f"; on the {h['device']} with {h['cores']} it took {runs} ({h['date']}; {h['since']})"
        if jobs < h["cores"]:
            detail += f": expect longer here, up to {h['cores'] / jobs:.1f}x"
    return Result("test suite", "OK", detail)


def _gpu_processes():
    """[(pid, MiB of GPU memory)] of every process NVML sees computing on the current GPU but this one."""
    from kernels.lab import clocks
    nvml = clocks._nvml()
    if nvml is None:
        raise ImportError("pynvml is missing or finds no NVIDIA driver")
    handle = clocks._handle(nvml)
    return [(p.pid, (p.usedGpuMemory or 0) >> 20) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if p.pid != os.getpid()]


def check_gpu_alone(processes=None):
    """Another process computing on this GPU times its kernels with the course's: every live figure, and the
    suite's timing tests, would include its work."""
    try:
        if _mode().MODE == "cpu" and processes is None:
            return Result("GPU to itself", "OK", "no GPU here: nothing to share")
        others = _gpu_processes() if processes is None else processes
    except Exception as e:
        return Result("GPU to itself", "WARN", f"could not ask NVML who uses the GPU ({type(e).__name__}: {e})",
                      f"{_python()} -m pip install nvidia-ml-py (the course reads clocks and processes through it)")
    if not others:
        return Result("GPU to itself", "OK", "no other process computes on this GPU (NVML)")
    listed = ", ".join(f"pid {pid} ({mib} MiB)" for pid, mib in others[:5]) + (", ..." if len(others) > 5 else "")
    return Result("GPU to itself", "WARN", f"{len(others)} other process(es) compute on this GPU: {listed}; live "
                  "figures and make test-here's timing tests would time their work with the course's",
                  "stop them first (nvidia-smi lists them), or export COURSE_RECORDED=1 to show recorded figures")


def checks():
    """Every check in the order they print; a check that crashes is itself a FAIL."""
    mode = None
    try:
        mode = _mode().MODE
    except ImportError:
        pass
    steps = [check_python, lambda: check_packages(mode), check_jupyterlab, check_widgets, check_mode, check_interpreter,
             check_recorded, check_nvcc, check_compile, check_launch, check_gpu_alone, check_results, check_suite]
    for step in steps:
        try:
            got = step()
        except Exception as e:
            got = Result(getattr(step, "__name__", "check"), "FAIL", f"the check itself failed: {type(e).__name__}: {e}",
                         "report it to the course's keepers with this output")
        yield from got if isinstance(got, list) else [got]


def main(argv=()):
    if list(argv) == ["--jobs"]:  # the Makefile's JOBS default
        print(_jobs())
        return 0
    print(f"Seat check for the TMA course ({ROOT}), Python {sys.executable}", flush=True)
    results = []
    for r in checks():
        results.append(r)
        for line in r.lines():
            print(line, flush=True)
    count = {s: sum(r.status == s for r in results) for s in ("OK", "WARN", "FAIL")}
    verdict = ("ready" if not count["FAIL"] else "not ready: run the fix of each FAIL line, then this again")
    if sum(r.detail.startswith("not installed") for r in results) > 1:
        verdict += f"; the whole pinned stack at once: {_python()} -m pip install -r requirements.txt (or make lab)"
    print(f"{count['OK']} OK, {count['WARN']} WARN, {count['FAIL']} FAIL: {verdict}")
    return 1 if count["FAIL"] else 0


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file (make doctor): works even where `import kernels` fails
        sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
