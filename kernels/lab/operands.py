"""What a launcher is handed, checked before anything reaches Triton: a kernel trusts its pointers,
so an ``out`` of the wrong shape is written past its end, and a tensor on the wrong device gets
Triton's own message (or a crash). Here each mistake gets one line that names the launcher, the
argument, what was expected and what was given.

Cheap by design: a GEMM at 2048^3 is launch-bound (tens of microseconds of host time per call),
so the happy path is a few attribute comparisons and a message is only composed once a check has
failed. Measured with timeit (CPU time, best of 7) on a 2-core CI box: ``check`` of two tensors
0.4 us, ``out`` 0.45 us; a launcher call with its kernel stubbed out costs 1.0-1.5 us more than
before these checks."""
import torch

from .errors import ArgumentError
from .mode import DEVICE

_GPU = DEVICE == "cuda"  # where kernels run: on the GPU, or in Triton's interpreter on CPU tensors

# layouts a kernel may assume of a tensor (None: any strides, the kernel is handed them all)
LAYOUTS = {
    "rows": "a 2D tensor with contiguous rows (last stride 1)",
    "matrix": "a contiguous 2D tensor",
    "flat": "one contiguous block",
}


def _laid_out(t, layout):
    if layout == "rows":
        return t.ndim == 2 and t.stride()[1] == 1
    if layout == "matrix":
        return t.ndim == 2 and t.is_contiguous()
    return t.is_contiguous()


def check(launcher, names, *tensors, layout=None):
    """Raise ArgumentError unless every tensor is where the kernels run (the GPU, all on one device;
    the CPU in the interpreter) and, where the kernel assumes one, has ``layout`` (see LAYOUTS).
    ``names`` names the tensors in order, separated by spaces."""
    device = tensors[0].get_device()
    for t in tensors:
        if not (t.is_cuda if _GPU else t.is_cpu) or t.get_device() != device or (layout and not _laid_out(t, layout)):
            _refuse_input(launcher, names.split(), tensors, layout)


def out(launcher, out, shape, like, layout=None, result="the result"):
    """``out`` once it can hold ``result`` (``shape``, with ``like``'s dtype and device, laid out as
    ``layout``), or a new tensor when it is None. Anything else is an ArgumentError."""
    if out is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    if (out.shape != shape or out.dtype != like.dtype or out.device != like.device
            or (layout and not _laid_out(out, layout))):
        _refuse_out(launcher, out, shape, like, layout, result)
    return out


# ---- the messages: composed only when a check has failed --------------------------------------

def _where_kernels_run():
    if not _GPU:
        return "with no GPU here the kernels run in Triton's interpreter, on CPU tensors", ".cpu()"
    index = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return f"the kernels run on cuda:{index}", ".cuda()"


def _dtype(d):
    return str(d).removeprefix("torch.")


def _refuse_input(launcher, names, tensors, layout):
    first = tensors[0]
    for name, t in zip(names, tensors):
        if not (t.is_cuda if _GPU else t.is_cpu):
            where, move = _where_kernels_run()
            raise ArgumentError(f"{launcher}: {name} is on {t.device}, {where} - move it with {move}")
        if t.device != first.device:
            raise ArgumentError(f"{launcher}: {name} is on {t.device} but {names[0]} is on {first.device} - "
                                f"put them on one device")
        if layout and not _laid_out(t, layout):
            raise ArgumentError(f"{launcher}: {name} has shape {tuple(t.shape)} and strides {t.stride()}; the kernel "
                                f"reads {LAYOUTS[layout]} - pass {name}.contiguous()")


def _refuse_out(launcher, out, shape, like, layout, result):
    if out.shape != shape:
        raise ArgumentError(f"{launcher}: out has shape {tuple(out.shape)} but {result} is {tuple(shape)}")
    if out.dtype != like.dtype:
        raise ArgumentError(f"{launcher}: out is {_dtype(out.dtype)} but {result} is {_dtype(like.dtype)} "
                            f"(the inputs' dtype) - pass an out of that dtype")
    if out.device != like.device:
        raise ArgumentError(f"{launcher}: out is on {out.device} but the inputs are on {like.device} - "
                            f"allocate out there (device='{like.device}')")
    raise ArgumentError(f"{launcher}: out has strides {out.stride()}; the kernel writes {LAYOUTS[layout]} - pass "
                        f"one made with torch.empty (out.contiguous() would be a copy, written instead of out)")
