"""The check behind exercises/00_memory_wall.ipynb: arithmetic intensity, the roofline bound, the bytes
a fused elementwise kernel saves, and that kernel itself, out = relu(alpha * x + y) in one pass
(values on ragged sizes, and in its compiled code one masked load per input and one masked store)."""
import itertools
import math
import random
import re

import torch

from ..lab import aot, check as lab_check
from ..lab.mode import DEVICE


def _products(names, values, factors, coefficients):
    """{value: words} of every sum of ``factors`` products of the named values (with repeats), times a coefficient:
    the terms a learner may have written, to find the one that gives what they gave."""
    terms = list(itertools.combinations_with_replacement(range(len(names)), factors))
    found = {}
    for c in coefficients:
        for t in terms:
            value = c * math.prod(values[i] for i in t)
            found.setdefault(value, (f"{c} * " if c != 1 else "") + " * ".join(names[i] for i in t))
    return found


def _intensity_terms(got, M, N, K, e):
    """Which numerator or denominator a wrong intensity implies, in words; '' when none fits."""
    flops, elems = 2 * M * N * K, M * K + K * N + M * N
    near = lambda a, b: abs(a - b) <= 1e-9 * abs(b)
    implied = got * elems * e  # the FLOP count, if the bytes were right
    for value, words in _products("MNK", (M, N, K), 3, (1, 2, 3, 4)).items():
        if near(implied, value):
            return (f"your FLOP count is {words}: a GEMM does M * N * K multiply-adds, 2 FLOP each "
                    "(2 * M * N * K)")
    pairs = {"M * K": M * K, "K * N": K * N, "M * N": M * N, "M * M": M * M, "N * N": N * N, "K * K": K * K}
    for combo in itertools.combinations_with_replacement(pairs, 3):
        if near(flops / (got * e), sum(pairs[p] for p in combo)):
            return (f"your bytes count {' + '.join(combo)} elements: A is M x K, B is K x N, C is M x N, each "
                    "crossing HBM once")
    return ""


def _intensity(gemm_intensity):
    for _ in range(20):
        M, N, K, e = random.randint(1, 9000), random.randint(1, 9000), random.randint(1, 9000), random.choice([1, 2, 4])
        flops, elems = 2 * M * N * K, M * K + K * N + M * N
        want, got = flops / (elems * e), gemm_intensity(M, N, K, e)
        if got is None:
            raise NotImplementedError
        if abs(got - want) <= 1e-9 * want:
            continue
        known = {flops / elems: "that is FLOP per element: divide by the bytes, elem_bytes per element",
                 flops / ((elems + M * N) * e): "C is written once, not read and written: count it once",
                 M * N * K / (elems * e): "a multiply-add is 2 FLOP: 2 * M * N * K in all",
                 2 * M * N * K / ((M * K + K * N) * e): "C crosses HBM too (it is written): count M * N elements"}
        hint = next((h for v, h in known.items() if abs(got - v) <= 1e-9 * v), None) or \
            _intensity_terms(got, M, N, K, e) or "count 2 FLOP per multiply-add, and the bytes of A, B and C once each"
        raise AssertionError(f"M={M}, N={N}, K={K}, {e}-byte elements: expected {want:.3f} FLOP/B, got {got:.3f}; "
                             f"{hint}")
    return "matches on 20 random shapes"


def _roofline_ref(flops, nbytes, tf, tb):
    return max(flops / (tf * 1e12), nbytes / (tb * 1e12)) * 1e3


def _roofline(roofline_ms):
    for _ in range(20):
        flops, nbytes = random.uniform(1e6, 1e13), random.uniform(1e6, 1e11)
        tf, tb = random.uniform(10, 1000), random.uniform(0.5, 5)
        t_math, t_mem = flops / (tf * 1e12) * 1e3, nbytes / (tb * 1e12) * 1e3
        want, got = max(t_math, t_mem), roofline_ms(flops, nbytes, tf, tb)
        if got is None:
            raise NotImplementedError
        if abs(got - want) > 1e-9 * want:
            args = (flops, nbytes, tf, tb)
            confused = next((words for confuse, words in lab_check.confusions(("flops", "nbytes", "tflops", "tbps"))
                             if abs(got - _roofline_ref(*confuse(args))) <= 1e-9 * want), None)
            hint = ("the bound is the larger of the two times, not their sum: bytes and math overlap"
                    if abs(got - (t_math + t_mem)) < 1e-9 * want else
                    f"you computed it with {confused}: flops go with tflops, nbytes with tbps" if confused else
                    "check the units: TFLOP/s and TB/s are 1e12 per second, and the answer is in ms")
            raise AssertionError(f"{flops:.3g} FLOP, {nbytes:.3g} B at {tf:.0f} TFLOP/s, {tb:.2f} TB/s: "
                                 f"expected {want:.4g} ms, got {got:.4g} ms; {hint}")
    return "matches on 20 random kernels"


def _bytes(relu_axpy_bytes):
    for _ in range(10):
        n, e = random.randint(1000, 10 ** 9), random.choice([2, 4])
        for fused, vectors in ((True, 3), (False, 5)):
            want, got = vectors * n * e, relu_axpy_bytes(n, e, fused)
            if got is None:
                raise NotImplementedError
            if got == want:
                continue
            way = "fused (one kernel)" if fused else "unfused (torch: an add kernel, then a ReLU kernel)"
            hint = {True: {2 * n * e: "the kernel reads x and y and writes out: three vectors cross HBM",
                           3 * n: "bytes, not elements: multiply by elem_bytes"},
                    False: {3 * n * e: "the add kernel writes alpha * x + y to memory, and the ReLU kernel reads it "
                                       "back and writes out: count both kernels' traffic",
                            4 * n * e: "the ReLU kernel reads its input and writes its output: two vectors, on top "
                                       "of the add kernel's three",
                            5 * n: "bytes, not elements: multiply by elem_bytes"}}[fused].get(got)
            factor = next((f"your bytes count is {vectors} * {words}: {what} (each vector is n elements of "
                           f"elem_bytes bytes: {vectors} * n * elem_bytes)"
                           for words, value, what in (("n * n", n * n, "n in place of elem_bytes"),
                                                      ("elem_bytes * elem_bytes", e * e, "elem_bytes in place of n"))
                           if got == vectors * value), None)
            hint = hint or factor
            if hint is None:
                counted = f"you count {got / (n * e):g} vectors of n elements" if got % (n * e) == 0 else ""
                hint = (f"{counted}; " if counted else "") + "count every vector each kernel reads or writes, once"
            raise AssertionError(f"n={n}, {e}-byte elements, {way}: expected {want} B, got {got}; {hint}")
    return "3 vectors cross HBM fused, 5 unfused"


def _store_swapped(kernel, e):
    """Where Triton refused a tl.store whose first argument is not pointers: the learner's tl.store call that passes
    a pointer (a name ending in _ptr) second and none first, in words; None otherwise."""
    import ast
    import inspect
    import textwrap
    if "Unsupported ptr type" not in str(e) or "tl.store" not in str(e):
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(kernel, "fn", kernel))))
    except (OSError, TypeError, SyntaxError):
        return None
    pointer = lambda node: any(isinstance(n, ast.Name) and n.id.endswith("_ptr") for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "store" \
                and len(node.args) >= 2 and pointer(node.args[1]) and not pointer(node.args[0]):
            wrong = ast.unparse(node)
            node.args[:2] = node.args[1::-1]
            said = re.search(r"Unsupported ptr type [^\n\"]*", str(e)).group(0)
            return (f"tl.store takes the pointers first, then the value: `{wrong}` passes the value first and the "
                    f"pointers second, swapped (Triton refused it: {said}); write {ast.unparse(node)}")
    return None


def _run(relu_axpy, relu_axpy_kernel, *args, **kwargs):
    """``relu_axpy(*args, **kwargs)``; a tl.store with its arguments swapped, which Triton refuses, is named."""
    try:
        return relu_axpy(*args, **kwargs)
    except Exception as e:
        if lab_check.is_stub(e):
            raise
        why = _store_swapped(relu_axpy_kernel, e)
        if why:
            raise AssertionError(why) from None
        raise


def _values(relu_axpy, relu_axpy_kernel=None):
    for dtype, tol in ((torch.float32, 1e-6), (torch.float16, 2e-3)):
        n = random.randint(1000, 5000)  # not a multiple of any block size: the edge must be masked
        x, y = lab_check.operand(n, dtype=dtype), lab_check.operand(n, dtype=dtype)
        alpha = random.uniform(0.5, 2) * random.choice([-1, 1])
        out = lab_check.poisoned(n, dtype=dtype)
        _run(relu_axpy, relu_axpy_kernel, alpha, x, y, out)
        xf, yf = x.float(), y.float()
        ref = torch.relu(alpha * xf + yf)
        candidates = [("alpha * x + y: the ReLU is missing", alpha * xf + yf),
                      ("relu(x + alpha * y): alpha multiplies y instead of x", torch.relu(xf + alpha * yf)),
                      ("relu(alpha * x) + y: the ReLU comes before adding y", torch.relu(alpha * xf) + yf),
                      ("relu(alpha * y + y): x is loaded through y's pointer", torch.relu(alpha * yf + yf)),
                      ("relu(alpha * x + x): y is loaded through x's pointer", torch.relu(alpha * xf + xf))]
        floor = float(out.float().min())
        if floor != 0 and floor == floor and floor != lab_check.POISON:
            candidates.append((f"max(alpha * x + y, {floor:g}): the ReLU clamps at {floor:g} in place of 0; "
                               "tl.maximum(alpha * x + y, 0.0)", torch.clamp(alpha * xf + yf, min=floor)))
        try:
            lab_check.compare(f"n={n} {dtype}", out, ref, tol)
        except AssertionError as e:
            ok = ~lab_check.unwritten(out)
            # a candidate is judged against the size of its terms, not of its result: with alpha near -1,
            # alpha * y + y nearly cancels, and a GPU's fused multiply-add differs from torch's two roundings by
            # far more than tol of that small result (seen on the H200, 2026-12-02)
            terms = ((abs(alpha) + 1) * (xf.abs() + yf.abs())).double().norm().item()
            match = next((what for what, wrong in candidates
                          if ok.all() and (out.double() - wrong.double()).norm().item() <= tol * terms), None)
            said = f"; out equals {match}" if match else \
                _read_through_out(relu_axpy, relu_axpy_kernel, alpha, x, y, tol)
            raise AssertionError(f"{e}" + (said or "")) from None
    return "correct on ragged fp32 and fp16 inputs"


def _read_through_out(relu_axpy, relu_axpy_kernel, alpha, x, y, tol):
    """The kernel run again with out holding random values instead of the poison: when what it writes is
    relu(alpha * out + y) or relu(alpha * x + out) of those values, an input is loaded through out_ptr; that, in
    words ("; ..."), or None."""
    out = lab_check.operand(x.numel(), dtype=x.dtype, device=x.device)
    held = out.float().clone()
    try:
        _run(relu_axpy, relu_axpy_kernel, alpha, x, y, out)
    except Exception:  # noqa: BLE001 - the first run already said how it fails
        return None
    xf, yf = x.float(), y.float()
    for what, wrong in (("x", torch.relu(alpha * held + yf)), ("y", torch.relu(alpha * xf + held))):
        if lab_check.rel_err(out, wrong) <= tol:
            formula = "relu(alpha * out + y)" if what == "x" else "relu(alpha * x + out)"
            return (f"; run again on an out filled with random values, the kernel writes {formula} of those values: "
                    f"{what} is loaded through out_ptr, the output's pointer; load it from {what}_ptr")
    return None


def _code(relu_axpy_kernel):
    x = torch.empty(4, dtype=torch.float16, device=DEVICE)
    compiled = _run(lambda *a, **k: aot.compile_sm90(relu_axpy_kernel, *a, **k), relu_axpy_kernel, x, x, x, 1.5,
                    1 << 28, BLOCK=1024, num_warps=4)
    counts = compiled.counts(sass=False)
    if not counts["ld.global"] and not counts["st.global"]:
        raise lab_check.NotAttempted("the kernel neither loads nor stores")
    lab_check.require(compiled, "ld.global", "a load from global memory")
    lab_check.require(compiled, "st.global", "a store to global memory")
    lines = [line.strip() for line in compiled.ptx.splitlines() if "ld.global" in line or "st.global" in line]
    bare = [line.split()[0] for line in lines if not line.startswith("@")]
    if bare:
        raise AssertionError(f"{len(bare)} of the {len(lines)} global loads and stores have no predicate "
                             f"({', '.join(sorted(set(bare)))}): without a mask the last block reads and writes past "
                             "the end of the vectors; mask every tl.load and tl.store with offsets < n")
    if counts["ld.global"] > 2 or counts["st.global"] > 1:
        raise AssertionError(f"{counts['ld.global']} ld.global and {counts['st.global']} st.global per thread: one "
                             "pass loads x and y once and stores out once; keep alpha * x + y in registers for the "
                             "ReLU instead of storing and reloading it")
    widths = sorted({k.split()[1] for k, v in counts.items() if k.startswith("ld.global ") and v})
    return (f"{counts['ld.global']} ld.global and {counts['st.global']} st.global in the sm_90 PTX, all masked, "
            f"{', '.join(widths)} wide (lesson 01 is about that width)")


def check(gemm_intensity, roofline_ms, relu_axpy_bytes, relu_axpy, relu_axpy_kernel):
    return lab_check.run("exercise 00", [("gemm_intensity", lambda: _intensity(gemm_intensity)),
                                         ("roofline_ms", lambda: _roofline(roofline_ms)),
                                         ("relu_axpy_bytes", lambda: _bytes(relu_axpy_bytes)),
                                         ("relu_axpy: values", lambda: _values(relu_axpy, relu_axpy_kernel)),
                                         ("relu_axpy: compiled code", lambda: _code(relu_axpy_kernel))], twin=True)


def _mixed_bytes(mixed_bytes):
    for _ in range(10):
        n = random.randint(1000, 10 ** 9)
        got = mixed_bytes(n)
        if got is None:
            raise NotImplementedError
        if got != 10 * n:
            hint = ("x and y are read as 4-byte fp32, out written as 2-byte fp16" if got in (12 * n, 6 * n) else
                    (f"you count {got / n:g} bytes per element; " if got % n == 0 else "") +
                    "count each vector once, at its own element size: 4 + 4 read (fp32), 2 written (fp16)")
            raise AssertionError(f"n={n}: expected {10 * n} B, got {got}; {hint}")
    return "10 bytes per element: 4 + 4 read, 2 written"


def _mixed_values(relu_axpy):
    n = random.randint(1000, 5000)
    x, y = lab_check.operand(n, dtype=torch.float32), lab_check.operand(n, dtype=torch.float32)
    out = lab_check.poisoned(n, dtype=torch.float16)
    relu_axpy(0.75, x, y, out)
    lab_check.compare(f"n={n} fp32 in, fp16 out", out, torch.relu(0.75 * x.float() + y.float()), 2e-3)
    return "your kernel, unchanged, casts on the way out (tl.store converts to out's element type)"


def check_stretch(relu_axpy, mixed_bytes):
    """The stretch goal: the bytes of relu_axpy with fp32 inputs and an fp16 output, and the kernel run so."""
    return lab_check.run("exercise 00, stretch", [("mixed_bytes", lambda: _mixed_bytes(mixed_bytes)),
                                                  ("fp32 in, fp16 out: values", lambda: _mixed_values(relu_axpy))], twin=True)
