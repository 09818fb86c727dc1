"""The check behind exercises/03_tma_descriptors.ipynb: a whole ``nn.Linear`` layer, ``y = x @ W^T + b``,
with every byte moved through tensor descriptors: ``W`` described as stored (N x K) and its tile
transposed in the kernel, the bias through a 1D descriptor, ``y`` stored through its own, no mask
anywhere. Right inside and at ragged edges (where TMA's zero fill and clipping do the masks' work), and
compiled to TMA loads and a TMA store with no pointer access left."""
import ast
import inspect
import textwrap

import torch
import triton

from ..lab import aot, check as lab_check, tma_rules, trace
from ..lab.mode import DEVICE
from ..ops import gemm
from .l02_cp_async_exercise import gemm_layout, likely, with_hints

TILE = (128, 64, 32)  # three different sizes: a block shape or an offset with one where another belongs does not fit
INTERIOR = (2 * TILE[0], 2 * TILE[1], 3 * TILE[2])  # whole tiles: no edge anywhere
K_TAIL_BY_DESCRIPTOR = ("a descriptor's shape reaches past the tensor into its padding: TMA fills with zeros only "
                        "past the shape you give it, so describe x as [M, K] and W as [N, K], not as wide as "
                        "their row strides")
W_BY_DESCRIPTOR = ("W is N x K: describe it as stored, shape [N, K] with strides [stride_wn, 1], load [BLOCK_N, "
                   "BLOCK_K] tiles at [n, k] and hand tl.dot the transposed tile, w.T")


# each descriptor's block shape, by the pointer it describes (the kernel's first four arguments), and why
BLOCKS = ((("BLOCK_M", "BLOCK_K"), "x's tile is [BLOCK_M, BLOCK_K]"),
          (("BLOCK_N", "BLOCK_K"), "W's tile is [BLOCK_N, BLOCK_K] (W is stored N x K)"),
          (("BLOCK_N",), "the bias has one value per column of the tile: [BLOCK_N]"),
          (("BLOCK_M", "BLOCK_N"), "y's tile is [BLOCK_M, BLOCK_N]"))
SHAPES = (("M", "K"), ("N", "K"), ("N",), ("M", "N"))  # each tensor's shape, as a descriptor gives it


def block_shape_mistakes(kernel):
    """The descriptors in ``kernel``'s source whose block shape names the wrong BLOCK_ sizes, in words ("" when
    none, or when the source cannot be read): with square tiles such a mistake goes unseen."""
    try:
        fn = ast.parse(textwrap.dedent(inspect.getsource(kernel.fn))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError, AttributeError):
        return ""
    params = [a.arg for a in fn.args.args][:len(BLOCKS)]
    said = []
    for node in ast.walk(fn):
        call = getattr(node, "value", None)
        if not isinstance(node, ast.Assign) or not isinstance(call, ast.Call) or \
                getattr(call.func, "attr", getattr(call.func, "id", None)) != "make_tensor_descriptor":
            continue
        args = dict(zip(("base", "shape", "strides", "block_shape"), call.args))
        args.update({kw.arg: kw.value for kw in call.keywords})
        base, block = args.get("base"), args.get("block_shape")
        if not isinstance(base, ast.Name) or base.id not in params or not isinstance(block, (ast.List, ast.Tuple)):
            continue
        got = tuple(getattr(e, "id", None) for e in block.elts)
        (want, why), shape = BLOCKS[params.index(base.id)], SHAPES[params.index(base.id)]
        described = tuple(ast.unparse(e) for e in getattr(args.get("shape"), "elts", ()))
        if sorted(got) == sorted(want) and sorted(described) == sorted(shape) and described != shape:
            continue  # the tensor described transposed, shape and block alike: the values check names that
        if got != want and all(g in ("BLOCK_M", "BLOCK_N", "BLOCK_K") for g in got):
            said.append(f"{ast.unparse(node.targets[0])}'s block shape is [{', '.join(got)}]; {why}")
    return "; ".join(said) and (f"{'; '.join(said)} (the check's tiles are {TILE[0]} x {TILE[1]} x {TILE[2]}, "
                                "BLOCK_M, BLOCK_N and BLOCK_K all different, so each block shape matters)")


def launch_args(x, w, b, y, BLOCK_M, BLOCK_N, BLOCK_K, stages, num_warps=None, GROUP_M=8):
    """(grid, args, meta) of one launch of a kernel with the exercise's signature."""
    M, K = x.shape
    N = w.shape[0]
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    args = (x, w, b, y, M, N, K, x.stride(0), w.stride(0), y.stride(0))
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_stages=stages,
                num_warps=num_warps or gemm.default_warps(BLOCK_M, BLOCK_N))
    return grid, args, meta


def launch(kernel, x, w, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None):
    """y = x @ w.T + b through ``kernel`` (the launcher the exercise gives the learner)."""
    y = torch.empty((x.shape[0], w.shape[0]), device=x.device, dtype=x.dtype) if out is None else out
    tma_rules.ready(("x", x, [BLOCK_M, BLOCK_K]), ("W", w, [BLOCK_N, BLOCK_K]), ("b", b, [BLOCK_N]),
                    ("y", y, [BLOCK_M, BLOCK_N]))
    grid, args, meta = launch_args(x, w, b, y, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    kernel[grid](*args, **meta)
    return y


def _likely(y, x, w, b, ref, tol, interior_ok, rerun):
    """What a wrong output most likely means, for this task."""
    written = ~lab_check.unwritten(y) & ~torch.isnan(y)
    product = x.double() @ w.double().T
    rows_bias = torch.zeros(y.shape[0], dtype=torch.float64, device=y.device)
    rows_bias[:min(y.shape[0], b.numel())] = b.double()[:y.shape[0]]  # b read by row; zero past its end
    M, N = y.shape
    at = (torch.arange(M, device=y.device)[:, None] // TILE[0] * TILE[0] + torch.arange(N, device=y.device) % TILE[1])
    at_row_tile = torch.where(at < N, b.double()[at.clamp(max=N - 1)], 0.0)  # each tile's bias box at off_m
    for candidate, meaning in ((product, "the bias is missing: add it in the epilogue, one value per column"),
                               (product + rows_bias[:, None], "the bias is added along the rows (one value per m); "
                                "it belongs to the output features: one value per column n, bias[None, :]"),
                               (product + at_row_tile, "each tile's bias is loaded at its row offset, "
                                "b_desc.load([off_m]); the bias goes with the columns: b_desc.load([off_n])")):
        if written.any() and lab_check.rel_err(y[written], candidate[written]) < 1e-2:
            return " - " + meaning
    hint = likely(y, ref, x, w, *TILE, tol, rerun, w_indexing=W_BY_DESCRIPTOR, k_tail=K_TAIL_BY_DESCRIPTOR)
    if interior_ok and "fp16 rounding" not in hint:
        hint += (" - tiles that lie inside the tensors came out right, so the edges are the problem: give every "
                 "descriptor the tensor's own shape ([M, K], [N, K], [N], [M, N]); TMA zero-fills loads past it "
                 "and clips the store")
    return hint


def _values(linear, shapes, interior_ok=False, blocks=""):
    """Check ``linear`` on each shape; ``blocks``: the kernel's block shape mistakes, named on any failure. Values
    right but lanes let past an edge, with no bound named (they ran to the tile's end: a size too large, or no
    bound), is said only after the other shapes: one where the same wrong size falls short names it."""
    vague = None
    for M, N, K, dtype in shapes:
        x = lab_check.operand(M, K, dtype=torch.float16, extra=8)
        w = lab_check.operand(N, K, dtype=torch.float16, extra=24)
        b = lab_check.operand(N, dtype=torch.float16)
        y = lab_check.poisoned(M, N, dtype=dtype)
        layout = gemm_layout(M, N, K, TILE, bias="b", offsets=True)
        try:
            with trace.watching(layout, x=x, W=w, b=b, y=y) as seen:
                if with_hints(lambda: linear(x, w, b, *TILE, 2, out=y)) is None:
                    raise NotImplementedError
        except Exception as e:
            if not blocks or lab_check.is_stub(e):
                raise  # (a Diagnosis too: with a block shape mistake, the block shape is named after it)
            raise AssertionError(f"{e if isinstance(e, AssertionError) else lab_check.explain(e)} - {blocks}") from None
        ref = x.double() @ w.double().T + b.double()
        tol = 1e-2 if dtype == torch.float16 else 1e-5
        try:
            lab_check.compare(f"{M}x{K} @ ({N}x{K})^T + b into {str(dtype).removeprefix('torch.')}", y, ref, tol)
        except AssertionError as e:
            def rerun():
                return linear(lab_check.zero_guarded(x), lab_check.zero_guarded(w), lab_check.zero_guarded(b), *TILE, 2,
                              out=lab_check.poisoned(M, N, dtype=dtype))
            raise trace.after(seen, layout, AssertionError(f"{e}{_likely(y, x, w, b, ref, tol, interior_ok, rerun)}"
                                                           + (f" - {blocks}" if blocks else ""))) from None
        told = trace.after(seen, layout)
        if told and "its bound is" not in str(told):
            vague = vague or told
        elif told:
            raise told
    if vague:
        raise vague


def compile_linear(kernel, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, stages=3, size=4096):
    x, w, y = (torch.empty(size, size, device=DEVICE, dtype=torch.float16) for _ in range(3))
    _, args, meta = launch_args(x, w, x[0], y, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    return aot.compile_sm90(kernel, *args, **meta)


def through_tma(compiled):
    """Raise AssertionError unless every global access of the compiled kernel is a TMA copy."""
    counts = compiled.counts()
    if not counts["wgmma"] and not counts["mma.sync"]:
        raise AssertionError("no tl.dot in the compiled code (no wgmma, no mma): multiply the tiles with tl.dot")
    problems = []
    if counts["cp.async"]:
        problems.append(f"{counts['cp.async']} cp.async: a tile of x or W still comes through pointers (lesson 02's "
                        "cp.async); load both through their descriptors, desc.load([row, col])")
    if counts["ld.global"]:
        problems.append(f"{counts['ld.global']} ld.global: something is still loaded through a pointer (the bias? "
                        "it can have a descriptor too: shape [N], strides [1], block [BLOCK_N])")
    if counts["st.global"] or not counts["cp.async.bulk.tensor store"]:
        problems.append(f"{counts['st.global']} st.global and {counts['cp.async.bulk.tensor store']} TMA stores: y "
                        "is stored through pointers; store the tile through y's descriptor, desc.store([row, col], tile)")
    if not counts["cp.async.bulk.tensor load"]:
        problems.append("no cp.async.bulk.tensor load at all: the tiles do not come through descriptors")
    if problems:
        raise AssertionError("; ".join(problems))
    return (f"{counts['cp.async.bulk.tensor load']} TMA loads (UTMALDG: {counts['UTMALDG']}), "
            f"{counts['cp.async.bulk.tensor store']} TMA store, {counts['mbarrier']} mbarrier operations; "
            "no ld.global, st.global or cp.async: every byte through a tensor map")


def ragged_shapes(rng):
    """The edges check's three (M, N, K, output dtype). N a multiple of 8: on the H200 a TMA store through a map
    131 (or 194) fp16 columns wide also wrote the padding up to the next 16 bytes (columns 131-135), while loads
    zero-filled exactly at K. Each shape has a different one of M, N and K the largest by far, so a bound, a loop
    or a tile count written with the wrong one is wrong on one of them (drawn from one range, a K loop to
    cdiv(M, BLOCK_K) passed whenever every shape gave M and K the same number of steps)."""
    small, large = (lambda: rng.randint(65, 120)), (lambda: rng.randint(200, 320))
    return [(large(), 8 * rng.randint(9, 15), small(), torch.float16),
            (small(), 8 * rng.randint(25, 40), small(), torch.float16),
            (small(), 8 * rng.randint(9, 15), large(), torch.float32)]


def check(linear, kernel):
    """``linear(x, w, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None)`` launches ``kernel`` (arguments as in
    ``launch_args``) into ``out``."""
    rng = lab_check.rng()
    blocks = block_shape_mistakes(kernel)

    def interior():
        _values(linear, [(*INTERIOR, torch.float16)], blocks=blocks)
        return "right where every tile lies inside the tensors"

    def edges():  # ragged everywhere, K too: only the descriptors' shapes keep the edges right
        try:
            _values(linear, [(*INTERIOR, torch.float16)], blocks=blocks)
            interior_ok = True
        except AssertionError:
            interior_ok = False
        _values(linear, ragged_shapes(rng), interior_ok, blocks)
        return ("within 1e-2 of torch on two ragged shapes into fp16, 1e-5 on one into fp32: the zero fill and "
                "the clipped store did the masks' work")

    def code():
        return through_tma(with_hints(lambda: compile_linear(kernel)))

    return lab_check.run("exercise 03", [("linear layer: values, whole tiles", interior),
                                         ("linear layer: values, ragged edges (no masks)", edges),
                                         ("linear layer: through TMA only", code)], twin=True)


def stretch(linear_host, kernel):
    """The optional stretch goal: the same layer with host-side descriptors. ``linear_host(x, w, b, BLOCK_M,
    BLOCK_N, BLOCK_K, stages, out=None)`` builds them and launches ``kernel(x_desc, w_desc, b_desc, y_desc, M, N,
    K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)``."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    rng = lab_check.rng()

    def values():  # a tall shape and a wide one (tile counts differ both ways), into fp16 and into fp32
        _values(linear_host, [(rng.randint(400, 600), 8 * rng.randint(9, 16), rng.randint(65, 300), torch.float16),
                              (rng.randint(65, 120), 8 * rng.randint(40, 70), rng.randint(65, 300), torch.float32)])
        return "right on a tall and a wide ragged shape, into fp16 and into fp32"

    def code():
        x, w, y = (torch.empty(4096, 4096, device=DEVICE, dtype=torch.float16) for _ in range(3))
        BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
        descs = (TensorDescriptor.from_tensor(x, [BLOCK_M, BLOCK_K]), TensorDescriptor.from_tensor(w, [BLOCK_N, BLOCK_K]),
                 TensorDescriptor.from_tensor(x[0], [BLOCK_N]), TensorDescriptor.from_tensor(y, [BLOCK_M, BLOCK_N]))
        compiled = aot.compile_sm90(kernel, *descs, 4096, 4096, 4096, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                    BLOCK_K=BLOCK_K, GROUP_M=8, num_stages=3, num_warps=8)
        return through_tma(compiled)

    lab_check.run("stretch (optional)", [("host descriptors: values", values), ("host descriptors: through TMA", code)], twin=True)
