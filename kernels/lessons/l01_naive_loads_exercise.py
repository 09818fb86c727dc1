"""The check behind exercises/01_naive_loads.ipynb: a fused residual update, ``out = h + alpha * f`` with
``h`` and ``out`` fp32 and ``f`` fp16, each with its own row stride; exact up to fp32 rounding on ragged
shapes, and compiled to 16-byte loads of both inputs, each load and store masked (a predicate on every ld.global
and st.global: the guard bands take a stray read without one, so only the compiled code shows it)."""

import torch
import triton

from ..lab import aot, check as lab_check, trace
from ..lab.mode import DEVICE

TILE = (32, 64)  # the values check's tile: small, so that the ragged shapes have several edge tiles
TOL = 1e-5       # fp32 arithmetic lands within ~1e-7; one rounding to fp16 on the way costs ~1e-4
TENSORS = (("h", "h_ptr"), ("f", "f_ptr"), ("out", "out_ptr"))  # the kernel's pointer arguments, in order


def launch(kernel, h, f, alpha, out, BLOCK_M=64, BLOCK_N=128, num_warps=4):
    """Launch ``kernel`` over the tiles of ``out`` (the launcher the exercise gives the learner)."""
    M, N = out.shape
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    kernel[grid](h, f, out, M, N, h.stride(0), f.stride(0), out.stride(0), alpha,
                 BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps)
    return out


def _likely(out, ref, err):
    """What the pattern of a wrong output most likely means, for this task."""
    written = ~lab_check.unwritten(out) & ~torch.isnan(out)
    typical = ref.double().pow(2).mean().sqrt()
    off = written & ((out.double() - ref.double()).abs() > 0.05 * typical)  # more than rounding can explain
    rows_off, cols_off = off[1:].any(axis=1).sum(), off.any(axis=0).sum()
    if off.any() and not off[0].any() and rows_off >= (off.shape[0] - 1) // 2 and cols_off >= off.shape[1] // 2:
        return (" - row 0 is right and the rows after it are not: a row stride is wrong (each tensor has its "
                "own, stride_hm, stride_fm and stride_om; the width N is not a row stride here)")
    if lab_check.unwritten(out).any():
        return (" - the launcher's grid is (row tiles, column tiles): program_id(0) owns rows "
                "program_id(0) * BLOCK_M ... + BLOCK_M - 1 and program_id(1) the columns likewise; check that the "
                "offsets give every program its own tile")
    if not off.any() and err < 2e-3:
        return (" - errors the size of fp16 rounding: part of the arithmetic ran in fp16. alpha is an fp32 "
                "argument, so alpha * f is fp32 already; a .to(tl.float16) on the way, or f scaled by a literal (a "
                "Python number keeps f's fp16), rounds it: keep h + alpha * f in fp32")
    return ""


def _narrow_loads(counts, needed):
    widths = {k.split()[1]: v for k, v in counts.items() if k.startswith("ld.global ") and v}
    narrow = {w: n for w, n in widths.items() if w != "128-bit"}
    if not narrow:
        return None
    said = ", ".join(f"{n} x {w}" for w, n in sorted(widths.items(), key=lambda kv: int(kv[0].split("-")[0])))
    if counts["ld.global"] < needed:
        why = ("each load covers too few elements for a 16-byte vector per thread: load the whole "
               "BLOCK_M x BLOCK_N tile with one tl.load per tensor, not a row (or a piece) at a time")
    else:
        why = ("the compiler could not prove that neighbouring columns are adjacent: keep the column index "
               "a plain `start + tl.arange(0, BLOCK_N)` (clamping it with tl.minimum, a modulo or any other "
               "arithmetic hides that) and handle the edges with a mask")
    return (f"the loads compile to {said} ld.global per thread, where 16-byte vectors would take {needed} "
            f"(8 fp16 or 4 fp32 each): {why}")


def _unmasked(compiled, tensors):
    """What the compiled code loads or stores without a predicate (a tl.load or tl.store without mask=), in
    words; None when every global access is masked. ``tensors``: the kernel's pointer arguments in order,
    (tensor, argument) pairs."""
    loads, stores = [], []
    for op, pointers, guarded in lab_check.global_accesses(compiled.ptx):
        if not guarded:
            bare = loads if op.startswith("ld.") else stores
            bare += [i for i in pointers or [None] if i not in bare]
    if not loads and not stores:
        return None
    known = lambda i: i is not None and i < len(tensors)
    names = lambda ids: " and ".join(f"{tensors[i][0]} ({tensors[i][1]})" if known(i) else "a tensor" for i in ids)

    def fix(ids, verb):
        by_mask = {}
        for i in filter(known, ids):
            by_mask.setdefault("cols < N" if tensors[i][0] == "bias" else "(rows < M) & (cols < N)", []).append(i)
        return "; ".join(f"{verb} {' and '.join(tensors[i][0] for i in these)} with mask={m}"
                         for m, these in by_mask.items()) or f"{verb} with a mask"

    what = []
    if loads:
        many = len(loads) > 1
        what.append(f"the tl.load{'s' if many else ''} of {names(loads)} {'have' if many else 'has'} no mask (no "
                    f"predicate on {'their' if many else 'its'} ld.global in the sm_90 PTX): the tiles at the last rows "
                    "and columns read past the edge" + ("" if stores else ", and the store's mask drops what they read, "
                    "so the values come out right here (the check's guard bands took the stray reads), but on a GPU "
                    "they read memory that is not the tensor's, or fault") + f". {fix(loads, 'Load')}")
    if stores:
        what.append(f"the tl.store to {names(stores)} has no mask (no predicate on its st.global): the edge tiles "
                    f"write past the tensor's edge. {fix(stores, 'Store')}")
    return "; ".join(what)


def check(residual_add, kernel):
    """``residual_add(h, f, alpha, out, BLOCK_M, BLOCK_N)`` launches ``kernel`` (arguments as in ``launch``)."""
    rng = lab_check.rng()

    def values():
        for _ in range(3):
            M, N = rng.randint(65, 300), rng.randint(65, 300)
            h = lab_check.operand(M, N, dtype=torch.float32, extra=8)  # three tensors, three row strides
            f = lab_check.operand(M, N, dtype=torch.float16, extra=24)
            out = lab_check.poisoned(M, N, dtype=torch.float32)
            alpha = rng.uniform(0.25, 2.0)
            layout = trace.Tiles({"h": "mn", "f": "mn", "out": "mn"}, "out",
                                 dict(M=M, N=N, BLOCK_M=TILE[0], BLOCK_N=TILE[1]))
            with trace.watching(layout, h=h, f=f, out=out) as seen:
                residual_add(h, f, alpha, out, *TILE)
            ref = h.double() + alpha * f.double()
            try:
                lab_check.compare(f"{M}x{N}", out, ref, TOL)
            except AssertionError as e:
                # again into rows padded wider than a tile: a store without its mask now spills only into padding
                wide = lab_check.poisoned(M, N, dtype=torch.float32, extra=TILE[1])
                residual_add(h, f, alpha, wide, *TILE)
                spills = lab_check.written_outside(wide) and not lab_check.unwritten(wide).any() and \
                    lab_check.rel_err(wide, ref) <= TOL
                hint = (" - the edge tiles' stores have no mask: into rows padded wider than a tile the same kernel "
                        "gets every value right and still writes outside, so past the last column a store lands in "
                        "the next row, and past the last row outside the tensor" if spills else
                        _likely(out, ref, lab_check.rel_err(out, ref)))
                raise trace.after(seen, layout, AssertionError(f"{e}{hint}")) from None
            told = trace.after(seen, layout)
            if told:
                raise told
        return f"within {TOL:.0e} of h + alpha * f on three ragged shapes, three row strides each"

    def code():
        h, f = (torch.empty(4, dtype=d, device=DEVICE) for d in (torch.float32, torch.float16))
        size = 16384
        compiled = aot.compile_sm90(kernel, h, f, h, size, size, size + 64, size + 128, size + 32, 0.5,
                                    BLOCK_M=64, BLOCK_N=128, num_warps=4)
        counts = compiled.counts()
        if not counts["ld.global"]:
            raise lab_check.NotAttempted("the kernel loads nothing")
        needed = 64 * 128 * (4 + 2) // 16 // 128  # both tiles in 16-byte pieces, over 128 threads
        problem = _narrow_loads(counts, needed) or _unmasked(compiled, TENSORS)
        if not problem and counts["ld.global"] > needed:
            problem = (f"{counts['ld.global']} x 128-bit ld.global per thread, where a 64x128 tile of h and one of f "
                       f"take {needed}: each program loads more than its tile - its rows are tl.arange(0, BLOCK_M), "
                       "its columns tl.arange(0, BLOCK_N), and it loads h and f once each")
        if problem:
            raise AssertionError(problem)
        return (f"{counts['ld.global 128-bit']} x 128-bit ld.global per thread for a 64x128 tile of h (fp32) and "
                f"of f (fp16): every load 16 bytes")

    return lab_check.run("exercise 01", [("residual add: values", values), ("residual add: 16-byte loads", code)], twin=True)


def stretch(kernel):
    """The optional stretch goal: ``kernel(h, f, bias, out, M, N, stride_hm, stride_fm, stride_om, alpha, BLOCK_M,
    BLOCK_N)`` adds a per-column fp32 ``bias`` too. Checks the values on one ragged shape, then shows the width
    of each load in the sm_90 code, the bias's beside the tiles'."""
    rng = lab_check.rng()

    def values():
        small, large = sorted(rng.sample(range(65, 301), 2))
        for M, N in ((large, small), (small, large)):  # a bias masked by rows < N, or by cols < M, is wrong in one
            h = lab_check.operand(M, N, dtype=torch.float32, extra=8)
            f = lab_check.operand(M, N, dtype=torch.float16, extra=24)
            bias = lab_check.operand(N, dtype=torch.float32)
            out = lab_check.poisoned(M, N, dtype=torch.float32)
            layout = trace.Tiles({"h": "mn", "f": "mn", "bias": "n", "out": "mn"}, "out",
                                 dict(M=M, N=N, BLOCK_M=TILE[0], BLOCK_N=TILE[1]))
            with trace.watching(layout, h=h, f=f, bias=bias, out=out) as seen:
                kernel[(triton.cdiv(M, TILE[0]), triton.cdiv(N, TILE[1]))](
                    h, f, bias, out, M, N, h.stride(0), f.stride(0), out.stride(0), 0.75, BLOCK_M=TILE[0],
                    BLOCK_N=TILE[1])
            base = h.double() + 0.75 * f.double()
            try:
                lab_check.compare(f"{M}x{N}", out, base + bias.double(), TOL)
            except AssertionError as e:
                rows, cols = torch.arange(M, device=out.device)[:, None], torch.arange(N, device=out.device)[None, :]
                wrong = {"rows < N": rows < N, "cols < M": cols < M}
                said = next((m for m, keep in wrong.items() if not lab_check.unwritten(out).any() and
                             lab_check.rel_err(out, base + bias.double() * keep) <= TOL), None)
                ref = base + bias.double()
                hint = (f" - out equals h + alpha * f + bias with the bias masked by {said}: the bias has one value per "
                        "column, N in all; load it with mask=cols < N" if said else
                        _likely(out, ref, lab_check.rel_err(out, ref)))
                raise trace.after(seen, layout, AssertionError(f"{e}{hint}")) from None
            told = trace.after(seen, layout)
            if told:
                raise told
        return "h + alpha * f + bias right on a ragged shape"

    def code():
        h, f = (torch.empty(4, dtype=d, device=DEVICE) for d in (torch.float32, torch.float16))
        lines = []
        for BLOCK_M, BLOCK_N in ((64, 128), (16, 512)):
            compiled = aot.compile_sm90(kernel, h, f, h, h, 16384, 16384, 16384, 16384, 16384, 0.5,
                                        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=4)
            problem = _unmasked(compiled, TENSORS[:2] + (("bias", "b_ptr"),) + TENSORS[2:])
            if problem:
                raise AssertionError(problem)
            counts = compiled.counts()
            needed = -(-BLOCK_M * BLOCK_N * (4 + 2) // 16 // 128) + -(-BLOCK_N * 4 // 16 // 128)  # tiles, bias row
            if counts["ld.global"] > needed:
                raise AssertionError(f"{counts['ld.global']} ld.global per thread at {BLOCK_M}x{BLOCK_N}, where its tiles "
                                     f"of h and f and one row of bias take {needed}: each program loads more than its "
                                     "tile - its rows are tl.arange(0, BLOCK_M), its columns tl.arange(0, BLOCK_N), and "
                                     "the bias is one row, b_ptr + cols, loaded once")
            widths = {k.split()[1]: v for k, v in counts.items() if k.startswith("ld.global ") and v}
            lines.append(f"{BLOCK_M}x{BLOCK_N}: " + ", ".join(f"{n} x {w}" for w, n in sorted(
                widths.items(), key=lambda kv: -int(kv[0].split("-")[0]))) + " ld.global per thread")
        return "; ".join(lines)

    lab_check.run("stretch (optional)", [("residual add + bias: values", values),
                                                ("residual add + bias: load widths", code)], twin=True)
