"""Lesson 06's sentences against what they rest on (the PTX ISA's definitions, the lesson's own later sections)."""
from conftest import prose

TEXT = prose("06_tma_by_hand")


def test_fence_mbarrier_init_is_a_release_to_the_cluster_not_to_the_tma_unit():
    """Step 2 said fence.mbarrier_init makes the barrier visible to the TMA unit; section 2 says (PTX ISA) it releases
    the thread's inits at cluster scope, and that a block alone does not need it: one statement, in both places."""
    assert "made visible to the TMA unit" not in TEXT
    assert "`fence.mbarrier_init`: a release, at cluster scope, of this thread's `mbarrier.init` (PTX ISA)" in TEXT
    assert "which the PTX ISA defines as a release of this thread's `mbarrier.init`s at cluster scope" in TEXT


def test_the_ring_copys_dram_share_names_both_runs():
    """Section 5 said 83% (the recorded profile) beside the saved table's 82%: both, each named."""
    import re
    from conftest import saved_output
    from kernels.lab import results
    ring = next(r for r in results.recorded().select("06", "ncu") if r["name"] == "cuda_ring")
    saved = re.search(r"cuda_ring\s+\d+\s+[\d.]+\s+(\d+)%", saved_output("06_tma_by_hand", 'profiled.show("06")'))[1]
    assert (f"{ring['ncu']['dram_pct']:.0f}", saved) == ("83", "82")
    assert "ran DRAM at 83% of its peak in one launch in the recorded run (82% in the saved run above)" in TEXT
