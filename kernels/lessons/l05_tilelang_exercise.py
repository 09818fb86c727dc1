"""The check behind exercises/05_tilelang.ipynb: a TileLang GEMM whose B is stored N x K, as nn.Linear
keeps its weight: C = A @ B^T. Its values (on a Hopper GPU; without one, through TileLang's own C
backend on this CPU), its accumulator, and in the sm_90a CUDA TMA loads and a ring that grows with the
stage count. ``check_stretch`` does the same for the stretch goal, relu(A @ B^T + bias)."""
import contextlib
import logging
import os
import random
import re

import torch

from ..lab import check as lab_check
from ..lab.errors import CourseError
from ..lab.mode import MODE
from ..ops import tilelang_kernels as tk

TILE = (128, 128, 64)  # block_M, block_N, block_K of the checks that read the program and its CUDA
VALUES_TILE = (128, 64, 64)  # of the values: block_M != block_N, so a buffer with the two swapped does not fit


def _ragged(lo, hi, block):
    """A size in [lo, hi), a multiple of 8 (16-byte rows for TMA) and not of ``block``."""
    while True:
        n = 8 * random.randint(lo // 8, hi // 8 - 1)
        if n % block:
            return n


def _shape(m, n, k):
    """(M, N, K) drawn by ``_ragged`` from the ranges ``m``, ``n`` and ``k`` ((lo, hi) each), with a different
    number of row and column tiles: a grid whose axes are swapped covers a square of tiles only."""
    while True:
        M, N = _ragged(*m, VALUES_TILE[0]), _ragged(*n, VALUES_TILE[1])
        if -(-M // VALUES_TILE[0]) != -(-N // VALUES_TILE[1]):
            return M, N, _ragged(*k, VALUES_TILE[2])


# ---- what the program says, read from its TIR before TileLang lowers it ---------------------------

def _buffer(region):
    """The buffer of a ``T.region(...)`` argument of a tile operation."""
    return region.args[0].buffer


def reading(func):
    """The tile operations of a prim_func in program order: ("gemm", A, B, C, transpose_B, clear_accum),
    ("fill", buffer), ("store", buffer), ("copy", source, destination) for each T.copy, ("pipelined", num_stages,
    trip count) for each T.Pipelined loop and ("parallel", extents, buffers stored) for each nest of T.Parallel
    loops; first of all ("params", the kernel's tensors)."""
    from tvm import tirx
    ops, nested = [("params", [func.buffer_map[p] for p in func.params if p in func.buffer_map])], []

    def stores(node):
        found = []
        tirx.stmt_functor.post_order_visit(node, lambda n: found.append(n.buffer)
                                           if isinstance(n, tirx.BufferStore) else None)
        return found

    def visit(node):
        if isinstance(node, tirx.For) and "num_stages" in node.annotations:
            ops.append(("pipelined", int(node.annotations["num_stages"]), _int(node.extent)))
        elif isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL \
                and not any(node.same_as(n) for n in nested):
            extents, inner = [], node
            while isinstance(inner, tirx.For) and inner.kind == tirx.ForKind.PARALLEL:
                extents.append(_int(inner.extent))
                inner = inner.body
                nested.append(inner)
            ops.append(("parallel", tuple(extents), stores(node)))
        elif isinstance(node, tirx.Call) and getattr(node.op, "name", "") == "tl.tileop.gemm":
            a = node.args
            ops.append(("gemm", _buffer(a[0]), _buffer(a[1]), _buffer(a[2]), bool(a[4]), bool(a[9])))
        elif isinstance(node, tirx.Call) and getattr(node.op, "name", "") == "tl.tileop.copy":
            ops.append(("copy", _buffer(node.args[0]), _buffer(node.args[1])))
        elif isinstance(node, tirx.Call) and getattr(node.op, "name", "") == "tl.tileop.fill":
            ops.append(("fill", _buffer(node.args[0])))
        elif isinstance(node, tirx.BufferStore):
            ops.append(("store", node.buffer))
        return True

    tirx.stmt_functor.pre_order_visit(func.body, visit)
    return ops


def _int(expr):
    """A TIR extent as an int (None where it is not a constant)."""
    try:
        return int(expr)
    except (TypeError, ValueError):
        return None


def _dims(buffer):
    return tuple(_int(d) for d in buffer.shape)


def _gemm(ops):
    gemms = [op for op in ops if op[0] == "gemm"]
    if not gemms:
        params = next((op[1] for op in ops if op[0] == "params"), [])
        loaded = sorted({op[2].name for op in ops if op[0] == "copy" and not any(op[2].same_as(p) for p in params)})
        if len(loaded) >= 2:  # the tiles are loaded: a body written, its multiply missing
            raise AssertionError(f"the program copies tiles into {' and '.join(loaded)} and nothing multiplies them: "
                                 "it has no T.gemm; in the K loop, after the copies, T.gemm(A_s, B_s, acc, "
                                 "transpose_B=True)")
        raise lab_check.NotAttempted("no T.gemm in the program: the kernel body is still the stub")
    return gemms[0]


def _uncleared(ops):
    """The accumulator's name if the first T.gemm reads it before anything wrote it."""
    _, _, _, acc, _, clear = _gemm(ops)
    for op in ops:
        if op[0] == "gemm":
            return None if clear else acc.name
        if op[0] in ("fill", "store") and op[1].same_as(acc):
            return None


# ---- building and running ----------------------------------------------------------------------

# TileLang's messages for mistakes learners make, and what each means for this program
HINTS = {"K shape check failed": "T.gemm multiplies A_s (block_M x block_K) by B_s as block_K x block_N unless told "
                                 "otherwise: B_s holds a block_N x block_K tile of B, so pass transpose_B=True",
         "N shape check failed": "the B tile is block_N x block_K here (B is N x K): allocate B_s that way and pass "
                                 "transpose_B=True to T.gemm",
         "M shape check failed": "T.gemm's accumulator is block_M x block_N, A_s's rows by B_s's rows: allocate acc "
                                 "as T.alloc_fragment((block_M, block_N), \"float32\") (the values check's tiles are "
                                 f"{VALUES_TILE[0]} x {VALUES_TILE[1]}, so the order matters)"}


@contextlib.contextmanager
def _quiet():
    """TileLang logs a failed build at CRITICAL with the whole generated source: the check says it shorter."""
    tk.tilelang()
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict) if n.startswith("tilelang")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@contextlib.contextmanager
def _calls():
    """While a program is built: each T.alloc_shared, T.alloc_fragment and T.gemm it calls, as (function, args,
    kwargs, the learner's source line, what the call returned), so that a program TileLang refuses can be explained
    by what it was given."""
    import linecache
    import tilelang.language as T
    from tilelang.language.eager.builder import Builder
    calls, saved = [], {}

    def line():
        try:
            b = Builder.current()
            # TileLang makes the file's name absolute: "<cell>" comes back as "/cwd/<cell>"
            name = b.current_file if linecache.getline(b.current_file, b.current_line) else \
                os.path.basename(b.current_file)
            return _without_comment(linecache.getline(name, b.current_line).strip())
        except Exception:  # noqa: BLE001 - no builder, no line: the diagnosis goes without it
            return ""

    def recording(name, fn):
        def call(*args, **kwargs):
            entry = [name, args, kwargs, line(), None]
            calls.append(entry)
            entry[4] = fn(*args, **kwargs)
            return entry[4]
        return call

    for name in ("alloc_shared", "alloc_fragment", "gemm"):
        saved[name] = getattr(T, name)
        setattr(T, name, recording(name, saved[name]))
    try:
        yield calls
    finally:
        for name, fn in saved.items():
            setattr(T, name, fn)


def _without_comment(line):
    """A line of Python without its trailing comment."""
    import io
    import tokenize
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return line[:tok.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return line


def _swapped_call(line, name):
    """``line``'s call of T.<name> with its first two arguments swapped, as code; None where it has no such call."""
    import ast
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == name and len(node.args) >= 2:
            node.args[:2] = node.args[1::-1]
            return ast.unparse(node)
    return None


def _refused(calls, cfg, msg):
    """What the recorded calls say about a program TileLang refused with ``msg``, in words; None when nothing."""
    for name, args, kwargs, line, _ in calls:
        if name.startswith("alloc_") and len(args) >= 2 and isinstance(args[0], str) and \
                isinstance(args[1], (tuple, list)):
            fixed = _swapped_call(line, name)
            at = f"`{line}` passes" if line else f"T.{name}({args[0]!r}, {tuple(args[1])}) passes"
            return (f"T.{name} takes the shape first, then the dtype: {at} the two swapped"
                    + (f"; write {fixed}" if fixed else ""))
    _, _, _, block_M, block_N, block_K, _ = cfg
    for name, args, kwargs, line, _ in calls:
        if name != "gemm" or "K shape check failed" not in msg or len(args) < 2 or not kwargs.get("transpose_B"):
            continue
        alloc = next((c for c in calls if c[0].startswith("alloc_") and c[4] is not None and c[4].same_as(args[1])),
                     None)
        dims = tuple(_int(d) for d in getattr(args[1], "shape", ()))
        if alloc and dims == (block_K, block_N) != (block_N, block_K):
            at = f"`{alloc[3]}` allocates it" if alloc[3] else "T.gemm's B operand is allocated"
            return (f"with transpose_B=True T.gemm takes the B tile as it lies in memory, block_N x block_K, but {at} "
                    f"block_K x block_N ({block_K} x {block_N}): the shape's two extents are swapped; allocate it "
                    "(block_N, block_K)")
    return None


def build(program, *cfg, plain=False):
    """``program(*cfg)``, the prim_func, built (not compiled); a mistake TileLang refuses becomes an
    AssertionError that says what it means here. ``plain``: with plain memory, for TileLang's C backend."""
    calls = []
    try:
        with (tk.plain_memory() if plain else contextlib.nullcontext()), _quiet(), _calls() as calls:
            return program(*cfg)
    except Exception as e:
        if lab_check.is_stub(e):
            raise
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        why = _refused(calls, cfg, msg)
        if why:
            short = msg.split(". ")[-1] if "Mismatched type" in msg else msg
            raise AssertionError(f"TileLang refuses the program: {why} (TileLang: {short})") from None
        hint = next((h for key, h in HINTS.items() if key in msg), None)
        raise AssertionError(f"TileLang refuses the program: {msg}" + (f" ({hint})" if hint else "")) from None


class _Programs:
    """The learner's program built and compiled once per configuration within one check."""

    def __init__(self, program):
        self.program, self.gpu, self.built = program, {}, {}

    def func(self, *cfg, plain=False):
        if (cfg, plain) not in self.built:
            self.built[cfg, plain] = build(self.program, *cfg, plain=plain)
        return self.built[cfg, plain]

    def cuda(self, *cfg):
        """(kernel, CUDA source) compiled for sm_90a."""
        if cfg not in self.gpu:
            func = self.func(*cfg)
            _gemm(reading(func))
            try:
                kernel = tk.build(func)
            except CourseError as e:
                raise AssertionError(str(e)) from None
            self.gpu[cfg] = kernel, kernel.get_kernel_source()
        return self.gpu[cfg]

    def runnable(self, *cfg):
        """A kernel that runs here: the sm_90a one on a Hopper GPU, TileLang's C backend elsewhere."""
        if MODE == "hopper":
            return self.cuda(*cfg)[0], "cuda"
        func = self.func(*cfg, plain=True)
        _gemm(reading(func))
        try:
            return tk.build_cpu(func), "cpu"
        except CourseError as e:  # a program the CUDA backend may take; without a GPU its values stay unchecked
            raise AssertionError(f"{e}; without a Hopper GPU the values cannot be checked otherwise (the CUDA "
                                 "checks below still run)") from None


GRID = ("T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), ...) as (bx, by): bx counts the column tiles and by "
        "the row tiles, and tile (by, bx) reads A[by * block_M, ...] and B[bx * block_N, ...] and goes to "
        "C[by * block_M, bx * block_N]")


def _swapped_axes(out, ref, tol):
    """What says that the grid's axes (bx, by) are swapped somewhere, in words; "" when nothing does."""
    tm, tn = -(-out.shape[0] // VALUES_TILE[0]), -(-out.shape[1] // VALUES_TILE[1])
    never = lab_check.per_tile_count(lab_check.unwritten(out), *VALUES_TILE[:2]) > 0
    wrong = ~lab_check.unwritten(out) & lab_check.far_off(out, ref, tol)
    off = lab_check.per_tile_count(wrong, *VALUES_TILE[:2]) > 0
    square = torch.zeros_like(never)
    square[:min(tm, tn), :min(tm, tn)] = True
    if never.any() and bool((never == ~square).all()) and not off[square].any():
        return (f" - grid axes swapped: C has {tm} row tiles and {tn} column tiles, and only the first {min(tm, tn)} x "
                f"{min(tm, tn)} were written, each right: bx walked the rows and by the columns. {GRID}")
    moved = lab_check.misplaced(out, ref, *VALUES_TILE[:2], tol)
    if moved and all(t == o[::-1] for t, o in moved):
        return (" - grid axes swapped where a tile is loaded or stored: tile (r, c) holds the values of tile (c, r). "
                f"{GRID}")
    return ""


def _program_mistakes(func, trips, changed=None):
    """What the program itself says is wrong, read from its TIR, in words ("" when nothing): a T.copy whose source
    and destination are swapped, an operand of T.gemm nothing loads, a K loop of the wrong trip count, a T.Parallel
    nest whose extents are the fragment's swapped. ``trips(K)``: the trip count of the program's K loop built at
    that K (block_K = VALUES_TILE[2]), to tell which expression it counts; ``changed``: {input's name: whether the
    run changed it}."""
    ops = reading(func)
    params = [func.buffer_map[p] for p in func.params]
    inputs, out = params[:-1], params[-1]
    is_param = lambda buf: any(buf.same_as(p) for p in params)
    written = lambda buf: any(op[0] == "copy" and op[2].same_as(buf) or op[0] in ("store", "fill") and
                              op[1].same_as(buf) for op in ops)
    said = []
    for op in ops:
        if op[0] != "copy":
            continue
        src, dst = op[1], op[2]
        if any(dst.same_as(i) for i in inputs) and not is_param(src):
            seen = f" ({dst.name} changed while the kernel ran)" if (changed or {}).get(dst.name) else ""
            unloaded = "" if written(src) else f", and nothing loads {src.name}"
            said.append(f"T.copy({src.name}, {dst.name}[...]) copies {src.name} into {dst.name}, an input of the "
                        f"kernel{seen}{unloaded}: T.copy takes the source first, then the destination, and here the "
                        f"two are swapped; T.copy({dst.name}[...], {src.name}) loads the tile")
        elif src.same_as(out) and not is_param(dst) and not written(out):
            said.append(f"T.copy({out.name}[...], {dst.name}) copies {out.name}, the output, into {dst.name}, and "
                        f"nothing writes {out.name}: T.copy takes the source first, then the destination, and here "
                        f"the two are swapped; T.copy({dst.name}, {out.name}[by * block_M, bx * block_N]) stores the "
                        "tile")
    if said:
        return "; ".join(said)
    gemms = [op for op in ops if op[0] == "gemm"]
    if gemms:
        for operand, which, at in ((gemms[0][1], 0, "by * block_M"), (gemms[0][2], 1, "bx * block_N")):
            if not written(operand) and not is_param(operand) and len(inputs) > which:
                g = inputs[which].name
                said.append(f"nothing copies a tile into {operand.name}, T.gemm's {g} operand, so each step "
                            f"multiplies whatever {operand.name} held: in the K loop, T.copy({g}[{at}, k * block_K], "
                            f"{operand.name}) at every step")
    if said:
        return "; ".join(said)
    block_K = VALUES_TILE[2]
    K = _dims(inputs[0])[1] if inputs and len(_dims(inputs[0])) == 2 else None
    loops = [op for op in ops if op[0] == "pipelined"]
    if K and loops and loops[0][2] is not None and loops[0][2] != -(-K // block_K):
        t, steps = loops[0][2], -(-K // block_K)
        said.append(f"the K loop runs {t} step{'s' if t != 1 else ''} where K = {K} needs T.ceildiv(K, block_K) = "
                    f"{steps}")
        other = block_K // 2
        if t == -(-block_K // K) and trips(other) == -(-block_K // other) != -(-other // block_K):
            said[-1] += (f": it runs T.ceildiv(block_K, K) steps ({t} here, {-(-block_K // other)} at K = {other}), "
                         "T.ceildiv with its arguments swapped")
    for op in ops:
        if op[0] != "parallel" or len(op[1]) != 2:
            continue
        for buf in {b.name: b for b in op[2]}.values():
            dims = _dims(buf)
            if len(dims) == 2 and tuple(op[1]) == dims[::-1] != dims:
                said.append(f"the T.Parallel loops over {buf.name} run {op[1][0]} x {op[1][1]}, and {buf.name} is "
                            f"{dims[0]} x {dims[1]}: their extents are swapped; T.Parallel(block_M, block_N) "
                            f"covers the {'fragment' if buf.scope() == 'local.fragment' else 'tile'}")
    return "; ".join(said)


def _coverage(func):
    """(rows, columns) of the accumulator tile that the epilogue's T.Parallel nest covers, where it covers less than
    the whole tile; None otherwise."""
    ops = reading(func)
    gemms = [op for op in ops if op[0] == "gemm"]
    if not gemms:
        return None
    acc = gemms[0][3]
    dims = _dims(acc)
    for op in ops:
        if op[0] == "parallel" and len(op[1]) == 2 and any(b.same_as(acc) for b in op[2]) and None not in op[1]:
            rows, cols = min(op[1][0], dims[0]), min(op[1][1], dims[1])
            if (rows, cols) != dims:
                return rows, cols
    return None


def _compare(name, out, ref, tol, candidates, uncleared, mistakes=lambda: ""):
    """lab_check.compare_tiles; an accumulator never cleared, what the program's TIR says is wrong (``mistakes()``,
    in words), C never written, or the grid's axes swapped, explained for TileLang."""
    try:
        return lab_check.compare_tiles(name, out, ref, tol, *VALUES_TILE[:2], candidates)
    except AssertionError as e:
        if uncleared:
            raise AssertionError(f"{name}: {uncleared} is never cleared before the K loop, so each tile adds its "
                                 f"product to whatever {uncleared} held before (garbage, NaN, another tile's sum): "
                                 f"T.clear({uncleared}) first") from None
        said = mistakes()
        if said:
            raise AssertionError(f"{e}; in the program, {said}") from None
        if lab_check.unwritten(out).all():
            raise AssertionError(f"{e}; copy the accumulator out at the end, T.copy(acc, C[...]) at the tile's own "
                                 "row and column") from None
        swapped = _swapped_axes(out, ref, tol)
        if swapped:
            raise AssertionError(f"{e}{swapped}") from None
        raise


def _values(programs, epilogue):
    cpu = MODE != "hopper"
    shapes = [_shape((136, 296), (136, 296), (72, 248))] if cpu else \
        [_shape((200, 700), (240, 720), (240, 720)) for _ in range(2)]
    uncleared = _uncleared(reading(programs.func(1024, 1024, 1024, *TILE, 3)))
    BM, BN, BK = VALUES_TILE
    for M, N, K in shapes:
        kernel, where = programs.runnable(M, N, K, *VALUES_TILE, 3)
        func = programs.func(M, N, K, *VALUES_TILE, 3)
        device = "cuda" if where == "cuda" else "cpu"
        a = lab_check.operand(M, K, device=device, padded=False)  # TileLang takes contiguous tensors
        b = lab_check.operand(N, K, device=device, padded=False)  # stored N x K, as nn.Linear's weight
        c = lab_check.poisoned(M, N, device=device, padded=False)  # TileLang takes C contiguous: bands only
        product = a.float() @ b.float().T
        steps, k_full = -(-K // BK), K // BK * BK
        kn = min(K, N)
        b_as_kxn = torch.zeros(K, N, device=device)
        b_as_kxn[:kn, :kn] = b[:kn, :kn].float()
        if epilogue:
            bias = lab_check.operand(N, device=device)
            biasf = bias.float()
            done, as_done = (lambda x: torch.relu(x + biasf)), (lambda w: f"relu(P + bias), P being {w}")
        else:
            done, as_done = (lambda x: x), (lambda w: w)
        # what the product comes out as for a mistake in the tiles or the K loop, before any epilogue
        products = [("A @ B with B read as if it were stored K x N", ": B is N x K here, so B's tile at step k is "
                     "B[bx * block_N, k * block_K], block_N x block_K, multiplied with transpose_B=True",
                     a.float() @ b_as_kxn),
                    (f"A @ B^T over the first {k_full} of K = {K} columns only", ": the K loop stops before the "
                     "last, partial step (T.ceildiv(K, block_K) steps, TMA fills the rest of that tile with zeros)",
                     a[:, :k_full].float() @ b[:, :k_full].float().T)]
        products += [(f"A @ B^T over the first {t} of the {steps} K steps", ": the K loop stops early; it must run "
                      "T.ceildiv(K, block_K) steps", a[:, :t * BK].float() @ b[:, :t * BK].float().T)
                     for t in range(1, steps - 1)]
        candidates = [(as_done(w) + why, done(p)) for w, why, p in products]
        before = {"A": a.clone(), "B": b.clone()}
        if epilogue:
            kernel(a, b, bias, c)
            ref = torch.relu(product + biasf)
            candidates += [("A @ B^T + bias: the ReLU is missing", product + biasf),
                           ("relu(A @ B^T): the bias is missing", torch.relu(product)),
                           ("relu(A @ B^T) + bias: the ReLU comes before the bias", torch.relu(product) + biasf),
                           ("relu(A @ B^T + bias of the first column tile): every tile adds bias[0:block_N]; "
                            "offset it by the tile's column, bx * block_N", torch.relu(product + biasf[
                                torch.arange(N, device=device) % BN])),
                           ("A @ B^T: the epilogue is missing", product)]
            written = c[~lab_check.unwritten(c)]
            floor = float(written.float().min()) if written.numel() else 0.0
            if floor != 0 and floor == floor:
                candidates.append((f"max(A @ B^T + bias, {floor:g}): the ReLU clamps at {floor:g} in place of 0; "
                                   "T.max(acc[i, j] + bias[...], 0)", torch.clamp(product + biasf, min=floor)))
            covered = _coverage(func)
            if covered:
                rows, cols = covered
                inside = ((torch.arange(M, device=device) % BM < rows)[:, None]
                          & (torch.arange(N, device=device) % BN < cols)[None, :])
                part = " and ".join([f"rows 0-{rows - 1}"] * (rows < BM) + [f"columns 0-{cols - 1}"] * (cols < BN))
                candidates.append((f"relu(A @ B^T + bias) in {part} of each {BM} x {BN} tile and A @ B^T elsewhere: "
                                   f"the epilogue's T.Parallel covers {rows} x {cols} of the tile, and the rest gets "
                                   "no bias and no ReLU", torch.where(inside, ref, product)))
        else:
            kernel(a, b, c)
            ref = product
        def trips(k, M=M, N=N):
            try:
                return next((op[2] for op in reading(programs.func(M, N, k, *VALUES_TILE, 3)) if op[0] == "pipelined"),
                            None)
            except AssertionError:  # TileLang refuses the program at that K: nothing to tell from it
                return None
        changed = lambda: {name: not torch.equal(t, before[name]) for name, t in (("A", a), ("B", b))}
        err = _compare(f"{M}x{K} @ ({N}x{K})^T", c, ref, 1e-2, candidates, uncleared,
                       lambda: _program_mistakes(func, trips, changed()))
    how = ("run on this GPU" if not cpu else
           "run by TileLang's C backend on this CPU (the same program, blocks one after another)")
    sizes = ", ".join(f"{M}x{N}x{K}" for M, N, K in shapes)
    return f"within 1e-2 of torch ({err:.1e}) at M x N x K = {sizes}, {how}"


def _accumulator(programs):
    ops = reading(programs.func(1024, 1024, 1024, *TILE, 3))
    _, _, _, acc, _, _ = _gemm(ops)
    if str(acc.dtype) != "float32":
        raise AssertionError(f"T.gemm accumulates into {acc.name}, a {acc.dtype} buffer: sums over K lose precision "
                             "in fp16; allocate the accumulator as T.alloc_fragment(..., \"float32\") and convert only "
                             "when it is copied out")
    name = _uncleared(ops)
    if name:
        raise AssertionError(f"{name} is read by the first T.gemm before anything writes it: each tile would start "
                             f"from whatever its registers held; T.clear({name}) before the K loop")
    return f"{acc.name}: float32, cleared before the K loop"


def _tma(programs):
    _, src = programs.cuda(1024, 1024, 1024, *TILE, 3)
    if "tma_load" not in src:
        raise AssertionError("no tma_load in the emitted CUDA: copy the A and B tiles into T.alloc_shared buffers "
                             "with T.copy inside a T.Pipelined loop; outside a pipelined loop TileLang loads "
                             "global -> shared with plain vector loads")
    return f"{src.count('tma_load')} tma_load call sites, {src.count('.wait(')} barrier waits, wgmma"


def _ring(programs):
    barriers = {}
    for stages in (1, 3):
        _, src = programs.cuda(1024, 1024, 1024, *TILE, stages)
        found = re.search(r"mbarrier_mem\[(\d+)\]", src)
        barriers[stages] = int(found.group(1)) if found else 0
    if barriers[3] <= barriers[1]:
        asked = [op[1] for op in reading(programs.func(1024, 1024, 1024, *TILE, 3)) if op[0] == "pipelined"]
        why = (f"the program's pipelined loop has num_stages={asked[0]} when stages=3 is asked: pass it on, "
               "T.Pipelined(..., num_stages=stages)" if asked else
               "the program has no T.Pipelined loop: write the K loop as T.Pipelined(..., num_stages=stages)")
        raise AssertionError(f"{barriers[1]} mbarriers at 1 stage and {barriers[3]} at 3: the ring does not grow; {why}")
    return f"{barriers[1]} mbarriers at 1 stage, {barriers[3]} at 3: a full/empty pair per buffer of the ring"


def _checks(program, epilogue):
    programs = _Programs(program)
    try:  # one line for a program TileLang refuses, not the same line from every check
        programs.func(1024, 1024, 1024, *TILE, 3)
    except AssertionError as e:
        def refused(e=e):
            raise e
        return [("the program builds", refused)]
    except Exception as e:
        if not lab_check.is_stub(e):
            raise
    if MODE != "hopper":
        print("(no Hopper GPU here: the values come from TileLang's own C backend on this CPU - your program with its "
              "shared and fragment buffers in ordinary memory, run block after block - so the tile coordinates, the "
              "K loop" + (", the transpose and the epilogue" if epilogue else " and the transpose") + " are checked; "
              "TMA, the ring and wgmma are read from the sm_90a CUDA, not run)")
    return [("values", lambda: _values(programs, epilogue)),
            ("accumulator", lambda: _accumulator(programs)),
            ("tma_load in the CUDA", lambda: _tma(programs)),
            ("stages: the ring grows", lambda: _ring(programs))]


def check(program):
    """``program(M, N, K, block_M, block_N, block_K, stages)`` returns a TileLang prim_func computing
    C = A @ B^T with A (M, K), B (N, K), C (M, N), fp16 in and out."""
    return lab_check.run("exercise 05", _checks(program, epilogue=False))


def check_stretch(program):
    """The stretch goal: ``program(...)`` as in ``check``, its prim_func taking (A, B, bias, C) with a bias
    of N elements and computing C = relu(A @ B^T + bias)."""
    return lab_check.run("exercise 05, stretch", _checks(program, epilogue=True)[:2])
