"""What each program of a kernel loaded and stored, read in Triton's interpreter (CPU mode), and what a GEMM's
trace says about its mistakes.

``recording(x=x, w=w, y=y)`` watches every load and store (pointer or descriptor) while a kernel runs and
tells, for each, which of the named tensors it touched, where its tile starts, how far the tile reaches along
each of the tensor's dimensions, and how many of its lanes the mask let through to memory outside the tensor.
``gemm_story(trace, layout)`` compares a tiled GEMM's trace with what each program must do (load its row
tile of A and its column tile of B at every K step, store its tile of C) and says the first thing that
differs, in the kernel's own terms (``pid_n * BLOCK_M where pid_m * BLOCK_M belongs``). Values alone say that
an output is wrong; the trace says which load made it so. The interpreter only: on a GPU ``recording`` yields
None."""
import contextlib
import hashlib
import itertools
import os
from dataclasses import dataclass, field

import numpy as np


# while this names a file, every trace recorded is appended to it, a line per access (the mutation tester compares a
# mutant's with the solution's on the same seeded inputs)
TRACE_LOG = "COURSE_TRACE_LOG"


@dataclass
class Access:
    program: int
    op: str                 # "load" or "store"
    tensor: str             # the named tensor its tile starts in or next to ("?" when none is near)
    block: tuple            # the tile's shape
    origin: tuple           # coordinates in ``tensor`` of the tile's first element (may lie outside it)
    axes: tuple             # per tile axis: (the tensor dimension it walks, or None if none, elements per step)
    lanes: int              # lanes the mask let through
    outside: int            # of those, lanes outside the tensor
    past: tuple = ()        # per tensor dimension, the furthest coordinate past the end that a lane reached
    hidden: tuple = ()      # per tensor dimension, (first, last) coordinate of the lanes inside the tensor that the
    # mask held back (None where none was): a mask tighter than the tensor
    declared: tuple = ()    # a descriptor's shape (a descriptor access only)
    grid: tuple = ()        # the program's index along each grid axis
    digest: str = ""        # a store's values (only while the mutation tester logs traces)
    cut: tuple = ()         # per tensor dimension, the first coordinate past the end where the mask stopped lanes


@dataclass
class Trace:
    tensors: dict
    accesses: list = field(default_factory=list)

    def of(self, program):
        return [a for a in self.accesses if a.program == program]


class _Tensor:
    def __init__(self, t):
        self.base, self.elem = t.data_ptr(), t.element_size()
        self.shape, self.strides = tuple(t.shape), tuple(t.stride())
        span = sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + 1
        self.lo, self.hi = self.base, self.base + span * self.elem

    def distance(self, address):
        return 0 if self.lo <= address < self.hi else min(abs(address - self.lo), abs(address - self.hi))

    def coords(self, addresses):
        """Coordinates (n x dims) of element addresses, the largest stride first; outside ones too."""
        offset = (addresses.astype(np.int64) - self.base) // self.elem
        order = sorted(range(len(self.shape)), key=lambda d: -self.strides[d])
        out = np.zeros((offset.size, len(self.shape)), dtype=np.int64)
        rest = offset.reshape(-1)
        for d in order:
            out[:, d] = rest // self.strides[d]
            rest = rest - out[:, d] * self.strides[d]
        return out


def _access(tensors, program, op, ptrs, mask, desc=None):
    coords, declared, base = desc if desc else (None, (), None)
    ptrs = np.asarray(ptrs)
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), ptrs.shape)
    first = int(ptrs.reshape(-1)[0])
    lane = base if base is not None else int(ptrs[mask][0]) if mask.any() else first  # a descriptor: its base
    name, t = min(tensors.items(), key=lambda kv: kv[1].distance(lane))
    if t.distance(first) > 1 << 24:
        return Access(program, op, "?", ptrs.shape, (), (), int(mask.sum()), int(mask.sum()))
    origin = tuple(int(c) for c in (coords if coords is not None else t.coords(np.array([first]))[0]))
    axes = []
    for ax, n in enumerate(ptrs.shape):
        if n < 2:
            axes.append((None, 0))
            continue
        step = (int(ptrs[tuple(1 if i == ax else 0 for i in range(ptrs.ndim))]) - first) // t.elem
        dims = [d for d, s in enumerate(t.strides) if s == abs(step) and t.shape[d] > 1]
        axes.append((dims[0] if dims and step > 0 else None, step))
    walks = [d for n, (d, _) in zip(ptrs.shape, axes) if n > 1]
    if None not in walks and len(set(walks)) == len(walks):  # a tile along the tensor's dimensions: each lane's
        # coordinates from the tile's origin (an address past the end of a row is not the next row's start)
        lane = np.zeros(ptrs.shape + (len(t.shape),), dtype=np.int64) + np.array(origin, dtype=np.int64)
        for ax, (n, (d, _)) in enumerate(zip(ptrs.shape, axes)):
            if n > 1:
                lane[..., d] += np.arange(n).reshape([-1 if i == ax else 1 for i in range(ptrs.ndim)])
        affine = sum(lane[..., d].astype(np.int64) * t.strides[d] for d in range(len(t.shape))) * t.elem + t.base
    if None not in walks and len(set(walks)) == len(walks) and np.array_equal(affine, ptrs.astype(np.int64)):
        inside, held = lane[mask], lane[~mask]
    else:  # not a plain tile (a clamped or wrapped index): each lane's coordinates from its address
        inside, held = t.coords(ptrs[mask]), t.coords(ptrs[~mask])
    out = np.zeros(len(inside), dtype=bool)
    past = []
    for d, n in enumerate(t.shape):
        out |= (inside[:, d] < 0) | (inside[:, d] >= n)
        past.append(int(inside[:, d].max()) - n + 1 if len(inside) and inside[:, d].max() >= n else 0)
    cut = tuple(int(held[held[:, d] >= n, d].min()) if (held[:, d] >= n).any() else None
                for d, n in enumerate(t.shape))
    valid = np.ones(len(held), dtype=bool)
    for d, n in enumerate(t.shape):
        valid &= (held[:, d] >= 0) & (held[:, d] < n)
    hidden = tuple((int(held[valid, d].min()), int(held[valid, d].max())) if valid.any() else None
                   for d in range(len(t.shape)))
    return Access(program, op, name, tuple(ptrs.shape), origin, tuple(axes), int(mask.sum()), int(out.sum()),
                  tuple(past), hidden, tuple(declared), cut=cut)


@contextlib.contextmanager
def recording(**tensors):
    """While the block runs, record every load and store of the kernels the interpreter runs: yields a Trace
    (None outside the interpreter). Tensors are named as the messages will name them."""
    from .mode import INTERPRET
    if not INTERPRET:
        yield None
        return
    from triton.runtime import interpreter
    builder = interpreter.interpreter_builder
    known = {name: _Tensor(t) for name, t in tensors.items() if t is not None}
    trace = Trace(known)
    load, store = builder.create_masked_load, builder.create_masked_store

    def pid():
        x, y, z = builder.grid_idx
        gx, gy, _ = builder.grid_dim
        return x + gx * (y + gy * z)

    coords = []  # a descriptor's own coordinates, for the masked access it makes next (an address past the end
    # of a row would read as the next row's start)
    names = ("create_masked_load", "create_masked_store", "create_descriptor_load", "create_descriptor_store")
    load_d, store_d = builder.create_descriptor_load, builder.create_descriptor_store

    def note(op, ptrs, mask):
        acc = _access(known, pid(), op, ptrs.data, mask.data, coords.pop() if coords else None)
        acc.grid = tuple(int(i) for i in builder.grid_idx)
        trace.accesses.append(acc)

    def loading(ptrs, mask, *rest, **kw):
        note("load", ptrs, mask)
        return load(ptrs, mask, *rest, **kw)

    def storing(ptrs, value, mask, *rest, **kw):
        note("store", ptrs, mask)
        if LOG:  # what was stored, for the mutation tester's comparison with the solution
            kept = np.asarray(value.data)[np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(value.data))]
            trace.accesses[-1].digest = hashlib.sha1(np.ascontiguousarray(kept).tobytes()).hexdigest()[:12]
        return store(ptrs, value, mask, *rest, **kw)

    def offsets(indices):
        return [int(np.asarray(i.data).reshape(-1)[0]) for i in indices]

    def loading_d(desc, indices, *rest, **kw):
        coords[:] = [(offsets(indices), offsets(desc.shape), int(np.asarray(desc.base.data).reshape(-1)[0]))]
        return load_d(desc, indices, *rest, **kw)

    def storing_d(desc, value, indices, *rest, **kw):
        coords[:] = [(offsets(indices), offsets(desc.shape), int(np.asarray(desc.base.data).reshape(-1)[0]))]
        return store_d(desc, value, indices, *rest, **kw)

    LOG = os.environ.get(TRACE_LOG)
    before = {k: vars(builder)[k] for k in names if k in vars(builder)}
    builder.create_masked_load, builder.create_masked_store = loading, storing
    builder.create_descriptor_load, builder.create_descriptor_store = loading_d, storing_d
    try:
        yield trace
    finally:
        if LOG:
            with open(LOG, "a") as f:
                f.writelines(f"{a.program} {a.op} {a.tensor} {a.origin} {a.block} {a.lanes} {a.outside} {a.hidden} "
                             f"{a.digest}\n" for a in trace.accesses)
        for k in names:
            if k in before:
                setattr(builder, k, before[k])
            else:
                delattr(builder, k)


class Diagnosis(AssertionError):
    """A check's failure that the trace explained (other error handlers pass it on as it is)."""


@contextlib.contextmanager
def watching(layout, **tensors):
    """``recording`` a GEMM kernel's launch: an error it raises comes out as a Diagnosis when the trace so far
    or the error's shapes say what went wrong (else as it was)."""
    from .check import explain, is_stub
    with recording(**tensors) as seen:
        try:
            yield seen
        except Exception as e:
            if is_stub(e) or isinstance(e, Diagnosis):
                raise
            story = layout.story(seen, complete=False) or shape_story(e, layout.sizes)
            if story:
                raise Diagnosis(f"{story} (the kernel stopped: {explain(e)})") from None
            raise


def after(seen, layout, failure=None):
    """After a launch: the Diagnosis to raise for ``failure`` (the values check's AssertionError, or None when the
    values passed) when the trace shows what went wrong, else ``failure`` itself (None: nothing to say)."""
    story = layout.story(seen, edges_only=failure is None)
    if story and failure is None:  # right values from a wrong mechanism (lanes past an edge no store keeps...)
        return Diagnosis(f"the values are right, but {story}")
    if story:
        return Diagnosis(f"{story}. In the values: {failure}")
    return failure


# ---- a tiled GEMM's trace against what each program must do ------------------------------------------------

@dataclass
class Gemm:
    """The layout of a tiled GEMM C = A @ B (+ bias), as the exercise names things.

    ``a``, ``b``, ``c``: (the tensor's name, the logical dimension of each of its dimensions): A is M x K
    ("m", "k"), a weight stored N x K ("n", "k"), B stored K x N ("k", "n"), C ("m", "n"); ``bias``: its name
    (N values) or None. ``sizes``: M, N, K and BLOCK_M, BLOCK_N, BLOCK_K."""
    a: tuple
    b: tuple
    c: tuple
    sizes: dict
    bias: str = None
    row: str = "pid_m"       # the kernel's names for its tile's row and column, and for the K step
    col: str = "pid_n"
    step: str = "k"
    offsets: bool = False    # the kernel names its tile's first row and column (off_m = pid_m * BLOCK_M, off_n)
    row_major: bool = False  # one tile per program, program p on tile divmod(p, tiles along N) (the skeleton's)

    def story(self, trace, complete=True, edges_only=False):
        return gemm_story(trace, self, complete, edges_only)


@dataclass
class Tiles:
    """The layout of a 2D elementwise kernel over a (row tiles, column tiles) grid: ``tensors`` name: "mn" (M x N)
    or "n" (one value per column); ``output`` the one it stores; ``sizes`` M, N, BLOCK_M, BLOCK_N."""
    tensors: dict
    output: str
    sizes: dict

    def story(self, trace, complete=True, edges_only=False):
        return tile_story(trace, self.tensors, self.sizes, self.output, complete, edges_only)


_BLOCK = {"m": "BLOCK_M", "n": "BLOCK_N", "k": "BLOCK_K"}
_SIZE = {"m": "M", "n": "N", "k": "K"}


def _extents(acc):
    """{tensor dimension: how many elements the tile spans along it}, and the tile axes that walk none."""
    span, odd = {}, []
    for n, (dim, step) in zip(acc.block, acc.axes):
        if n < 2 or (dim is None and step == 0):  # a broadcast axis (a row of values repeated down the tile)
            continue
        if dim is None or dim in span:
            odd.append(n)
        else:
            span[dim] = n
    return span, odd


def _fit(observed, names, values, expected):
    """The expression among ``names`` (evaluated per observation by ``values``) that every observation equals,
    preferring ``expected``: its text, or None."""
    for name in [expected] + [n for n in names if n != expected]:
        if all(values(name, ob) == v for ob, v in observed):
            return name
    return None


def _expressions(g):
    B = {_BLOCK[d]: g.sizes[_BLOCK[d]] for d in "mnk"}
    names = ["0"] + [f"{p} * {b}" for p in (g.row, g.col, g.step) for b in B] + [g.row, g.col, g.step]
    if g.offsets:
        names = ["off_m", "off_n"] + names

    def value(name, ob):
        env = {g.row: ob[0], g.col: ob[1], g.step: ob[2], **B}
        env.update(off_m=ob[0] * B["BLOCK_M"], off_n=ob[1] * B["BLOCK_N"])
        return eval(name, {}, env)  # noqa: S307 - our own expression texts
    return names, value


def _dims(layout):
    name, dims = layout
    return name, {d: i for i, d in enumerate(dims)}


def _per_tile(trace, g):
    """Each program's work split at its stores of C: [(program, [loads...], store or None)]."""
    c = g.c[0]
    pieces = []
    for p in sorted({a.program for a in trace.accesses}):
        loads = []
        for acc in trace.of(p):
            if acc.op == "store" and acc.tensor == c:
                pieces.append((p, loads, acc))
                loads = []
            elif acc.op == "load":
                loads.append(acc)
        if loads:
            pieces.append((p, loads, None))
    return pieces


def _past(trace, layouts, S):
    """A load or store whose mask lets lanes through to memory outside its tensor."""
    for acc in trace.accesses:
        if acc.outside and acc.tensor in layouts:
            name, dims = layouts[acc.tensor]
            past = [f"{int(n)} {'row' if d == 0 and len(dims) == 2 else 'element' if len(dims) == 1 else 'column'}"
                    f"{'s' if n > 1 else ''} past its last ({_SIZE[dims[d]]} = {S[_SIZE[dims[d]]]})"
                    for d, n in enumerate(acc.past) if n]
            if not past:
                return (f"a {acc.op} of {acc.tensor} (program {acc.program}) lets {acc.outside} of its {acc.lanes} "
                        f"lanes through to memory before the start of {acc.tensor}: an offset below zero, which a "
                        "mask of the form < size lets through")
            d = next(d for d, n in enumerate(acc.past) if n)
            tail = (": the K tail's bound is what is left of K at this step, K - k * BLOCK_K" if dims[d] == "k"
                    else "")
            size = _SIZE[dims[d]]
            cuts = {x.cut[d] for x in trace.accesses if x.tensor == acc.tensor and x.cut and x.cut[d] is not None}
            bound = [x for x in "MNK" if x != size and S.get(x) in cuts and S[x] > S[size]]
            if bound:
                tail = f": its bound is {bound[0]} in place of {size}" + tail
            return (f"a {acc.op} of {acc.tensor} (program {acc.program}) lets {acc.outside} of its {acc.lanes} lanes "
                    f"through to memory outside {acc.tensor}, up to {'; '.join(past)}: its mask (or its descriptor's "
                    f"shape) lets lanes past the edge through: mask with offsets < the size, never <={tail}")
    return None


def _held_back(trace, layouts, S):
    """A load whose mask holds back elements inside its tensor (they read as other=, zero, in the sum)."""
    for acc in trace.accesses:
        if acc.tensor in layouts and any(h is not None for h in acc.hidden):
            name, dims = layouts[acc.tensor]
            d = len(dims) - 1 if len(dims) == 1 else next(
                (i for i, h in enumerate(acc.hidden) if h and h[0] > acc.origin[i]), len(dims) - 1)
            first, last = acc.hidden[d]
            size = _SIZE[dims[d]]
            said = [x for x in "MNK" if S[x] == first and x != size]
            where = f"{first}" + (" (the last, N - 1)".replace("N", size) if first == S[size] - 1 else "")
            tail = (": the K tail's bound is what is left of K at this step, K - k * BLOCK_K" if dims[d] == "k"
                    else "")
            verb = "read" if acc.op == "load" else "write"
            return (f"a {acc.op} of {acc.tensor} (program {acc.program}) masks off elements inside {acc.tensor}, "
                    f"{size} = {where} to {last}, where {size} = {S[size]}: its mask (or its descriptor's shape) holds "
                    f"back elements it must {verb}" + (f": its bound is {said[0]} in place of {size}" if said else "")
                    + tail)
    return None


def _count(done, S):
    """Why a walk computed ``done`` tiles: the tile count it was most likely given."""
    fits = [f"cdiv({x}, {bx}) * cdiv({y}, {by})" for x, y in (("M", "N"), ("K", "N"), ("M", "K"), ("N", "N"),
                                                                 ("M", "M"), ("N", "M"), ("K", "K"))
            for bx in ("BLOCK_M", "BLOCK_N", "BLOCK_K") for by in ("BLOCK_N", "BLOCK_M", "BLOCK_K")
            if -(-S[x] // S[bx]) * -(-S[y] // S[by]) == done]
    fits = [f for f in fits if f != "cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"]
    said = f"the tile count reads like {fits[0]}; " if fits else ""
    return f"{said}the walk over the tiles must reach each of C's tiles once: tiles = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"


def _declared(trace, layouts, S):
    """A descriptor whose shape is not its tensor's."""
    for acc in trace.accesses:
        t = trace.tensors.get(acc.tensor)
        if acc.declared and acc.tensor in layouts and t and list(acc.declared) != list(t.shape):
            name, dims = layouts[acc.tensor]
            wide = any(x > y for x, y in zip(acc.declared, t.shape)) and list(acc.declared[::-1]) != list(t.shape)
            names = [_SIZE[d] for d in dims]
            if len(dims) == 2 and list(acc.declared[::-1]) == list(t.shape):
                fit = f": its dimensions are swapped, [{names[1]}, {names[0]}]"
            else:
                fit = "".join(f": {x} in place of {names[i]}" for i, (have, want) in enumerate(zip(acc.declared, t.shape))
                              if have != want for x in [next((z for z in "MNK" if S.get(z) == have), None)] if x)
            return (f"the descriptor of {acc.tensor} has shape {list(acc.declared)} where {acc.tensor} is "
                    f"{' x '.join(map(str, t.shape))} ({' x '.join(names)}): describe it as stored, "
                    f"shape [{', '.join(names)}]" + fit
                    + (": a descriptor's shape reaches past the tensor into its padding" if wide else ""))
    return None


def _operands(pieces, layouts, g):
    """A piece of work whose loads come from the wrong tensors (the output, one operand twice, no bias)."""
    a, b = g.a[0], g.b[0]
    for p, loads, store in pieces[:1]:
        got = {n: sum(1 for x in loads if x.tensor == n) for n in layouts}
        if got[g.c[0]]:
            return (f"program {p} loads from {g.c[0]}, the output: an operand read through {g.c[0]}'s pointer or "
                    f"descriptor in place of {a}'s or {b}'s")
        if not got[a] and got[b]:
            return (f"program {p} never loads {a} and loads {b} {got[b]} times: the first operand of tl.dot is read "
                    f"through {b}'s pointer or descriptor in place of {a}'s")
        if not got[b] and got[a]:
            return (f"program {p} never loads {b} and loads {a} {got[a]} times: the second operand of tl.dot is read "
                    f"through {a}'s pointer or descriptor in place of {b}'s")
        if g.bias and store is not None and not got[g.bias] and got[a] != got[b]:
            other = a if got[a] > got[b] else b
            return (f"program {p} loads {other} {max(got[a], got[b])} times and the other operand "
                    f"{min(got[a], got[b])}, and never the bias: a load reads {other}'s pointer in place of the "
                    "bias's")
    return None


def _extents_story(trace, layouts, g, S):
    """A tile whose extent along one of its tensor's dimensions is not that dimension's BLOCK size."""
    for acc in trace.accesses:
        if acc.tensor not in layouts or not acc.lanes:
            continue
        name, dims = layouts[acc.tensor]
        span, _ = _extents(acc)
        for i, d in enumerate(dims):
            want = S[_BLOCK[d]]
            have = span.get(i, 1)
            if have != want:
                other = [dims[j] for j in range(len(dims)) if j != i]
                if len(dims) == 2 and have == S[_BLOCK[other[0]]] and span.get(1 - i, 1) == want:
                    return (f"the tile {acc.op}ed from {acc.tensor} spans {have} along {_SIZE[d]} and "
                            f"{want} along {_SIZE[other[0]]}, where {_BLOCK[d]} and {_BLOCK[other[0]]} belong: its "
                            "extents are swapped: the strides (or the tl.aranges) of its offsets are swapped")
                same = [x for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if S[x] == have]
                return (f"the tile {acc.op}ed from {acc.tensor} spans {have} along {_SIZE[d]} where {_BLOCK[d]} = "
                        f"{want} belongs" + (f": {same[0]} in place of {_BLOCK[d]} in its tl.arange or block shape"
                                             if same else ": check its tl.arange or block shape"))
    return None


def _strides(trace, layouts):
    """A tile axis that walks no dimension of its tensor one element at a time."""
    for acc in trace.accesses:
        if acc.tensor not in layouts or acc.lanes == acc.outside:
            continue
        t = trace.tensors[acc.tensor]
        for n, (dim, step) in zip(acc.block, acc.axes):
            if n > 1 and (dim is None or _extents(acc)[1]) and not (step == 0 and len(t.shape) < len(acc.block)):
                owner = [m for m, o in trace.tensors.items() if m != acc.tensor and len(o.strides) == 2
                         and o.strides[0] == abs(step)]
                return (f"a {acc.op} of {acc.tensor} (program {acc.program}) moves {step} elements from one element "
                        f"of its tile to the next along a tile axis, which walks no dimension of {acc.tensor} (its "
                        f"strides are {', '.join(str(x) for x in t.strides)}): a stride used for the wrong tensor or "
                        "the wrong dimension" + (f" ({step} is the row stride of {' and of '.join(owner)})"
                                                  if owner else ""))
    return None


def _drift(pieces, g):
    """An operand's tile that moves along M (or N) from one K step to the next."""
    for p, loads, store in pieces:
        if store is None:  # loads not yet split into tiles by a store
            continue
        for layout in (g.a, g.b):
            name, where = _dims(layout)
            fixed = [d for d in where if d != "k"][0]
            mine = [x for x in loads if x.tensor == name]
            seen_at = [x.origin[where[fixed]] for x in mine]
            if len(set(seen_at)) > 1 and seen_at == [j * g.sizes["BLOCK_K"] for j in range(len(mine))] \
                    and len({x.origin[where["k"]] for x in mine}) == 1 and all(x.declared for x in mine):
                right = ["", ""]
                right[where[fixed]] = "pid_m * BLOCK_M" if fixed == "m" else "pid_n * BLOCK_N"
                right[where["k"]] = "k * BLOCK_K"
                return (f"{name}'s coordinates are swapped: its {_SIZE[fixed]} coordinate steps by BLOCK_K with the K "
                        f"loop and its K coordinate stays put; the load takes [{', '.join(right)}]")
            if len(set(seen_at)) > 1:
                return (f"from one step of the K loop to the next, {name}'s tile moves along {_SIZE[fixed]} "
                        f"({_SIZE[fixed]} = {', '.join(map(str, seen_at[:4]))}...), where it must stay put and move "
                        f"along K: the step's pointer increment (or K coordinate) uses the stride of {_SIZE[fixed]}'s "
                        "dimension where K's belongs")
    return None


def gemm_story(trace, g, complete=True, edges_only=False):
    """The first way the trace of a tiled GEMM differs from what its programs must do, in words; None when it
    does not. In the order of cause: descriptors, which tensor each operand comes from, strides, tile extents,
    the tile staying put along M and N; then (the kernel having run to its end) which tiles of C were computed,
    each tile's coordinates and the K loop; last, lanes past an edge or held back inside a tensor, and K steps
    that load nothing. ``complete``: the kernel ran to its end. ``edges_only``: the values came out right, so
    only what right values can hide is said."""
    if trace is None:
        return None
    if not trace.accesses:
        return ("no program loads or stores anything: the loop over the tiles never runs (is its range empty: start "
                "and stop swapped?)") if complete else None
    S = g.sizes
    layouts = {g.a[0]: g.a, g.b[0]: g.b, g.c[0]: g.c}
    if g.bias:
        layouts[g.bias] = (g.bias, ("n",))
    pieces = _per_tile(trace, g)
    if complete and not any(a.op == "store" and a.tensor == g.c[0] for a in trace.accesses):
        return (f"no program stores anything into {g.c[0]}: the store of the tile (through {g.c[0]}'s descriptor or "
                "pointer) is missing, or goes to another tensor")
    first = [] if edges_only else [lambda: _declared(trace, layouts, S), lambda: _operands(pieces, layouts, g),
                                   lambda: _strides(trace, layouts), lambda: _extents_story(trace, layouts, g, S),
                                   lambda: _drift(pieces, g)]
    for step in first + ([lambda: _tiles_story(pieces, g, S, edges_only)] if complete else []) + [
            lambda: _past(trace, layouts, S), lambda: _held_back(trace, layouts, S)]:
        said = step()
        if said:
            return said
    for p, loads, store in pieces if complete else []:
        for x in loads:
            if not x.lanes and x.tensor in (g.a[0], g.b[0]):
                return (f"a load of {x.tensor} (program {p}) lets no lane through: the K loop makes a step past the "
                        "end of K (more steps than cdiv(K, BLOCK_K))")
    return None


def _tiles_story(pieces, g, S, edges_only):
    """Which tiles of C the programs computed, and each tile's coordinates and K loop."""
    a, b = g.a[0], g.b[0]
    tm, tn = -(-S["M"] // S["BLOCK_M"]), -(-S["N"] // S["BLOCK_N"])
    done = sum(1 for _, _, store in pieces if store)
    if done > tm * tn:
        stored = [tuple(x // S[bl] for x, bl in zip(st.origin[:2], ("BLOCK_M", "BLOCK_N")))
                  for _, _, st in pieces if st and st.lanes]
        if len(set(stored)) == tm * tn and len(stored) > tm * tn:
            return (f"the programs compute {done} tiles where C has {tm} x {tn} = {tm * tn}: some tiles are computed "
                    "by more than one program; each program must step by the number of programs: "
                    "tl.range(tl.program_id(0), tiles, tl.num_programs(0))")
        return f"the programs compute {done} tiles where C has {tm} x {tn} = {tm * tn}: " + _count(done, S)
    if done and not any(x.tensor in (a, b) for _, loads, _ in pieces for x in loads):
        return ("no program loads A or B before it stores its tile: the K loop never runs (is its range empty: "
                "start and stop swapped, or a bound of zero?)")
    programs = len({p for p, _, st in pieces if st})
    if done and done < tm * tn and programs == done and len({p for p, _, _ in pieces}) == done:
        return (f"only {done} of the {tm * tn} tiles were written, one per program: each program must walk the tiles, "
                "t = program_id, program_id + num_programs, ... while t < tiles (tl.range(tl.program_id(0), tiles, "
                "tl.num_programs(0)))")
    if done and done < tm * tn and programs > 1:
        return f"the programs compute {done} tiles where C has {tm} x {tn} = {tm * tn}: " + _count(done, S)
    _, ca = _dims(g.a)
    _, cb = _dims(g.b)
    _, cc = _dims(g.c)
    work = [(p, [x for x in loads if x.tensor == a], [x for x in loads if x.tensor == b],
             [x for x in loads if x.tensor == g.bias], store) for p, loads, store in pieces]
    work = [w for w in work if w[1] and w[2]]
    if not work:
        return None
    stored = [(s.origin[cc["m"]] / S["BLOCK_M"], s.origin[cc["n"]] / S["BLOCK_N"]) for *_, s in work if s]
    loaded = [(al[0].origin[ca["m"]] / S["BLOCK_M"], bl[0].origin[cb["n"]] / S["BLOCK_N"]) for _, al, bl, _, _ in work]
    every = sorted(itertools.product(range(tm), range(tn)))
    by_store = len(stored) == len(work) and sorted(stored) == every
    by_loads = sorted(loaded) == every
    if by_store:
        tiles = [(int(r), int(c)) for r, c in stored]
    elif by_loads:
        tiles = [(int(r), int(c)) for r, c in loaded]
    elif g.row_major and len(work) == tm * tn:  # one tile per program, in row-major order (the skeleton's)
        tiles = [divmod(p, tn) for p, *_ in work]
    else:
        if edges_only:
            return None
        have = {tuple(int(v) for v in t) for t in (stored or loaded) if float(t[0]).is_integer()
                and float(t[1]).is_integer()}
        missing = [t for t in every if t not in have]
        twice = len(stored or loaded) - len(set(stored or loaded))
        if not missing:
            return None
        return (f"{len(missing)} of the {tm} x {tn} tiles of C are never computed (e.g. tile "
                f"{missing[0]}){f' and {twice} are computed twice' if twice > 0 else ''}: the mapping from a "
                f"program (and its walk over the tiles) to ({g.row}, {g.col}) misses them; it must reach every "
                f"tile once: tiles = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)")

    names, value = _expressions(g)

    full = {"off_m": f"{g.row} * BLOCK_M", "off_n": f"{g.col} * BLOCK_N"}

    def coordinate(what, layout, pick, dim, want):
        name, where = _dims(layout)
        obs = [((r, c, j), x.origin[where[dim]]) for (r, c), w in zip(tiles, work) for j, x in enumerate(pick(w))]
        if all(v == value(want, ob) for ob, v in obs):
            return None
        fit = _fit(obs, names, value, want)
        (r, c, j), v = next((ob, v) for ob, v in obs if v != value(want, ob))
        axis = "row" if where[dim] == 0 and len(where) == 2 else "column"
        other = [d for d in where if d != dim and d != "k"]
        if fit and other and len(where) == 2:  # both coordinates swapped?
            theirs = [((r, c, j), x.origin[where[other[0]]]) for (r, c), w in zip(tiles, work)
                      for j, x in enumerate(pick(w))]
            mine_want = row if other[0] == "m" else col
            if fit == mine_want and _fit(theirs, names, value, want) == want:
                first, second = (want, mine_want) if where[dim] == 0 else (mine_want, want)
                return (f"{what}'s coordinates are swapped: [{second}, {first}] where [{first}, {second}] belongs")
        if fit and (fit in full or want in full):
            fit_s, want_s = full.get(fit, fit), full.get(want, want)
            mine, right = fit_s.split(" * "), want_s.split(" * ")
            swap = (mine[0], right[0]) if mine[0] != right[0] else (mine[-1], right[-1])
            said = lambda e: e + (f" = {full[e]}" if e in full else "")  # noqa: E731
            return (f"{what}'s {axis} coordinate ({_SIZE[dim]}), the offset of the program's tile, is {said(fit)} "
                    f"where {said(want)} belongs: {swap[0]} in place of {swap[1]}")
        if fit:
            mine, right = fit.split(" * "), want.split(" * ")
            swap = (mine[0], right[0]) if mine[0] != right[0] else (mine[-1], right[-1])
            return (f"{what}'s {axis} coordinate ({_SIZE[dim]}) is {fit} where {want} belongs: {swap[0]} in place of "
                    f"{swap[1]}")
        return (f"{what}'s {axis} coordinate ({_SIZE[dim]}) does not follow the tile: for C's tile ({r}, {c}) at "
                f"step {j} it is {v}, where {want} = {value(want, (r, c, j))} belongs")

    def kloop(what, layout, pick):
        name, where = _dims(layout)
        steps = -(-S["K"] // S["BLOCK_K"])
        for (r, c), w in zip(tiles, work):
            ks = [x.origin[where["k"]] for x in pick(w)]
            if len(ks) != steps:
                bounds = [f"cdiv({x}, {bl})" for x in "MNK" for bl in ("BLOCK_M", "BLOCK_N", "BLOCK_K")
                          if -(-S[x] // S[bl]) == len(ks) and (x, bl) != ("K", "BLOCK_K")]
                start = "" if ks[:1] == [0] else f", starting at K = {ks[0]} (at step 1?)" if ks else ""
                return (f"the K loop loads {what} {len(ks)} times for C's tile ({r}, {c}), where cdiv(K, BLOCK_K) = "
                        f"{steps} steps are needed{start}"
                        + (f": its bound is {bounds[0]} in place of cdiv(K, BLOCK_K)" if bounds and not start else ""))
        return coordinate(what, layout, pick, "k", f"{g.step} * BLOCK_K")

    row, col = ("off_m", "off_n") if g.offsets else (f"{g.row} * BLOCK_M", f"{g.col} * BLOCK_N")
    checks = [lambda: coordinate(a, g.a, lambda w: w[1], "m", row),
              lambda: coordinate(b, g.b, lambda w: w[2], "n", col),
              lambda: kloop(a, g.a, lambda w: w[1]),
              lambda: kloop(b, g.b, lambda w: w[2])]
    if not by_store:
        checks += [lambda: coordinate(g.c[0], g.c, lambda w: [w[4]] if w[4] else [], "m", row),
                   lambda: coordinate(g.c[0], g.c, lambda w: [w[4]] if w[4] else [], "n", col)]
    if g.bias:
        checks.append(lambda: coordinate(g.bias, (g.bias, ("n",)), lambda w: w[3], "n", col))
    for check in checks:
        said = check()
        if said:
            return said
    return None


# ---- Triton's shape errors, in the GEMM's own names ------------------------------------------------------------

def _frames(e):
    while e is not None:
        tb = e.__traceback__
        while tb is not None:
            yield tb.tb_frame
            tb = tb.tb_next
        e = e.__cause__ or e.__context__


def _named(shape, S):
    shape = [int(getattr(n, "value", n)) for n in shape]
    by = {S[b]: b for b in ("BLOCK_K", "BLOCK_N", "BLOCK_M") if b in S}
    return " x ".join(by.get(n, str(n)) for n in shape) + f" ({' x '.join(str(n) for n in shape)})"


def shape_story(e, S):
    """``_shape_story``, and None where reading the error itself fails."""
    try:
        return _shape_story(e, S)
    except Exception:  # noqa: BLE001 - an explanation that breaks must not hide the learner's error
        return None


def _shape_story(e, S):
    """What a shape error Triton raised while tracing a GEMM kernel means, in the kernel's names (BLOCK_M,
    BLOCK_N, BLOCK_K must differ in ``S``); None for any other error."""
    text = " ".join(str(x) for x in (e, e.__cause__, e.__context__) if x is not None)
    want_a, want_b = [S["BLOCK_M"], S.get("BLOCK_K")], [S.get("BLOCK_K"), S["BLOCK_N"]]
    if "Unsupported ptr type" in text and "tl.store" in text:
        return "tl.store(pointers, value, mask=...): the pointers and the value are swapped"
    if "Expected pointer argument to have shape" in text:
        import re
        got = re.findall(r"\[([^\]]*)\]", text.split("Expected pointer argument to have shape", 1)[1])[:2]
        dims = [[int(n) for n in re.findall(r"(\d+)", g)] for g in got]
        if len(dims) == 2:
            return (f"the store's pointers are a {_named(dims[1], S)} block where its value is {_named(dims[0], S)}: "
                    "an offset along one axis is missing or broadcast the wrong way (rows in place of cols?)")
    for f in _frames(e):
        code, v = f.f_code, f.f_locals
        if code.co_name == "dot" and "a_shape" in v and "b_shape" in v:
            a, b = list(v["a_shape"]), list(v["b_shape"])
            said = f"tl.dot gets a {_named(a, S)} tile and a {_named(b, S)} tile"
            if a == want_b and b == want_a:
                return f"{said}: its operands are swapped; tl.dot(a, b) multiplies BLOCK_M x BLOCK_K by BLOCK_K x BLOCK_N"
            if a == want_a and b == want_b[::-1]:
                return (f"{said}: the second is BLOCK_N x BLOCK_K, as a weight is stored; hand tl.dot its transposed "
                        "tile (w.T), BLOCK_K x BLOCK_N")
            if a == want_a[::-1] and b == want_b:
                return f"{said}: the first is transposed; it must be BLOCK_M x BLOCK_K"
            if a == want_a and b == want_b and "acc" in v and v["acc"] is not None:
                c = list(v["acc"].shape)
                wrong = [f"{_named([h], S).split(' ')[0]} in place of {_named([w], S).split(' ')[0]}"
                         for h, w in zip(c, [S["BLOCK_M"], S["BLOCK_N"]]) if h != w]
                return (f"{said}, which make a BLOCK_M x BLOCK_N tile, but the accumulator is {_named(c, S)}: "
                        f"{', '.join(wrong)} in acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
                        + (" (its extents swapped)" if c == [S["BLOCK_N"], S["BLOCK_M"]] else ""))
            wrong = [f"{_named([h], S).split(' ')[0]} in place of {_named([w], S).split(' ')[0]}"
                     for h, w in zip(a + b, want_a + want_b) if h != w]
            return (f"{said}; tl.dot(a, b) multiplies BLOCK_M x BLOCK_K by BLOCK_K x BLOCK_N: "
                    f"{', '.join(wrong)} in a tile's tl.arange or block shape (or an operand read through another "
                    "tensor's pointer or descriptor)")
        if code.co_name == "validate_store_like" and hasattr(v.get("value"), "shape") and "desc" in v:
            tile = [int(getattr(n, "value", n)) for n in v["value"].shape]
            box = [int(getattr(n, "value", n)) for n in v["desc"].block_shape]
            names = lambda xs: [_named([x], S).split(" ")[0] for x in xs]  # noqa: E731
            why = ("its block_shape is swapped" if box == tile[::-1] else
                   "its block_shape has " + ", ".join(f"{h} in place of {w}" for h, w in zip(names(box), names(tile))
                                                     if h != w))
            return (f"a descriptor store of a {_named(tile, S)} tile through a descriptor whose block is "
                    f"{_named(box, S)}: {why} (or the store goes through another tensor's descriptor)")
    if "incompatible dimensions" in text:
        import re
        m = re.search(r"at index (\d+): (\d+) and (\d+)", text)
        if m:
            x, y = (_named([int(m.group(k))], S).split(" ")[0] for k in (2, 3))
            return (f"two tiles meet in one expression with {x} and {y} along axis {m.group(1)}: one of them has "
                    f"{y} in place of {x} (or the other way round) in its tl.arange or block shape")
    if "offsets, but got" in text:
        return ("a descriptor load or store is given a different number of coordinates than its descriptor has "
                "dimensions: it goes through another tensor's descriptor, or a coordinate is missing")
    if "last dim must be 1" in text:
        return ("a descriptor's last stride is not 1: the strides are [row stride, 1], the contiguous dimension last "
                "(swapped, or a stride in place of 1?)")
    from .check import _learner_line
    line = (_learner_line(e) or ("", 0, ""))[2]
    if ("has no len()" in text or "has no attribute 'shape'" in text) and ".store(" in line:
        return ("desc.store takes the coordinates first and the tile second, desc.store([row, col], tile): the two "
                "arguments are swapped")
    if "make_tensor_descriptor(" in line and ("has no len()" in text or "has no attribute" in text):
        return ("tl.make_tensor_descriptor takes the base pointer, then the shape, the strides and the block shape: "
                "two of its arguments are swapped")
    return None


# ---- an elementwise kernel's trace: every tensor read and written on the program's own tile ------------------

def tile_story(trace, tensors, sizes, output, complete=True, edges_only=False):
    """The first way a 2D elementwise kernel's trace differs from what its programs must do: program (i, j) of a
    (row tiles, column tiles) grid loads each input in ``tensors`` (name: "mn" for an M x N tensor, "n" for one
    value per column) on its own BLOCK_M x BLOCK_N tile (the "n" ones on its columns) and stores the output
    ``output`` there. None when it does."""
    if trace is None:
        return None
    S = sizes
    named = set(tensors)
    outputs = {output}
    inputs = [n for n in tensors if n != output]
    for p in sorted({a.program for a in trace.accesses}) if not edges_only else []:
        loads = [a for a in trace.of(p) if a.op == "load"]
        got = {n: sum(1 for a in loads if a.tensor == n) for n in tensors}
        for o in outputs:
            if got.get(o):
                return (f"program {p} loads from {o}, the output: a load through {o}'s pointer in place of "
                        f"{' or '.join(n for n in inputs if not got[n]) or 'an input'}'s")
        missing = [n for n in inputs if not got[n]]
        twice = [n for n in inputs if got[n] > 1]
        if missing and twice:
            return (f"program {p} never loads {missing[0]} and loads {twice[0]} {got[twice[0]]} times: the load of "
                    f"{missing[0]} goes through {twice[0]}'s pointer in place of {missing[0]}'s")
        break
    for acc in [] if edges_only else trace.accesses:  # each tile axis walks one dimension, one element per step
        if acc.tensor not in named or acc.lanes == acc.outside:
            continue
        t = trace.tensors[acc.tensor]
        for n, (dim, step) in zip(acc.block, acc.axes):
            if n > 1 and (dim is None or _extents(acc)[1]) and len(t.shape) == len(tensors[acc.tensor]):
                if step == 0 and len(t.shape) < len(acc.block):
                    continue  # a per-column tensor broadcast over the tile's rows
                if step == 0:
                    return (f"the {acc.op} of {acc.tensor} does not move along one axis of its tile: its offsets "
                            "along that axis are missing (rows where cols belong, or the other way round)")
                owner = [m for m, o in trace.tensors.items() if m != acc.tensor and len(o.strides) == 2
                         and o.strides[0] == abs(step)]
                width = " (that is N: the width N is not a row stride)" if step == S["N"] else ""
                return (f"the {acc.op} of {acc.tensor} (program {acc.program}) moves {step} elements from one row of "
                        f"its tile to the next, where {acc.tensor}'s row stride is {t.strides[0]}: a row stride is "
                        "wrong, a stride used for the wrong tensor or the wrong dimension" + width
                        + (f" ({step} is the row stride of {' and of '.join(owner)})" if owner else ""))
    for acc in [] if edges_only else trace.accesses:  # each tile BLOCK_M x BLOCK_N (a per-column tensor: BLOCK_N)
        if acc.tensor not in named:
            continue
        span, _ = _extents(acc)
        for i, d in enumerate(tensors[acc.tensor]):
            want, have = S[_BLOCK[d]], span.get(i, 1)
            if have != want and len(trace.tensors[acc.tensor].shape) == len(tensors[acc.tensor]):
                same = [b for b in ("BLOCK_M", "BLOCK_N") if S[b] == have]
                return (f"the tile {acc.op}ed from {acc.tensor} spans {have} along {_SIZE[d]} where {_BLOCK[d]} = "
                        f"{want} belongs" + (f": {same[0]} in place of {_BLOCK[d]} in its tl.arange" if same else
                                             ": check its tl.arange"))
    for acc in [] if edges_only else trace.accesses:  # each program on its own tile: program_id(0) * BLOCK_M, ...
        if acc.tensor not in named or len(acc.grid) < 2:
            continue
        for i, d in enumerate(tensors[acc.tensor]):
            want = acc.grid[0 if d == "m" else 1] * S[_BLOCK[d]]
            have = acc.origin[i]
            if have != want:
                axis = "row" if d == "m" else "column"
                fits = [f"program_id({a}) * {b}" for a in (0, 1) for b in ("BLOCK_M", "BLOCK_N")
                        if acc.grid[a] * S[b] == have] + [f"program_id({a})" for a in (0, 1) if acc.grid[a] == have]
                right = f"program_id({0 if d == 'm' else 1}) * {_BLOCK[d]}"
                return (f"the {acc.op} of {acc.tensor} in program {acc.grid[:2]} starts at {axis} {have}, where "
                        f"{right} = {want} belongs" + (f": {fits[0]} in place of {right}" if fits else ""))
    for acc in trace.accesses:  # masks: no lane outside its tensor, none inside held back
        if acc.tensor in named and acc.outside:
            past = [f"{n} {'rows' if d == 0 and len(acc.past) == 2 else 'columns'} past its last" for d, n in
                    enumerate(acc.past) if n]
            return (f"the {acc.op} of {acc.tensor} (program {acc.grid[:2]}) lets {acc.outside} lanes through to "
                    f"memory outside {acc.tensor} ({', '.join(past) or 'before its start'}): its mask lets lanes "
                    "past the edge through: rows < M and cols < N, the bias's cols < N")
    for acc in trace.accesses:
        if acc.tensor in named and any(h is not None for h in acc.hidden):
            dims = tensors[acc.tensor]
            d = next(i for i, h in enumerate(acc.hidden) if h is not None and (len(dims) == 1 or h[0] > acc.origin[i]))\
                if any(h is not None and (len(dims) == 1 or h[0] > acc.origin[i]) for h in acc.hidden) else 0
            first, last = acc.hidden[d]
            size = _SIZE[dims[d]]
            said = [x for x in "MN" if S.get(x) == first and x != size]
            return (f"the {acc.op} of {acc.tensor} (program {acc.grid[:2]}) masks off elements inside {acc.tensor}, "
                    f"{size} = {first} to {last}, where {size} = {S[size]}: its mask holds back elements it must "
                    + ("read" if acc.op == "load" else "write") + (f": {said[0]} in place of {size}" if said else ""))
    return None
