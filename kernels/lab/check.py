"""Exercise checks: fresh random inputs, poisoned outputs, a torch reference, and the mechanism
in the compiled code. Each failed check says what is wrong; an untouched stub gets a hint. Each
lesson's own checks use these (``kernels.lessons.lNN_*_exercise``)."""
import torch

from .mode import DEVICE


class NotAttempted(Exception):
    """The exercise still has its stub (it raised NotImplementedError or wrote nothing)."""


def poison_like(t):
    """An output filled with a value no correct kernel writes (NaN for floats), so an element a
    kernel never wrote is caught."""
    return torch.full_like(t, float("nan") if t.dtype.is_floating_point else -(2 ** 30))


def unwritten(out):
    return torch.isnan(out) if out.dtype.is_floating_point else out == -(2 ** 30)


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64; inf when anything is NaN."""
    out, ref = out.double(), ref.double()
    if torch.isnan(out).any():
        return float("inf")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def compare(name, out, ref, tol):
    """Assert ``out`` matches ``ref`` (after poisoning): every element written, error under tol."""
    missing = unwritten(out)
    if missing.all():
        raise NotAttempted(f"{name}: the output was never written")
    if missing.any():
        idx = missing.nonzero()[0].tolist()
        raise AssertionError(f"{name}: {int(missing.sum())} of {out.numel()} elements never written "
                             f"(first at index {idx}); check the mask and the grid cover the edges")
    err = rel_err(out, ref)
    if not err <= tol:
        raise AssertionError(f"{name}: relative error {err:.2e} exceeds {tol:.0e}")
    return err


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
    """Check ``matmul(a, b, *launch, **kw)`` on fresh random fp16 inputs of each (M, N, K) shape."""
    for M, N, K in shapes:
        a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
        b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
        out = matmul(a, b, *launch, **kw)
        if out is None:
            raise NotImplementedError
        if not out.abs().max() > 0:
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
