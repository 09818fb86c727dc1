"""Lesson 02's sentences against the sm_90 code Triton makes (compiled ahead of time without a GPU)."""
import re

import torch

import kernels  # noqa: F401  (first: the interpreter)
import triton
import triton.language as tl
from conftest import prose
from kernels.lab import aot

TEXT = prose("02_cp_async")


@triton.jit
def _dot_loop(a, b, c, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * sam + (k + rk)[None, :], mask=(rm[:, None] < M) & (k + rk < K)[None, :])
        y = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :], mask=(k + rk < K)[:, None] & (rn[None, :] < N))
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * scm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _copies(dtype, K):
    on = dict(device=kernels.DEVICE)
    a, b, c = torch.empty(64, K, dtype=dtype, **on), torch.empty(K, 64, dtype=dtype, **on), torch.empty(64, 64, **on)
    ptx = aot.compile_sm90(_dot_loop, a, b, c, 64, 64, K, a.stride(0), b.stride(0), c.stride(0), BM=64, BN=64,
                           BK=32, num_warps=4, num_stages=3).ptx
    return set(re.findall(r"cp\.async\.(c[ag])\.", ptx))


def test_loads_of_4_bytes_and_up_are_pipelined_and_the_answer_says_so():
    """Question 3: a dot loop's loads become cp.async from 4-byte pieces up: fp32 rows of a stride Triton cannot
    prove 16-byte aligned (100 floats) as cp.async.ca, fp16 rows of 128 elements as cp.async.cg."""
    assert _copies(torch.float32, 100) == {"ca"}
    assert "cg" in _copies(torch.float16, 128)
    assert "pieces of 4 bytes or more whose alignment Triton can prove" in TEXT
    assert "provably aligned 16-byte pieces" not in TEXT
