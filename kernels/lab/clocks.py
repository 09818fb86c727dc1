"""What the card was doing while a measurement ran: SM clock, power, temperature and the reasons the driver
gives for holding the clock down, sampled in-process through NVML (NVIDIA Management Library, what nvidia-smi
reads; its Python binding is nvidia-ml-py, imported as ``pynvml``) every few tens of milliseconds, in a thread.

A GEMM loop can drive a card to its power limit, and then its clocks drop: a figure measured there is a
different card's figure. A lesson that names such a cause shows these samples next to it.

The power-cap reason is a flag: NVML sets it whenever the power controller is holding the clock down, by any
amount (lesson 03's recorded run had it set in every sample of a kernel timed at 1,958 MHz, 22 below the
maximum). So each sample also keeps how far below the SM clock's maximum it was, and the summary says what
the cap cost: the share of samples in which it was set, and by how many MHz the clock stood below its
maximum in those samples (median)."""
import statistics
import threading
import time

# NVML's clock-event reasons the course reports, by the binding's names (nvml.h, nvmlClocksEventReason*)
REASONS = {"power_cap": ("SwPowerCap",), "hw_slowdown": ("HwSlowdown", "HwPowerBrakeSlowdown"),
           "thermal": ("SwThermalSlowdown", "HwThermalSlowdown")}


def _nvml():
    """pynvml, initialised once per process; None where there is no binding, no driver or no GPU."""
    try:
        import pynvml
        pynvml.nvmlInit()  # counted by the library: one init per call, harmless to repeat
        return pynvml
    except Exception:
        return None


def _handle(nvml):
    """NVML's handle of the current CUDA device, found by PCI address: NVML's indices need not match CUDA's
    under CUDA_VISIBLE_DEVICES."""
    import torch
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return nvml.nvmlDeviceGetHandleByPciBusId(f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0")


def _bits(nvml):
    """Each reason's bits (bindings before 12.535 name them nvmlClocksThrottleReason*, as NVML did)."""
    bit = lambda n: getattr(nvml, f"nvmlClocksEventReason{n}", None) or getattr(nvml, f"nvmlClocksThrottleReason{n}")
    return {k: sum(bit(n) for n in names) for k, names in REASONS.items()}


def read(nvml, handle, bits, max_mhz):
    """One sample: the wall-clock time (``time.time()``), SM clock, its distance below the maximum, power,
    the enforced power limit, temperature, and which reasons were set."""
    mhz = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    reasons = reasons(handle)
    return {"t": time.time(), "sm_mhz": float(mhz), "below_max_mhz": float(max_mhz - mhz),
            "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
            "limit_w": nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
            "temp_c": float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            **{k: bool(reasons & b) for k, b in bits.items()}}


class Sampler:
    """``with Sampler() as s: ...`` samples the current CUDA device while the block runs; ``s.summary()``
    afterwards. Without NVML or a GPU it samples nothing, and the summary says so."""

    def __init__(self, every_ms=50):
        self.every_ms, self.samples, self.max_mhz = every_ms, [], None
        self._stop, self._thread = threading.Event(), None

    def __enter__(self):
        nvml = _nvml()
        try:
            handle = _handle(nvml) if nvml else None
        except Exception:  # no CUDA device, or NVML does not know it
            handle = None
        if handle is not None:
            self.max_mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)
            bits = _bits(nvml)
            self._thread = threading.Thread(target=self._loop, args=(nvml, handle, bits), daemon=True)
            self._thread.start()
        return self

    def _loop(self, nvml, handle, bits):
        while True:
            try:
                self.samples.append(read(nvml, handle, bits, self.max_mhz))
            except Exception:  # a query this card or driver does not answer: keep what was sampled, stop
                return
            if self._stop.wait(self.every_ms / 1000):
                return

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
        return False

    def summary(self, windows=None):
        """Median, lowest and highest SM clock, highest power against the enforced limit, the share of samples
        in which the driver named power, heat or a hardware slowdown as holding the clock down, and for power
        the median MHz below the clock's maximum while it did (``{}`` when nothing was sampled). ``windows``:
        only the samples taken inside these ``(start, end)`` times (``time.time()``), e.g. while one kernel
        was being timed."""
        s = self.samples if windows is None else [x for x in self.samples
                                                  if any(a <= x["t"] <= b for a, b in windows)]
        if not s:
            return {}
        col = lambda k, rows=s: [x[k] for x in rows if x.get(k) is not None]
        clocks, power = col("sm_mhz"), col("power_w")
        capped = col("below_max_mhz", [x for x in s if x["power_cap"]])
        return {"samples": len(s),
                "sm_mhz_median": statistics.median(clocks) if clocks else None,
                "sm_mhz_min": min(clocks, default=None), "sm_mhz_max": max(clocks, default=None),
                "sm_mhz_limit": self.max_mhz,
                "power_w_max": max(power, default=None), "limit_w": max(col("limit_w"), default=None),
                "temp_c_max": max(col("temp_c"), default=None),
                **{f"{k}_share": round(sum(x[k] for x in s) / len(s), 3) for k in REASONS},
                "power_cap_below_mhz": statistics.median(capped) if capped else None}


def _cap_cost(state):
    below, limit = state.get("power_cap_below_mhz"), state.get("sm_mhz_limit")
    if below is None or not limit:  # nothing capped, or a record sampled before the cost was kept
        return ""
    return f" (the clock {below:.0f} MHz below its {limit:.0f} MHz maximum there, median)"


def describe(state):
    """One line for a summary: what a reader needs to judge whether the card held its clock."""
    if not state:
        return "SM clock and power were not sampled (no NVML or no GPU)"
    return (f"SM clock median {state['sm_mhz_median']:.0f} MHz (lowest {state['sm_mhz_min']:.0f}, highest "
            f"{state['sm_mhz_max']:.0f}), power up to {state['power_w_max']:.0f} W of a {state['limit_w']:.0f} W "
            f"limit, the power cap flagged in {state['power_cap_share']:.0%} of {state['samples']} samples"
            + _cap_cost(state)
            + (f", thermal slowdown in {state['thermal_share']:.0%}" if state["thermal_share"] else "")
            + (f", hardware slowdown in {state['hw_slowdown_share']:.0%}" if state["hw_slowdown_share"] else ""))


def table(records, unit="tflops"):
    """One line per record that carries a ``state``: its rate, the median SM clock while it was timed,
    the rate per GHz of that clock (work per cycle, which the clock does not move), and how often the
    driver flagged the power cap meanwhile, with what it cost where the record kept that."""
    rows = [(" ".join([r["name"]] + [f"{k.removeprefix('BLOCK_')}={v}" for k, v in r["config"].items()]), r)
            for r in records if r["name"] != "gpu_state" and r.get("state")]
    width = max([len(name) for name, _ in rows] + [6])
    out = [f"{'kernel':{width}s} {'TFLOP/s' if unit == 'tflops' else 'GB/s':>8s} {'SM MHz':>7s} {'per GHz':>8s}  power-capped"]
    for name, r in rows:
        st = r["state"]
        below = st.get("power_cap_below_mhz")
        out.append(f"{name:{width}s} {r[unit]:8.0f} {st['sm_mhz_median']:7.0f} {r[unit] / st['sm_mhz_median'] * 1000:8.0f}"
                   f"  {st['power_cap_share']:.0%} of {st['samples']} samples"
                   + (f", {below:.0f} MHz below max" if below is not None else ""))
    return "\n".join(out)
