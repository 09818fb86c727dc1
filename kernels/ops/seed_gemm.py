"""Lesson 03's case study: the TMA GEMM from one of the course's source articles, as written there,
with the one change today's Triton forces: ``tl._experimental_make_tensor_descriptor`` was removed in
Triton 3.4 and is ``tl.make_tensor_descriptor`` now. Everything else is the article's: a 2D grid in
row-major tile order, 128x128x64 tiles, default warps and stages, ``input_precision="ieee"``.
The lesson measures it against the same kernel with grouped tile order (``gemm.matmul_tma_kernel``)."""
import torch
import triton
import triton.language as tl

from ..lab import alloc, operands

ARTICLE_API = "_experimental_make_tensor_descriptor"  # the name the article calls, gone from triton.language


@triton.jit
def seed_gemm_kernel(A_ptr, B_ptr, C_ptr, M, N, K,
                     stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    desc_a = tl.make_tensor_descriptor(A_ptr, shape=[M, K], strides=[stride_am, stride_ak],
                                       block_shape=[BLOCK_M, BLOCK_K])
    desc_b = tl.make_tensor_descriptor(B_ptr, shape=[K, N], strides=[stride_bk, stride_bn],
                                       block_shape=[BLOCK_K, BLOCK_N])
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a_tile = desc_a.load([off_m, k])
        b_tile = desc_b.load([k, off_n])
        acc += tl.dot(a_tile, b_tile, input_precision="ieee")
    c_tile = acc.to(tl.float16)
    desc_c = tl.make_tensor_descriptor(C_ptr, shape=[M, N], strides=[stride_cm, stride_cn],
                                       block_shape=[BLOCK_M, BLOCK_N])
    desc_c.store([off_m, off_n], c_tile)


def seed_gemm(a, b, allocator=True):
    """The article's host function; ``allocator=False`` launches as the article does, without one.
    (The placement check is the course's: the article has none.)"""
    operands.check("seed_gemm", "a b", a, b)
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
    if allocator:
        alloc.install()
    seed_gemm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                           c.stride(0), c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
    return c
