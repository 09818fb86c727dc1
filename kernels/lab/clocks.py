"""What the card was doing while a measurement ran: SM clock, power and throttle reasons, sampled
by ``nvidia-smi`` (which reads NVML) every few tens of milliseconds in a child process.

A GEMM loop can drive a card to its power limit, and then its clocks drop: a figure measured there is
a different card's figure. A lesson that names such a cause shows these samples next to it."""
import datetime
import statistics
import subprocess

FIELDS = {"t": "timestamp", "sm_mhz": "clocks.sm", "power_w": "power.draw", "limit_w": "enforced.power.limit",
          "temp_c": "temperature.gpu", "power_cap": "clocks_event_reasons.sw_power_cap",
          "hw_slowdown": "clocks_event_reasons.hw_slowdown",
          "thermal": "clocks_event_reasons.sw_thermal_slowdown"}


def _gpu_id():
    """nvidia-smi's name for the current CUDA device (its PCI address): its indices need not match
    CUDA's under CUDA_VISIBLE_DEVICES."""
    import torch
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"


def _value(field, text):
    text = text.strip()
    if field == "t":  # local time, as time.time() counts it
        return datetime.datetime.strptime(text, "%Y/%m/%d %H:%M:%S.%f").timestamp()
    if field in ("power_cap", "hw_slowdown", "thermal"):
        return text == "Active"
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]" on parts that do not report it


class Sampler:
    """``with Sampler() as s: ...`` samples while the block runs; ``s.summary()`` afterwards."""

    def __init__(self, every_ms=50):
        self.every_ms, self.samples, self.proc = every_ms, [], None

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--id={_gpu_id()}", f"--query-gpu={','.join(FIELDS.values())}",
                 "--format=csv,noheader,nounits", f"--loop-ms={self.every_ms}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except (OSError, AssertionError, RuntimeError):
            self.proc = None  # no nvidia-smi: the summary says so
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            out, _ = self.proc.communicate(timeout=10)
            for line in out.splitlines():
                parts = line.split(",")
                if len(parts) == len(FIELDS):
                    self.samples.append({k: _value(k, v) for k, v in zip(FIELDS, parts)})
        return False

    def summary(self, windows=None):
        """Median, lowest and highest SM clock, highest power against the enforced limit, and the share
        of samples in which the driver was capping clocks for power, for heat, or by hardware slowdown
        (``{}`` when nothing was sampled). ``windows``: only the samples taken inside these
        ``(start, end)`` times (``time.time()``), e.g. while one kernel was being timed."""
        s = self.samples if windows is None else [x for x in self.samples
                                                  if any(a <= x["t"] <= b for a, b in windows)]
        if not s:
            return {}
        col = lambda k: [x[k] for x in s if x[k] is not None]
        clocks, power = col("sm_mhz"), col("power_w")
        return {"samples": len(s),
                "sm_mhz_median": statistics.median(clocks) if clocks else None,
                "sm_mhz_min": min(clocks, default=None), "sm_mhz_max": max(clocks, default=None),
                "power_w_max": max(power, default=None), "limit_w": max(col("limit_w"), default=None),
                "temp_c_max": max(col("temp_c"), default=None),
                **{f"{k}_share": round(sum(x[k] for x in s) / len(s), 3) for k in ("power_cap", "thermal", "hw_slowdown")}}


def describe(state):
    """One line for a summary: what a reader needs to judge whether the card held its clock."""
    if not state:
        return "SM clock and power were not sampled (no nvidia-smi)"
    return (f"SM clock median {state['sm_mhz_median']:.0f} MHz (lowest {state['sm_mhz_min']:.0f}, highest "
            f"{state['sm_mhz_max']:.0f}), power up to {state['power_w_max']:.0f} W of a {state['limit_w']:.0f} W "
            f"limit, power capping in {state['power_cap_share']:.0%} of {state['samples']} samples"
            + (f", thermal slowdown in {state['thermal_share']:.0%}" if state["thermal_share"] else "")
            + (f", hardware slowdown in {state['hw_slowdown_share']:.0%}" if state["hw_slowdown_share"] else ""))


def table(records, unit="tflops"):
    """One line per record that carries a ``state``: its rate, the median SM clock while it was timed,
    the rate per GHz of that clock (work per cycle, which the clock does not move), and how often the
    driver was capping the clock for power meanwhile."""
    rows = [(" ".join([r["name"]] + [f"{k.removeprefix('BLOCK_')}={v}" for k, v in r["config"].items()]), r)
            for r in records if r["name"] != "gpu_state" and r.get("state")]
    width = max([len(name) for name, _ in rows] + [6])
    out = [f"{'kernel':{width}s} {'TFLOP/s' if unit == 'tflops' else 'GB/s':>8s} {'SM MHz':>7s} {'per GHz':>8s}  power-capped"]
    for name, r in rows:
        st = r["state"]
        out.append(f"{name:{width}s} {r[unit]:8.0f} {st['sm_mhz_median']:7.0f} {r[unit] / st['sm_mhz_median'] * 1000:8.0f}"
                   f"  {st['power_cap_share']:.0%} of {st['samples']} samples")
    return "\n".join(out)
