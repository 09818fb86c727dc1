"""A first Triton kernel, ``out = alpha * x``, masked for sizes that are not a multiple of the block
(lesson 00): one program per BLOCK elements, its tensors spread over the program's threads."""
import triton
import triton.language as tl

from ..lab import operands


@triton.jit
def scale_kernel(x_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)                      # which block of BLOCK elements this program owns
    offs = pid * BLOCK + tl.arange(0, BLOCK)    # a tensor of BLOCK offsets, spread over the threads
    mask = offs < n                             # False past the end: the last program's tail
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)  # masked-off lanes read nothing and hold `other`
    tl.store(out_ptr + offs, alpha * x, mask=mask)   # and write nothing


def scale(alpha, x, out=None, BLOCK=1024, num_warps=4):
    """out = alpha * x for a contiguous tensor of any size: cdiv(n, BLOCK) programs."""
    operands.check("scale", "x", x, layout="flat")
    out = operands.out("scale", out, x.shape, x, "flat")
    n = x.numel()
    scale_kernel[(triton.cdiv(n, BLOCK),)](x, out, alpha, n, BLOCK=BLOCK, num_warps=num_warps)
    return out
