"""Exercise checks: fresh random inputs, poisoned outputs, a torch reference, and the mechanism
in the compiled code. Each failed check says what is wrong; an untouched stub gets a hint. Each
lesson's own checks use these (``kernels.lessons.lNN_*_exercise``)."""
import contextlib
import faulthandler
import io
import itertools
import linecache
import os
import pickle
import random
import re
import select
import signal
import sys
import threading
import time
from pathlib import Path

import torch

from . import aot
from .mode import DEVICE, LIVE, MODE


def seeded():
    """The seed that the mutation tester fixes (COURSE_CHECK_SEED) so that a mutant and the solution draw the same
    inputs; None, and fresh inputs every run, otherwise."""
    seed = os.environ.get("COURSE_CHECK_SEED")
    return int(seed) if seed else None


def rng():
    """A check's own random generator: fresh (from the OS) unless the mutation tester fixed the seed."""
    return random.Random(seeded())


class NotAttempted(Exception):
    """The exercise still has its stub (its code says so: no tl.dot, no T.gemm, nothing loaded)."""


# what a checker fills an output with before the learner's kernel runs: a finite value no correct kernel
# writes (exact in fp16, bf16 and fp32), so "never written" and "written as NaN" are told apart
POISON = -6144.0
INT_POISON = -(2 ** 30)


# every tensor a checker hands over sits inside a larger allocation ("guarded"): rows padded to a
# larger, 16-byte aligned stride and a band of whole rows before and after, so an access past an edge
# lands in memory the checker owns - it reads NaN from an input, and a stray store is seen - instead
# of in somebody else's memory (where, in CPU mode, it can kill the process)
BAND_ROWS = 256


def _guarded(shape, dtype, device, fill, padded, extra=None):
    elem = torch.empty((), dtype=dtype).element_size()
    rows, width = (1, shape[0]) if len(shape) == 1 else shape
    if len(shape) == 1 or not padded:
        stride = width
    else:  # at least one 16-byte step (or ``extra`` elements) of padding, the stride 16-byte aligned (a TMA rule)
        step = max(1, 16 // elem)
        stride = -(-(width + (extra or step)) // step) * step
    band = BAND_ROWS * stride if len(shape) == 2 else max(4096, width)
    base = torch.full((2 * band + rows * stride,), fill, dtype=dtype, device=device)
    view = base[band:band + rows * stride]
    view = view if len(shape) == 1 else view.view(rows, stride)[:, :width]
    view._guard = (base, band, stride, fill)  # what compare() reads back
    return view


def operand(*shape, dtype=torch.float16, device=DEVICE, padded=True, extra=None):
    """Fresh random normal input (1D or 2D) inside a NaN guard: a load past an edge reads NaN. ``extra``:
    at least that many elements of padding per row (a different one per tensor gives each its own row
    stride, so a kernel that mixes the strides up is caught)."""
    view = _guarded(shape, dtype, device, float("nan"), padded, extra)
    view.copy_(torch.randn(shape, device=device).to(dtype))
    return view


def zero_guarded(t):
    """``operand`` ``t`` again, same values and strides, with zeros where its guard has NaN: rerun on it, a
    kernel that only reads past an edge comes out right (so a K tail is told from a wrong index)."""
    base, band, stride, _ = t._guard
    base = base.nan_to_num(0.0)
    view = base.as_strided(t.shape, t.stride(), t.storage_offset())
    view._guard = (base, band, stride, 0.0)
    return view


def poisoned(*shape, dtype=torch.float16, device=DEVICE, padded=True, extra=None):
    """An output (1D or 2D) filled with the poison, inside a poisoned guard: an element never written
    and a store outside the output are both caught by ``compare``."""
    fill = POISON if dtype.is_floating_point else INT_POISON
    return _guarded(shape, dtype, device, fill, padded, extra)


def poison_like(t, padded=True):
    """A poisoned, guarded output of ``t``'s shape, dtype and device."""
    return poisoned(*t.shape, dtype=t.dtype, device=t.device, padded=padded)


def unwritten(out):
    return out == (POISON if out.dtype.is_floating_point else INT_POISON)


def written_outside(out):
    """Where a kernel wrote into the guard around ``out``, in words; None when nothing was (or when
    ``out`` is not a tensor the checker made)."""
    guard = getattr(out, "_guard", None)
    if guard is None:
        return None
    base, band, stride, fill = guard
    changed = ~(torch.isnan(base) if fill != fill else base == fill)
    rows, width = (1, out.numel()) if out.dim() == 1 else out.shape
    idx = torch.arange(base.numel(), device=base.device) - band
    row, col = torch.div(idx, stride, rounding_mode="floor"), idx % stride
    before, after = changed & (row < 0), changed & (row >= rows)
    padding = changed & (row >= 0) & (row < rows) & (col >= width)
    unit = "rows" if out.dim() == 2 else "elements"
    span = (lambda m: -int(row[m].min())) if out.dim() == 2 else (lambda m: -int(idx[m].min()))
    what = []
    if before.any():
        what.append(f"{int(before.sum())} before its start (from {span(before)} {unit} before)")
    if after.any():
        past = int(row[after].max()) - rows + 1 if out.dim() == 2 else int(idx[after].max()) - width + 1
        what.append(f"{int(after.sum())} past its end" + (f" (up to {past} rows past)" if out.dim() == 2 else ""))
    if padding.any():
        r = row[padding]
        what.append(f"{int(padding.sum())} between rows {int(r.min())}-{int(r.max())} and the next (past the last "
                    f"column, {width - 1}: the row stride here is {stride}, not the width {width})")
    return "; ".join(what) or None


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64; inf when anything is NaN."""
    out, ref = out.double(), ref.double()
    if torch.isnan(out).any():
        return float("inf")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def where(mask):
    """Where the True elements of a 1D or 2D mask lie, in words: the index range they span and how
    many of the rows (and columns) they touch."""
    if mask.dim() == 1:
        idx = mask.nonzero().flatten()
        return f"indices {idx.min().item()}-{idx.max().item()} of {mask.numel()}"
    rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
    return (f"rows {rows.min().item()}-{rows.max().item()} ({len(rows)} of {mask.shape[0]}), "
            f"columns {cols.min().item()}-{cols.max().item()} ({len(cols)} of {mask.shape[1]})")


def far_off(out, ref, tol):
    """Elements off by more than 10 x ``tol`` of the reference's typical (RMS) value: more than rounding."""
    return (out.double() - ref.double()).abs() > 10 * tol * ref.double().pow(2).mean().sqrt().item()


def compare(name, out, ref, tol):
    """Assert ``out`` (poisoned before the kernel ran) matches ``ref``: every element written, none NaN,
    relative error under ``tol``, nothing written into its guard. A failure says which kind of wrong and
    where: written outside (a store mask, a stride), never written (the grid or a store mask misses them),
    NaN (a load read past an edge: a missing mask or ``other``), or values off (indexing, strides, the loop)."""
    never, nan = unwritten(out), torch.isnan(out) if out.dtype.is_floating_point else torch.zeros_like(out, dtype=bool)
    problems, outside = [], written_outside(out)
    if outside:
        problems.append(f"elements written outside the output - {outside}: " + (
            "a store mask is missing or the row stride is wrong" if out.dim() == 2 else
            "a store mask is missing, or an offset is wrong"))
    if never.all():
        problems.append("no element of the output was written: does the store go to the output pointer, with the "
                        "output's strides, and does the launch start any program?")
    elif never.any():
        problems.append(f"{int(never.sum())} of {out.numel()} elements never written ({where(never)}): the grid or "
                        "a store mask misses them")
    if nan.any():
        problems.append(f"{int(nan.sum())} elements are NaN ({where(nan)}): a load read past an edge; mask it, "
                        "with other=0.0 where the value feeds a sum")
    if never.all():
        raise AssertionError(f"{name}: " + "; ".join(problems))
    ok = ~never & ~nan
    err = rel_err(out[ok], ref[ok]) if ok.any() else 0.0
    if not problems and err <= tol:
        return err
    if err > tol:
        off = ok & far_off(out, ref, tol)
        share = f"{10 * tol:.0%}" if 10 * tol >= 0.01 else f"{10 * tol:.0e}"
        detail = f" ({int(off.sum())} elements off by more than {share} of the typical value: {where(off)})" \
            if off.any() else " (small errors everywhere: check the precision of the accumulator)"
        problems.append(f"relative error {err:.2e} exceeds {tol:.0e} in the elements written{detail}")
    raise AssertionError(f"{name}: " + "; ".join(problems))


def require(compiled, family, why, at_least=1):
    """Assert the compiled code has an instruction family (see isa.PTX_FAMILIES / SASS_FAMILIES)."""
    n = compiled.counts()[family]
    if n < at_least:
        raise AssertionError(f"the compiled code of {compiled.name} has no {family} ({why})")
    return n


def forbid(compiled, family, why):
    n = compiled.counts()[family]
    if n:
        raise AssertionError(f"the compiled code of {compiled.name} still has {n} x {family} ({why})")


def gemm_values(matmul, shapes, *launch, **kw):
    """Check ``matmul(a, b, *launch, **kw, out=c)`` on fresh random fp16 inputs of each (M, N, K) shape,
    guarded (a K tail read without a mask reads NaN) and ``c`` poisoned (tiles never written, and stores
    outside C, are caught)."""
    for M, N, K in shapes:
        a, b = operand(M, K), operand(K, N)
        out = poisoned(M, N)
        if matmul(a, b, *launch, **kw, out=out) is None:
            raise NotImplementedError
        if (out == 0).all():
            raise AssertionError("the product came out all zeros: the K loop accumulates nothing")
        compare(f"{M}x{K} @ {K}x{N}", out, a.float() @ b.float(), 1e-2)


def require_dot(compiled):
    """The compiled GEMM of a learner, refused as not attempted while it has no tl.dot."""
    if not compiled.counts()["wgmma"] and not compiled.counts()["mma.sync"]:
        raise NotAttempted("no tl.dot in the compiled code")
    return compiled


def is_stub(e):
    """An error that comes from the exercise's stub (``raise NotImplementedError()`` where the code
    goes), however it surfaced: raised, or reported by Triton's interpreter or compiler, which
    cannot compile a raise inside a @triton.jit function."""
    return isinstance(e, (NotImplementedError, NotAttempted)) or "NotImplementedError" in str(e)


def _learner_line(e):
    """(function, line number, text) of the deepest line, in ``e`` or the exceptions it wraps, written
    outside the course and the installed packages: where a learner's code raised."""
    here, found = str(Path(__file__).resolve().parents[1]), None
    while e is not None:
        tb = e.__traceback__
        while tb is not None:
            path = tb.tb_frame.f_code.co_filename
            if not path.startswith((here, sys.prefix, sys.base_prefix)) and "site-packages" not in path:
                found = (tb.tb_frame.f_code.co_name, tb.tb_lineno, linecache.getline(path, tb.tb_lineno).strip())
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    return found


def explain(e):
    """An exception from a learner's code in a line or two: what it was and the learner's line."""
    text = str(e)
    if "illegal instruction" in text:
        return (f"the GPU reported {text.splitlines()[0]}: a check compiled into the kernel trapped. On the H200 the "
                "course saw this for a descriptor load at a coordinate that is not a multiple of 16 bytes (a K "
                "coordinate counting steps, k, instead of elements, k * BLOCK_K). The GPU context is now unusable: "
                "restart the Jupyter kernel, fix the kernel, and run the cells again")
    if isinstance(e, getattr(torch, "AcceleratorError", ())) or "CUDA error" in text:
        return (f"the GPU reported {text.splitlines()[0]}: the kernel most likely read or wrote outside its "
                "tensors (a missing mask, or a wrong offset or stride). The GPU context is now unusable: restart the "
                "Jupyter kernel, fix the kernel, and run the cells again")
    lines = [line for line in text.splitlines() if line.strip()]
    carets = [i for i, line in enumerate(lines) if set(line.strip()) == {"^"}]
    if carets:  # Triton's compile errors: the source line, a caret under the fault, the reason last
        return f"your kernel does not compile: {lines[-1].strip()} at `{lines[carets[-1] - 1].strip()}`"
    inner = e
    while inner.__cause__ is not None or (type(inner).__name__ == "InterpreterError" and inner.__context__):
        inner = inner.__cause__ or inner.__context__
    at = _learner_line(e)
    at = f" in {at[0]}, line {at[1]}: `{at[2]}`" if at else ""
    return f"your code raised {type(inner).__name__}: {str(inner).splitlines()[-1] if str(inner) else ''}{at}"


# in CPU mode each check runs in a forked child: the interpreter runs the learner's kernel on raw host
# memory, where a far stray access kills the process; the child dies instead, and the parent reports it
ISOLATE = MODE == "cpu" and hasattr(os, "fork")
# a check of a solution takes at most 11 s in the interpreter (every exercise, 2 busy cores, 2026-12-02): a minute
# is far beyond an honest kernel and short enough that a learner whose loop never ends is told so soon
TIMEOUT_S = 60


def _outcome(fn):
    """("pass", note) | ("fail", why) | ("todo", why) for one check, in this process."""
    try:
        return "pass", fn()
    except AssertionError as e:
        return "fail", str(e)
    except Exception as e:
        if is_stub(e):
            return "todo", str(e) if isinstance(e, NotAttempted) else "the stub is still there"
        return "fail", explain(e)


def _outcome_in_child(fn, timeout=None):
    timeout = timeout or TIMEOUT_S
    aot.start_worker()  # here, so every child borrows one warm compile helper instead of starting its own
    read, write = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the child: fresh random inputs (not the parent's generator state), output sent back
        os.close(read)
        code = 0
        try:
            faulthandler.disable()  # a crash is reported by the parent, not dumped here
            torch.set_num_threads(1)  # the parent's OpenMP pool did not survive the fork: waiting on it hangs
            if seeded() is None:
                torch.seed()  # Python's random reseeds itself in a forked child; torch does not
            else:
                random.seed(seeded())
                torch.manual_seed(seeded())
            text = io.StringIO()
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
                kind, note = _outcome(fn)
            os.write(write, pickle.dumps((kind, note, text.getvalue())))
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    data, deadline = b"", time.monotonic() + timeout
    with os.fdopen(read, "rb") as pipe:
        while time.monotonic() < deadline:
            if select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))[0]:
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    break
                data += chunk
        else:
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if data and os.WIFEXITED(status):
        kind, note, text = pickle.loads(data)
        print(text, end="")
        return kind, note
    aot.forget_worker()  # it may have been mid-conversation with the child
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL and not data:
        return "fail", (f"your kernel did not finish in {timeout} s: a loop that never ends (a bound or a step that "
                        "never reaches it?), or a grid far larger than the tensor")
    how = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
    return "fail", (f"the process running your kernel crashed ({how}): it read or wrote far outside its tensors - "
                    "a load or store without a mask at an edge, or an offset or stride that points past the tensor. "
                    "(In CPU mode the course runs each check in a child process, so Jupyter survives.)")


# on a GPU a kernel that never ends cannot be stopped from its own process, and the check that waits for it would
# wait forever: the check runs in a thread, a second thread keeps putting marks on the GPU's queue (CUDA events) and
# notes when the GPU reaches each, and the caller gives up when the GPU has not caught up for the limit. A check's
# kernels take milliseconds on the H200; compiling (nothing queued) never counts, nor does CUDA's start (its context
# is made by `import kernels`: made inside a check, on an H100 crowded by the test suite, it stalled the marks past
# 5 s and the untouched exercise 08 was given up on, issue 41). A GPU that other processes compute on serves them
# too: where others compute on the card the limit is a minute, as for a check in CPU mode
GPU_TIMEOUT_S = 5
GPU_SHARED_TIMEOUT_S = 60
_WAITED = {"seconds": GPU_TIMEOUT_S, "why": ""}  # the limit the last watched check ran under, and why
_stuck = []  # the checks given up on: their kernels still hold this process's GPU


def given_up():
    """The names of the checks given up on in this process: their kernels still run on its GPU."""
    return list(_stuck)


def _mark():
    """A mark at the end of what the GPU has been given so far: query() is True once it has done it all (None
    before there is a CUDA context). Recording one waits while another thread of this process waits on a copy
    from the GPU (measured on the H200, 2026-12-02), so it is done in a thread of its own."""
    if not torch.cuda.is_initialized():
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream())
    return event


def _keep_marking(caught_up, done):
    """Mark the GPU's queue, wait until the mark is reached, note when in ``caught_up[0]``; again, until ``done``."""
    while not done.is_set():
        try:
            mark = _mark()
            while mark is not None and not mark.query() and not done.is_set():
                time.sleep(0.01)
        except Exception:  # a GPU error: the check itself reports it
            pass
        caught_up[0] = time.monotonic()
        done.wait(0.05)


def gpu_sharers():
    """How many other processes hold a CUDA context on this process's GPU (NVML's list of compute processes), or
    None where NVML cannot tell."""
    from . import clocks
    nvml = clocks._nvml()
    try:
        return sum(p.pid != os.getpid() for p in nvml.nvmlDeviceGetComputeRunningProcesses(clocks._handle(nvml)))
    except Exception:
        return None


def gpu_limit():
    """(seconds, why): how long a check waits for a GPU that does not catch up: GPU_TIMEOUT_S where this process
    has the GPU to itself, GPU_SHARED_TIMEOUT_S where others compute on it or NVML cannot tell."""
    others = gpu_sharers()
    if others == 0:
        return GPU_TIMEOUT_S, ""
    return GPU_SHARED_TIMEOUT_S, (f"{others} other process{'es' if others > 1 else ''} compute on this GPU, and its "
                                  "work waits behind theirs" if others else "NVML cannot tell whether other "
                                  "processes compute on this GPU")


def finish_or_give_up(fn, timeout=None):
    """(True, what ``fn()`` returned) or (False, None) when, while ``fn`` ran, the GPU did not catch up with the
    work it had been given for ``timeout`` s (default: ``gpu_limit()``, asked when the GPU first falls
    GPU_TIMEOUT_S behind). ``fn`` runs in a thread; what it prints is printed here, after it."""
    limit = [timeout]
    result, text, caught_up, done = [], io.StringIO(), [time.monotonic()], threading.Event()
    worker = threading.Thread(target=lambda: result.append(fn()), daemon=True)  # a hung one must not block exit
    marker = threading.Thread(target=_keep_marking, args=(caught_up, done), daemon=True)

    def behind():
        late = time.monotonic() - caught_up[0]
        if limit[0] is None and late > GPU_TIMEOUT_S:
            limit[0], _WAITED["why"] = gpu_limit()
        return late > (limit[0] or GPU_TIMEOUT_S)
    _WAITED["why"] = ""
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
        worker.start()
        marker.start()
        while worker.is_alive() and not behind():
            worker.join(0.05)
    done.set()
    _WAITED["seconds"] = limit[0] or GPU_TIMEOUT_S
    print(text.getvalue(), end="")
    return (True, result[0]) if result else (False, None)


def _outcome_watched(fn, name):
    if _stuck:
        return "fail", (f"not run: the GPU is still running the kernel of '{_stuck[0]}', which never finished, and "
                        "would run nothing else. Restart the Jupyter kernel (Kernel > Restart Kernel), fix that "
                        "kernel, and run the cells again")
    done, outcome = finish_or_give_up(lambda: _outcome(fn))
    if done:
        return outcome
    _stuck.append(name)
    why = f" ({_WAITED['why']})" if _WAITED["why"] else ""
    return "fail", (f"your kernel did not finish: the GPU had not done its work after {_WAITED['seconds']} s{why}, "
                    "where this check's kernels take milliseconds - a loop that never ends (a bound or a step that never "
                    "reaches it?), or a wait that nothing satisfies. It is still running, and only ending this "
                    "process stops it: restart the Jupyter kernel (Kernel > Restart Kernel), fix the loop, and run "
                    "the cells again")


class Verdict:
    """What ``run`` found: true when every check passed, and ``score(points)``, the partial credit a graded cell
    shows (nbgrader's autograder reads a number shown by a grade cell as its points)."""

    def __init__(self, passed, total):
        self.passed, self.total = passed, total

    def __bool__(self):
        return self.passed == self.total

    def score(self, points):
        """``points`` times the fraction of the checks that pass."""
        return round(points * self.passed / self.total, 2)

    def __repr__(self):
        return f"{self.passed} of {self.total} checks pass"


def run(title, checks, twin=False):
    """Run named checks; print one line each and a verdict. Returns a ``Verdict``: true when all pass.

    ``checks`` is a list of (name, callable); a callable returns a short note on success, raises
    AssertionError with an explanation on failure, NotImplementedError/NotAttempted for a stub. Any
    other exception, a crash or a check that never ends is a failure, explained. ``twin``: on a GPU, when every
    check passes, the notebook's cells run again in Triton's interpreter (``twin``), which follows every load and
    store, and a check that fails there fails here."""
    passed, attempted, outcomes = 0, True, {}
    for name, fn in checks:
        kind, note = _outcome_in_child(fn) if ISOLATE else _outcome_watched(fn, name) if LIVE else _outcome(fn)
        outcomes[name] = kind
        if kind == "pass":
            passed += 1
            print(f"  pass  {name}" + (f": {note}" if note else ""))
        elif kind == "fail":
            print(f"  FAIL  {name}: {note}")
        else:
            attempted = False
            print(f"  todo  {name}: not attempted yet ({note})")
    if twin and LIVE and passed == len(checks) and not os.environ.get("COURSE_TWIN"):
        passed -= _twin(title, outcomes)
    if passed == len(checks):
        print(f"{title}: all {len(checks)} checks pass")
    elif not attempted and passed == 0:
        print(f"{title}: not attempted yet - fill in the cells marked 'YOUR CODE HERE' and run this again")
    else:
        print(f"{title}: {passed} of {len(checks)} checks pass")
    return Verdict(passed, len(checks))


def _twin(title, outcomes):
    """The checks of ``title`` once more in Triton's interpreter (``twin``); prints what fails there; returns how
    many of ``outcomes``' passes it failed."""
    from . import twin
    cells = twin.cells()
    if cells is None:  # not in a notebook (a test calling a check): nothing to replay
        return 0
    printed, why = twin.run(cells)
    there = twin.verdicts(printed or "").get(title)
    if there is None:
        print(f"  note  the interpreter could not replay this notebook ({why or 'no verdict'}): the checks above "
              "ran on the GPU alone")
        return 0
    failed = 0
    for name in (n for n, kind in outcomes.items() if kind == "pass"):
        kind, note = twin.said(there, name) or ("pass", "")
        if kind != "pass":
            failed += 1
            print(f"  FAIL  {name} (in Triton's interpreter, which follows every load and store; the GPU cannot "
                  f"see this): {note}")
    if not failed:
        print("  pass  the same checks in Triton's interpreter, which follows every load and store")
    return failed


def confusions(names):
    """The ways a learner confuses the arguments ``names`` of a formula, each (what it does to an argument tuple,
    in words): a pair swapped, or one argument used in another's place. A check that finds the course's
    formula, fed confused arguments, giving what the learner's gives can name the confusion. The order matters
    where one draw fits several: for each pair, the swap, then the first used in the second's place."""
    for i, j in itertools.permutations(range(len(names)), 2):
        if i < j:
            yield (lambda c, i=i, j=j: tuple(c[j] if k == i else c[i] if k == j else v for k, v in enumerate(c)),
                   f"{names[i]} and {names[j]} swapped")
        yield (lambda c, i=i, j=j: tuple(c[j] if k == i else v for k, v in enumerate(c)), f"{names[j]} in place of {names[i]}")


def per_tile_count(mask, block_m, block_n):
    """How many True elements of a 2D mask fall in each ``block_m x block_n`` output tile: a (row tiles,
    column tiles) tensor."""
    M, N = mask.shape
    tm, tn = -(-M // block_m), -(-N // block_n)
    padded = torch.zeros(tm * block_m, tn * block_n, dtype=torch.int64, device=mask.device)
    padded[:M, :N] = mask
    return padded.view(tm, block_m, tn, block_n).sum((1, 3))


def tiles(mask, block_m, block_n, limit=6):
    """The output tiles (row tile, column tile) of ``block_m x block_n`` that hold a True element of a 2D
    mask, in words: how many of the grid, which ones (the first ``limit``), and whether whole or in part."""
    per_tile, size = per_tile_count(mask, block_m, block_n), per_tile_count(torch.ones_like(mask), block_m, block_n)
    tm, tn = per_tile.shape
    hit = per_tile.nonzero().tolist()
    names = ", ".join(f"({r}, {c})" for r, c in hit[:limit]) + (f" and {len(hit) - limit} more" if len(hit) > limit else "")
    whole = all(per_tile[r, c] == size[r, c] for r, c in hit)
    return (f"{len(hit)} of the {tm} x {tn} tiles of {block_m} x {block_n} ((row tile, column tile): {names}), "
            f"{'whole' if whole else 'in part'}")


def misplaced(out, ref, block_m, block_n, tol, limit=3):
    """Output tiles that hold another tile's values: [((row tile, column tile), (its values' row tile, column
    tile))], at most ``limit``. A wrong tile offset or swapped grid axes put right values in the wrong place."""
    M, N = out.shape
    grid = [(r, c) for r in range(-(-M // block_m)) for c in range(-(-N // block_n))]
    part = lambda t, r, c: t[r * block_m:(r + 1) * block_m, c * block_n:(c + 1) * block_n]
    found = []
    for r, c in grid:
        mine = part(out, r, c)
        if rel_err(mine, part(ref, r, c)) <= tol:
            continue
        for r2, c2 in grid:
            theirs = part(ref, r2, c2)
            h, w = min(mine.shape[0], theirs.shape[0]), min(mine.shape[1], theirs.shape[1])
            if (r2, c2) != (r, c) and rel_err(mine[:h, :w], theirs[:h, :w]) <= tol:
                found.append(((r, c), (r2, c2)))
                break
        if len(found) == limit:
            break
    return found


def compare_tiles(name, out, ref, tol, block_m, block_n, candidates=()):
    """``compare`` for a tiled output, and on failure the same diagnosis by tile: which tiles were never
    written or hold wrong values, which hold another tile's values, and which of ``candidates`` (a list of
    (what it means, the tensor that wrong answer computes)) the output equals."""
    try:
        return compare(name, out, ref, tol)
    except AssertionError as e:
        never = unwritten(out)
        off = ~never & far_off(out, ref, tol) | torch.isnan(out)
        by_tile = []
        if never.any():
            by_tile.append(f"never written: {tiles(never, block_m, block_n)}")
        if off.any():
            by_tile.append(f"wrong values: {tiles(off, block_m, block_n)}")
        moved = misplaced(out, ref, block_m, block_n, tol)
        if moved:
            by_tile.append(", ".join(f"tile {t} holds the values of tile {o}" for t, o in moved)
                           + ": the tile coordinates of a load or the store are off")
        for what, wrong in candidates:
            if not never.any() and rel_err(out, wrong) <= tol:
                by_tile.append(f"C equals {what}")
                break
        raise AssertionError(f"{e}; by tile, " + "; ".join(by_tile) if by_tile else str(e)) from None


# ---- which pointer each global access of the compiled code goes through -----------------------------

def _operands(text):
    """The comma-separated operands of one PTX instruction, commas inside {} and [] kept."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "{["
        depth -= ch in "}]"
        if ch == "," and not depth:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()] if cur.strip() else parts


def global_accesses(ptx):
    """Each ld.global and st.global of a PTX kernel in program order: (the instruction, the pointer parameters
    its address is computed from (indices into the kernel's parameters), whether a predicate guards it). A
    masked tl.load or tl.store compiles to a predicated access (``@%p ld.global...``); one without a mask to a
    bare one."""
    reg = re.compile(r"%[a-z]+\d+")
    pointers = {int(i) for i in re.findall(r"\.param\s+\.u64\s+\.ptr[^\n]*?_param_(\d+)", ptx)}
    defs, params, accesses = {}, {}, []
    for line in ptx.splitlines():
        line = line.split("//")[0].strip().rstrip(";").strip()
        if not line or line.startswith(".") or line.endswith(":") or line in ("{", "}"):
            continue
        guarded = line.startswith("@")
        if guarded:
            line = line.split(None, 1)[1] if " " in line else ""
        op, _, rest = line.partition(" ")
        ops = _operands(rest)
        if op.startswith(("ld.global", "st.global")):
            address = next((o for o in ops if o.startswith("[")), "")
            accesses.append((op, reg.findall(address), guarded))
            continue
        if not ops or not reg.search(ops[0]) or op.startswith(("st.", "bra", "bar", "ret", "red.", "atom.")):
            continue
        found = re.search(r"_param_(\d+)\]", rest)
        for r in reg.findall(ops[0]):
            if op.startswith("ld.param") and found:
                params.setdefault(r, set()).add(int(found.group(1)))
            defs.setdefault(r, set()).update(x for o in ops[1:] for x in reg.findall(o))

    def reached(regs):
        seen, todo, out = set(), list(regs), set()
        while todo:
            r = todo.pop()
            if r not in seen:
                seen.add(r)
                out |= params.get(r, set())
                todo.extend(defs.get(r, ()))
        return out

    return [(op, sorted(reached(regs) & pointers), guarded)
            for op, regs, guarded in accesses]


# ---- which tensor each TMA copy of the compiled code goes through -------------------------------------

def tma_copies(ptx):
    """Each cp.async.bulk.tensor of a PTX kernel in program order: ("load" or "store", the index of the kernel
    parameter whose address its descriptor was built from, or None where that cannot be told). A descriptor made
    in the kernel (tl.make_tensor_descriptor) is a tensormap written in shared memory (its global_address from a
    pointer parameter) and copied out to global memory (tensormap.cp_fenceproxy); the copy names that address."""
    reg = r"%rd\d+"
    source, pending, copies = {}, None, []
    for line in ptx.splitlines():
        line = line.split("//")[0].strip()
        if line.startswith("@"):
            line = line.split(None, 1)[1] if " " in line else ""
        op, _, rest = line.partition(" ")
        if op.startswith("ld.param") or op.startswith("mov.") or op.startswith("cvta."):
            m = re.match(rf"\s*({reg}),\s*\[?\s*(\w+?_param_(\d+)|{reg})", rest)
            if m:
                source[m.group(1)] = int(m.group(3)) if m.group(3) else source.get(m.group(2))
        elif op.startswith("tensormap.replace") and ".global_address" in op:
            m = re.search(rf"\],\s*({reg})", rest)
            pending = source.get(m.group(1)) if m else None
        elif op.startswith("tensormap.cp_fenceproxy"):
            m = re.match(rf"\s*\[\s*({reg})", rest)
            if m:
                source[m.group(1)] = pending
        elif op.startswith("cp.async.bulk.tensor"):
            m = re.search(rf"\[\s*({reg})\s*,\s*\{{", rest)
            copies.append(("store" if ".global.shared" in op else "load", source.get(m.group(1)) if m else None))
    return copies


# ---- values element by element -----------------------------------------------------------------------------

def rounding_off(out, ref):
    """Elements of ``out`` further from ``ref`` than rounding to ``out``'s dtype explains: by more than one unit in
    the last place of that dtype at |ref| plus one at the reference's typical (RMS) value. For a product accumulated
    in fp32 and rounded once; a mistake that a relative error over the whole output hides (one column, one row)
    shows here."""
    eps = torch.finfo(out.dtype).eps
    r = ref.double()
    return (out.double() - r).abs() > eps * (r.abs() + r.pow(2).mean().sqrt())


# ---- who wrote what (the interpreter only) ----------------------------------------------------------------

@contextlib.contextmanager
def program_writes(out):
    """While the block runs, record which programs store into each element of the 2D tensor ``out``: yields an
    int64 tensor of ``out``'s shape, bit p set when program p (along grid axis 0, p < 63) wrote the element.
    Kernels run in Triton's interpreter only (CPU mode); elsewhere it yields None."""
    from .mode import INTERPRET
    if not INTERPRET:
        yield None
        return
    import numpy as np
    from triton.runtime import interpreter
    builder = interpreter.interpreter_builder
    bits = np.zeros(tuple(out.shape), dtype=np.int64)
    base, elem, (s0, s1) = out.data_ptr(), out.element_size(), out.stride()
    store = builder.create_masked_store

    def recording(ptrs, value, mask, *rest):
        where = (ptrs.data[mask.data].astype(np.int64) - base) // elem
        row, col = where // s0, where % s0 // s1
        inside = (where >= 0) & (row < out.shape[0]) & (col < out.shape[1])
        pid = builder.grid_idx[0]
        if pid < 63:
            np.bitwise_or.at(bits, (row[inside], col[inside]), np.int64(1) << pid)
        return store(ptrs, value, mask, *rest)

    builder.create_masked_store = recording
    try:
        yield torch.from_numpy(bits)
    finally:
        del builder.create_masked_store


def programs_of(bits):
    """The programs whose bits are set in an int: [p, ...]."""
    return [p for p in range(63) if int(bits) >> p & 1]


# ---- a tl.dot whose result is thrown away ---------------------------------------------------------------

def dropped_dot(kernel):
    """The source line of ``kernel`` (a @triton.jit function) where a tl.dot is computed and its result thrown
    away (a statement that is only an expression, ``tl.dot(a, b, acc)``), or None."""
    import ast
    import inspect
    import textwrap
    try:
        source = textwrap.dedent(inspect.getsource(getattr(kernel, "fn", kernel)))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                                              and n.func.attr == "dot" for n in ast.walk(node.value)):
            return lines[node.lineno - 1].strip()
    return None


def dropped_dot_message(line):
    return (f"the result of tl.dot is dropped: `{line}` returns the new sum and leaves acc as it was, so the "
            "accumulator never changes (and the compiler removes the dot); assign it: acc = tl.dot(a, b, acc)")


def require_kept_dot(compiled, kernel):
    """``require_dot``, except that a kernel whose tl.dot result is thrown away (so the compiler removed the dot)
    fails with a message that says so instead of being called a stub."""
    if not compiled.counts()["wgmma"] and not compiled.counts()["mma.sync"]:
        line = dropped_dot(kernel)
        if line:
            raise AssertionError(dropped_dot_message(line))
    return require_dot(compiled)
