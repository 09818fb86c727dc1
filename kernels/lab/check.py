"""Exercise checks: fresh random inputs, poisoned outputs, a torch reference, and the mechanism
in the compiled code. Each failed check says what is wrong; an untouched stub gets a hint. Each
lesson's own checks use these (``kernels.lessons.lNN_*_exercise``)."""
import torch

from .mode import DEVICE


class NotAttempted(Exception):
    """The exercise still has its stub (it raised NotImplementedError or wrote nothing)."""


# what a checker fills an output with before the learner's kernel runs: a finite value no correct kernel
# writes (exact in fp16, bf16 and fp32), so "never written" and "written as NaN" are told apart
POISON = -6144.0
INT_POISON = -(2 ** 30)


def poison_like(t):
    """A tensor like ``t`` filled with the poison, so an element a kernel never wrote is caught."""
    return torch.full_like(t, POISON if t.dtype.is_floating_point else INT_POISON)


def poisoned(*shape, dtype=torch.float16, device=DEVICE):
    return torch.full(shape, POISON if dtype.is_floating_point else INT_POISON, dtype=dtype, device=device)


def unwritten(out):
    return out == (POISON if out.dtype.is_floating_point else INT_POISON)


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64; inf when anything is NaN."""
    out, ref = out.double(), ref.double()
    if torch.isnan(out).any():
        return float("inf")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def where(mask):
    """Where the True elements of a 1D or 2D mask lie, in words: the index range they span and how
    many of the rows (and columns) they touch."""
    if mask.dim() == 1:
        idx = mask.nonzero().flatten()
        return f"indices {idx.min().item()}-{idx.max().item()} of {mask.numel()}"
    rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
    return (f"rows {rows.min().item()}-{rows.max().item()} ({len(rows)} of {mask.shape[0]}), "
            f"columns {cols.min().item()}-{cols.max().item()} ({len(cols)} of {mask.shape[1]})")


def compare(name, out, ref, tol):
    """Assert ``out`` (poisoned before the kernel ran) matches ``ref``: every element written, none NaN,
    relative error under ``tol``. A failure says which kind of wrong and where: never written (the grid
    or a store mask misses them), NaN (a load read past an edge: a missing mask or ``other``), or values
    off (indexing, strides, the loop)."""
    never, nan = unwritten(out), torch.isnan(out) if out.dtype.is_floating_point else torch.zeros_like(out, dtype=bool)
    if never.all():
        raise NotAttempted(f"{name}: the output was never written")
    problems = []
    if never.any():
        problems.append(f"{int(never.sum())} of {out.numel()} elements never written ({where(never)}): the grid or "
                        "a store mask misses them")
    if nan.any():
        problems.append(f"{int(nan.sum())} elements are NaN ({where(nan)}): a load read past an edge; mask it, "
                        "with other=0.0 where the value feeds a sum")
    ok = ~never & ~nan
    err = rel_err(out[ok], ref[ok]) if ok.any() else 0.0
    if not problems and err <= tol:
        return err
    if err > tol:
        scale = ref.double().pow(2).mean().sqrt().item()
        off = ok & ((out.double() - ref.double()).abs() > 10 * tol * scale)
        detail = f" ({int(off.sum())} elements off by more than {10 * tol:.0%} of the typical value: {where(off)})" \
            if off.any() else " (small errors everywhere: check the precision of the accumulator)"
        problems.append(f"relative error {err:.2e} exceeds {tol:.0e} in the elements written{detail}")
    raise AssertionError(f"{name}: " + "; ".join(problems))


def require(compiled, family, why, at_least=1):
    """Assert the compiled code has an instruction family (see isa.PTX_FAMILIES / SASS_FAMILIES)."""
    n = compiled.counts()[family]
    if n < at_least:
        raise AssertionError(f"the compiled code of {compiled.name} has no {family} ({why})")
    return n


def forbid(compiled, family, why):
    n = compiled.counts()[family]
    if n:
        raise AssertionError(f"the compiled code of {compiled.name} still has {n} x {family} ({why})")


def gemm_values(matmul, shapes, *launch, **kw):
    """Check ``matmul(a, b, *launch, **kw, out=c)`` on fresh random fp16 inputs of each (M, N, K) shape,
    ``c`` poisoned so that tiles the kernel never writes are caught."""
    for M, N, K in shapes:
        a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
        b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
        out = poisoned(M, N)
        if matmul(a, b, *launch, **kw, out=out) is None:
            raise NotImplementedError
        if (out == 0).all():
            raise NotAttempted("the product came out all zeros: the loop is still the stub")
        compare(f"{M}x{K} @ {K}x{N}", out, a.float() @ b.float(), 1e-2)


def require_dot(compiled):
    """The compiled GEMM of a learner, refused as not attempted while it has no tl.dot."""
    if not compiled.counts()["wgmma"] and not compiled.counts()["mma.sync"]:
        raise NotAttempted("no tl.dot in the compiled code")
    return compiled


def is_stub(e):
    """An error that comes from the exercise's stub (``raise NotImplementedError()`` where the code
    goes), however it surfaced: raised, or reported by Triton's interpreter or compiler, which
    cannot compile a raise inside a @triton.jit function."""
    return isinstance(e, (NotImplementedError, NotAttempted)) or "NotImplementedError" in str(e)


def run(title, checks):
    """Run named checks; print one line each and a verdict. Returns True when all pass.

    ``checks`` is a list of (name, callable); a callable returns a short note on success, raises
    AssertionError with an explanation on failure, NotImplementedError/NotAttempted for a stub."""
    passed, attempted = 0, True
    for name, fn in checks:
        try:
            note = fn()
            passed += 1
            print(f"  pass  {name}" + (f": {note}" if note else ""))
        except AssertionError as e:
            print(f"  FAIL  {name}: {e}")
        except Exception as e:
            if not is_stub(e):
                raise
            attempted = False
            why = str(e) if isinstance(e, NotAttempted) else "the stub is still there"
            print(f"  todo  {name}: not attempted yet ({why})")
    if passed == len(checks):
        print(f"{title}: all {len(checks)} checks pass")
    elif not attempted and passed == 0:
        print(f"{title}: not attempted yet - fill in the cells marked 'YOUR CODE HERE' and run this again")
    else:
        print(f"{title}: {passed} of {len(checks)} checks pass")
    return passed == len(checks)


def tiles(mask, block_m, block_n, limit=6):
    """The output tiles (row tile, column tile) of ``block_m x block_n`` that hold a True element of a 2D
    mask, in words: how many of the grid, which ones (the first ``limit``), and whether whole or in part."""
    M, N = mask.shape
    tm, tn = -(-M // block_m), -(-N // block_n)
    padded = torch.zeros(tm * block_m, tn * block_n, dtype=torch.bool, device=mask.device)
    padded[:M, :N] = mask
    per_tile = padded.view(tm, block_m, tn, block_n).sum((1, 3))
    inside = torch.zeros_like(padded, dtype=torch.int64)
    inside[:M, :N] = 1
    size = inside.view(tm, block_m, tn, block_n).sum((1, 3))
    hit = per_tile.nonzero().tolist()
    names = ", ".join(f"({r}, {c})" for r, c in hit[:limit]) + (f" and {len(hit) - limit} more" if len(hit) > limit else "")
    whole = all(per_tile[r, c] == size[r, c] for r, c in hit)
    return (f"{len(hit)} of the {tm} x {tn} tiles of {block_m} x {block_n} ((row tile, column tile): {names}), "
            f"{'whole' if whole else 'in part'}")


def misplaced(out, ref, block_m, block_n, tol, limit=3):
    """Output tiles that hold another tile's values: [((row tile, column tile), (its values' row tile, column
    tile))], at most ``limit``. A wrong tile offset or swapped grid axes put right values in the wrong place."""
    M, N = out.shape
    grid = [(r, c) for r in range(-(-M // block_m)) for c in range(-(-N // block_n))]
    part = lambda t, r, c: t[r * block_m:(r + 1) * block_m, c * block_n:(c + 1) * block_n]
    found = []
    for r, c in grid:
        mine = part(out, r, c)
        if rel_err(mine, part(ref, r, c)) <= tol:
            continue
        for r2, c2 in grid:
            theirs = part(ref, r2, c2)
            h, w = min(mine.shape[0], theirs.shape[0]), min(mine.shape[1], theirs.shape[1])
            if (r2, c2) != (r, c) and rel_err(mine[:h, :w], theirs[:h, :w]) <= tol:
                found.append(((r, c), (r2, c2)))
                break
        if len(found) == limit:
            break
    return found


def compare_tiles(name, out, ref, tol, block_m, block_n, candidates=()):
    """``compare`` for a tiled output, and on failure the same diagnosis by tile: which tiles were never
    written or hold wrong values, which hold another tile's values, and which of ``candidates`` (a list of
    (what it means, the tensor that wrong answer computes)) the output equals."""
    try:
        return compare(name, out, ref, tol)
    except AssertionError as e:
        never = unwritten(out)
        scale = ref.double().pow(2).mean().sqrt().item()
        off = ~never & ((out.double() - ref.double()).abs() > 10 * tol * scale) | torch.isnan(out)
        by_tile = []
        if never.any():
            by_tile.append(f"never written: {tiles(never, block_m, block_n)}")
        if off.any():
            by_tile.append(f"wrong values: {tiles(off, block_m, block_n)}")
        moved = misplaced(out, ref, block_m, block_n, tol)
        if moved:
            by_tile.append(", ".join(f"tile {t} holds the values of tile {o}" for t, o in moved)
                           + ": the tile coordinates of a load or the store are off")
        for what, wrong in candidates:
            if not never.any() and rel_err(out, wrong) <= tol:
                by_tile.append(f"C equals {what}")
                break
        raise AssertionError(f"{e}; by tile, " + "; ".join(by_tile)) from None
