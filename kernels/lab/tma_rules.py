"""The rules a TMA tensor map must obey, checked before launch with messages that say which rule
broke and how to fix it (the driver's own answer is an opaque launch failure or a Python assert).

Source: CUDA Driver API, cuTensorMapEncodeTiled - global address 16-byte aligned, every global
stride a multiple of 16 bytes, box dimensions 1..256, inner box dimension times element size a
multiple of 16 bytes; and Triton 3.6, which also wants power-of-two block shapes and a
contiguous last dimension."""
import torch

from .errors import TMAError


def check_operand(t: torch.Tensor, block_shape, name="tensor"):
    """Raise TMAError if ``t`` cannot be read or written through a tensor map with this box."""
    esize = t.element_size()
    if not 1 <= t.dim() <= 5:
        raise TMAError(f"{name}: TMA describes tensors of rank 1 to 5, this one has rank {t.dim()}")
    if len(block_shape) != t.dim():
        raise TMAError(f"{name}: block shape {list(block_shape)} has {len(block_shape)} dims, the tensor {t.dim()}")
    if t.stride(-1) != 1:
        raise TMAError(f"{name}: the last dimension must be contiguous (stride 1), strides are {list(t.stride())}; "
                       f"use .contiguous(), or describe the transposed view and transpose the tile in the kernel")
    if t.data_ptr() % 16:
        raise TMAError(f"{name}: base address is {t.data_ptr() % 16} bytes past a 16-byte boundary; TMA needs a "
                       f"16-byte aligned base (start a view at a multiple of {16 // esize} elements, or .clone())")
    for d, s in enumerate(t.stride()[:-1]):
        if (s * esize) % 16:
            raise TMAError(f"{name}: stride of dim {d} is {s} elements = {s * esize} bytes, not a multiple of 16 bytes; "
                           f"pad that dimension's rows to a multiple of {16 // esize} elements")
    for d, b in enumerate(block_shape):
        if not 1 <= b <= 256:
            raise TMAError(f"{name}: box dim {d} is {b}; TMA boxes are 1 to 256 elements per dimension")
        if b & (b - 1):
            raise TMAError(f"{name}: box dim {d} is {b}; Triton wants powers of two for block shapes")
    if (block_shape[-1] * esize) % 16:
        raise TMAError(f"{name}: the box's inner row is {block_shape[-1]} x {esize} B = {block_shape[-1] * esize} B; "
                       f"TMA moves inner rows in multiples of 16 bytes (use at least {16 // esize} elements)")


def ready(*operands):
    """Check each ``(name, tensor, box)`` against the rules above, then set the allocator that
    device-side descriptors need (in the calling thread: see ``alloc``). Call it right before a
    descriptor kernel's launch."""
    from . import alloc
    for name, t, box in operands:
        check_operand(t, box, name)
    alloc.install()
