"""The check behind exercises/00_memory_wall.ipynb: arithmetic intensity, the roofline bound, and an
axpy kernel (values, and the loads it compiles to)."""
import random

import torch

from ..lab import aot, check as lab_check
from ..lab.mode import DEVICE


def check(gemm_intensity, roofline_ms, axpy, axpy_kernel):
    rng = random.Random()

    def intensity():
        for _ in range(20):
            M, N, K, e = rng.randint(1, 9000), rng.randint(1, 9000), rng.randint(1, 9000), rng.choice([1, 2, 4])
            want = 2 * M * N * K / ((M * K + K * N + M * N) * e)
            got = gemm_intensity(M, N, K, e)
            if got is None or abs(got - want) > 1e-9 * want:
                raise AssertionError(f"M={M}, N={N}, K={K}, {e}-byte elements: expected {want:.3f} FLOP/B, got {got}; "
                                     "count 2 FLOP per multiply-add, and the bytes of A, B and C once each")
        return "matches on 20 random shapes"

    def roofline():
        for _ in range(20):
            flops, nbytes = rng.uniform(1e6, 1e13), rng.uniform(1e6, 1e11)
            tf, tb = rng.uniform(10, 1000), rng.uniform(0.5, 5)
            t_math, t_mem = flops / (tf * 1e12) * 1e3, nbytes / (tb * 1e12) * 1e3
            want, got = max(t_math, t_mem), roofline_ms(flops, nbytes, tf, tb)
            if got is None:
                raise NotImplementedError
            if abs(got - want) > 1e-9 * want:
                hint = ("the bound is the larger of the two times, not their sum: bytes and math overlap"
                        if abs(got - (t_math + t_mem)) < 1e-9 * want else
                        "check the units: TFLOP/s and TB/s are 1e12 per second, and the answer is in ms")
                raise AssertionError(f"{flops:.3g} FLOP, {nbytes:.3g} B at {tf:.0f} TFLOP/s, {tb:.2f} TB/s: "
                                     f"expected {want:.4g} ms, got {got:.4g} ms; {hint}")
        return "matches on 20 random kernels"

    def axpy_values():
        for dtype, tol in ((torch.float32, 1e-6), (torch.float16, 2e-3)):
            n = rng.randint(1000, 5000)  # not a multiple of any block size: the edge must be masked
            x, y = torch.randn(n, device=DEVICE, dtype=dtype), torch.randn(n, device=DEVICE, dtype=dtype)
            alpha = rng.uniform(-2, 2)
            out = lab_check.poison_like(x)
            axpy(alpha, x, y, out)
            lab_check.compare(f"axpy n={n} {dtype}", out, alpha * x.float() + y.float(), tol)
        return "correct on ragged fp32 and fp16 inputs"

    def axpy_code():
        x = torch.empty(4, dtype=torch.float16, device=DEVICE)
        compiled = aot.compile_sm90(axpy_kernel, x, x, x, 1.5, 1 << 28, BLOCK=1024, num_warps=4)
        if not compiled.counts()["ld.global"] and not compiled.counts()["st.global"]:
            raise lab_check.NotAttempted("the kernel neither loads nor stores")
        loads = lab_check.require(compiled, "ld.global", "a load from global memory")
        lab_check.require(compiled, "st.global", "a store to global memory")
        widths = sorted({k.split()[1] for k, v in compiled.counts().items() if k.startswith("ld.global ") and v})
        return f"{loads} ld.global in the sm_90 PTX, {', '.join(widths)} wide (lesson 01 is about that width)"

    return lab_check.run("exercise 00", [("gemm_intensity", intensity), ("roofline_ms", roofline),
                                     ("axpy: values", axpy_values), ("axpy: compiled code", axpy_code)])
