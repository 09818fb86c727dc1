"""Recorded results: ``results/<device-slug>.json``, written on a GPU, read back in CPU mode.

A file holds the device, its SM count, driver, versions and date, and one record per measurement,
keyed by structure - which lesson, which run of that lesson (the group of kernels timed together),
which kernel, its configuration, the shape and dtype::

    {"lesson": "03", "run": "copies", "name": "copy_tma_loop", "config": {"stages": 4, "descriptor": "host"},
     "shape": [16384, 16384], "dtype": "float16", "ms": 0.27, "gbps": 3971.4, "baseline": "torch_copy"}

``baseline`` names the record of the same lesson and shape the figure is compared with (in the same
run where the run has one). A record whose ``ms`` is None counts an outcome instead of timing one (lesson 06's
``short_count``), and has no rate. A file is read once per session (``recorded()``)."""
import datetime
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import triton

from . import bench

RESULTS = Path(__file__).resolve().parents[2] / "results"
REFERENCE_DEVICE = "nvidia-h200"  # the device whose records CPU mode shows


def record(name, ms, *, shape, dtype="float16", config=None, nbytes=None, flops=None, baseline=None):
    """One measurement, in the schema above; ``measure`` stamps the lesson and run on it."""
    r = {"name": name, "config": config or {}, "shape": list(shape), "dtype": dtype, "ms": round(ms, 5)}
    if nbytes:
        r["gbps"] = round(bench.gbps(nbytes, ms), 1)
    if flops:
        r["tflops"] = round(bench.tflops(flops, ms), 1)
    if baseline:
        r["baseline"] = baseline
    return r


def key(r):
    return (r["lesson"], r["run"], r["name"], json.dumps(r["config"], sort_keys=True), tuple(r["shape"]), r["dtype"])


def device_slug(name=None):
    name = name or torch.cuda.get_device_name()
    return "-".join(name.lower().replace("_", " ").split())


def _this_gpu():
    """What a results file says of the GPU and the stack that recorded it."""
    try:
        import tilelang
        tl_version = tilelang.__version__
    except Exception:
        tl_version = None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"device": props.name, "sm_count": props.multi_processor_count, "driver": bench.driver(),
            "torch": torch.__version__, "triton": triton.__version__, "tilelang": tl_version}


def save(records, path=None, keep_date=False):
    """Merge ``records`` into this GPU's results file: the runs they belong to are replaced, the others kept.
    ``keep_date``: the records carry their own date, and the file's (the lessons' recording) stays."""
    path = Path(path or RESULTS / f"{device_slug()}.json")
    data = json.loads(path.read_text()) if path.exists() else {"records": []}
    today = datetime.date.today().isoformat()
    if data.get("date") and not keep_date:  # the records the file's date dated keep it when that date moves on
        for r in data["records"]:
            r.setdefault("date", data["date"])
    data.update({**_this_gpu(), "date": data.get("date") if keep_date and data.get("date") else today})
    new = {key(r): r for r in records}
    # a run measured again replaces the whole run: a configuration it no longer picks must not linger
    runs = {(r["lesson"], r["run"]) for r in records}
    data["records"] = [r for r in data["records"] if (r["lesson"], r["run"]) not in runs] + list(new.values())
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    recorded.cache_clear()
    return path


@dataclass
class Store:
    """The records of one results file, with look-ups by structure and a label for every figure."""
    slug: str
    data: dict = field(repr=False)

    @property
    def records(self):
        return self.data["records"]

    @property
    def device(self):
        return self.data.get("device", self.slug)

    @property
    def sm_count(self):
        return self.data.get("sm_count")

    @property
    def label(self):
        return (f"recorded on {self.device}, {self.data.get('date', '?')}" if self.records
                else f"no recorded results for {self.slug} yet")

    def label_of(self, records):
        """The label of some records: the days they were taken (a record's own date, else the file's), all of them
        where they span several (a finding resting on runs of different days)."""
        dates = sorted({r.get("date") or self.data.get("date") for r in records} - {None})
        return f"recorded on {self.device}, {' and '.join(dates)}" if dates else self.label

    def select(self, lesson, run=None, name=None, shape=None, config=None):
        """Records of ``lesson`` matching every criterion given (``config`` exactly)."""
        return [r for r in self.records if r["lesson"] == lesson and (run is None or r["run"] == run)
                and (name is None or r["name"] == name) and (shape is None or r["shape"] == list(shape))
                and (config is None or r["config"] == config)]

    def find(self, lesson, run=None, name=None, shape=None, config=None):
        found = self.select(lesson, run, name, shape, config)
        return found[0] if found else None

    def baseline_of(self, r):
        """The record ``r`` is compared with: its lesson and shape, its run where that run has one."""
        same = self.select(r["lesson"], name=r.get("baseline"), shape=r["shape"])
        return next((b for b in same if b["run"] == r["run"]), same[0] if same else None)


@functools.lru_cache(maxsize=None)
def recorded(slug=REFERENCE_DEVICE) -> Store:
    """The results file of ``slug``, read once per session."""
    path = RESULTS / f"{slug}.json"
    return Store(slug, json.loads(path.read_text()) if path.exists() else {"records": []})
