"""The guard around a learner's kernel: guarded tensors catch a stray access, a crash or an endless
loop in a check is a failed check (CPU mode: the check runs in a child process), and a learner's
Python error names its line. Last, the same from inside a Jupyter kernel, which must survive."""
import os
import random
import re
import signal
import subprocess
import sys
import time

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from conftest import cpu_only, gpu_only, report
from kernels.lab import check


def test_a_store_past_the_end_or_into_the_padding_is_named():
    out = check.poisoned(5, 7)
    out.copy_(torch.ones(5, 7, device=out.device))
    assert check.written_outside(out) is None
    base, band, stride, _ = out._guard
    base[band + 7] = 1           # row 0, in the padding after its last column
    base[band + 5 * stride] = 1  # the first element past the last row
    with pytest.raises(AssertionError) as e:
        check.compare("C", out, torch.ones(5, 7, device=out.device), 1e-3)
    assert "1 past its end (up to 1 rows past)" in str(e.value)
    assert f"between rows 0-0 and the next (past the last column, 6: the row stride here is {stride}" in str(e.value)
    assert "a store mask is missing or the row stride is wrong" in str(e.value)


def test_an_input_read_past_its_edge_reads_nan():
    x = check.operand(3, 10, dtype=torch.float32)
    base, band, stride, _ = x._guard
    assert stride % 4 == 0 and stride > 10 and not torch.isnan(x).any()
    assert torch.isnan(base[band + 10]) and torch.isnan(base[band - 1])  # padding and band
    assert check.written_outside(x) is None


def test_an_output_never_written_is_a_failure_not_a_stub():
    with pytest.raises(AssertionError, match="no element of the output was written"):
        check.compare("y", check.poisoned(100), torch.ones(100, device=check.DEVICE), 1e-3)


def _crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def _forever():
    while True:
        time.sleep(0.1)


def _typo():
    return undefined_name  # noqa: F821  (the learner's mistake)


@cpu_only
def test_a_crash_an_endless_loop_and_a_python_error_are_failed_checks(monkeypatch):
    monkeypatch.setattr(check, "TIMEOUT_S", 3)
    passed, text = report(check.run, "guard", [("crash", _crash), ("loop", _forever), ("typo", _typo),
                                               ("fine", lambda: "ok")])
    assert not passed
    assert "FAIL  crash: the process running your kernel crashed (SIGSEGV)" in text
    assert "FAIL  loop: your kernel did not finish in 3 s" in text
    assert "FAIL  typo: your code raised NameError: name 'undefined_name' is not defined in _typo" in text
    assert "pass  fine: ok" in text and "guard: 1 of 4 checks pass" in text
    assert (passed.passed, passed.total, passed.score(4), passed.score(3)) == (1, 4, 1.0, 0.75)  # nbgrader's credit


def test_each_run_draws_fresh_inputs():
    """In CPU mode a check runs in a forked child, which starts from the parent's generator states: it must
    reseed, or every run of a check in one session would test the same inputs."""
    def draw():
        return f"{random.random():.6f} {torch.randn(1).item():.6f}"
    notes = [report(check.run, "fresh", [("draw", draw)])[1].splitlines()[0].split() for _ in range(2)]
    assert notes[0][:2] == ["pass", "draw:"], notes
    assert notes[0][2] != notes[1][2] and notes[0][3] != notes[1][3], notes  # Python's random, and torch's


@cpu_only
def test_the_jupyter_kernel_survives_an_unmasked_far_store(tmp_path):
    """A learner's axpy that writes 100000 blocks away, checked from a notebook: the notebook's kernel
    lives on and prints the course's diagnosis."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (
        "import kernels, triton, triton.language as tl\n"
        "from kernels.lessons import l00_memory_wall_exercise as exercise",
        "@triton.jit\n"
        "def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK * 100000 + tl.arange(0, BLOCK)\n"
        "    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs) + tl.load(y_ptr + offs))\n"
        "def axpy(alpha, x, y, out, BLOCK=1024):\n"
        "    axpy_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, alpha, x.numel(), BLOCK=BLOCK)",
        "exercise.check(lambda M, N, K, e: 0, lambda f, b, tf, tb: 0, lambda n, e, fused: 0, axpy, axpy_kernel)",
        "print('still alive')")]
    NotebookClient(nb, timeout=300, startup_timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.outputs)
    assert "FAIL  relu_axpy: values: the process running your kernel crashed (SIGSEGV)" in text, text
    assert "still alive" in text


class _Mark:
    """A fake mark on the GPU's queue, reached ``after`` seconds from now (never: None)."""
    def __init__(self, after):
        self.at = None if after is None else time.monotonic() + after

    def query(self):
        return self.at is not None and time.monotonic() >= self.at


def _blocked():
    time.sleep(5)  # recording a mark while the check's thread waits on a copy from a GPU that never finishes


@pytest.mark.parametrize("marks, finishes", [((None,), False), ((0.0,), True), ((0.2,), True), ((0.0, None), False),
                                             (("blocked",), False)])
def test_a_check_is_given_up_when_the_gpu_does_not_reach_a_mark(monkeypatch, marks, finishes):
    """The rule of the GPU watch, with the marks faked (each reached after so many seconds, never, or never even
    recorded). A check is given up on when a mark is not reached within the limit (the first mark, or a later one:
    the watch keeps marking); one that works as long on the host (compiling: each mark reached at once) or keeps
    the GPU busy with kernels that end (each mark reached within the limit) is waited for."""
    made = iter(marks[:-1])
    monkeypatch.setattr(check, "_mark", lambda: (lambda after: _blocked() if after == "blocked" else _Mark(after))(
        next(made, marks[-1])))
    start = time.monotonic()
    # a mark reached after 0.2 s leaves the watch 0.6 s - (0.2 s + its 0.05 s pause) of slack: enough for a busy
    # 2-core CI machine (0.3 s, with 0.05 s of slack, once failed there)
    done, said = check.finish_or_give_up(lambda: time.sleep(2.0) or "ok", timeout=0.6)
    assert done == finishes and said == ("ok" if finishes else None)
    assert time.monotonic() - start < (2.5 if finishes else 1.5)


@gpu_only
def test_the_jupyter_kernel_survives_a_kernel_that_never_ends(tmp_path):
    """A learner's axpy whose loop never takes its step, checked from a notebook on the GPU: the check gives up
    when the GPU has not done its work after GPU_TIMEOUT_S (GPU_SHARED_TIMEOUT_S where other processes compute on
    it, as in the suite) and says so, the checks after it say why they did not
    run, the notebook goes on."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (
        "import kernels, triton, triton.language as tl\n"
        "from kernels.lessons import l00_memory_wall_exercise as exercise",
        "@triton.jit\n"
        "def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    i = 0\n"
        "    while i < n:  # the step, i += BLOCK, forgotten\n"
        "        tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)\n"
        "def axpy(alpha, x, y, out, BLOCK=1024):\n"
        "    axpy_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, alpha, x.numel(), BLOCK=BLOCK)",
        "import time; start = time.monotonic()\n"
        "exercise.check(lambda M, N, K, e: 0, lambda f, b, tf, tb: 0, lambda n, e, fused: 0, axpy, axpy_kernel)\n"
        "print(f'still alive after {time.monotonic() - start:.0f} s')")]
    NotebookClient(nb, timeout=300, startup_timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.outputs)
    assert re.search(rf"your kernel did not finish: the GPU had not done its work after ({check.GPU_TIMEOUT_S}|"
                     rf"{check.GPU_SHARED_TIMEOUT_S}) s", text), text
    assert "restart the Jupyter kernel (Kernel > Restart Kernel)" in text, text
    seconds = int(text.split("still alive after ")[1].split(" s")[0])
    assert seconds < check.GPU_SHARED_TIMEOUT_S + 30, text


@gpu_only
def test_cuda_starts_when_kernels_is_imported_not_inside_a_check():
    """A CUDA context takes seconds to make on a crowded card (up to 6 s, 32 processes at once on an H100), and a
    check whose kernels were the process's first CUDA work counted that as the GPU falling behind and gave up on
    the untouched exercise 08 (issue 41): ``import kernels``, every notebook's first line, makes it."""
    probe = ("import ctypes\n"
             "cuda = ctypes.CDLL('libcuda.so.1')\n"
             "def context():\n"
             "    ctx = ctypes.c_void_p()\n"
             "    assert cuda.cuInit(0) == 0 and cuda.cuCtxGetCurrent(ctypes.byref(ctx)) == 0\n"
             "    return ctx.value is not None\n"
             "import torch\n"
             "before = context()\n"
             "import kernels\n"
             "print(before, context())")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["False", "True"], run.stdout + run.stderr[-2000:]


@pytest.mark.parametrize("sharers, finishes", [(0, False), (3, True), (None, True)])
def test_a_gpu_shared_with_other_processes_is_waited_for_longer(monkeypatch, sharers, finishes):
    """A mark reached late on a card other processes compute on is not, by that alone, a kernel that never ends:
    where NVML lists other compute processes on the GPU, or cannot tell, the watch waits GPU_SHARED_TIMEOUT_S; alone
    on it, GPU_TIMEOUT_S. Scaled down here: 0.3 s and 3 s, a mark reached after 1 s (the old watch gave up here)."""
    monkeypatch.setattr(check, "GPU_TIMEOUT_S", 0.3)
    monkeypatch.setattr(check, "GPU_SHARED_TIMEOUT_S", 3.0)
    monkeypatch.setattr(check, "gpu_sharers", lambda: sharers)
    monkeypatch.setattr(check, "_mark", lambda: _Mark(1.0))
    done, said = check.finish_or_give_up(lambda: time.sleep(1.5) or "ok")
    assert done == finishes and said == ("ok" if finishes else None)
    assert check._WAITED["seconds"] == (0.3 if sharers == 0 else 3.0)
    assert ("waits behind theirs" in check._WAITED["why"]) == bool(sharers)
    assert ("NVML cannot tell" in check._WAITED["why"]) == (sharers is None)
