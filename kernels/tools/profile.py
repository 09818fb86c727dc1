"""Nsight Compute's view of course kernels, recorded in results/<device>.json like every other figure.

    python -m kernels.tools.profile            # on a GPU with ncu: profile every target, record the figures

Each target is one launch of a course kernel (or its vendor baseline) at one configuration, on fresh random
data, its output checked against torch first. This module runs itself in a child process under
``ncu --clock-control none --profile-from-start off``: the card keeps the clocks it has when the course times
it (ncu's default would lock them to base), and only the launches between ``cudaProfilerStart`` and
``cudaProfilerStop`` are profiled, one per target, in order. Only the counters in ``METRICS`` are collected:
a few passes per kernel instead of the dozens a full section set replays.

The records go to each target's lesson under the run "ncu": ``ms`` is ncu's duration of the one launch
(not a ``do_bench`` median), ``ncu`` holds the counters by the short names of ``METRICS``, ``date`` the day
they were taken (the file's own date stays that of the lessons' last recording)."""
import csv
import datetime
import io
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
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
    # warps stalled for each reason, per cycle a warp issued (ncu's "warp state" statistics)
    "stall_long_scoreboard": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "stall_barrier": "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "stall_mio_throttle": "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "stall_wait": "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "stall_gmma": "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio",
    "stall_math_pipe_throttle": "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
}
STALLS = [k for k in METRICS if k.startswith("stall_")]


@dataclass
class Target:
    """One launch to profile: its lesson, its record's name, shape and config, the ncu kernel name it must
    show, and (set up on the GPU) the launch, its output and the torch reference it is checked against."""
    lesson: str
    name: str
    shape: tuple
    kernel: str                     # a regex on ncu's kernel name: the row must be this launch
    config: dict = field(default_factory=dict)
    baseline: str = None
    kind: str = "copy"              # "copy" (bytes) or "gemm" (FLOPs)

    def work(self):
        from ..lab import bench
        if self.kind == "copy":
            M, N = self.shape
            return {"nbytes": 2 * M * N * 2}  # every fp16 element read once and written once
        return {"flops": bench.gemm_flops(*self.shape)}


TARGETS = [
    # memory-bound: lesson 03's TMA copy, one 64 x 128 tile per program
    Target("03", "copy_tma", (16384, 16384), r"^copy_tma_kernel", {"BLOCK_M": 64, "BLOCK_N": 128}),
    # compute-bound: lesson 04's persistent TMA GEMM, and cuBLAS at the same shape
    Target("04", "matmul_tma_persistent", (8192, 8192, 8192), r"^matmul_tma_persistent_kernel",
           {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 3}, baseline="cublas", kind="gemm"),
    Target("04", "cublas", (8192, 8192, 8192), r".", kind="gemm"),
]


def launch(target):
    """(launch, reference for its output or None) of ``target`` on fresh random fp16 data."""
    import torch

    from ..lab import bench
    from ..ops import copy, gemm
    if target.kind == "copy":
        x = bench.randn(*target.shape)
        return (lambda: copy.copy_tma(x, **target.config)), x
    M, N, K = target.shape
    a, b = bench.randn(M, K), bench.randn(K, N)
    if target.name == "cublas":
        return (lambda: torch.matmul(a, b)), None  # the vendor: the reference itself
    cfg = target.config
    return (lambda: gemm.matmul_tma_persistent(a, b, cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["stages"]),
            a @ b)


def child():
    """In the process ncu watches: check each target's output, then launch each once inside a profiler range."""
    import torch
    launches = []
    for t in TARGETS:
        fn, ref = launch(t)
        out = fn()  # compiles, and the output is checked before anything is profiled
        if ref is not None and not torch.allclose(out.float(), ref.float(), rtol=1e-2, atol=1e-1):
            sys.exit(f"{t.name}: output differs from torch's; nothing profiled")
        launches.append(fn)
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    for fn in launches:
        cudart.cudaProfilerStart()
        fn()
        torch.cuda.synchronize()
        cudart.cudaProfilerStop()


def ncu_command(ncu="ncu"):
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(METRICS.values()),
            "--csv", "--page", "raw", sys.executable, "-m", "kernels.tools.profile", "--child"]


def _number(s):
    s = s.replace(",", "").strip()
    try:
        return float(s)
    except ValueError:
        return None


def parse(text):
    """ncu's ``--csv --page raw`` output -> one dict per profiled kernel: its name and METRICS by short name.
    Lines before the header (the child's own output, ncu's notes) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu table in the output (did ncu profile anything?)")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], rows[2:]  # rows[1] holds the units
    missing = [m for m in METRICS.values() if m not in header]
    if missing:
        raise ValueError(f"ncu did not report {', '.join(missing)}")
    out = []
    for row in body:
        cells = dict(zip(header, row))
        out.append({"kernel": cells["Kernel Name"], **{k: _number(cells[m]) for k, m in METRICS.items()}})
    return out


def records(kernels, targets=TARGETS):
    """The course's records of ``kernels`` (parsed, one per target in order): each row checked to be its
    target's kernel, the duration as ``ms`` with the rate it gives."""
    from ..lab import results
    if len(kernels) != len(targets):
        raise ValueError(f"ncu profiled {len(kernels)} kernels for {len(targets)} targets")
    out = []
    for t, k in zip(targets, kernels):
        if not re.search(t.kernel, k["kernel"]):
            raise ValueError(f"{t.name}: ncu's kernel is {k['kernel']!r}, expected {t.kernel!r}")
        r = results.record(t.name, k["duration_ns"] / 1e6, shape=t.shape, config=t.config, baseline=t.baseline,
                           **t.work())
        r["ncu"] = {key: v for key, v in k.items() if key != "duration_ns"}
        r["date"] = datetime.date.today().isoformat()  # its own: recording it leaves the file's date alone
        out.append({"lesson": t.lesson, "run": "ncu", **r})
    return out


def main(argv):
    """``--child``: be the profiled process; ``--out FILE``: record there instead of results/; ``--raw FILE``:
    keep ncu's own table too."""
    if argv[:1] == ["--child"]:
        return child()
    opts = dict(zip(argv[::2], argv[1::2]))
    from ..lab import results
    from ..lab.mode import MODE
    if MODE == "cpu":
        sys.exit("profiling needs a CUDA GPU: in CPU mode the course reads results/, it never writes it")
    ncu = shutil.which("ncu")
    if not ncu:
        sys.exit("ncu (Nsight Compute) is not on the PATH")
    done = subprocess.run(ncu_command(ncu), capture_output=True, text=True, timeout=600, cwd=ROOT)
    if "--raw" in opts:
        Path(opts["--raw"]).write_text(done.stdout)
    if done.returncode:
        sys.exit(f"ncu failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    recs = records(parse(done.stdout))
    path = results.save(recs, opts.get("--out"), keep_date=True)
    for r in recs:
        n = r["ncu"]
        print(f"lesson {r['lesson']} {r['name']:24s} {r['ms'] * 1e3:8.1f} us  DRAM {n['dram_pct']:5.1f}%  "
              f"SM {n['sm_pct']:5.1f}%  tensor {n['tensor_pct']:5.1f}%  warps {n['warps_active_pct']:5.1f}%")
    print(f"-> {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
