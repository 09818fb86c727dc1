"""The check behind exercises/02_cp_async.ipynb: the pointer GEMM of an ``nn.Linear`` layer, ``y = x @ W^T``
with the weight ``W`` stored N x K as PyTorch keeps it. Right on ragged shapes, and pipelined into 16-byte
``cp.async`` at three stages."""
import re

import torch
import triton

from ..lab import aot, check as lab_check, isa, trace
from ..lab.mode import DEVICE
from ..ops import gemm

TILE = (32, 64, 16)  # the values check's tile: ragged shapes get edge tiles on every side and a K tail; three
# different sizes, so a BLOCK_M, BLOCK_N or BLOCK_K where another belongs does not go unseen


def launch_args(x, w, y, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps=None, GROUP_M=8):
    """(grid, args, meta) of one launch of a kernel with the exercise's signature."""
    M, K = x.shape
    N = w.shape[0]
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    args = (x, w, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1))
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_stages=stages,
                num_warps=num_warps or gemm.default_warps(BLOCK_M, BLOCK_N))
    return grid, args, meta


def launch(kernel, x, w, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None):
    """y = x @ w.T through ``kernel`` (the launcher the exercise gives the learner)."""
    y = torch.empty((x.shape[0], w.shape[0]), device=x.device, dtype=x.dtype) if out is None else out
    grid, args, meta = launch_args(x, w, y, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    kernel[grid](*args, **meta)
    return y


def _no_advance(x, w, BLOCK_K):
    """What a K loop computes when its pointers never move on: the first K step, again and again (the last
    time under the tail's mask)."""
    K = x.shape[1]
    steps = triton.cdiv(K, BLOCK_K)
    first, tail = min(BLOCK_K, K), K - (steps - 1) * BLOCK_K
    xf, wf = x.double(), w.double()
    return (steps - 1) * (xf[:, :first] @ wf[:, :first].T) + xf[:, :tail] @ wf[:, :tail].T


W_BY_POINTERS = "W is N x K: element (n, k) at w_ptr + n * stride_wn + k * stride_wk"
K_TAIL_BY_POINTERS = "that is the K tail, which needs its own bound (K - k * BLOCK_K, with other=0.0)"


def likely(out, ref, x, w, BLOCK_M, BLOCK_N, BLOCK_K, tol, rerun=None, w_indexing=W_BY_POINTERS,
           k_tail=K_TAIL_BY_POINTERS):
    """What the pattern of a wrong GEMM output most likely means. ``rerun()`` runs the kernel again on the same
    values with zeros instead of NaN past every edge: if that comes out right, the kernel's only fault is a
    read past an edge. (Shared with exercise 03, which says how W is indexed, and the K tail handled, through
    descriptors.)"""
    said = ""
    if torch.isnan(out).any() and rerun is not None:
        out = rerun()
        nan = torch.isnan(out)
        if not nan.any() and lab_check.rel_err(out, ref) < 1e-2:
            return (" - with zeros instead of NaN past the edges the result is right: the only fault is a read "
                    f"past the end of the rows of x or W in the last K step; {k_tail}")
        said = " - with zeros instead of NaN past the edges it is still wrong:"
    written = ~lab_check.unwritten(out) & ~torch.isnan(out)
    typical = ref.double().pow(2).mean().sqrt()
    off = written & ((out.double() - ref.double()).abs() > 0.05 * typical)
    if not off.any():
        err = lab_check.rel_err(out[written], ref[written]) if written.any() else 0.0
        if tol < err < 2e-3:
            return (f"{said or ' -'} errors the size of fp16 rounding: accumulate in fp32 (the acc given), let tl.dot "
                    "return fp32 (no out_dtype=tl.float16, no fp16 accumulator), and convert the result to the "
                    "output's own type, y's (y_ptr.dtype.element_ty or y_desc.dtype), not another pointer's")
        return ""
    if written.all() and lab_check.rel_err(out, _no_advance(x, w, BLOCK_K)) < 1e-2:
        return (f"{said or ' -'} the output is the first K step's product repeated K / BLOCK_K times: the "
                "pointers never move on; advance both by BLOCK_K along K after each step")
    if bool((lab_check.per_tile_count(off, BLOCK_M, BLOCK_N) > 0).all()):
        return (f"{said or ' -'} every tile is wrong: check how W is indexed ({w_indexing}) and how far each "
                "step moves along K (BLOCK_K)")
    return f"{said or ' -'} the wrong elements fall in {lab_check.tiles(off, BLOCK_M, BLOCK_N)}"


# what Triton says when a kernel of these exercises goes wrong in a typical way, and what it means here
HINTS = (("equal reduction dimensions", "the W tile loaded as W is stored is BLOCK_N x BLOCK_K; tl.dot needs "
          "BLOCK_K x BLOCK_N: hand it the transposed tile, w.T"),
         ("offset start must be 16-byte aligned", "a load's coordinates are in elements: step k starts at "
          "k * BLOCK_K along K"))


def with_hints(fn, hints=HINTS):
    """``fn()``; an error from the learner's kernel that ``hints`` know comes back as a failure that says what it
    means here (any other error goes on to the checker's own handling)."""
    try:
        return fn()
    except Exception as e:
        chain, inner = [], e
        while inner is not None and len(chain) < 8:
            chain.append(str(inner))
            inner = inner.__cause__ or inner.__context__
        hint = next((h for key, h in hints if any(key in text for text in chain)), None)
        if hint is None or lab_check.is_stub(e) or isinstance(e, trace.Diagnosis):
            raise
        said = lab_check.explain(e) if hasattr(lab_check, "explain") else f"{type(e).__name__}: {e}"
        raise AssertionError(f"{said} - {hint}") from None


def _right_with_one_stride(linear, x, w, ref, dtype, tile, stages, tol):
    """Whether ``linear`` comes out right when x, W and y share one row stride (same values): then its only fault
    is a row stride taken from the wrong tensor, which the check's three different strides expose."""
    (M, K), N = x.shape, w.shape[0]
    common = -(-(max(K, N) + 8) // 8) * 8  # a multiple of 8 elements: every tensor's padding lands on it
    xs, ws = lab_check.operand(M, K, extra=common - K), lab_check.operand(N, K, extra=common - K)
    ys = lab_check.poisoned(M, N, dtype=dtype, extra=common - N)
    if not xs.stride(0) == ws.stride(0) == ys.stride(0):
        return False
    xs.copy_(x)
    ws.copy_(w)
    try:
        linear(xs, ws, *tile, stages, out=ys)
        lab_check.compare("one stride", ys, ref, tol)
    except Exception:  # noqa: BLE001 - still wrong (or failing) with one stride: the fault is elsewhere
        return False
    return True


def values_check(linear, shapes, tile, stages):
    """Run ``linear(x, w, *tile, stages, out=y)`` on fresh inputs of each (M, N, K, out dtype): x, W and y with
    three different row strides, NaN beyond every edge of x and W, y poisoned. Names what a wrong output most
    likely means."""
    for M, N, K, dtype in shapes:
        x = lab_check.operand(M, K, dtype=torch.float16, extra=8)
        w = lab_check.operand(N, K, dtype=torch.float16, extra=24)
        y = lab_check.poisoned(M, N, dtype=dtype)
        layout = gemm_layout(M, N, K, tile)
        with trace.watching(layout, x=x, W=w, y=y) as seen:
            if with_hints(lambda: linear(x, w, *tile, stages, out=y)) is None:
                raise NotImplementedError
        ref = x.double() @ w.double().T
        tol = 1e-2 if dtype == torch.float16 else 1e-5
        try:
            lab_check.compare(f"{M}x{K} @ ({N}x{K})^T into {str(dtype).removeprefix('torch.')}", y, ref, tol)
        except AssertionError as e:
            told = trace.after(seen, layout, e)
            if told is not e:  # the trace names the cause: say it first
                raise trace.Diagnosis(f"{told}{likely(y, ref, x, w, *tile, tol)}") from None
            if _right_with_one_stride(linear, x, w, ref, dtype, tile, stages, tol):
                raise AssertionError(f"{e} - with x, W and y given one common row stride the result is right: a row "
                                     "stride is used for the wrong tensor (x's rows step by stride_xm, W's by "
                                     "stride_wn, y's by stride_ym)") from None

            def rerun():
                return linear(lab_check.zero_guarded(x), lab_check.zero_guarded(w), *tile, stages,
                              out=lab_check.poisoned(M, N, dtype=dtype))
            raise AssertionError(f"{e}{likely(y, ref, x, w, *tile, tol, rerun)}") from None
        told = trace.after(seen, layout)
        if told:
            raise told


def gemm_layout(M, N, K, tile, bias=None, offsets=False):
    """The trace's picture of these exercises' GEMM: x (M x K) times W (N x K, as PyTorch keeps it) into y."""
    return trace.Gemm(("x", "mk"), ("W", "nk"), ("y", "mn"),
                      dict(M=M, N=N, K=K, BLOCK_M=tile[0], BLOCK_N=tile[1], BLOCK_K=tile[2]), bias=bias,
                      offsets=offsets, row_major=True)


def cp_async_sizes(ptx):
    """Bytes per cp.async instruction in the PTX: {size: count}."""
    sizes = {}
    for line in isa.lines(ptx, "cp.async.cg", "cp.async.ca", limit=10 ** 6):
        m = re.search(r"\],\s*(0x[0-9a-f]+|\d+)", line)
        if m:
            size = int(m.group(1), 0)
            sizes[size] = sizes.get(size, 0) + 1
    return sizes


def compile_linear(kernel, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3, size=4096):
    x, w, y = (torch.empty(size, size, device=DEVICE, dtype=torch.float16) for _ in range(3))
    _, args, meta = launch_args(x, w, y, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    return aot.compile_sm90(kernel, *args, **meta)


def pipelined(compiled, stages=3):
    """Raise AssertionError unless the compiled GEMM multiplies with tensor cores and brings its tiles in
    with 16-byte cp.async; return the counts in words."""
    counts = compiled.counts()
    if not counts["wgmma"] and not counts["mma.sync"]:
        raise AssertionError("no tl.dot in the compiled code (no wgmma, no mma): multiply the tiles with tl.dot; "
                             "the loads that feed it are what the pipeliner turns into cp.async")
    if not counts["cp.async"]:
        raise AssertionError(f"no cp.async at {stages} stages: the tiles come in through {counts['ld.global']} "
                             "ld.global, which wait for their data. The pipeliner rewrites the loads of a K loop "
                             "that feed tl.dot; a loop written as tl.range(..., num_stages=1), or loads outside "
                             "the loop, keep it from doing so")
    sizes = cp_async_sizes(compiled.ptx)
    if set(sizes) != {16}:
        raise AssertionError(f"cp.async moves {', '.join(f'{n} x {s} B' for s, n in sorted(sizes.items()))}: pieces "
                             "under 16 bytes mean the compiler could not prove 8 neighbouring fp16 along K are "
                             "adjacent; index K as a plain k * BLOCK_K + tl.arange along the unit stride")
    return (f"{counts['cp.async']} x 16-byte cp.async ({counts['LDGSTS']} LDGSTS) and "
            f"{counts['cp.async.wait_group']} cp.async.wait_group at {stages} stages")


def lopsided(rng):
    """Three ragged (M, N, K), each with a different one of M, N and K the largest by far: a bound, a loop or a
    tile count written with the wrong one of the three is wrong on at least one of them."""
    small, large = (lambda: rng.randint(40, 90)), (lambda: rng.randint(200, 320))
    return [(large(), small(), small()), (small(), large(), small()), (small(), small(), large())]


def check(linear, kernel):
    """``linear(x, w, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None)`` launches ``kernel`` (arguments as in
    ``launch_args``) into ``out``."""
    rng = lab_check.rng()

    def values():
        shapes = [(*mnk, dtype) for mnk, dtype in zip(lopsided(rng), (torch.float16, torch.float16, torch.float32))]
        values_check(linear, shapes, TILE, 2)
        return ("within 1e-2 of torch on two ragged shapes into fp16, within 1e-5 on one into fp32 "
                "(x, W and y with different row strides)")

    def code():
        return pipelined(with_hints(lambda: compile_linear(kernel)))

    return lab_check.run("exercise 02", [("linear: values", values), ("linear: cp.async at 3 stages", code)], twin=True)


def stretch(linear_relu, kernel):
    """The optional stretch goal: ``linear_relu(x, w, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None)`` computes
    relu(x @ W^T + b) through ``kernel`` (the exercise's arguments, with ``b_ptr`` after ``w_ptr``)."""
    rng = lab_check.rng()

    def values():
        shapes = [(*mnk, torch.float32) for mnk in lopsided(rng)]
        for M, N, K, dtype in shapes:
            x = lab_check.operand(M, K, dtype=torch.float16, extra=8)
            w = lab_check.operand(N, K, dtype=torch.float16, extra=24)
            b = lab_check.operand(N, dtype=torch.float16)
            y = lab_check.poisoned(M, N, dtype=dtype)
            layout = gemm_layout(M, N, K, TILE, bias="b")
            with trace.watching(layout, x=x, W=w, b=b, y=y) as seen:
                linear_relu(x, w, b, *TILE, 2, out=y)
            pre = x.double() @ w.double().T + b.double()
            ref = torch.relu(pre)
            try:
                lab_check.compare(f"relu({M}x{K} @ ({N}x{K})^T + b)", y, ref, 1e-5)
            except AssertionError as e:
                written = ~lab_check.unwritten(y)
                floor = y[written].double().min().item() if written.any() else 0.0
                err = lab_check.rel_err(y[written], ref[written]) if written.any() else 1.0
                extra = (f" - y equals max(x @ W^T + b, {floor:g}): the ReLU clamps at {floor:g} where 0 belongs, "
                         "tl.maximum(acc, 0.0)" if floor > 0 and written.all()
                         and lab_check.rel_err(y, pre.clamp(min=floor)) <= 1e-5 else
                         " - errors the size of fp16 rounding: the result is rounded to a 16-bit type before the "
                         "store; convert it to the type of the output pointer, acc.to(y_ptr.dtype.element_ty)"
                         if 1e-5 < err < 2e-3 else
                         " - no element is zero: the ReLU is missing" if not (y == 0).any() else
                         " - compare with the bias left out: is it added along the columns (one value per n)?")
                raise trace.after(seen, layout, AssertionError(f"{e}{extra}")) from None
            told = trace.after(seen, layout)
            if told:
                raise told
        return "relu(x @ W^T + b) right on three ragged shapes, each with M, N or K the largest"

    def code():
        x, w, b, y = (torch.empty(4096, 4096, device=DEVICE, dtype=torch.float16) for _ in range(4))
        _, args, meta = launch_args(x, w, y, 128, 128, 64, 3)
        args = args[:2] + (b[0],) + args[2:]
        return pipelined(aot.compile_sm90(kernel, *args, **meta)) + ": the epilogue leaves the K loop's ring alone"

    lab_check.run("stretch (optional)", [("linear + bias + ReLU: values", values),
                                                ("linear + bias + ReLU: cp.async at 3 stages", code)], twin=True)
