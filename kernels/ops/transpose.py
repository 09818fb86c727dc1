"""Transpose y = x.T of a 2D tensor, with pointer tiles and with TMA.

Both read a BLOCK_M x BLOCK_N tile of x and write it transposed at the mirrored place of y. With
pointers, the transposed store needs the data rearranged across threads (the compiler goes through
shared memory); with TMA the tile is already in shared memory and the store descriptor writes it out."""
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from ..lab import operands, smem, tma_rules


@triton.jit
def transpose_tile_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask)
    tl.store(y_ptr + cols[:, None] * stride_ym + rows[None, :], tl.trans(tile), mask=tl.trans(mask))


@triton.jit
def transpose_tma_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, N], [stride_xm, 1], [BLOCK_M, BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, [N, M], [stride_ym, 1], [BLOCK_N, BLOCK_M])
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    y_desc.store([off_n, off_m], tl.trans(x_desc.load([off_m, off_n])))


def _launch(launcher, kernel, x, out, BLOCK_M, BLOCK_N, layout):
    operands.check(launcher, "x", x, layout=layout)
    M, N = x.shape
    y = operands.out(launcher, out, (N, M), x, layout, result="the transpose")
    if layout is None:  # the TMA rules check the layout instead, and set the allocator
        tma_rules.ready(("input", x, [BLOCK_M, BLOCK_N]), ("output", y, [BLOCK_N, BLOCK_M]))
    try:
        kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))](x, y, M, N, x.stride(0), y.stride(0),
                                                                   BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    except OutOfResources as e:  # the tile goes through shared memory once, to change hands (or for TMA)
        raise smem.overflow(e, f"{BLOCK_M}x{BLOCK_N} tiles", 1, BLOCK_M * BLOCK_N * x.element_size()) from None
    return y


def transpose_tile(x, out=None, BLOCK_M=64, BLOCK_N=64):
    return _launch("transpose_tile", transpose_tile_kernel, x, out, BLOCK_M, BLOCK_N, "rows")


def transpose_tma(x, out=None, BLOCK_M=64, BLOCK_N=64):
    return _launch("transpose_tma", transpose_tma_kernel, x, out, BLOCK_M, BLOCK_N, None)
