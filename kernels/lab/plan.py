"""A Triton launch prepared once and replayed: the answer to launch cost at small shapes.

A call of a Triton kernel from Python does host work every time: the course's argument checks, tensor maps
built on the host, then Triton's dispatch (binding the arguments, computing the specialisation key, looking
up the compiled kernel) before the driver call. For a GEMM of a few microseconds of GPU time that host work
is longer than the kernel. A plan does all of it once - it launches through the normal path, which checks,
compiles and keeps the compiled kernel - and each later call goes straight to the compiled kernel's launcher
with the same arguments (the same tensors: a plan is for one set of operands, as a cuBLASLt plan or a CUDA
graph is). Triton's launcher still encodes host tensor maps on each call (a few microseconds in C)."""
import inspect

import torch


class Plan:
    """``plan()`` launches ``kernel[grid](*args, **kwargs)`` again with only the driver call's host work."""

    def __init__(self, kernel, grid, args, kwargs):
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.slow = lambda: kernel[grid](*args, **kwargs)
        compiled = self.slow()  # checks and compiles (or finds the compiled kernel) and launches once
        self.why_slow = None if compiled is not None else "the interpreter runs kernels without a launcher"
        self.fast = compiled is not None and hasattr(compiled, "run")  # the interpreter returns no kernel
        if self.fast:
            params = inspect.signature(kernel.fn).parameters
            bound = inspect.signature(kernel.fn).bind(*args, **{k: v for k, v in kwargs.items() if k in params})
            bound.apply_defaults()
            self.args = tuple(bound.arguments.values())
            self.compiled, self.launch, self.function = compiled, compiled.run, compiled.function
            try:
                self()  # the direct path once; a Triton whose launcher takes other arguments falls back
            except Exception as e:  # noqa: BLE001 - any failure of the direct path means: use the normal one
                self.fast, self.why_slow = False, f"{type(e).__name__}: {e}"

    def __call__(self):
        if not self.fast:
            return self.slow()
        g0, g1, g2 = self.grid
        stream = torch.cuda.current_stream().cuda_stream
        self.launch(g0, g1, g2, stream, self.function, self.compiled.packed_metadata, None, None, None, *self.args)
