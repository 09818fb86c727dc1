"""One source for every figure a lesson shows.

A lesson says what it wants - a run of kernels timed together (``run``), or one kernel against
its baseline at one configuration (``versus``) - and gets the figures with a label saying where
they come from: measured now, where this machine can run the kernels, or read from the recorded
results of ``results.REFERENCE_DEVICE`` (device and date) where it cannot. No lesson asks which."""
import contextlib
import shutil
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import bench, check, clocks, results
from .mode import LIVE, MODE, device_name, recorded_only, sm_count as _sm_count


def gpu_lost():
    """Whether this process's GPU context is gone: a kernel trapped or faulted (every CUDA call returns that error
    from then on; a stream query asks without waiting), or a check gave up on a kernel that never ended."""
    if not (LIVE and torch.cuda.is_initialized()):
        return False
    if check.given_up():  # its kernel still runs: a query would answer, a later launch would wait behind it
        return True
    try:
        torch.cuda.current_stream().query()
    except Exception:  # noqa: BLE001 - whichever CUDA error it is, the context is lost
        return True
    return False


def can_run(needs="gpu"):
    """Whether figures of kernels that need ``"gpu"`` (any CUDA GPU), ``"hopper"`` (sm_90a code) or ``"ncu"`` (a
    Hopper GPU and Nsight Compute on the PATH) are measured here now: they run here and the room has not asked for
    recorded figures (COURSE_RECORDED)."""
    if recorded_only() or gpu_lost():  # a kernel that trapped left nothing to time with
        return False
    if needs == "ncu":
        return MODE == "hopper" and shutil.which("ncu") is not None
    return MODE == "hopper" if needs == "hopper" else LIVE


def recorded_label(store, records=None):
    """Where recorded figures come from (``records``' own date where they carry one); on a GPU told not to time, or
    that cannot, say why they are not its own."""
    why = ("COURSE_RECORDED=1: not timed on this GPU" if recorded_only() else
           "a kernel trapped and this process lost its GPU: restart the Jupyter kernel to time here"
           if gpu_lost() else "")
    return (store.label if records is None else store.label_of(records)) + (f" ({why})" if LIVE and why else "")


def live_label():
    return f"measured live on {device_name()}"


@dataclass
class Run:
    """The records of one run of a lesson and where they come from."""
    records: list
    label: str

    def __iter__(self):
        return iter(self.records)

    def __len__(self):
        return len(self.records)

    def select(self, name=None, **config):
        """Records named ``name`` (any, if None) whose config holds every item of ``config``."""
        return [r for r in self.records if (name is None or r["name"] == name)
                and all(r["config"].get(k) == v for k, v in config.items())]

    def find(self, name=None, **config):
        found = self.select(name, **config)
        if not found:
            raise LookupError(f"no record {name} {config} ({self.label})")
        return found[0]


def take(lesson, run, measure_fn):
    """Measure now: the records ``measure_fn()`` returns, stamped with their lesson and run."""
    return [{"lesson": lesson, "run": run, **r} for r in measure_fn()]


def run(lesson, run_name, measure_fn, needs="gpu") -> Run:
    """A run of ``lesson``: measured now by ``measure_fn`` where it can run, else the recorded one."""
    if can_run(needs):
        return Run(take(lesson, run_name, measure_fn), live_label())
    store = results.recorded()
    found = store.select(lesson, run_name)
    return Run(found, recorded_label(store, found))


@dataclass
class Live:
    """What it takes to time one kernel against its baseline now: two launches sharing data, the
    bytes or FLOPs one launch moves or does, and where the kernel writes (checked before timing)."""
    kernel: Callable
    baseline: Callable
    work: float
    out: object = None
    ref: object = None
    tol: float = 0.0


def gemm_against_cublas(shape, launch):
    """Live timing of ``launch(a, b, c)`` (C = A @ B into c) against cuBLAS on fresh fp16 operands."""
    import torch
    a, b, c = bench.gemm_operands(*shape)
    return Live(lambda: launch(a, b, c), lambda: torch.matmul(a, b, out=c), bench.gemm_flops(*shape),
                out=c, ref=torch.matmul(a, b), tol=1e-2)


def copy_against_torch(shape, launch):
    """Live timing of ``launch(x, y)`` (y = x) against torch's copy on fresh fp16 data."""
    import torch
    x = bench.randn(*shape)
    y = torch.empty_like(x)
    return Live(lambda: launch(x, y), lambda: y.copy_(x), bench.copy_bytes(x), out=y, ref=x)


@dataclass
class Query:
    """One kernel at one configuration against its baseline: the record it is (lesson, run, name,
    config, shape), how to launch it on live operands - ``launch(a, b, c)`` for a GEMM timed against
    cuBLAS, ``launch(x, y)`` for a copy timed against torch's - and what it needs to run live."""
    lesson: str
    run: str
    name: str
    config: dict
    shape: tuple
    launch: Callable = field(repr=False)
    against: str = "cublas"     # or "torch_copy"
    needs: str = "gpu"

    @property
    def base(self):
        """The baseline's record name: AGAINST's for a GEMM or a copy, else ``against`` itself (a lesson's own
        baseline, whose ``setup`` the lesson writes)."""
        return AGAINST[self.against][0] if self.against in AGAINST else self.against

    @property
    def unit(self):
        return AGAINST[self.against][1]

    def setup(self) -> Live:
        return AGAINST[self.against][2](self.shape, self.launch)


AGAINST = {"cublas": ("cublas_gemm", "tflops", gemm_against_cublas),
           "torch_copy": ("torch_copy", "gbps", copy_against_torch)}


@dataclass
class Figure:
    rate: float
    base: float
    unit: str
    label: str

    @property
    def ratio(self):
        return self.rate / self.base

    @property
    def unit_text(self):
        return {"gbps": "GB/s", "tflops": "TFLOP/s"}[self.unit]


class NoRecord(LookupError):
    """CPU mode, and nothing was recorded for this configuration."""


def versus(q: Query) -> Figure:
    """``q``'s kernel and its baseline: both timed in turn now (the kernel's output checked first),
    or the recorded pair. Raises NoRecord when neither can be had."""
    if can_run(q.needs):
        live = q.setup()
        if live.out is not None:
            bench.check_writes(q.name, live.kernel, live.out, live.ref, live.tol)
        ms = bench.interleaved_ms({"kernel": live.kernel, "baseline": live.baseline}, rounds=1)
        rate = bench.gbps if q.unit == "gbps" else bench.tflops
        return Figure(rate(live.work, ms["kernel"]), rate(live.work, ms["baseline"]), q.unit, live_label())
    store = results.recorded()
    r = store.find(q.lesson, q.run, q.name, q.shape, q.config)
    b = store.baseline_of(r) if r else None
    if r is None or b is None:
        raise NoRecord(f"no recorded measurement of {q.name} {q.config} at {list(q.shape)} ({store.label})")
    return Figure(r[q.unit], b[q.unit], q.unit, recorded_label(store, [r, b]))


def sm_count(t=None):
    """SMs of the GPU the figures come from: this one when live, else the recording device's."""
    if can_run():
        import torch
        return _sm_count(t if t is not None else torch.empty(0, device="cuda"))
    return results.recorded().sm_count


def timed(variants, out, ref, tol=0.0, checked=None, watch=None, **work):
    """Records of ``[(name, config, launch)]``: each launch writing ``out`` is checked against ``ref``
    (those ``checked(name, config)`` accepts, default all), then all are timed in turn
    (``bench.interleaved_ms``). The first variant is the baseline of the others. ``work`` is the
    records' shape and ``nbytes`` or ``flops``. With ``watch`` (a config dict), the SM clock and power
    are sampled while they are timed (``clocks``): each record gets a ``state`` of the samples taken
    while it was timed, and one more record, ``gpu_state``, holds the whole run's."""
    fns = {i: fn for i, (_, _, fn) in enumerate(variants)}
    for i, (name, cfg, fn) in enumerate(variants):
        if checked is None or checked(name, cfg):
            bench.check_writes(name, fn, out, ref, tol)
    sampler, windows = clocks.Sampler(), {}
    with sampler if watch is not None else contextlib.nullcontext():
        ms = bench.interleaved_ms(fns, windows=windows)
    records = [results.record(name, ms[i], config=cfg, baseline=None if i == 0 else variants[0][0], **work)
               for i, (name, cfg, _) in enumerate(variants)]
    if watch is None:
        return records
    for i, r in enumerate(records):
        r["state"] = sampler.summary(windows[i])
    return records + [{**results.record("gpu_state", sum(ms.values()), config=watch, shape=work["shape"]),
                       "state": sampler.summary()}]


def screened(entries, out, ref, tol, refused, where=""):
    """The entries of a screen that can run: ``({i: launch}, {i: (name, config)})`` for each ``(name, config,
    prepare)`` whose ``prepare()`` (a prepared launch, e.g. a plan) writes ``out`` within ``tol`` of ``ref``
    (``bench.check_writes``); one that raises one of ``refused`` is left out with a line saying why, ``where``."""
    fns, cfgs = {}, {}
    for i, (name, config, prepare) in enumerate(entries):
        try:
            fn = prepare()
            bench.check_writes(name, fn, out, ref, tol)
        except refused as e:
            print(f"left out{where}: {describe(name, config)}: {e}")
            continue
        fns[i], cfgs[i] = fn, (name, config)
    return fns, cfgs


def describe(name, config):
    """A record's kernel and configuration in one line: ``copy_tma_loop stages=4 descriptor=host``."""
    return " ".join([name] + [f"{k}={v}" for k, v in config.items()])
