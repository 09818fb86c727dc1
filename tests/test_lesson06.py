"""Lesson 06's sentences against what they rest on (the PTX ISA's definitions, the lesson's own later sections)."""
from conftest import prose

TEXT = prose("06_tma_by_hand")


def test_fence_mbarrier_init_is_a_release_to_the_cluster_not_to_the_tma_unit():
    """Step 2 said fence.mbarrier_init makes the barrier visible to the TMA unit; section 2 says (PTX ISA) it releases
    the thread's inits at cluster scope, and that a block alone does not need it: one statement, in both places."""
    assert "made visible to the TMA unit" not in TEXT
    assert "`fence.mbarrier_init`: a release, at cluster scope, of this thread's `mbarrier.init` (PTX ISA)" in TEXT
    assert "which the PTX ISA defines as a release of this thread's `mbarrier.init`s at cluster scope" in TEXT
