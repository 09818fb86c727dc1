"""TileLang kernels of lesson 05: a tile copy and a pipelined GEMM, the same jobs as the Triton ones.

A TileLang program names its buffers by where they live (``T.alloc_shared``, ``T.alloc_fragment``
for registers) and moves tiles with ``T.copy``; the compiler picks the instruction for each copy
(plain vector loads, cp.async, TMA) and emits CUDA, which nvcc compiles. Programs are static in
shape: one compile per (shape, tile, stages), a few seconds each, cached here and on disk by
TileLang. The target is fixed to sm_90a, so a machine without a GPU shows the very CUDA a Hopper
GPU would run (the ``a`` enables wgmma and setmaxnreg)."""
import logging

import torch

from ..lab import operands
from ..lab.errors import CourseError, NoGPUError
from ..lab.mode import MODE

SM90A = {"kind": "cuda", "arch": "sm_90a"}


def gemm_program(M, N, K, block_M=128, block_N=256, block_K=64, stages=3, threads=256, tma=True, c_shared=True,
                 panel=16, dtype="float16"):
    """C = A @ B, fp32 accumulation: one block per C tile, the K loop under ``T.Pipelined``.
    ``tma=False`` asks ``T.copy`` not to use the TMA engine (it falls back to cp.async);
    ``c_shared`` stages the C tile through shared memory (a TMA store) instead of storing from
    registers; ``panel`` is the width of the grouped block order (0: row by row)."""
    import tilelang.language as T
    hint = None if tma else {"disable_tma": True}

    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            if panel:
                T.use_swizzle(panel_size=panel)  # grouped block order for L2, as GROUP_M in the Triton GEMM
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, k * block_K], A_s, annotations=hint)
                T.copy(B[k * block_K, bx * block_N], B_s, annotations=hint)
                T.gemm(A_s, B_s, acc)
            if c_shared:
                C_s = T.alloc_shared((block_M, block_N), dtype)
                T.copy(acc, C_s)
                T.copy(C_s, C[by * block_M, bx * block_N])
            else:
                T.copy(acc, C[by * block_M, bx * block_N])
    return gemm


def copy_program(M, N, block_M=64, block_N=128, threads=128, dtype="float16"):
    """Y = X one tile per block, staged through shared memory: global -> shared -> global."""
    import tilelang.language as T

    @T.prim_func
    def copy(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            tile = T.alloc_shared((block_M, block_N), dtype)
            T.copy(X[by * block_M, bx * block_N], tile)
            T.copy(tile, Y[by * block_M, bx * block_N])
    return copy


PROGRAMS = {"gemm": gemm_program, "copy": copy_program}


def tilelang():
    """The tilelang module, imported on first use (seconds) with its per-compile log lines quieted."""
    import tilelang as tilelang_module
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("tilelang"):
            logging.getLogger(name).setLevel(logging.ERROR)
    return tilelang_module


_KERNELS = {}  # (kind, config) -> compiled kernel, for this session (TileLang also caches on disk)


def is_compiled(kind, **cfg):
    return (kind, tuple(sorted(cfg.items()))) in _KERNELS


def compile(kind, **cfg):
    """The compiled kernel (``.get_kernel_source()`` is the CUDA) of a ``gemm`` or ``copy`` program.
    Compiling needs nvcc, not a GPU."""
    if kind not in PROGRAMS:
        raise CourseError(f"no TileLang program {kind!r}; there are {sorted(PROGRAMS)}")
    key = (kind, tuple(sorted(cfg.items())))
    if key not in _KERNELS:
        _KERNELS[key] = build(PROGRAMS[kind](**cfg), f"{kind} {cfg}")
    return _KERNELS[key]


def build(func, what="it"):
    """Compile any TileLang prim_func for sm_90a; a failure becomes one CourseError line."""
    try:
        return tilelang().compile(func, target=SM90A)
    except Exception as e:  # TileLang's own message is the last line of a long C++ trace
        lines = [line for line in str(e).splitlines() if line.strip()]
        raise CourseError(f"TileLang cannot compile {what}: {lines[-1] if lines else type(e).__name__}") from None


def source(kind, **cfg):
    return compile(kind, **cfg).get_kernel_source()


def _require_gpu(*ts):
    if MODE != "hopper":
        raise NoGPUError("TileLang kernels here are compiled for sm_90a and run only on a Hopper GPU; "
                         "without one, read the generated CUDA (tilelang_kernels.source) and the recorded results")
    for t in ts:
        if not (t.is_cuda and t.is_contiguous() and t.dtype == torch.float16):
            raise CourseError(f"TileLang kernels here take contiguous fp16 CUDA tensors, got {t.dtype} "
                              f"on {t.device}, contiguous={t.is_contiguous()}")


def gemm(a, b, out=None, **cfg):
    """C = A @ B with the TileLang GEMM compiled for these shapes (see ``gemm_program`` for ``cfg``)."""
    _require_gpu(a, b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise CourseError(f"gemm needs (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    (M, K), N = a.shape, b.shape[1]
    c = operands.out("tilelang_kernels.gemm", out, (M, N), a, "matrix", result="the product")
    compile("gemm", M=M, N=N, K=K, **cfg)(a, b, c)
    return c


def copy(x, out=None, **cfg):
    """Y = X through the TileLang tile copy compiled for this shape."""
    _require_gpu(x)
    y = operands.out("tilelang_kernels.copy", out, x.shape, x, "matrix", result="the copy")
    compile("copy", M=x.shape[0], N=x.shape[1], **cfg)(x, y)
    return y
