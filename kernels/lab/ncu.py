"""Nsight Compute (``ncu``) from Python: the counters the course reads, the command that collects only those, and
its table read back into one dict per profiled kernel.

The command profiles a child process (``python -m MODULE --child ...``) with ``--clock-control none``, so the card
keeps the clocks it has when the course times it (ncu's default locks them to base), and ``--profile-from-start
off``, so only the launches between ``cudaProfilerStart`` and ``cudaProfilerStop`` are profiled. Only ``METRICS``
are collected: a few replay passes per kernel instead of the dozens a full section set takes."""
import csv
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# short name -> Nsight Compute metric (names as ncu 2025.3 spells them for GH100)
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "sm_hz": "sm__cycles_elapsed.avg.per_second",
    "dram_bytes_per_s": "dram__bytes.sum.per_second",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "tensor_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "issue_pct": "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
    "warps_active_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers": "launch__registers_per_thread",
    "smem_per_block": "launch__shared_mem_per_block_allocated",
    # global loads through L1: 32-byte sectors asked for, and the warp-wide requests that asked (lesson 01)
    "gld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "gld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    # shared-memory loads: warp instructions, the wavefronts (passes) they took, the extra ones conflicts caused
    "sld_insts": "smsp__inst_executed_op_shared_ld.sum",
    "sld_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "sld_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    # warps stalled for each reason, per cycle a warp issued (ncu's "warp state" statistics)
    "stall_long_scoreboard": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "stall_short_scoreboard": "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "stall_barrier": "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "stall_mio_throttle": "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "stall_wait": "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "stall_gmma": "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio",
    "stall_math_pipe_throttle": "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
}
STALLS = [k for k in METRICS if k.startswith("stall_")]


class NcuError(RuntimeError):
    """ncu could not profile here: it is missing, the counters are the administrator's, or it did not finish. The
    lessons then show the recorded figures and say why."""


class ProfiledError(RuntimeError):
    """ncu ran, and what it profiled failed: the child refused a wrong output, or its table is not what the course
    reads. Never answered with recorded figures: it is a bug to see."""


# the units the course's figures assume, by short name (ncu's raw page states each metric's unit in its second row)
UNITS = {"duration_ns": "ns", "sm_hz": "hz", "dram_bytes_per_s": "byte/s"}


def command(module, *args, ncu="ncu"):
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(METRICS.values()),
            "--csv", "--page", "raw", sys.executable, "-m", module, "--child", *args]


def profile(module, *args, raw=None, timeout=600):
    """ncu's table for ``python -m module --child *args`` (``raw``: a file to keep it in too)."""
    ncu = shutil.which("ncu")
    if not ncu:
        raise NcuError("ncu (Nsight Compute) is not on the PATH")
    try:
        done = subprocess.run(command(module, *args, ncu=ncu), capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise NcuError(f"ncu did not finish in {timeout} s") from None
    if raw:
        Path(raw).write_text(done.stdout)
    if "ERR_NVGPUCTRPERM" in done.stdout + done.stderr:
        raise NcuError("ncu failed: ERR_NVGPUCTRPERM (reading the GPU's counters needs the administrator's leave)")
    if done.returncode:
        raise ProfiledError(f"the profiled process failed ({done.returncode}):\n{done.stdout[-2000:]}\n"
                            f"{done.stderr[-2000:]}")
    return done.stdout


def reason(error):
    """The short reason of an NcuError: ncu's own error code where it gave one (ERR_NVGPUCTRPERM: the counters are
    the administrator's), else its first line."""
    code = re.search(r"ERR_[A-Z_]+", str(error))
    return code.group(0) if code else str(error).splitlines()[0].rstrip(":")


def _number(s):
    s = s.replace(",", "").strip()
    try:
        return float(s)
    except ValueError:
        return None


def parse(text):
    """ncu's ``--csv --page raw`` output -> one dict per profiled kernel: its name and METRICS by short name.
    Lines before the table (the child's own output, ncu's notes) and after it are skipped; a counter without a
    value, or in another unit than the figures assume (``UNITS``), is refused."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ProfiledError("no ncu table in the output (did ncu profile anything?)")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith('"')), len(lines))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:end]))))
    header, units, body = rows[0], dict(zip(rows[0], rows[1])), rows[2:]
    missing = [m for m in METRICS.values() if m not in header]
    if missing:
        raise ProfiledError(f"ncu did not report {', '.join(missing)}")
    for key, unit in UNITS.items():
        if units[METRICS[key]] != unit:
            raise ProfiledError(f"ncu reported {METRICS[key]} in {units[METRICS[key]]!r}, the course reads {unit!r}")
    out = []
    for row in body:
        cells = dict(zip(header, row))
        k = {"kernel": cells["Kernel Name"], **{k: _number(cells[m]) for k, m in METRICS.items()}}
        empty = [METRICS[n] for n, v in k.items() if v is None]
        if empty:
            raise ProfiledError(f"ncu gave no value of {', '.join(empty)} for {k['kernel']}")
        out.append(k)
    return out
