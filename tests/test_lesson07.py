"""Lesson 07's sentences against the code they describe."""
import kernels  # noqa: F401  (first: the interpreter)
from conftest import prose
from kernels.ops import gemm, gemm_splitk

TEXT = prose("07_shapes_and_waves")


def test_the_two_splits_and_their_limits_are_the_codes():
    """Misconception 6: the split last wave splits only the last wave's tiles, at most 8 ways; split-K at a small M
    splits every tile, at most 16 ways (it once said the course splits only the last wave)."""
    # one tile in the last wave of 132 SMs, a long K: as many slices as the cap allows
    assert gemm.split_plan(128 * 133, 128, 1 << 16, 128, 128, 64, 132) == (132, 8)
    # 16 rows, one 64-wide tile, a long K: split-K covers the SMs up to its cap
    assert gemm_splitk.split_for(16, 64, 1 << 16, 16, 64, 128, 132) == 16
    assert "the split last wave only the last wave's tiles, at most 8 ways (section 5)" in TEXT
    assert "split-K at a small M every tile, at most 16 ways" in TEXT
    assert "splits only the last wave, and at most 8 ways" not in TEXT


def test_no_unmeasured_bias_is_given_a_size():
    """Section 3 put the fastest-of-three selection's bias at "a few tenths of a percent", which no run measures."""
    assert "by a few tenths of a percent where they are near-equal" not in TEXT
    assert "by how much, the course has not measured" in TEXT
