"""The checks behind each lesson's exercise notebook (exercises/NN_*.ipynb).

Each checker takes the learner's functions, tests them on fresh random inputs (ragged sizes,
poisoned outputs, a torch reference) and, where the exercise is about a mechanism, reads the
compiled sm_90 code for it. It prints one line per check and returns True when all pass."""
import random
import re

import torch

from . import DEVICE
from .lab import aot, check


def lesson00(gemm_intensity, roofline_ms, axpy, axpy_kernel):
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
            out = check.poison_like(x)
            axpy(alpha, x, y, out)
            check.compare(f"axpy n={n} {dtype}", out, alpha * x.float() + y.float(), tol)
        return "correct on ragged fp32 and fp16 inputs"

    def axpy_code():
        x = torch.empty(4, dtype=torch.float16, device=DEVICE)
        compiled = aot.compile_sm90(axpy_kernel, x, x, x, 1.5, 1 << 28, BLOCK=1024, num_warps=4)
        if not compiled.counts()["ld.global"] and not compiled.counts()["st.global"]:
            raise check.NotAttempted("the kernel neither loads nor stores")
        loads = check.require(compiled, "ld.global", "a load from global memory")
        check.require(compiled, "st.global", "a store to global memory")
        widths = sorted({k.split()[1] for k, v in compiled.counts().items() if k.startswith("ld.global ") and v})
        return f"{loads} ld.global in the sm_90 PTX, {', '.join(widths)} wide (lesson 01 is about that width)"

    return check.run("exercise 00", [("gemm_intensity", intensity), ("roofline_ms", roofline),
                                     ("axpy: values", axpy_values), ("axpy: compiled code", axpy_code)])


def _gemm_values(matmul, shapes, *launch, **kw):
    """Check ``matmul(a, b, *launch, **kw)`` on fresh random fp16 inputs of each (M, N, K) shape."""
    for M, N, K in shapes:
        a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
        b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
        out = matmul(a, b, *launch, **kw)
        if out is None:
            raise NotImplementedError
        if not out.abs().max() > 0:
            raise check.NotAttempted("the product came out all zeros: the loop is still the stub")
        check.compare(f"{M}x{K} @ {K}x{N}", out, a.float() @ b.float(), 1e-2)


def _gemm_code(kernel, stages=3):
    """The sm_90 code of a learner's GEMM kernel (gemm.matmul_kernel's arguments) at 4096^3, 128x128x64."""
    from . import gemm
    big = torch.empty(4096, 4096, dtype=torch.float16, device=DEVICE)
    _, args, meta = gemm.launch_args(big, big, big, 128, 128, 64, stages)
    compiled = aot.compile_sm90(kernel, *args, **meta)
    if not compiled.counts()["wgmma"] and not compiled.counts()["mma.sync"]:
        raise check.NotAttempted("no tl.dot in the compiled code")
    return compiled


def _ragged_shapes(rng, n=3):
    """Shapes that are not multiples of any tile: the edges need masks."""
    return [(rng.randint(65, 400), rng.randint(65, 400)) for _ in range(n)]


def lesson01(copy_2d, kernel):
    """``copy_2d(x, out, BLOCK_M, BLOCK_N)`` launches ``kernel`` to copy a 2D tensor tile by tile."""
    rng = random.Random()

    def values():
        for (M, N), dtype in zip(_ragged_shapes(rng), (torch.float16, torch.float32, torch.float16)):
            x = torch.randn(M, N, device=DEVICE, dtype=dtype)
            out = check.poison_like(x)
            copy_2d(x, out, 32, 64)
            check.compare(f"copy of {M}x{N} {dtype}", out, x, 0.0)
        return "exact on three ragged shapes, fp16 and fp32"

    def code():
        x = torch.empty(4, dtype=torch.float16, device=DEVICE)
        compiled = aot.compile_sm90(kernel, x, x, 16384, 16384, 16384, 16384, BLOCK_M=64, BLOCK_N=128, num_warps=4)
        counts = compiled.counts()
        if not counts["ld.global"]:
            raise check.NotAttempted("the kernel loads nothing")
        narrow = {k: v for k, v in counts.items() if k.startswith("ld.global ") and k != "ld.global 128-bit" and v}
        if narrow or not counts["ld.global 128-bit"]:
            raise AssertionError(f"the loads compile to {narrow or counts}, not 16-byte vectors: index the "
                                 "contiguous dimension with unit stride (x_ptr + rows * stride + cols), so the "
                                 "compiler can prove that 8 neighbouring fp16 elements are adjacent")
        return f"{counts['ld.global 128-bit']} x 128-bit ld.global per thread for a 64x128 fp16 tile"

    return check.run("exercise 01", [("copy: values", values), ("copy: 16-byte loads", code)])


def lesson02(matmul, kernel):
    """``matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, num_stages)`` launches ``kernel`` (args as gemm.matmul_kernel)."""
    rng = random.Random()

    def values():
        _gemm_values(matmul, [(rng.randint(65, 300), rng.randint(65, 300), rng.randint(65, 300)) for _ in range(3)],
                     32, 32, 32, 2)
        return "within 1e-2 of torch on three ragged shapes"

    def code():
        compiled = _gemm_code(kernel)
        counts = compiled.counts()
        check.require(compiled, "cp.async", "with num_stages=3 the loads feeding tl.dot should become asynchronous "
                      "copies; they do when the loop's loads go straight into tl.dot and the pointers advance by a "
                      "loop-invariant step")
        return (f"{counts['cp.async']} cp.async and {counts['cp.async.wait_group']} cp.async.wait_group "
                f"at num_stages=3")

    return check.run("exercise 02", [("matmul: values", values), ("matmul: cp.async at 3 stages", code)])


def lesson03(matmul, kernel):
    """``matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, num_stages)`` launches ``kernel`` (args as gemm.matmul_kernel),
    checking the TMA rules on its operands first."""
    from .lab.errors import TMAError
    rng = random.Random()

    def values():  # ragged against the tiles; K and N stay multiples of 8 (16-byte row strides)
        _gemm_values(matmul, [(rng.randint(65, 300), 8 * rng.randint(9, 40), 8 * rng.randint(9, 40))
                              for _ in range(3)], 64, 64, 32, 2)
        return "within 1e-2 of torch on three ragged shapes (the edges come from TMA's zero fill)"

    def code():
        compiled = _gemm_code(kernel)
        counts = compiled.counts()
        if not counts["cp.async.bulk.tensor load"]:
            raise AssertionError(f"no cp.async.bulk.tensor in the sm_90 code ({counts['ld.global']} ld.global, "
                                 f"{counts['cp.async']} cp.async): load the tiles with a descriptor's .load([row, col]), "
                                 "not through pointers")
        return (f"{counts['cp.async.bulk.tensor load']} TMA loads (UTMALDG: {counts['UTMALDG']}), "
                f"{counts['mbarrier']} mbarrier operations, {counts['ld.global']} ld.global")

    def rules():
        ok = matmul(*(torch.randn(64, 64, device=DEVICE, dtype=torch.float16) for _ in range(2)), 64, 64, 32, 2)
        if ok is None or not ok.abs().max() > 0:
            raise check.NotAttempted("write the kernel first")
        a = torch.randn(64, 100, device=DEVICE, dtype=torch.float16)  # rows of 200 bytes
        b = torch.randn(100, 64, device=DEVICE, dtype=torch.float16)
        sq = torch.randn(64, 64, device=DEVICE, dtype=torch.float16)
        msgs = []
        for what, x, y in (("a 200-byte row stride", a, b), ("a column-major B", sq, sq.t())):
            try:
                matmul(x, y, 64, 64, 32, 2)
            except TMAError as e:
                msgs.append(f"{what} is refused: {e}")
                continue
            raise AssertionError(f"{what} was launched: check the operands with kernels.tma.check_operand "
                                 "before building descriptors, so the learner sees the rule, not a crash")
        return "; ".join(msgs)

    return check.run("exercise 03", [("TMA matmul: values", values), ("TMA matmul: cp.async.bulk.tensor", code),
                                     ("TMA rules on bad inputs", rules)])


def lesson04(matmul, kernel):
    """``matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, num_stages, programs)`` launches ``kernel`` (args as
    gemm.matmul_kernel) on ``programs`` programs, which must walk all the tiles."""
    from .lab import smem
    rng = random.Random()

    def values():  # more tiles than programs: only a persistent loop covers them all
        _gemm_values(matmul, [(rng.randint(130, 300), 8 * rng.randint(17, 40), 8 * rng.randint(9, 40))
                              for _ in range(3)], 64, 64, 32, 2, programs=3)
        return "within 1e-2 of torch on three ragged shapes, 3 programs walking all the tiles"

    def code():
        compiled = _gemm_code(kernel)
        if not compiled.counts()["cp.async.bulk.tensor load"]:
            raise AssertionError("no cp.async.bulk.tensor loads: keep the tiles coming through the descriptors")
        stage = smem.gemm_stage_bytes(128, 128, 64)
        if compiled.shared < 2 * stage:
            raise AssertionError(f"the kernel asks {compiled.shared} B of shared memory, less than two stages "
                                 f"({2 * stage} B): the loads are not pipelined; keep the K loop a plain loop "
                                 "over descriptor loads feeding tl.dot, so num_stages can build the ring")
        return (f"{compiled.shared // 1024} KiB of shared memory at num_stages=3, more than two "
                f"{stage // 1024} KiB stages of A and B tiles: the ring is there")

    return check.run("exercise 04", [("persistent GEMM: values", values), ("pipelined: the ring in the code", code)])


def lesson05(program):
    """``program(M, N, K, block_M, block_N, block_K, stages)`` returns a TileLang prim_func computing
    C = A @ B (fp16 in and out); it is compiled for sm_90a here, and run on a Hopper GPU if there is one."""
    from . import MODE, tilelang_kernels as tk
    from .lab.errors import CourseError
    rng = random.Random()

    def emitted(*shape_tile_stages):
        func = program(*shape_tile_stages)
        try:
            kernel = tk.build(func)
        except CourseError as e:
            raise AssertionError(str(e)) from None
        src = kernel.get_kernel_source()
        if "wgmma" not in src and "mma" not in src:
            raise check.NotAttempted("no T.gemm in the emitted CUDA: the kernel body is still the stub")
        return kernel, src

    def tma():
        _, src = emitted(1024, 1024, 1024, 128, 128, 64, 3)
        if "tma_load" not in src:
            raise AssertionError("no tma_load in the emitted CUDA: copy the A and B tiles into T.alloc_shared buffers "
                                 "with T.copy inside the T.Pipelined loop; outside a pipelined loop TileLang loads "
                                 "global -> shared with plain vector loads")
        return f"{src.count('tma_load')} tma_load call sites, {src.count('.wait(')} barrier waits, wgmma"

    def ring():
        barriers = {}
        for stages in (1, 3):
            _, src = emitted(1024, 1024, 1024, 128, 128, 64, stages)
            found = re.search(r"mbarrier_mem\[(\d+)\]", src)
            barriers[stages] = int(found.group(1)) if found else 0
        if barriers[3] <= barriers[1]:
            raise AssertionError(f"{barriers[1]} mbarriers at 1 stage and {barriers[3]} at 3: the stage count does "
                                 "not reach the loop; pass it as T.Pipelined(..., num_stages=stages)")
        return f"{barriers[1]} mbarriers at 1 stage, {barriers[3]} at 3: a full/empty pair per buffer of the ring"

    def values():  # ragged against the tiles; N and K multiples of 8 (16-byte rows for TMA)
        for M, N, K in [(rng.randint(200, 700), 8 * rng.randint(30, 90), 8 * rng.randint(30, 90)) for _ in range(2)]:
            kernel, _ = emitted(M, N, K, 128, 128, 64, 3)
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            c = check.poison_like(torch.empty(M, N, device="cuda", dtype=torch.float16))
            kernel(a, b, c)
            check.compare(f"{M}x{K} @ {K}x{N}", c, a.float() @ b.float(), 1e-2)
        return "within 1e-2 of torch on two ragged shapes (TMA fills the edges with zeros)"

    checks = [("TileLang GEMM: tma_load in the CUDA", tma), ("stages: the ring grows", ring)]
    if MODE == "hopper":
        checks.append(("TileLang GEMM: values", values))
    else:
        print("(no Hopper GPU here: the emitted CUDA is checked, the values are checked on one)")
    return check.run("exercise 05", checks)
