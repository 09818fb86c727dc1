"""Exercise 06's check, fed the wrong answers learners write: each must say what kind of wrong it is, in the
learner's terms. CPU mode: nvcc compiles for sm_90a (no GPU needed) and g++ builds the model of the
barriers, so these run in CI too. The right answer is the solution notebook's own CUDA (single source)."""
import re
from pathlib import Path

import nbformat
import pytest
import torch

from conftest import gpu_only, report
from kernels.lessons import l06_tma_by_hand_exercise as ex06

ROOT = Path(__file__).resolve().parents[1]


def _ring(folder):
    cell = next(c for c in nbformat.read(ROOT / folder / "06_tma_by_hand.ipynb", as_version=4).cells
                if c.source.startswith('RING = r"""'))
    return re.search(r'r"""\n(.*)"""', cell.source, re.S).group(1)


RIGHT = _ring("solutions")


def _wrong(old, new):
    assert old in RIGHT, old
    return RIGHT.replace(old, new)


ARM = "mbar_arrive_expect_tx(full + 8 * s, BOX_M * BOX_N * 2);"
WAIT = "mbar_wait_bounded(full + 8 * slot, phase, budget_ns)"
WAIT_BLOCK = RIGHT[RIGHT.index(f"if (!{WAIT})"):RIGHT.index("return;\n    }") + len("return;\n    }")]
COUNTS = ("BOX_M * BOX_N", "BOX_M * BOX_N * sizeof(float)", "SLOT_STRIDE")  # wrong byte counts
WRONG = {
    "no expect_tx": _wrong(ARM, ""),
    **{f"count {c}": _wrong("BOX_M * BOX_N * 2)", c + ")") for c in COUNTS},
    "no phase flip": _wrong("phase ^= 1;", ""),
    "phase starts at 1": _wrong("uint32_t phase = 0;", "uint32_t phase = 1;"),
    "no fence": _wrong("    fence_proxy_async();\n", ""),
    "other slot's barrier": _wrong(WAIT, "mbar_wait_bounded(full + 8 * (slot ^ 1), phase, budget_ns)"),
    "too few arguments": _wrong(WAIT, "mbar_wait_bounded(full + 8 * slot, phase)"),
    "two-slot flip": _wrong("if (++slot == STAGES) {  // the ring wrapped: every barrier's next phase has the other "
                            "parity\n      slot = 0;\n      phase ^= 1;\n    }", "slot ^= 1;\n    if (slot == 0) phase ^= 1;"),
    "result ignored": _wrong(WAIT_BLOCK, f"{WAIT};"),
    "timeout not counted": _wrong("      atomicAdd(timeouts, 1);\n", ""),
    "spin wait": _wrong(WAIT_BLOCK, "while (!mbar_try_wait(full + 8 * slot, phase)) {\n    }"),
    "spin wait, wrong count": _wrong(WAIT_BLOCK, "while (!mbar_try_wait(full + 8 * slot, phase)) {\n    }").replace(
        "BOX_M * BOX_N * 2)", "SLOT_STRIDE)"),
    "trap": _wrong("    fence_proxy_async();\n", "    __trap();  // stops the GPU, as a broken ring can\n    fence_proxy_async();\n"),
}


@pytest.fixture(scope="module", autouse=True)
def one_build_for_every_answer():
    """On a GPU the check builds each answer it runs into an extension (ex06.build): about 20 s of g++ and nvcc
    over torch's headers each time (H200). Every answer that compiles goes into one extension up front instead."""
    if ex06.LIVE:
        compiled = []
        for answer in (RIGHT, *WRONG.values()):
            try:
                compiled.append(ex06.compile_ptx(answer)[1])
            except ex06.CompileError:
                pass
        ex06.build(*compiled)


def test_ex06_the_solution_passes_and_the_exercise_is_not_attempted():
    passed, text = report(ex06.check, RIGHT)
    assert passed and f"exercise 06: all {4 if ex06.LIVE else 3} checks pass" in text, text  # a GPU adds its run
    passed, text = report(ex06.check, _ring("exercises"))  # the stub: no exception, a hint
    assert not passed and "exercise 06: not attempted yet" in text, text
    assert "not attempted yet (the CUDA still has 'YOUR CODE HERE'" in text, text


def test_ex06_a_build_shows_its_files_in_the_cache_only_whole(tmp_path, monkeypatch):
    """Test workers check one answer at once: one ran the model while another was still linking it ("Text file busy",
    H100, 2026-12-06). nvcc and g++ write in a folder of the build's own, never where a reader looks (the cache's
    folder of that source), and the files are all there after."""
    import subprocess
    from kernels.lab import cuda
    monkeypatch.setattr(cuda, "CACHE", tmp_path)
    real, seen = subprocess.run, []

    def spy(cmd, *args, **kwargs):
        if Path(cmd[0]).name in ("nvcc", "g++"):
            seen.append(Path(cmd[cmd.index("-o") + 1]).relative_to(tmp_path))
        return real(cmd, *args, **kwargs)
    monkeypatch.setattr(subprocess, "run", spy)
    ex06.compile_ptx(RIGHT)
    ex06.model_trace(ex06._source(RIGHT), 2, 2, 2, 1)
    assert len(seen) == 3 and all(len(out.parts) == 3 for out in seen), seen  # nvcc twice (PTX, cubin), g++ once
    assert sorted(p.name for p in tmp_path.glob("*/*")) == ["ex06_s2.cu", "ex06_s2.cubin", "ex06_s2.ptx", "model",
                                                           "model.cpp"]


def test_ex06_no_expect_tx_is_named_in_the_ptx_and_never_completes_in_the_model():
    passed, text = report(ex06.check, WRONG["no expect_tx"])
    assert not passed
    assert "FAIL  the protocol in the PTX: no mbarrier.arrive.expect_tx: nothing arms the barriers" in text, text
    assert "the barrier never completed" in text, text


@pytest.mark.parametrize("count, words", [
    (COUNTS[0], "armed with 8192 bytes, but one TMA load of a 64x128 fp16 box delivers 16384: 8192 is half "
                "the tile"),
    (COUNTS[1], "armed with 32768 bytes, but one TMA load of a 64x128 fp16 box delivers 16384: 32768 is the tile "
                "in fp32"),
    (COUNTS[2], "32768 is the tile in fp32 (4 bytes an element; the tensors are fp16, 2 bytes) - or the slots' "
                "stride"),
])
def test_ex06_a_wrong_byte_count_is_read_from_the_ptx(count, words):
    passed, text = report(ex06.check, WRONG[f"count {count}"])
    assert not passed and words in text, text


def test_ex06_a_short_count_lets_the_store_read_a_half_landed_tile_in_the_model():
    passed, text = report(ex06.check, WRONG[f"count {COUNTS[0]}"])
    assert "of 16384 bytes had not landed yet: the barrier's phase completed before the whole tile had landed" \
        in text, text


def test_ex06_an_over_count_never_completes_in_the_model():
    passed, text = report(ex06.check, WRONG[f"count {COUNTS[2]}"])
    assert "FAIL  the protocol, tile by tile (a model of the barriers)" in text
    assert "the barrier never completed" in text and "its bytes never add up to what it was armed for" in text, text


def test_ex06_a_phase_never_flipped():
    passed, text = report(ex06.check, WRONG["no phase flip"])
    assert not passed
    assert "the parity the waits ask for never changes in the loop: the phase must flip" in text, text
    assert ("which had already completed (a round earlier), so it returned at once: the phase must flip each time "
            "the ring wraps") in text, text


def test_ex06_a_phase_starting_at_the_wrong_parity_returns_at_once():
    passed, text = report(ex06.check, WRONG["phase starts at 1"])
    assert not passed and "the wait asked for the phase of parity 1, which had already completed" in text, text


def test_ex06_no_fence_before_the_store():
    passed, text = report(ex06.check, WRONG["no fence"])
    assert not passed
    assert "no fence.proxy.async between the wait and the TMA store" in text, text
    assert "was stored with no fence_proxy_async() between the wait and the TMA store" in text, text


def test_ex06_a_wait_on_the_other_slots_barrier():
    passed, text = report(ex06.check, WRONG["other slot's barrier"])
    assert not passed
    assert "the tile sits in the slot at" in text and "wait on the barrier of the slot you store from" in text, text


def test_ex06_a_compile_error_names_the_learners_line():
    bad = WRONG["too few arguments"]
    line = next(i for i, l in enumerate(bad.splitlines(), 1) if "mbar_wait_bounded(full + 8 * slot, phase)" in l)
    # the string starts on the line after RING = r""" (line 1 of the cell): its line n is the cell's line n + 1
    passed, text = report(ex06.check, bad)
    assert not passed
    assert (f"FAIL  your CUDA compiles (nvcc, sm_90a): your CUDA does not compile for sm_90a: line {line} of your "
            "CUDA (`if (!mbar_wait_bounded(full + 8 * slot, phase)) {") in text, text
    assert "too few arguments" in text, text
    assert "FAIL  the protocol in the PTX: not tried: your CUDA does not compile (above)" in text, text


def test_ex06_stretch_a_two_slot_only_flip_fails_with_three_slots():
    two_only = WRONG["two-slot flip"]
    passed, text = report(ex06.check, two_only)
    assert passed, text  # right for two slots
    passed, text = report(ex06.stretch, two_only)
    assert not passed and "FAIL  3 slots" in text, text
    assert report(ex06.stretch, RIGHT)[0]


def test_ex06_a_wait_whose_result_is_ignored_stores_after_giving_up_in_the_model():
    passed, text = report(ex06.check, WRONG["result ignored"])
    assert not passed
    assert ("one load lost: when a wait gave up (a load that never lands), your kernel went on and stored tile (0, 1): "
            "use mbar_wait_bounded's result") in text, text


def test_ex06_a_timeout_not_counted_is_named():
    passed, text = report(ex06.check, WRONG["timeout not counted"])
    assert not passed and "a wait gave up (a load that never lands) and nothing counted it" in text, text


def test_ex06_an_unbounded_spin_wait_ends_with_a_message_not_a_hang():
    passed, text = report(ex06.check, WRONG["spin wait"])
    assert not passed
    assert "your kernel did not finish in the model (5 s) with one load lost: a wait that spins without a bound" in text
    assert "TimeoutExpired" not in text, text


@gpu_only
def test_ex06_a_ring_that_never_ends_on_the_gpu_is_given_up_in_seconds():
    """A wait that spins on a barrier that never completes (twice the bytes expected) never ends on the GPU: the
    check's child process gives up once the GPU has been busy for HANG_S and ends, and this process's GPU runs on."""
    passed, text = report(ex06.check, WRONG["spin wait, wrong count"])
    assert not passed
    assert f"FAIL  on the GPU: values and termination: your ring did not finish: the GPU had not done it after {ex06.HANG_S} s" \
        in text, text
    assert "this notebook's GPU is unharmed" in text and "TimeoutExpired" not in text, text
    x = torch.randn(1 << 16, device="cuda")
    assert torch.equal(x * 1, x)


@gpu_only
def test_ex06_a_ring_that_stops_the_gpu_is_reported_and_this_process_keeps_its_gpu():
    """A fault of a CUDA context is sticky: had the learner's ring run in this process, every later kernel here
    would fail (the notebook's, or the next test's: on the H200, a trap of "phase starts at 1" did so)."""
    passed, text = report(ex06.check, WRONG["trap"])
    assert not passed
    assert "FAIL  on the GPU: values and termination: your ring stopped the GPU (" in text, text
    assert "this notebook's GPU is unharmed" in text, text
    x = torch.randn(1 << 16, device="cuda")
    assert torch.equal(x * 1, x)  # a kernel of this process still runs


@pytest.mark.parametrize("wrong, says", [
    (("      atomicAdd(timeouts, 1);\n", "      atomicAdd(timeouts, 2);\n"), "one wait gave up and the count says 2"),
    (("      bulk_wait_read<0>();  // once the stores issued have read their slots\n", ""),
     "the kernel left while the TMA stores it had issued may still read their slots: before return, bulk_wait_read<0>()")])
def test_ex06_leaving_after_a_timeout_is_checked_in_the_model(wrong, says):
    passed, text = report(ex06.check, _wrong(*wrong))
    assert not passed and says in text, text
