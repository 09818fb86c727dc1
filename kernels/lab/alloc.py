"""The allocator that device-side tensor descriptors need.

``tl.make_tensor_descriptor`` builds the tensor map in global scratch memory at launch, which
Triton obtains through ``triton.set_allocator``. Since Triton 3.5 that setting is a ContextVar:
a thread (or context) that never set it launches with no allocator and fails with "Kernel
requires a runtime memory allocation, but no allocator was set". So every launcher of a
descriptor kernel calls ``install()`` right before launching; it is cheap and idempotent."""
import torch
import triton

from .mode import INTERPRET


def _scratch(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def install():
    """Set the allocator in the calling context (no-op for the interpreter, which needs none)."""
    if not INTERPRET and torch.cuda.is_available():
        triton.set_allocator(_scratch)
