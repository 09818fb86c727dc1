"""The numbers card: one table of the figures a candidate should know about the H200, part of the pack.

Measured figures are read from the recorded results (``results/nvidia-h200.json``) when the pack is generated,
so a new recording changes the card (and ``python -m kernels.tools.interview --check`` says the page is stale);
the card prints the device and date of that recording. Specifications are the ones the course already states,
with the same sources: the CUDA C++ Programming Guide for compute capability 9.0 (lesson 00, section 2; the
glossary), lesson 00's datasheet table (``l00_memory_wall.DATASHEET``), the shared-memory limit of
``kernels/lab/smem.py``, and the L2 size the H200 itself reported in lesson 00's recorded run."""
import re

import nbformat

from ..lab import results, smem
from ..lessons import l00_memory_wall as l00
from ..lessons import l08_fp8_capstone as l08
from .items import NOTEBOOKS

GUIDE = 'CUDA C++ Programming Guide, "Compute Capabilities" (9.0)'
# compute capability 9.0, per SM unless said: as lesson 00 (section 2) and the glossary state them
REGS_PER_SM, REGS_PER_THREAD, REG_UNIT = 65536, 255, 256  # REG_UNIT: allocation per warp (CUDA Occupancy Calculator)
MAX_WARPS, MAX_THREADS, MAX_BLOCKS = 64, 2048, 32
SMEM_PER_SM = 228 * 1024
BANKS, BANK_BYTES = 32, 4
KiB, MiB = 1024, 1024 * 1024


def device_reported(notebooks=NOTEBOOKS):
    """What lesson 00, section 2 printed from ``torch.cuda.get_device_properties`` in its committed run:
    ({quantity: value}, the device it names), or ({}, None) where that run was not on a GPU."""
    nb = nbformat.read(notebooks / "00_memory_wall.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or "device_facts()" not in cell.source:
            continue
        text = "".join(o.get("text", "") for o in cell.get("outputs", []))
        device = re.search(r"this GPU \((.+?)\), from torch\.cuda\.get_device_properties", text)
        if device:
            facts = {m.group(1).strip(): int(m.group(2).replace(",", ""))
                     for m in re.finditer(r"^(.+?)\s{2,}([\d,]+)$", text, re.M)}
            return facts, device.group(1)
    return {}, None


def _find(store, lesson, run, name, **config):
    found = [r for r in store.select(lesson, run, name) if all(r["config"].get(k) == v for k, v in config.items())]
    if not found:
        raise LookupError(f"results: no record {lesson}/{run}/{name} {config or ''}")
    return found[0]


def measured(store=None):
    """The card's measured figures, each read from one record of ``store`` (the recorded H200 run)."""
    store = store or results.recorded()
    copy, gemm = _find(store, "00", "ceilings", "torch_copy"), _find(store, "00", "ceilings", "cublas_gemm")
    chase = {level: _find(store, "00", "latency", "pointer_chase", level=level) for level in ("HBM", "L2", "shared")}
    ns = {level: r["ms"] * 1e6 / r["config"]["steps"] for level, r in chase.items()}  # as l00_memory_wall.latencies
    fp8 = {n: next(r for r in store.select("08", "best", n) if r["shape"] == list(l08.BAR_SHAPE))
           for n in ("scaled_mm", "gemm_fp8")}
    launch = {t: _find(store, "04", "launch", "cublas_gemm", timer=t) for t in ("host", "cuda_graph")}
    banks = {s: _find(store, "06", "banks", f"read4_{s}") for s in ("plain", "swizzled")}
    return {
        "hbm_tbps": copy["gbps"] / 1000, "gemm_tflops": gemm["tflops"],
        "latency_ns": ns, "sm_mhz": _find(store, "00", "latency", "gpu_state").get("state", {}).get("sm_mhz_median"),
        "l2_copy_tbps": _find(store, "00", "latency", "torch_copy", level="L2")["gbps"] / 1000,
        "fp8_tflops": {n: r["tflops"] for n, r in fp8.items()}, "fp8_shape": l08.BAR_SHAPE,
        "launch_us": {t: r["ms"] * 1e3 for t, r in launch.items()},
        "banks_gbps": {s: r["gbps"] for s, r in banks.items()},
        "banks_ways": {s: r["config"]["ways"] for s, r in banks.items()},
        "sm_count": store.data.get("sm_count"), "device": store.device, "date": store.data.get("date"),
        "label": store.label,
    }


def rows(store=None, notebooks=NOTEBOOKS):
    """[(quantity, figure, where it comes from)], measured first, then the specifications."""
    m = measured(store)
    sheet = l00.DATASHEET["H200"]
    ns, mhz = m["latency_ns"], m["sm_mhz"]
    cycles = lambda t: f" = {t * mhz / 1000:,.0f} cycles" if mhz else ""  # noqa: E731
    shape = " x ".join(str(d) for d in m["fp8_shape"])
    facts, device = device_reported(notebooks)
    l2 = facts.get("L2 cache, bytes")
    measured_rows = [
        ("HBM bandwidth, measured", f"**{m['hbm_tbps']:.2f} TB/s** ({m['hbm_tbps'] / sheet['tbps']:.0%} of the "
         f"datasheet's {sheet['tbps']})",
         "torch copy of 16384 x 16384 fp16, bytes read + written (lesson 00, section 4)"),
        ("fp16 GEMM, measured", f"**{m['gemm_tflops']:.0f} TFLOP/s** ({m['gemm_tflops'] / sheet['tflops']:.0%} of "
         f"the datasheet's {sheet['tflops']})", "cuBLAS at 8192^3 (lesson 00, section 4)"),
        ("ridge point", f"**{m['gemm_tflops'] / m['hbm_tbps']:.0f} FLOP/B** measured; "
         f"{sheet['tflops'] / sheet['tbps']:.0f} by the datasheet",
         "the two rows above divided (lesson 00, section 4)"),
        ("latency of a dependent load", f"HBM **{ns['HBM']:.0f} ns**{cycles(ns['HBM'])}; L2 **{ns['L2']:.0f} ns**"
         f"{cycles(ns['L2'])}; shared **{ns['shared']:.0f} ns**{cycles(ns['shared'])}",
         f"pointer chase, SM clock sampled at {mhz:g} MHz (lesson 00, section 3)" if mhz
         else "pointer chase (lesson 00, section 3)"),
        ("L2 bandwidth, a lower bound", f"**{m['l2_copy_tbps']:.2f} TB/s**", "torch copy of 8 MiB kept in L2 "
         "(lesson 00, section 3)"),
        ("FP8 (e4m3) GEMM", f"**{m['fp8_tflops']['scaled_mm']:.0f} TFLOP/s** `torch._scaled_mm`; "
         f"{m['fp8_tflops']['gemm_fp8']:.0f} the course's kernel", f"at {shape} (lesson 08, section 4)"),
        ("host time per launch", f"**{m['launch_us']['host']:.1f} us** cuBLAS, against "
         f"{m['launch_us']['cuda_graph']:.1f} us of GPU time", "cuBLAS at 2048^3, GPU time from a CUDA graph "
         "(lesson 04, section 6)"),
        ("a bank conflict's cost", f"**{m['banks_gbps']['swizzled'] / m['banks_gbps']['plain']:.1f}x** slower "
         f"{m['banks_ways']['plain']}-way than {m['banks_ways']['swizzled']}-way", "4-byte shared-memory reads, "
         "plain against TMA's 128-byte swizzle (lesson 06, section 4)"),
    ]
    specs = [
        ("SMs", f"**{m['sm_count']}**", f"reported by the {m['device']} of the recorded run"),
        ("registers", f"**{REGS_PER_SM:,}** x 32-bit per SM; at most **{REGS_PER_THREAD}** per thread; "
         f"allocated per warp in units of {REG_UNIT}", f"{GUIDE}; the unit: CUDA Occupancy Calculator"),
        ("resident per SM", f"**{MAX_WARPS}** warps = {MAX_THREADS:,} threads; at most {MAX_BLOCKS} blocks", GUIDE),
        ("shared memory", f"**{smem.HOPPER_LIMIT // KiB} KiB** per block (opt-in: {smem.HOPPER_LIMIT:,} B); "
         f"{SMEM_PER_SM // KiB} KiB per SM", GUIDE + "; `kernels/lab/smem.py`"),
        ("shared-memory banks", f"**{BANKS}** banks of {BANK_BYTES} bytes",
         'CUDA C++ Programming Guide, "Shared Memory"'),
        ("L2 cache", f"**{l2 / MiB:.0f} MiB** ({l2:,} B)" if l2 else "see lesson 00, section 2",
         f"reported by the {device} (`torch.cuda.get_device_properties`, lesson 00, section 2)" if l2
         else "lesson 00, section 2"),
        ("HBM bandwidth, datasheet", f"**{sheet['tbps']} TB/s** (H100 SXM: {l00.DATASHEET['H100 SXM']['tbps']})",
         "NVIDIA H200 product brief; H100 Tensor Core GPU datasheet (lesson 00, section 4)"),
        ("dense fp16 tensor core, datasheet", f"**{sheet['tflops']} TFLOP/s**; FP8 twice that",
         "NVIDIA H100 Tensor Core GPU datasheet (the H200 keeps the H100's compute; lesson 00, section 4)"),
    ]
    return measured_rows, specs


def markdown(store=None, notebooks=NOTEBOOKS):
    """The card as a markdown cell: its heading, where its figures come from, one table."""
    m = measured(store)
    measured_rows, specs = rows(store, notebooks)
    table = ["| | figure | from |", "|---|---|---|"]
    table += [f"| {q} | {v} | {s} |" for q, v, s in measured_rows]
    table += ["| **specifications** | | |"] + [f"| {q} | {v} | {s} |" for q, v, s in specs]
    return (f"## Numbers to know\n\nThe figures worth having in your head, on one card. The measured ones are "
            f"{m['label']} (`results/nvidia-h200.json`, read when this page was generated: a new recording "
            "rewrites them); the specifications come from the sources the lessons cite. Percentages are of the "
            "H200's datasheet.\n\n" + "\n".join(table))
