"""Lesson 04's sentences against what they rest on: the kernel's sm_90 code (compiled ahead of time without a GPU)."""
import re

import kernels  # noqa: F401  (first: the interpreter)
from conftest import prose, recorded_run, saved_output
from kernels.ops import gemm

TEXT = prose("04_pipelining")


def test_wait_group_1_leaves_the_newest_commit_group_of_one_k_steps_wgmmas():
    """The slot's "empty" signal in section 3: `wgmma.wait_group 1` waits for every commit group but the newest,
    and a group is one K step's wgmmas (four of k16 at BLOCK_K 64), not one wgmma."""
    ptx = gemm.compile_sm90(gemm.matmul_tma_kernel, 128, 128, 64, 3).ptx
    order = "".join("M" if "mma_async" in line else "C" if "commit_group" in line else line.split()[-1].rstrip(";")
                    for line in ptx.splitlines()
                    if re.search(r"wgmma\.(mma_async|commit_group|wait_group)", line))
    assert order.startswith("MMMMC1"), order
    assert "every commit group of `wgmma` but the newest has finished" in TEXT
    assert "four of k16 for a BLOCK_K of 64" in TEXT and "every `wgmma` but the last one issued" not in TEXT


def _penalties(rows):
    """{kernel: (do_bench over CUDA graph, host), in us} of a launch run, from (name, do_bench, graph, host) in us."""
    return {name: (round(bench - graph), round(host)) for name, bench, graph, host in rows}


def test_do_benchs_penalty_at_2048_is_stated_as_the_two_runs_show_it():
    """Section 6 blamed do_bench's penalty at 2048^3 on host time beyond the L2 clear. The page's own run (its saved
    output, H200 2026-12-02) and the recorded one (H200 2026-11-30) charge kernels of about the same host time 1 and
    22 us, and one kernel 2 us in one run and 22 in the other: the lesson states both runs' figures and leaves the
    cause open."""
    from kernels.lessons import l04_pipelining as lesson
    flop = 2 * 2048 ** 3
    launch = recorded_run("04", "launch")
    assert launch.label == "recorded on NVIDIA H200, 2026-11-30"
    saved = [m for line in saved_output("04_pipelining", 'lesson.results("launch")').splitlines() if (m := re.match(
        r"(\w+)\s+\d?\s*\| do_bench\s+(\d+) TFLOP/s \| CUDA graph\s+(\d+) TFLOP/s .*host\s+(\d+) us", line))]
    shown = _penalties((m[1], flop / int(m[2]) / 1e6, flop / int(m[3]) / 1e6, int(m[4])) for m in saved)
    recorded = _penalties((name, t["do_bench"]["ms"] * 1e3, t["cuda_graph"]["ms"] * 1e3, t["host"]["ms"] * 1e3)
                          for name, _, t in lesson.launch_rows(launch.records))
    names = ("gemm_pointer", "gemm_tma", "gemm_tma_persistent")
    assert [shown[n] for n in names] == [(1, 40), (22, 41), (38, 50)], shown
    assert [recorded[n] for n in names] == [(1, 30), (2, 46), (1, 54)], recorded
    assert ("about 1, 22 and 38 us in the H200 run of 2026-12-02 this page was saved with (host 40, 41 and 50 us), "
            "and about 1, 2 and 1 us in the H200 run of 2026-11-30" in TEXT and "(host 30, 46 and 54 us)" in TEXT)
    assert "Its cause is not measured yet" in TEXT and "only the excess shows" not in TEXT
    # nor a drift between runs: each run timed it twice under do_bench, and in each one of the two was slow
    cublas_saved, tma_saved = (int(next(m for m in saved if m[1] == name)[2]) for name in ("cublas_gemm", "gemm_tma"))
    assert f"0.57x (`gemm_tma`, {tma_saved} against cuBLAS's {cublas_saved})" in TEXT and \
        round(tma_saved / cublas_saved, 2) == 0.57
    assert "one day and 22 the next" not in TEXT and "The same drift moved" not in TEXT
    assert "a kernel with device-side tensor maps can leave it" not in TEXT


def test_the_consume_only_probe_is_said_to_time_nothing_of_the_loop():
    """Section 2 said the consume-only probe prices the running maximum. Compiled for sm_90 it has no K loop (a
    maximum of an unchanging tile is dropped), while the loads-only K loop reads the whole stage into registers
    (12 ld.shared.v4 a thread) and takes 48 max.f16x2 a thread each step: the lesson now says so."""
    from kernels.lessons import l04_pipelining as lesson
    assert lesson.probe_loops() == {"loads_only": (12, 48), "consume_only": None}
    assert "the consume-only line prices nothing of the loop" in TEXT
    assert "12 x 16 bytes x 256 threads = the whole 48 KiB) and takes 48 `max.f16x2`" in TEXT
    assert "an upper bound on the loads' own time per step" in TEXT
    for wrong in ("it times what that maximum itself costs", "The consume-only line is the price of the running maximum",
                  "consume them for almost nothing"):
        assert wrong not in TEXT, wrong


def test_the_two_epilogues_are_stated_as_both_runs_have_them():
    """Section 5 said the pointer store was about 2% faster than the TMA store in both runs; the page's saved run has
    the TMA store ahead. Both runs' gains over one tile per program, as the lesson states them."""
    from kernels.lessons import l04_pipelining as lesson
    saved = dict(re.findall(r"persistent with the (\w+) store: ([\d.]+)x one tile per program",
                            saved_output("04_pipelining", 'steps = lesson.results("steps")')))
    steps = recorded_run("04", "steps")
    one = steps.find("gemm_tma", stages=3)["tflops"]
    recorded = {e: f"{steps.find('gemm_tma_persistent', stages=3, epilogue=e)['tflops'] / one:.2f}"
                for e in ("tma", "pointer")}
    assert saved == {"tma": "1.05", "pointer": "1.04"} and recorded == {"tma": "1.02", "pointer": "1.04"}
    assert ("1.05x with the TMA store and 1.04x with the pointer store in the H200 run this page was saved with, "
            "2026-12-02; 1.02x and 1.04x in the run recorded") in TEXT
    assert "about 2% faster than the TMA store in both runs" not in TEXT


def test_one_configuration_in_two_cells_is_stated_with_its_spread():
    """The persistent TMA-store GEMM at 3 stages, 8192^3, is timed in the steps cell and the six-shape cell: the page
    gives both figures of each run and the spread."""
    from kernels.lab import results
    rec = {r["run"]: r["tflops"] for r in results.recorded().select("04") if r["name"] == "gemm_tma_persistent"
           and r["run"] in ("steps", "shapes") and r["shape"] == [8192] * 3
           and r["config"].get("stages") == 3 and r["config"].get("epilogue") == "tma"}
    steps = int(re.search(r"TMA store\s+3 stages\s+(\d+)", saved_output("04_pipelining", 'steps = lesson.results("steps")'))[1])
    shapes = int(re.search(r"8192x8192x8192: course best\s+(\d+) TFLOP/s \(gemm_tma_persistent, 3 stages\)",
                           saved_output("04_pipelining", 'shapes = lesson.results("shapes")'))[1])
    assert (steps, shapes) == (668, 652) and (round(rec["steps"]), round(rec["shapes"])) == (654, 651)
    assert f"{steps} and {shapes} TFLOP/s in the H200 run this page was saved with, {rec['steps']:.0f} and " \
        f"{rec['shapes']:.0f} in the runs recorded" in TEXT
    assert steps / shapes - 1 <= 0.025 and "differ by up to about 2.5% within one run" in TEXT
