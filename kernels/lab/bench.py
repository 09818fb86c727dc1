"""Timing and counting.

Time is the median of ``triton.testing.do_bench`` (CUDA events, warm-up first). Every figure is
reported with the bytes or FLOPs it moved and as a ratio to a baseline measured in the same run.
Where the figures go, and how CPU mode reads them back, is ``results``; which of the two a lesson
gets is ``measure``.

``COURSE_BENCH_SCALE`` (default 1) scales every timing window (warm-up and repetitions, at least 1 ms each).
The test suite's parallel part sets it to 0.1: there sixteen processes share the card, so its figures measure
nothing and the suite only needs the live paths to run; the timing part, alone on the card, keeps full windows."""
import os
import statistics
import time

import torch
import triton

from . import clocks
from .check import rel_err
from .errors import CourseError, NoGPUError
from .mode import MODE, recorded_only


def randn(*shape):
    """Fresh random fp16 data on the GPU: never zeros, which hide unwritten outputs and run faster."""
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


def gemm_operands(M, N, K):
    """Random A (M x K) and B (K x N), and an uninitialised C (M x N), fp16 on the GPU."""
    return randn(M, K), randn(K, N), torch.empty(M, N, device="cuda", dtype=torch.float16)


def copy_bytes(x):
    """A copy reads every byte once and writes it once."""
    return 2 * x.numel() * x.element_size()


def gemm_flops(M, N, K):
    return 2 * M * N * K


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops, ms):
    return flops / (ms * 1e-3) / 1e12


def _may_time():
    """Every timer's gate: a GPU, and no COURSE_RECORDED (a room sharing the card shows recorded figures)."""
    if MODE == "cpu":
        raise NoGPUError("timing needs a CUDA GPU; in CPU mode the notebooks show recorded figures")
    if recorded_only():
        raise CourseError("COURSE_RECORDED=1: this session shows recorded figures and times nothing on the GPU "
                          "(it may be shared); start Jupyter without COURSE_RECORDED to time here")


def window_ms(ms):
    """A timing window of ``ms`` milliseconds, scaled by COURSE_BENCH_SCALE (at least 1 ms)."""
    return max(1.0, ms * float(os.environ.get("COURSE_BENCH_SCALE") or 1))


def median_ms(fn, warmup=25, rep=100):
    """Median milliseconds of ``fn()`` over ``rep`` ms of repeats after ``warmup`` ms of warm-up."""
    _may_time()
    return triton.testing.do_bench(fn, warmup=window_ms(warmup), rep=window_ms(rep), return_mode="median")


def interleaved_ms(fns: dict, rounds=3, windows=None, **kw) -> dict:
    """Median ms of each callable, timed in turn for ``rounds`` rounds, the median of rounds kept.
    Interleaving matters: a long GEMM loop drives the card to its power cap and clocks drop, so a
    variant timed after its baseline would be judged on a slower card. ``windows`` (a dict) gets, per
    callable, the ``(start, end)`` wall-clock times it was timed in (to match with ``clocks``)."""
    seen = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.time()
            seen[name].append(median_ms(fn, **kw))
            if windows is not None:
                windows.setdefault(name, []).append((start, time.time()))
    return {name: statistics.median(v) for name, v in seen.items()}


def check_writes(name, fn, out, ref, tol=0.0):
    """Run ``fn`` into ``out`` (poisoned with NaN first) and compare with ``ref``: exactly when ``tol``
    is 0, else by relative error (NaN left anywhere fails)."""
    out.fill_(float("nan"))
    fn()
    ok = torch.equal(out, ref) if tol == 0 else rel_err(out, ref) < tol
    assert ok, f"{name} computed a wrong result"


def checked_interleaved(fns, out, ref, tol=0.0, checked=None, rounds=3):
    """Check what each callable writes into ``out`` (``check_writes``), then time them all in turn
    (``interleaved_ms``). ``checked`` names the callables to check (default: all; a probe that
    computes nothing is not)."""
    for name in fns if checked is None else checked:
        check_writes(name, fns[name], out, ref, tol)
    return interleaved_ms(fns, rounds=rounds)


def driver():
    """The NVIDIA driver's version, from NVML (``clocks``): what a record was measured under."""
    nvml = clocks._nvml()
    return nvml.nvmlSystemGetDriverVersion() if nvml else "unknown"


def graph_ms(fn, rep=100):
    """Median ms per call of ``fn`` replayed back to back from a CUDA graph
    (``triton.testing.do_bench_cudagraph``): no host launch cost between calls and, unlike
    ``median_ms``, no L2 flush, so the data stays wherever the previous call left it."""
    _may_time()
    return triton.testing.do_bench_cudagraph(fn, rep=window_ms(rep), return_mode="median")


def host_us(fn, calls=100):
    """Microseconds of host time (Python, argument checks, descriptor set-up, the driver call) per call
    of ``fn``: the calls are queued behind a long GPU task, so the GPU never waits for the host and the
    wall clock measures the host alone. For a kernel shorter than its launch, this sets the pace."""
    _may_time()
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU cycles, far longer than the calls below
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6
