"""FP8 (e4m3) GEMM on Hopper, fed by TMA, pipelined and persistent: C = (A @ B) * scale_a * scale_b (lesson 08).

What changes from the fp16 GEMM of lessons 04 and 07:
- wgmma reads FP8 operands from shared memory only in K-major order (PTX ISA, wgmma: for .e4m3/.e5m2 the
  transpose of A or B is not supported), so B is stored as B^T, (N, K) row-major, and the kernel loads
  (BLOCK_N, BLOCK_K) boxes of it and multiplies by their transpose - a view, no data moves.
- A TMA box is counted in bytes: 128 e4m3 elements make the 128-byte row that 64 fp16 elements did, so
  BLOCK_K = 128 keeps the same box and swizzle.
- Per-tensor scales: the products accumulate in fp32 (with Triton's default on sm_90, imprecise: see
  ``FAST_ACCUM``) and are scaled once, in the epilogue, before the cast to the output dtype."""
import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from ..lab import operands, smem, tma_rules
from ..lab.errors import CourseError
from ..lab.mode import sm_count
from ..lab.plan import Plan
from .gemm import c_box, grouped_tile, store_tile

FP8 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # the largest finite e4m3 value (OCP FP8 format: S.EEEE.MMM, bias 7, no infinities)
# Triton compiles an fp8 tl.dot on sm_90 with max_num_imprecise_acc = 2**30 unless told otherwise
# (triton/backends/nvidia/compiler.py, CUDAOptions): the wgmma accumulator is never promoted to a full
# fp32 sum mid-loop. cuBLASLt's equivalent is torch._scaled_mm(..., use_fast_accum=True).
FAST_ACCUM = True


@triton.jit
def matmul_fp8_kernel(a_desc, bt_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, SUBTILE: tl.constexpr):
    # a_desc: A (M, K) e4m3; bt_desc: B^T (N, K) e4m3, K-major as wgmma needs; c_desc: C (M, N), its box
    # BLOCK_M x BLOCK_N, or half as wide with SUBTILE
    scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, ki * BLOCK_K])
            acc = tl.dot(a, bt.T, acc)
        store_tile(c_desc, (acc * scale).to(c_desc.dtype), pid_m * BLOCK_M, pid_n * BLOCK_N, SUBTILE)


def quantize(x, dtype=FP8):
    """(x in e4m3, scale) with x ~ q * scale: one scale for the whole tensor, chosen so that the largest
    |x| lands on the largest finite e4m3 value."""
    scale = x.abs().max().float().clamp(min=1e-12) / E4M3_MAX
    return (x.float() / scale).to(dtype), scale.reshape(())


def _check(a, bt, scale_a, scale_b, out_dtype):
    if a.dim() != 2 or bt.dim() != 2 or a.shape[1] != bt.shape[1]:
        raise CourseError(f"matmul_fp8 needs A (M, K) and B^T (N, K), got {tuple(a.shape)} and {tuple(bt.shape)}: "
                          f"pass B transposed and contiguous (b.t().contiguous()), K-major as wgmma reads FP8")
    for name, t in (("A", a), ("B^T", bt)):
        if t.dtype != FP8:
            raise CourseError(f"matmul_fp8: {name} is {t.dtype}; quantize it first (gemm_fp8.quantize)")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s.numel() != 1 or s.dtype != torch.float32:
            raise CourseError(f"matmul_fp8: {name} must be one float32 value (a per-tensor scale), got "
                              f"{tuple(s.shape)} {s.dtype}")
    if out_dtype not in (torch.bfloat16, torch.float16):
        raise CourseError(f"matmul_fp8: out_dtype bf16 or fp16, got {out_dtype}")
    operands.check("matmul_fp8", "a bt", a, bt)


def _launch(a, bt, scale_a, scale_b, c, BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, stages=3, num_warps=8, GROUP_M=8,
            persistent=True, warp_specialize=False, subtile=False, programs=None):
    """(kernel, grid, args, kwargs) of one launch, host-side tensor maps."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, K = a.shape
    N = bt.shape[0]
    out_box = c_box(BLOCK_M, BLOCK_N, subtile)
    tma_rules.ready(("A", a, [BLOCK_M, BLOCK_K]), ("B^T", bt, [BLOCK_N, BLOCK_K]), ("C", c, out_box))
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    grid = (min(tiles, programs or sm_count(a)),) if persistent else (tiles,)
    descs = (TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K]), TensorDescriptor.from_tensor(bt, [BLOCK_N, BLOCK_K]),
             TensorDescriptor.from_tensor(c, out_box))
    return (matmul_fp8_kernel, grid, (*descs, scale_a, scale_b, M, N, K),
            dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, WARP_SPECIALIZE=warp_specialize,
                 SUBTILE=subtile, num_stages=stages, num_warps=num_warps))


def _overflow(e, c, kwargs):
    m, n, k, s = kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["BLOCK_K"], kwargs["num_stages"]
    c_cols = n // 2 if kwargs["SUBTILE"] else n
    return smem.overflow(e, f"{m}x{n}x{k} e4m3 with {s} stages", s, smem.gemm_stage_bytes(m, n, k, 1),
                         m * c_cols * c.element_size())


def _out(a, bt, scale_a, scale_b, out_dtype, out):
    _check(a, bt, scale_a, scale_b, out_dtype)
    if out is None:
        return torch.empty(a.shape[0], bt.shape[0], device=a.device, dtype=out_dtype)
    return operands.out("matmul_fp8", out, (a.shape[0], bt.shape[0]), out, result="the product")


def matmul_fp8(a, bt, scale_a, scale_b, out_dtype=torch.bfloat16, out=None, **config):
    """C = (A @ B) * scale_a * scale_b from A (M, K) and B^T (N, K) in e4m3; ``config``: BLOCK_M, BLOCK_N,
    BLOCK_K, stages, num_warps, GROUP_M, persistent, warp_specialize, subtile, programs (see ``_launch``). Without a
    tile or stage count, the configuration is the one ``gemm_auto`` predicts fastest for this shape (lesson 08)."""
    c = _out(a, bt, scale_a, scale_b, out.dtype if out is not None else out_dtype, out)
    if not {"BLOCK_M", "BLOCK_N", "BLOCK_K", "stages"} & set(config):
        from . import gemm_auto  # it imports this module
        config = {**gemm_auto.config_for("gemm_fp8", a, bt, warp_specialize=False), **config}
    kernel, grid, args, kwargs = _launch(a, bt, scale_a, scale_b, c, **config)
    try:
        kernel[grid](*args, **kwargs)
    except OutOfResources as e:
        raise _overflow(e, c, kwargs) from None
    return c


def plan(a, bt, scale_a, scale_b, c, **config):
    """A ``lab.plan.Plan`` of ``matmul_fp8`` into ``c``: checks, tensor maps and compilation once."""
    _out(a, bt, scale_a, scale_b, c.dtype, c)
    kernel, grid, args, kwargs = _launch(a, bt, scale_a, scale_b, c, **config)
    try:
        return Plan(kernel, grid, args, kwargs)
    except OutOfResources as e:
        raise _overflow(e, c, kwargs) from None


def reference(a, bt, scale_a, scale_b, out_dtype=torch.bfloat16):
    """The same product in fp32 from the e4m3 values (what an exact kernel would compute), cast at the end."""
    return ((a.float() @ bt.float().t()) * (scale_a * scale_b)).to(out_dtype)


def scaled_mm(a, bt, scale_a, scale_b, out_dtype=torch.bfloat16, fast_accum=FAST_ACCUM, out=None):
    """cuBLASLt's FP8 GEMM through torch: B is passed as bt.t(), the column-major (K, N) view it wants."""
    return torch._scaled_mm(a, bt.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                            use_fast_accum=fast_accum, out=out)


def compile_sm90(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, stages=3, num_warps=8, GROUP_M=8, shape=(8192, 8192, 4096),
                 kernel=matmul_fp8_kernel, b_kmajor=True, subtile=False, **meta):
    """The sm_90 code of ``kernel`` (``matmul_fp8_kernel``'s arguments: the A, B and C tensor maps, the two
    scales, M, N, K) for an M x N x K e4m3 GEMM at this tile, as a launch compiles it; nothing runs.
    ``b_kmajor=False`` describes B as (K, N) instead of B^T (N, K), for a kernel that loads it that way."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    from ..lab import aot
    from ..lab.mode import DEVICE
    M, N, K = shape
    a = torch.empty(M, K, device=DEVICE, dtype=FP8)
    b = torch.empty((N, K) if b_kmajor else (K, N), device=DEVICE, dtype=FP8)
    c = torch.empty(M, N, device=DEVICE, dtype=torch.bfloat16)
    scales = [torch.ones((), device=DEVICE) for _ in range(2)]
    descs = (TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K]),
             TensorDescriptor.from_tensor(b, [BLOCK_N, BLOCK_K] if b_kmajor else [BLOCK_K, BLOCK_N]),
             TensorDescriptor.from_tensor(c, c_box(BLOCK_M, BLOCK_N, subtile)))
    meta = dict(dict(WARP_SPECIALIZE=False, SUBTILE=subtile), **meta) if kernel is matmul_fp8_kernel else meta
    return aot.compile_sm90(kernel, *descs, *scales, M, N, K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                            GROUP_M=GROUP_M, num_stages=stages, num_warps=num_warps, **meta)
