"""Lesson 04, section 7: its persistent TMA GEMM compiled for sm_100 (Blackwell) beside sm_90, ahead of time (the
course has no Blackwell GPU: nothing here runs). What the lesson says of the two, read from the compiled code."""
import kernels  # noqa: F401  (first: the interpreter)
from kernels.lab import isa
from kernels.lessons import l04_pipelining as lesson


def test_the_tma_and_barriers_stay_and_the_mma_changes():
    hopper, blackwell = (c.counts() for c in lesson.blackwell_pair())
    for counts in (hopper, blackwell):  # what stays: tensor maps, TMA loads and stores, mbarriers
        assert counts["cp.async.bulk.tensor load"] and counts["UTMALDG"] and counts["UTMASTG"] and counts["mbarrier"]
    assert hopper["wgmma.mma_async"] and hopper["HGMMA"] and not hopper["tcgen05"]
    assert not blackwell["wgmma"] and not blackwell["HGMMA"]
    for family in ("tcgen05 alloc", "tcgen05 mma", "tcgen05 commit", "tcgen05 ld", "tcgen05 dealloc", "UTCHMMA",
                   "UTCBAR", "LDTM"):
        assert blackwell[family], family


def test_one_elected_thread_issues_the_mma_and_an_mbarrier_completes_it():
    elect, mma, commit, load = lesson.mma_lines(lesson.blackwell_pair()[1])
    predicate = elect.split("|")[1].split(",")[0]
    assert elect.startswith("elect.sync") and mma.startswith(f"@{predicate} tcgen05.mma")
    assert "mbarrier::arrive" in commit and load.startswith("tcgen05.ld")


def test_two_ctas_are_declared_but_never_paired():
    assert lesson.two_cta(lesson.blackwell_pair()[1]) == (1, False)
    assert lesson.two_cta(lesson.blackwell_pair(num_ctas=2)[1]) == (2, False)


def test_tcgen05_is_counted_by_instruction():
    ptx = "\n".join(["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 256;",
                     "@%p1 tcgen05.mma.cta_group::1.kind::f16 [%r2+0], %rd1, %rd2, %r3, %p2;",
                     "tcgen05.wait::ld.sync.aligned;"])
    counts = isa.count_ptx(ptx)
    assert counts["tcgen05"] == 3 and counts["tcgen05 alloc"] == counts["tcgen05 mma"] == counts["tcgen05 wait"] == 1
