"""Timing, counting and recorded results.

Time is the median of ``triton.testing.do_bench`` (CUDA events, warm-up first). Every figure is
reported with the bytes or FLOPs it moved and as a ratio to a baseline measured in the same run.
Results live in ``results/<device-slug>.json`` (see README); in CPU mode the notebooks read them
back and label each figure with the device and date it was recorded on."""
import datetime
import json
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from .. import MODE
from .errors import NoGPUError

RESULTS = Path(__file__).resolve().parents[2] / "results"
REFERENCE_DEVICE = "nvidia-h200"  # the device whose records CPU mode shows


def randn(*shape):
    """Fresh random fp16 data on the GPU: never zeros, which hide unwritten outputs and run faster."""
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


def gemm_operands(M, N, K):
    """Random A (M x K) and B (K x N), and an uninitialised C (M x N), fp16 on the GPU."""
    return randn(M, K), randn(K, N), torch.empty(M, N, device="cuda", dtype=torch.float16)


def median_ms(fn, warmup=25, rep=100):
    """Median milliseconds of ``fn()`` over ``rep`` ms of repeats after ``warmup`` ms of warm-up."""
    if MODE == "cpu":
        raise NoGPUError("timing needs a CUDA GPU; in CPU mode the notebooks show recorded figures")
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def interleaved_ms(fns: dict, rounds=3, **kw) -> dict:
    """Median ms of each callable, timed in turn for ``rounds`` rounds, the median of rounds kept.
    Interleaving matters: a long GEMM loop drives the card to its power cap and clocks drop, so a
    variant timed after its baseline would be judged on a slower card."""
    seen = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            seen[name].append(median_ms(fn, **kw))
    return {name: statistics.median(v) for name, v in seen.items()}


def checked_interleaved(fns, out, ref, tol=0.0, checked=None):
    """Check what each callable writes into ``out`` (poisoned first) against ``ref`` - exactly when
    ``tol`` is 0, else by relative error - then time them all in turn (``interleaved_ms``).
    ``checked`` names the callables to check (default: all; a probe that computes nothing is not)."""
    for name in fns if checked is None else checked:
        out.fill_(float("nan"))
        fns[name]()
        ok = torch.equal(out, ref) if tol == 0 else \
            ((out.float() - ref.float()).norm() / ref.float().norm()).item() < tol
        assert ok, f"{name} computed a wrong result"
    return interleaved_ms(fns)


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops, ms):
    return flops / (ms * 1e-3) / 1e12


def record(lesson, name, ms, *, shape, dtype="float16", config=None, nbytes=None, flops=None, baseline=None):
    """One result, in the schema of results/*.json."""
    r = {"lesson": lesson, "name": name, "config": config or {}, "shape": list(shape), "dtype": dtype,
         "ms": round(ms, 5)}
    if nbytes:
        r["gbps"] = round(gbps(nbytes, ms), 1)
    if flops:
        r["tflops"] = round(tflops(flops, ms), 1)
    if baseline:
        r["baseline"] = baseline
    return r


def device_slug(name=None):
    name = name or torch.cuda.get_device_name()
    return "-".join(name.lower().replace("_", " ").split())


def max_sm_clock_mhz():
    """The GPU's maximum SM clock in MHz (nvidia-smi), to turn nanoseconds into cycles; None if unknown."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        return int(out.stdout.strip().splitlines()[0])
    except Exception:
        return None


def _driver():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0]
    except Exception:
        return "unknown"


def _key(r):
    return (r["lesson"], r["name"], json.dumps(r["config"], sort_keys=True), tuple(r["shape"]), r["dtype"])


def save(records, path=None):
    """Merge ``records`` into this GPU's results file (same lesson/name/config/shape replaced)."""
    path = Path(path or RESULTS / f"{device_slug()}.json")
    data = json.loads(path.read_text()) if path.exists() else {"records": []}
    try:
        import tilelang
        tl_version = tilelang.__version__
    except Exception:
        tl_version = None
    data.update({"device": torch.cuda.get_device_name(), "driver": _driver(), "torch": torch.__version__,
                 "triton": triton.__version__, "tilelang": tl_version,
                 "date": datetime.date.today().isoformat()})
    new = {_key(r): r for r in records}
    kept = [r for r in data["records"] if _key(r) not in new]
    data["records"] = kept + list(new.values())
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


class Recorded:
    """The records of one results file, for CPU mode: look-ups and a label for every figure."""

    def __init__(self, slug=REFERENCE_DEVICE):
        self.path = RESULTS / f"{slug}.json"
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {"records": []}
        self.label = (f"recorded on {self.data.get('device', slug)}, {self.data.get('date', '?')}"
                      if self.data["records"] else f"no recorded results for {slug} yet")

    def find(self, lesson, name, config=None, shape=None):
        for r in self.data["records"]:
            if (r["lesson"] == lesson and r["name"] == name
                    and (config is None or r["config"] == config)
                    and (shape is None or r["shape"] == list(shape))):
                return r
        return None

    def all(self, lesson, name=None):
        return [r for r in self.data["records"] if r["lesson"] == lesson and (name is None or r["name"] == name)]


def versus(kernel, baseline, *, rate, lesson, name, config, shape, base_name, unit="gbps"):
    """A kernel against its baseline: (rate, baseline rate, where). On a GPU both callables are timed in
    turn now and ``rate(ms)`` turns ms into GB/s or TFLOP/s; on a CPU the recorded pair is looked up
    (``unit`` names the record field). Rates are None when nothing was recorded for this config."""
    if MODE != "cpu":
        from .. import device_name
        ms = interleaved_ms({"kernel": kernel, "baseline": baseline}, rounds=1)
        return rate(ms["kernel"]), rate(ms["baseline"]), f"live on {device_name()}"
    rec = Recorded()
    r, b = rec.find(lesson, name, config=config, shape=shape), rec.find(lesson, base_name, shape=shape)
    return (r[unit], b[unit], rec.label) if (r and b) else (None, None, rec.label)


@dataclass
class Ceilings:
    """The two ceilings of a GPU: copy bandwidth (bytes read + written) and fp16 matmul rate."""
    tbps: float
    tflops: float
    label: str  # "measured live on ..." or "recorded on ..., date"

    @property
    def ridge(self):
        """FLOP per byte above which a kernel can be compute-bound."""
        return self.tflops / self.tbps
