"""Exercise 07's check, fed the wrong answers learners write: waves and the split plan of the last wave.
Each must name its mistake; the course's own functions pass; the stubs are 'not attempted'."""
import math

import pytest

from conftest import report
from kernels.lessons import l07_shapes_and_waves_exercise as ex07
from kernels.ops import gemm


def _stub(*args):
    # YOUR CODE HERE
    raise NotImplementedError()


def test_ex07_the_course_functions_pass_and_the_stubs_are_not_attempted():
    passed, text = report(ex07.check, gemm.waves, gemm.split_plan, "128x128")
    assert passed, text
    passed, text = report(ex07.check, _stub, _stub, None)
    assert not passed and "exercise 07: not attempted yet" in text, text


def _floor(M, N, BM, BN, sms):
    t = (M // BM) * (N // BN)
    return t, t // sms, t % sms


def _ceil_waves(M, N, BM, BN, sms):
    t = math.ceil(M / BM) * math.ceil(N / BN)
    return t, math.ceil(t / sms), t % sms


def _idle(M, N, BM, BN, sms):
    t = math.ceil(M / BM) * math.ceil(N / BN)
    return t, t // sms, sms - t % sms if t % sms else 0


@pytest.mark.parametrize("waves, says", [(_floor, "floors M / BLOCK_M"), (_ceil_waves, "counted as a whole wave"),
                                         (_idle, "idle SMs")])
def test_ex07_wrong_waves_are_named(waves, says):
    passed, text = report(ex07.check, waves, gemm.split_plan, "128x128")
    assert not passed and says in text, text
    assert "pass  split_plan" in text  # the other checks still judged on their own


def _plan(no_k=False, no_cap=False, whole_last=False, ceil=False, no_split_whole=False, k_floor=False, tail_zero=False):
    def split_plan(M, N, K, BM, BN, BK, sms):
        tiles, full, tail = gemm.waves(M, N, BM, BN, sms)
        if tail == 0 and not tail_zero:
            return tiles, 1
        split = math.ceil(sms / tail) if ceil else sms // tail  # tail == 0 here divides by zero
        if not no_k:
            split = min(split, K // BK if k_floor else math.ceil(K / BK))
        if not no_cap:
            split = min(split, 8)
        if split > 1:
            return (tiles if whole_last else full * sms), split
        return (full * sms if no_split_whole else tiles), 1
    return split_plan


@pytest.mark.parametrize("plan, says", [
    (_plan(no_k=True), "not capped by the K tiles"), (_plan(no_cap=True), "no cap of 8"),
    (_plan(whole_last=True), "'whole' counts the last wave's tiles"), (_plan(ceil=True), "rounds sms / tail up"),
    (_plan(no_split_whole=True), "with no split (split 1) every tile is computed whole, the last wave's tail too"),
    (_plan(k_floor=True), "K tiles are floored"),
    (_plan(tail_zero=True), "when the last wave is full")])
def test_ex07_wrong_split_plans_are_named(plan, says):
    passed, text = report(ex07.check, gemm.waves, plan, "128x128")
    assert not passed and says in text, text


def test_ex07_the_wrong_prediction_says_why():
    passed, text = report(ex07.check, gemm.waves, gemm.split_plan, "128x256")
    assert not passed and "last wave is mostly idle" in text, text


@pytest.mark.parametrize("answer", ["128X128", "128 x 128", "(128, 128)", (128, 128)])
def test_ex07_the_right_prediction_in_another_spelling_passes(answer):
    assert report(ex07.check, gemm.waves, gemm.split_plan, answer)[0]


@pytest.mark.parametrize("answer", ["128", "big", (128, 256, 64)])
def test_ex07_a_prediction_that_is_not_a_tile_says_how_to_answer(answer):
    passed, text = report(ex07.check, gemm.waves, gemm.split_plan, answer)
    assert not passed and 'is not a tile: answer "128x128" or "128x256"' in text, text


def test_ex07_the_prediction_follows_the_waves():
    assert ex07.wave_units(3072, 3072, 128, 128) < ex07.wave_units(3072, 3072, 128, 256)


def test_ex07_arguments_confused_are_named():
    def split_plan(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, sms):  # waves(N, M, ...): M and N swapped in the call
        return gemm.split_plan(N, M, K, BLOCK_M, BLOCK_N, BLOCK_K, sms)

    def waves(M, N, BLOCK_M, BLOCK_N, sms):  # BLOCK_M used for both sides
        return gemm.waves(M, N, BLOCK_M, BLOCK_M, sms)
    passed, text = report(ex07.check, gemm.waves, split_plan, "128x128")
    assert not passed and "with M and N swapped: check where you use them" in text, text
    passed, text = report(ex07.check, waves, gemm.split_plan, "128x128")
    assert not passed and "with BLOCK_M in place of BLOCK_N (the tile count already differs): check where" in text


def test_ex07_the_right_numbers_in_another_order_are_named():
    def waves(M, N, BLOCK_M, BLOCK_N, sms):
        tiles, full, last = gemm.waves(M, N, BLOCK_M, BLOCK_N, sms)
        return tiles, last, full
    passed, text = report(ex07.check, waves, gemm.split_plan, "128x128")
    assert not passed and "the right numbers in another order: waves returns (tiles, whole waves" in text, text


def _plan_changed(cap=8, full_split=1, above=1, unsplit=1):
    """The course's split plan with one constant changed, as a learner's typo would."""
    def split_plan(M, N, K, BM, BN, BK, sms):
        tiles, full, tail = gemm.waves(M, N, BM, BN, sms)
        if tail == 0:
            return tiles, full_split
        split = min(sms // tail, math.ceil(K / BK), cap)
        return (full * sms, split) if split > above else (tiles, unsplit)
    return split_plan


@pytest.mark.parametrize("plan, says", [
    (_plan_changed(cap=9), "the split is capped at 9 K slices in place of 8"),
    (_plan_changed(full_split=2), "when the last wave is full (tiles % sms == 0) there is no tail to split: return "
                                  "(tiles, 1), not (tiles, 2)"),
    (_plan_changed(above=2), "the tail is left unsplit where the split comes out at 2: any split above 1 is used"),
    (_plan_changed(unsplit=2), "where the split comes out at 1 (sms // tail is 1, or K has a single step) nothing is "
                               "split: return (tiles, 1), not (tiles, 2)")])
def test_ex07_a_constant_of_the_split_plan_changed_is_named(plan, says):
    passed, text = report(ex07.check, gemm.waves, plan, "128x128")
    assert not passed and says in text, text
