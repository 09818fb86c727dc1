"""Lesson 04's sentences against what they rest on: the kernel's sm_90 code (compiled ahead of time without a GPU)."""
import re

import kernels  # noqa: F401  (first: the interpreter)
from conftest import prose
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
