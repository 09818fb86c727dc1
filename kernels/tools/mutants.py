"""Mutation testing of the exercise checks: does each check fail every wrong answer, and say why?

Each solution notebook (the single source) is read; every answer region (``### BEGIN SOLUTION`` ...
``### END SOLUTION``) is mutated mechanically, one change at a time, the way learners go wrong: a mask or an
``other=`` dropped, a bound off by one, a stride, a size or a program axis swapped for another, an argument
pair swapped, a dtype changed, a constant changed, a statement deleted. Python answers (Triton, TileLang,
plain functions) are mutated on their AST; exercise 06's CUDA C++ on the text of its protocol lines. Each
mutant runs through the notebook's own cells: the cells before its cell as the solution has them, its cell
mutated, then every later cell that uses what it defines, checks included. Its outcome:

- named: a check failed and its message names the mutated construct (the words each operator lists);
- symptom: a check failed with a message that does not name it;
- not attempted: the checks called a written answer a stub;
- raw: an exception escaped the checks (the learner would see a traceback);
- equivalent: every check passed, and every kernel the checks compiled for sm_90 has the solution's PTX, or (in the
  interpreter: on a GPU, in a child process without one) the mutant loads and stores what the solution does and
  stores the same values, on the check's inputs drawn from two fixed seeds (what differs, a fill value no kept lane
  reads say, changes nothing the kernel does);
- survived: every check passed, and the compiled code differs (or nothing was compiled to compare).

Run on a GPU, the checks see values and compiled code (and, for a notebook that passes, the interpreter's twin:
``kernels.lab.twin``); the report of that mode is reports/mutants-gpu.json, beside the CPU mode's.

    python -m kernels.tools.mutants 01 04       # those exercises; all when none is named
    python -m kernels.tools.mutants --sample 5  # 5 mutants per exercise, drawn evenly (CI's quick run)
    python -m kernels.tools.mutants --report    # write the report of this mode (reports/mutants.json, or
                                                # reports/mutants-gpu.json on a GPU) and its .md
"""
import argparse
import ast
import contextlib
import copy
import hashlib
import io
import json
import linecache
import os
import re
import sys
import time
from unittest import mock
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "reports" / "mutants.json"          # CPU mode: Triton's interpreter
GPU_REPORT = ROOT / "reports" / "mutants-gpu.json"  # on a GPU


def report_path(gpu):
    return GPU_REPORT if gpu else REPORT
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN = re.compile(r"^\s*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)

# the words a check's message must hold to name what a mutant changed, by construct
NAMES = {
    "mask": ("mask", "edge", "outside", "past the", "beyond", "ragged", "guard"),
    "bound": ("mask", "edge", "bound", "last row", "last column", "tail", "outside", "past the", "ragged", "off by"),
    "stride": ("stride",),
    "pointer": ("pointer", "operand", "descriptor", "the output", "the input", "reads", "swapped"),
    "size": ("tail", "last row", "last column", "k loop", "swapped", "in place of", "m and n", "n and k", "m and k",
             "extent", "you count", "your flop count", "your bytes count", "you computed it with", "units"),
    "axis": ("grid", "program", "axis", "axes", "swapped", "transposed", "holds tile", "holds the values"),
    "order": ("swapped", "transposed", "order", "coordinates", "axes", "operand", "holds tile", "holds the values"),
    "dtype": ("dtype", "fp16", "fp32", "bf16", "fp8", "e4m3", "float", "precision", "accumulat", "convert", "type"),
    "scale": ("scale",),
    "broadcast": ("row", "column", "broadcast", "shape", "transposed"),
    "tma": ("tma", "descriptor", "block_shape", "box"),
    "byte count": ("byte count", "expect", "bytes"),
    "phase": ("phase", "parity"),
    "fence": ("fence",),
    "barrier": ("barrier", "slot"),
    "wait": ("wait", "timeout", "gave up", "bounded", "never completed"),
    "loop": ("loop", "k loop", "tail", "step", "accumulat", "iteration"),
    # a size, order or axis changed where the program finds its tile (program_id, the tile count, the walk)
    "grid": ("grid", "program", "walk", "tiles of c", "tile count", "never computed", "computed twice", "in place of"),
    # the first assignment of a name deleted: Python names the name
    "definition": ("is not defined", "not associated with a value"),
}
# a line where the program finds its tile: a mutant there is a grid mistake, whatever it changed
GRID_LINE = re.compile(r"program_id|num_programs|grouped_tile|\btiles(_n|_m)?\s*=")
# a K loop's header: a bound or an order changed there is a loop mistake
LOOP_LINE = re.compile(r"^for \w+ in (tl\.)?range\(")
SIZES = ({"M", "N", "K"}, {"BLOCK_M", "BLOCK_N", "BLOCK_K"}, {"block_M", "block_N", "block_K"}, {"pid_m", "pid_n"},
         {"rows", "cols"}, {"n", "elem_bytes"}, {"flops", "nbytes"}, {"tflops", "tbps"})
DTYPES = ("float16", "bfloat16", "float32", "float8e4nv", "float8e5")
SUBSTITUTE_DTYPE = {"float32": "float16", "float16": "float32", "bfloat16": "float16", "float8e4nv": "float16",
                    "float8e5": "float8e4nv"}


@dataclass
class Mutant:
    exercise: str
    cell: int
    operator: str
    construct: str
    line: str         # the solution's line it changes
    change: str       # what it became
    source: str = field(repr=False)  # the mutated cell
    outcome: str = ""
    message: str = ""  # the checks' FAIL/todo lines, or the exception
    seconds: float = 0.0

    @property
    def key(self):
        return hashlib.sha256(self.source.encode()).hexdigest()[:10]

    @property
    def identity(self):
        """What tells one mutant from another across runs (--skip, --merge): its exercise, cell and mutated source."""
        return self.exercise, self.cell, self.source


# ---- the notebook --------------------------------------------------------------------------------------------

def solution(number):
    path, = ROOT.glob(f"solutions/{number}_*.ipynb")
    return path, nbformat.read(path, as_version=4)


def regions(source):
    """Line ranges (1-based, inclusive) of the answer regions of a cell."""
    lines, found, start = source.splitlines(), [], None
    for i, line in enumerate(lines, 1):
        if line.strip().endswith(BEGIN):  # "### BEGIN SOLUTION", or "// ### BEGIN SOLUTION" in CUDA
            start = i + 1
        elif line.strip().endswith(END) and start:
            found.append((start, i - 1))
            start = None
    return found


def in_regions(node, spans):
    return hasattr(node, "lineno") and any(a <= node.lineno <= b and node.end_lineno <= b for a, b in spans)


# ---- mutation operators on a Python answer (AST) ---------------------------------------------------------------

def _names(scope):
    """The names a line of ``scope`` can confuse: its parameters and the names it assigns."""
    args = scope.args if isinstance(scope, (ast.FunctionDef, ast.Lambda)) else None
    return ({a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} if args else set()) | \
        {n.id for n in ast.walk(scope) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _scopes(tree):
    """id(node) -> the names of the innermost function that holds it (the module's for the rest)."""
    found = {id(n): _names(tree) for n in ast.walk(tree)}
    for f in ast.walk(tree):  # outer functions come first in ast.walk: inner ones overwrite them
        if isinstance(f, ast.FunctionDef):
            names = _names(f)
            found.update({id(n): names for n in ast.walk(f)})
    return found


def _peers(name, params):
    """The names a learner confuses with ``name``: other strides, pointers, sizes of the same family."""
    stride = re.fullmatch(r"stride_([a-z]+)([a-z])", name)
    if stride:  # stride_<tensor><dim>: the same tensor's other stride, or another tensor's along the same dim
        tensor, dim = stride.groups()
        yield from sorted(p for p in params if p != name and re.fullmatch(rf"stride_({tensor}[a-z]|[a-z]+{dim})", p))
        return
    for end in ("_ptr", "_desc"):  # another tensor's pointer or descriptor (the parameters, not derived names)
        if name.endswith(end):
            yield from sorted(p for p in params if p.endswith(end) and p != name)
            return
    for group in SIZES:
        if name in group:
            yield from sorted((group & params) - {name})


def _plumbing(tree):
    """Constants that only spell an axis or a range (program_id(0), arange(0, ...), x[:, None]): other operators
    cover their mistakes; changing them gives code no learner writes (a third program axis, a 127-long range)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "program_id", "arange", "num_programs"):
            ids |= {id(a) for a in node.args}
        if isinstance(node, ast.Subscript):
            ids |= {id(n) for n in ast.walk(node.slice)}
    return ids


def _candidates(tree, spans):
    """(index in ast.walk order, operator, construct, how to change the copy's node) for each mutation."""
    scopes, plumbing, first = _scopes(tree), _plumbing(tree), _first_assignments(tree)
    for i, node in enumerate(ast.walk(tree)):
        params = scopes[id(node)]
        if not in_regions(node, spans):
            continue
        if isinstance(node, ast.Call):
            for k, kw in enumerate(node.keywords):
                if kw.arg in ("mask", "other"):
                    yield i, f"drop {kw.arg}=", "mask", lambda n, k=k: n.keywords.pop(k)
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "program_id" and node.args and isinstance(node.args[0], ast.Constant):
                yield i, "other program axis", "axis", lambda n: setattr(n.args[0], "value", 1 - n.args[0].value)
            if isinstance(f, ast.Attribute) and f.attr == "to" and len(node.args) == 1:
                yield i, "drop .to()", "dtype", None  # handled by the parent (replaces the call by its receiver)
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            # min, max and their tl forms are commutative: a swap of their arguments is the same program
            if len(node.args) >= 2 and called not in ("arange", "full", "zeros", "min", "max", "minimum", "maximum"):
                yield i, "swap the first two arguments", "order", lambda n: n.args.__setitem__(slice(0, 2), n.args[1::-1])
        elif isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == 2 and isinstance(node.ctx, ast.Load):
            yield i, "swap a pair", "order", lambda n: n.elts.reverse()
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            flip = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq}
            if type(node.ops[0]) in flip:
                yield i, "off-by-one comparison", "bound", lambda n: n.ops.__setitem__(0, flip[type(n.ops[0])]())
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            for peer in _peers(node.id, params):
                construct = ("stride" if "stride" in node.id else "pointer" if node.id.endswith(("_ptr", "_desc"))
                             else "size")
                yield i, f"{node.id} -> {peer}", construct, lambda n, p=peer: setattr(n, "id", p)
        elif isinstance(node, ast.Attribute) and node.attr in SUBSTITUTE_DTYPE:
            yield i, f"{node.attr} -> {SUBSTITUTE_DTYPE[node.attr]}", "dtype", \
                lambda n: setattr(n, "attr", SUBSTITUTE_DTYPE[n.attr])
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float) and id(node) not in plumbing:
            new = node.value + 1 if isinstance(node.value, int) else (node.value * 2 if node.value else 1.0)
            yield i, f"{node.value!r} -> {new!r}", "size", lambda n, v=new: setattr(n, "value", v)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2:
            yield i, "[:, None] <-> [None, :]", "broadcast", lambda n: n.slice.elts.reverse()
        if isinstance(node, (ast.FunctionDef, ast.For, ast.If, ast.While, ast.With)) or hasattr(node, "body"):
            body = getattr(node, "body", [])
            for k, stmt in enumerate(body if isinstance(body, list) else []):
                if in_regions(stmt, spans) and not isinstance(stmt, (ast.Return, ast.Pass)) and len(body) > 1:
                    yield i, "delete a statement", _statement_construct(stmt, first), lambda n, k=k: n.body.pop(k)


def _first_assignments(tree):
    """The ids of the statements that first assign each name (in source order) within each function."""
    first = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        seen = set(a.arg for a in fn.args.args)
        for stmt in sorted((n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))),
                           key=lambda n: (n.lineno, n.col_offset)):
            names = {t.id for target in getattr(stmt, "targets", [getattr(stmt, "target", None)]) if target
                     for t in ast.walk(target) if isinstance(t, ast.Name)}
            if isinstance(stmt, ast.Assign) and names - seen:
                first.add(id(stmt))
            seen |= names
    return first


def _statement_construct(stmt, first=()):
    if id(stmt) in first:
        return "definition"
    if isinstance(stmt, (ast.For, ast.While)):
        return "loop"
    text = ast.unparse(stmt)
    for word, construct in (("mask", "mask"), ("stride", "stride"), ("scale", "scale"), ("desc", "tma"),
                            ("program_id", "axis"), (".to(", "dtype"), ("dot", "loop"), ("acc", "loop")):
        if word in text:
            return construct
    return "size"


def _drop_to(tree, target):
    """Replace the call ``x.to(t)`` at ``target`` by ``x``, in whatever node holds it."""
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, target.func.value)
                return
            if isinstance(value, list) and any(v is target for v in value):
                value[[v is target for v in value].index(True)] = target.func.value
                return


def _enclosing_line(source, node):
    return source.splitlines()[node.lineno - 1].strip()


def python_mutants(number, index, source):
    tree = ast.parse(source)
    spans = regions(source)
    base = ast.unparse(tree)
    seen = {base}
    for i, operator, construct, change in _candidates(tree, spans):
        mutated = copy.deepcopy(tree)
        node = next(n for j, n in enumerate(ast.walk(mutated)) if j == i)
        original = next(n for j, n in enumerate(ast.walk(tree)) if j == i)
        if change is None:
            _drop_to(mutated, node)
        else:
            change(node)
        ast.fix_missing_locations(mutated)
        try:
            text = ast.unparse(mutated)
        except Exception:  # an operator that made no valid tree: not a mutant a learner can write
            continue
        if text in seen:
            continue
        seen.add(text)
        after = _changed_line(base, text)
        line = _enclosing_line(source, original)
        if operator == "delete a statement":
            pass  # its line is the block it was deleted from
        elif construct in ("size", "order", "axis") and GRID_LINE.search(line):
            construct = "grid"
        elif construct in ("size", "order") and LOOP_LINE.search(line):
            construct = "loop"
        yield Mutant(f"{number}", index, operator, construct, line, after, text)


def _changed_line(a, b):
    for x, y in zip(a.splitlines(), b.splitlines()):
        if x != y:
            return y.strip()
    return "(a line deleted)" if len(b.splitlines()) < len(a.splitlines()) else b.splitlines()[-1].strip()


# ---- mutation operators on exercise 06's CUDA (text) -----------------------------------------------------------

CUDA_CONSTRUCT = (("expect_tx", "byte count"), ("wait", "wait"), ("fence", "fence"), ("phase", "phase"),
                  ("slot", "barrier"), ("timeouts", "wait"), ("return", "wait"))


def cuda_mutants(number, index, source):
    """The region lines of the CUDA string: each deleted, each integer changed, each slot/phase name confused."""
    lines = source.splitlines(keepends=True)
    seen = {source}
    for a, b in regions(source):
        for n in range(a - 1, b):
            line = lines[n]
            if not line.strip() or line.strip().startswith("//") or set(line.strip()) <= set("{}; "):
                continue  # a lone brace deleted is a syntax error, not a protocol mistake
            construct = next((c for word, c in CUDA_CONSTRUCT if word in line), "barrier")
            code = line.split("//")[0]
            variants = [("delete the line", "")]
            for m in re.finditer(r"\b\d+\b", code):
                v = int(m.group())
                variants.append((f"{v} -> {v + 1}", line[:m.start()] + str(v + 1) + line[m.end():]))
            for old, new in (("slot", "prev"), ("phase", "phase ^ 1"), ("slot", "(slot ^ 1)"), ("* 2", "* 4"),
                             ("full + 8 * s", "full")):
                # only where the name is read: "(slot ^ 1) = 0" or "phase ^ 1 ^= 1" is no learner's code
                if re.search(rf"(?<![\w.+]){re.escape(old)}(?![\w+]|\s*[\^+]?=[^=])", code):
                    variants.append((f"{old} -> {new}", re.sub(rf"(?<![\w.+]){re.escape(old)}(?![\w+]|\s*[\^+]?=[^=])", new, code, count=1)
                                     + line[len(code):]))
            for operator, new in variants:
                text = "".join(lines[:n]) + new + "".join(lines[n + 1:])
                if text in seen:
                    continue
                seen.add(text)
                yield Mutant(number, index, operator, construct, line.strip(), new.strip() or "(deleted)", text)


def mutants(number):
    """Every mutant of exercise ``number``'s solution."""
    _, nb = solution(number)
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or BEGIN not in cell.source:
            continue
        make = cuda_mutants if cell.source.lstrip().startswith(("RING = r", "CUDA = r")) else python_mutants
        found += make(number, i, cell.source)
    return found


# ---- running a mutant through the notebook's cells ----------------------------------------------------------

_PTX_FILE = "COURSE_MUTANT_PTX"


def _record_ptx():
    """Every kernel the checks compile for sm_90 is written (name, PTX digest) to the file in $COURSE_MUTANT_PTX:
    the checks may compile in a forked child, so a file, not a list, carries it back."""
    from kernels.lab import aot
    original = aot.compile_sm90
    if getattr(original, "recorded", False):
        return

    def compile_sm90(kernel, *args, **meta):
        compiled = original(kernel, *args, **meta)
        path = os.environ.get(_PTX_FILE)
        if path:  # the code only: debug sections (after the first .section), line info and labels differ by source
            code = compiled.ptx.split("\n.section", 1)[0].split("\n\t.section", 1)[0]
            ptx = "\n".join(line for line in code.splitlines()
                            if not line.lstrip().startswith((".loc", ".file", "//", "$L__")))
            with open(path, "a") as f:
                f.write(f"{compiled.name} {hashlib.sha256(ptx.encode()).hexdigest()[:16]}\n")
        return compiled
    compile_sm90.recorded = True
    aot.compile_sm90 = compile_sm90


def _defines(source):
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | \
        {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def _bound(source):
    """Every name a cell binds: imports, functions, classes, assignment and loop targets."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
              for a in n.names}
    return names


def _uses(source):
    try:
        return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return set()


def _exec(ns, source, name):
    source = HIDDEN.sub("", source)
    filename = f"<mutant-{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # Triton reads the source
    exec(compile(source, filename, "exec"), ns)


class Runner:
    """One exercise's notebook, executed once as the solution; a mutant's cell runs in a copy of that namespace
    (so the other answers a check takes are the solution's), then the later cells that use what it defines."""

    def __init__(self, number):
        import matplotlib
        matplotlib.use("Agg")
        self.number = number
        _, self.nb = solution(number)
        self.cells = [c.source for c in self.nb.cells if c.cell_type == "code"]
        self.index = [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code"]
        self.solved = {"__name__": "__main__"}  # the namespace after every cell a mutant needs ran as the solution has it
        needed = self.needed()
        for i, src in zip(self.index, self.cells):
            if i in needed:
                with contextlib.redirect_stdout(io.StringIO()), self.replaying(i, src), _solution_alone():
                    _exec(self.solved, src, f"{number}-{i}")
        _record_ptx()
        self.reference = {}

    def needed(self):
        """The cells a mutant's run can depend on: the answer cells, the cells after them that use what they define
        (the checks), and every earlier cell that defines a name one of those uses. The rest (a timing at size, a
        plot) would only cost time here."""
        need = {i for i, src in zip(self.index, self.cells) if BEGIN in src}
        need |= {j for i in set(need) for j, _ in self.later(i, self.cells[self.index.index(i)])}
        for i, src in reversed(list(zip(self.index, self.cells))):
            if i not in need and _bound(src) & set().union(*(_uses(HIDDEN.sub("", self.cells[self.index.index(j)]))
                                                             for j in need if j > i)):
                need.add(i)
        return need

    def replaying(self, index, source):
        """The twin (kernels.lab.twin) of a check run in cell ``index`` replays the cells a notebook would have run by
        then: the solution's before it, this one's ``source``."""
        from kernels.lab import twin
        before = [HIDDEN.sub("", src) for i, src in zip(self.index, self.cells) if i < index]
        return twin.replaying(before + [HIDDEN.sub("", source)])

    def later(self, index, source):
        """The cells after ``index`` that use what the mutated cell (or a cell run after it) defines."""
        names, run = _defines(source), []
        for i, src in zip(self.index, self.cells):
            if i > index and _uses(HIDDEN.sub("", src)) & names:
                run.append((i, src))
                names |= _defines(src)
        return run

    def _execute(self, cell, source, name, env):
        """Run ``source`` as cell ``cell``, then the later cells that use it, with ``env`` set: (printed, raised)."""
        ns = dict(self.solved)
        out = io.StringIO()
        try:
            with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(io.StringIO()):
                with self.replaying(cell, source):
                    _exec(ns, source, f"{self.number}-{cell}-{name}")
                for i, src in self.later(cell, source):
                    with self._replaying_after(cell, source, i, src):
                        _exec(ns, src, f"{self.number}-{i}")
        except Exception as e:  # noqa: BLE001 - whatever escapes is what the learner would see
            raised = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        else:
            raised = None
        return out.getvalue(), raised

    def _replaying_after(self, cell, source, index, src):
        """``replaying`` for a later cell ``index``: the mutated cell ``cell`` holds ``source`` in what it replays."""
        from kernels.lab import twin
        before = [HIDDEN.sub("", source if i == cell else text) for i, text in zip(self.index, self.cells) if i < index]
        return twin.replaying(before + [HIDDEN.sub("", src)])

    def traced_alike(self, mutant, seeds=(1, 2)):
        """Whether the mutant loads and stores what the solution does, and stores the same values, on the check's
        inputs drawn from each of ``seeds`` (the interpreter only: it traces every access). An honest
        equivalence: what differs (a fill value no kept lane reads, say) changes nothing the kernel does."""
        import tempfile
        from kernels.lab import mode, trace
        if not mode.INTERPRET:
            return _alike_without_gpu(mutant)
        source = self.cells[self.index.index(mutant.cell)]
        source = source if source.lstrip().startswith(("RING = r", "CUDA = r")) else ast.unparse(ast.parse(source))
        for seed in seeds:
            logs = []
            for name, text in (("solution", source), (mutant.key, mutant.source)):
                log = tempfile.mktemp(prefix="mutant-trace-")
                self._execute(mutant.cell, text, name, {"COURSE_CHECK_SEED": str(seed), trace.TRACE_LOG: log})
                logs.append(Path(log).read_text() if Path(log).exists() else "")
                Path(log).unlink(missing_ok=True)
            if not logs[0] or logs[0] != logs[1]:
                return False
        return True

    def run(self, mutant, ptx_path, trace=True):
        """Run ``mutant`` and set its outcome; ``trace``: a mutant that passes with other PTX than the solution's is
        traced against it for equivalence (``traced_alike``)."""
        open(ptx_path, "w").close()
        start = time.monotonic()
        text, raised = self._execute(mutant.cell, mutant.source, mutant.key, {_PTX_FILE: ptx_path})
        mutant.seconds = round(time.monotonic() - start, 1)
        failed = [line.strip() for line in text.splitlines() if re.match(r"\s+(FAIL|todo)\s", line)]
        ptx = Path(ptx_path).read_text().splitlines()
        if raised:
            mutant.outcome, mutant.message = "raw", raised
        elif any(line.startswith("FAIL") for line in failed):
            mutant.message = "\n".join(failed)
            words = NAMES[mutant.construct]
            named = any(w in line.lower() for line in failed if line.startswith("FAIL") for w in words)
            mutant.outcome = "named" if named else "symptom"
        elif failed:
            mutant.outcome, mutant.message = "not attempted", "\n".join(failed)
        elif not re.search(r"checks? pass", text):
            mutant.outcome, mutant.message = "raw", "no check printed a verdict"
        else:
            same = ptx and ptx == self.reference.get(mutant.cell)
            alike = not same and trace and self.traced_alike(mutant)
            mutant.outcome = "equivalent" if same or alike else "survived"
            mutant.message = "same PTX as the solution" if same else (
                "the same loads, stores and stored values as the solution on two seeded draws of the check's inputs"
                if alike else "the compiled code differs" if ptx else "nothing compiled to compare")
        return mutant

    def baseline(self, cell, ptx_path):
        """The solution's own run of ``cell`` (through the same unparse as its mutants): it must pass."""
        source = self.cells[self.index.index(cell)]
        text = ast.unparse(ast.parse(source)) if not source.lstrip().startswith(("RING = r", "CUDA = r")) else source
        # not traced: the solution is alike itself, and its baseline holds its PTX whatever the outcome's word
        with _solution_alone():
            m = self.run(Mutant(self.number, cell, "none", "size", "", "", text), ptx_path, trace=False)
        if m.outcome not in ("survived", "equivalent"):
            raise SystemExit(f"exercise {self.number}: the solution itself does not pass through the runner: "
                             f"{m.outcome}: {m.message}")
        self.reference[cell] = Path(ptx_path).read_text().splitlines()


def _solution_alone():
    """The solution's own runs without the twin (COURSE_TWIN: the interpreter's replay of a notebook whose checks
    pass, kernels/lab/twin.py): it passes there too (its notebook's test), and on a GPU each replay costs a process
    and an interpreted notebook, most of a runner's start on a busy H100 (2026-12-06). The mutants' runs keep it."""
    return mock.patch.dict(os.environ, {"COURSE_TWIN": "1"})


def _child_env(**extra):
    """The environment of a child ``python -m kernels.tools.mutants``: this one's, with its import path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **extra}


def _alike_without_gpu(mutant):
    """``Runner.traced_alike`` of ``mutant`` in a child process with no GPU (CPU mode: the interpreter traces)."""
    import subprocess
    env = _child_env(CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-m", "kernels.tools.mutants", "--alike"], text=True, capture_output=True,
                          input=json.dumps({k: getattr(mutant, k) for k in ("exercise", "cell", "source")}), env=env,
                          timeout=900)
    return done.stdout.strip().endswith("alike")


DEADLINE = "COURSE_MUTANTS_DEADLINE"  # seconds since the epoch after which no mutant starts (--stop-after)


def _past_deadline():
    return time.time() > float(os.environ.get(DEADLINE, "inf"))


def run_exercise(number, sample=None, shard=(0, 1), log=print, skip=()):
    found = [m for m in mutants(number)[shard[0]::shard[1]] if m.identity not in skip]
    if sample:
        step = max(1, len(found) // sample)
        found = found[::step][:sample]
    return run_mutants(number, found, log)


def run_mutants(number, found, log=print, until_lost=False):
    """Run ``found`` (mutants of exercise ``number``) in order. On a GPU a mutant whose kernel trapped (or never
    ended) leaves its process's context lost: every later launch there fails with that mutant's error (and the
    memory it holds stays held). So on a GPU this process runs none: a fresh process runs them until its context is
    lost, then another the rest, until none is left (``until_lost``: such a process, which stops after the loss)."""
    import tempfile
    from kernels.lab import measure, mode
    if mode.LIVE and not until_lost:
        return _until_none_left(number, found)
    runner = Runner(number)
    ptx_path = tempfile.mktemp(prefix=f"mutant-ptx-{number}-")
    for cell in sorted({m.cell for m in found}):
        runner.baseline(cell, ptx_path)
    for k, m in enumerate(found, 1):
        if _past_deadline():
            return found[:k - 1]
        runner.run(m, ptx_path)
        log(f"{number} {k}/{len(found)} {m.outcome:13s} {m.seconds:5.1f}s  cell {m.cell} {m.operator}: "
            f"{m.line} -> {m.change}" + (f"\n      {m.message.splitlines()[0][:200]}" if m.message else ""))
        if measure.gpu_lost() and k < len(found):
            return found[:k] if until_lost else found[:k] + _until_none_left(number, found[k:])
    return found


def _until_none_left(number, rest):
    done = []
    while rest and not _past_deadline():
        ran = _in_a_fresh_process(number, rest)
        done, rest = done + ran, rest[len(ran):]
        if not ran:  # it started before the deadline and reached its first mutant after
            break
    return done


def _in_a_fresh_process(number, rest):
    """The mutants of ``rest`` a new process runs before its GPU context is lost (at least the first)."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        todo, done = Path(folder) / "todo.json", Path(folder) / "done.json"
        todo.write_text(json.dumps([asdict(m) for m in rest]))
        # its exit status is not read: a process that lost its GPU may abort on the way out, after writing done
        child = subprocess.run([sys.executable, "-m", "kernels.tools.mutants", "--until-lost", str(todo), str(done)],
                               env=_child_env())
        ran = [Mutant(**m) for m in json.loads(done.read_text())] if done.exists() else []
    if not ran and not _past_deadline():
        raise SystemExit(f"exercise {number}: a fresh process ran none of the {len(rest)} mutants left "
                         f"(exit status {child.returncode})")
    return ran


OUTCOMES = ("named", "symptom", "not attempted", "raw", "survived", "equivalent")


def summary(results):
    """Per exercise: how many mutants, and how many of each outcome."""
    table = {}
    for m in results:
        row = table.setdefault(m.exercise, {"mutants": 0, **{o: 0 for o in OUTCOMES}})
        row["mutants"] += 1
        row[m.outcome] += 1
    return table


def fingerprint(number):
    """What the report of an exercise depends on: its solution notebook, its check's module, the checks' library
    (check.py; trace.py, which reads the interpreter's loads and stores; twin.py, which replays a notebook there from a
    GPU; triton_internals.py, which types the interpreter's float arguments) and this tester."""
    _, nb = solution(number)
    module, = ROOT.glob(f"kernels/lessons/l{number}_*_exercise.py")
    digest = hashlib.sha256()
    for cell in nb.cells:  # the code only: outputs (a re-run on another machine) change no mutant's outcome
        if cell.cell_type == "code":
            digest.update(cell.source.encode())
    for p in (module, ROOT / "kernels/lab/check.py", ROOT / "kernels/lab/trace.py", ROOT / "kernels/lab/twin.py",
              ROOT / "kernels/lab/triton_internals.py", Path(__file__)):
        digest.update(p.read_bytes())
    return digest.hexdigest()[:16]


def here():
    """(on a GPU, this machine and stack in words) for a report."""
    import platform
    import torch
    import triton
    stack = f"torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}"
    if not torch.cuda.is_available():
        return False, stack
    from kernels.lab import bench
    return True, f"{torch.cuda.get_device_name()}, driver {bench.driver()}, {stack}"


def write_report(results, numbers, where=None, gpu=None):
    on_gpu, stack = here()
    gpu = on_gpu if gpu is None else gpu
    path = report_path(gpu)
    path.parent.mkdir(exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else {"exercises": {}}
    before = old.get("recorded", {})
    for entry in old["exercises"].values():  # entries written before each said where it ran: the report's last run
        entry.setdefault("recorded", f"{before.get('date')}, {before.get('stack')}")
    for number in numbers:
        mine = [m for m in results if m.exercise == number]
        old["exercises"][number] = {
            "fingerprint": fingerprint(number), "summary": summary(mine)[number] if mine else {},
            "recorded": f"{time.strftime('%Y-%m-%d')}, {where or stack}",
            "mutants": [{k: v for k, v in asdict(m).items() if k not in ("source", "exercise")} for m in mine]}
    old["recorded"] = {"date": time.strftime("%Y-%m-%d"), "mode": "gpu" if gpu else "cpu (Triton's interpreter)",
                       "stack": where or stack}
    path.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    lines = ["# Mutation testing of the exercise checks" + (" on a GPU" if gpu else ""), "",
             f"Written by `python -m kernels.tools.mutants --report` (`make mutants`), {old['recorded']['mode']}, "
             "each exercise on the date and machine its row names; read by tests/test_mutants.py. "
             "What each outcome means: the module's docstring.", "",
             "| exercise | mutants | " + " | ".join(OUTCOMES) + " | recorded |", "|---" * (len(OUTCOMES) + 3) + "|"]
    for number, entry in sorted(old["exercises"].items()):
        s = entry["summary"]
        lines.append(f"| {number} | {s.get('mutants', 0)} | " + " | ".join(str(s.get(o, 0)) for o in OUTCOMES) +
                     f" | {entry['recorded']} |")
    for number, entry in sorted(old["exercises"].items()):
        rest = [m for m in entry["mutants"] if m["outcome"] in ("survived", "equivalent", "raw", "symptom",
                                                                 "not attempted")]
        if rest:
            lines += ["", f"## Exercise {number}: not named", ""]
            lines += [f"- **{m['outcome']}** (cell {m['cell']}, {m['operator']}): `{m['line']}` -> `{m['change']}`"
                      + (f": {m['message'].splitlines()[0][:240]}" if m["message"] else "") for m in rest]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("numbers", nargs="*", help="exercise numbers (00-08); all when none")
    parser.add_argument("--sample", type=int, help="run only this many mutants per exercise, drawn evenly")
    parser.add_argument("--report", action="store_true", help="write reports/mutants.json and reports/mutants.md")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--shard", default="0/1", help="k/n: run every n-th mutant from the k-th (one of n processes)")
    parser.add_argument("--out", help="also write the outcomes to this JSON file (one shard's share)")
    parser.add_argument("--skip", nargs="+", metavar="JSON", default=(), help="leave out the mutants these --out files "
                        "hold (a run that stopped, resumed)")
    parser.add_argument("--stop-after", type=float, metavar="S", help="start no mutant after S seconds (the --out file "
                        "holds those that ran; --skip it to resume)")
    parser.add_argument("--where", help="with --merge: the machines and stacks the shards ran on, for the report "
                        "(default: this one's)")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="read the outcomes of shards (--out files) instead of "
                        "running; with --report, write the report from them")
    parser.add_argument("--alike", action="store_true", help=argparse.SUPPRESS)  # a GPU run's child: see traced_alike
    parser.add_argument("--until-lost", nargs=2, help=argparse.SUPPRESS)  # a GPU run's child: see run_mutants
    args = parser.parse_args(argv)
    if args.until_lost:  # a JSON list of mutants, run in order until the GPU context is lost; their outcomes back
        from kernels.lab import mode  # noqa: F401  (picks the mode before Triton loads)
        todo, done = args.until_lost
        todo = [Mutant(**m) for m in json.loads(Path(todo).read_text())]
        ran = run_mutants(todo[0].exercise, todo, until_lost=True)
        Path(done).write_text(json.dumps([asdict(m) for m in ran]))
        return 0
    if args.alike:  # {exercise, cell, source} on stdin: is the mutant traced alike the solution here (no GPU)?
        from kernels.lab import mode  # noqa: F401  (picks the mode before Triton loads)
        m = json.loads(sys.stdin.read())
        mutant = Mutant(m["exercise"], m["cell"], "", "size", "", "", m["source"])
        print("alike" if Runner(m["exercise"]).traced_alike(mutant) else "differs")
        return 0
    numbers = args.numbers or sorted(p.name[:2] for p in ROOT.glob("solutions/[0-9][0-9]_*.ipynb"))
    if args.list:
        for number in numbers:
            for m in mutants(number):
                print(f"{number} cell {m.cell} {m.operator} [{m.construct}]: {m.line} -> {m.change}")
        return 0
    gpu = None
    if args.merge:
        shards = [json.loads(Path(path).read_text()) for path in args.merge]
        if len({s["gpu"] for s in shards}) > 1:
            raise SystemExit("the shards ran in different modes (with and without a GPU): one report is one mode")
        gpu, args.where = shards[0]["gpu"], args.where or shards[0]["where"]
        results = [Mutant(**m) for s in shards for m in s["mutants"]]
        made = {m.identity for n in numbers for m in mutants(n)}
        ran = {m.identity for m in results}
        if made - ran or ran - made:
            raise SystemExit(f"the shards ran {len(ran)} mutants, this code makes {len(made)}: not the same set "
                             f"({len(made - ran)} missing, {len(ran - made)} unknown)")
        results = [m for m in results if m.exercise in numbers]
        args.shard = "0/1"
    else:
        from kernels.lab import mode  # noqa: F401  (picks the mode before Triton loads)
        if args.stop_after is not None:
            os.environ[DEADLINE] = str(time.time() + args.stop_after)  # the fresh processes inherit it
        skip = {Mutant(**m).identity for path in args.skip for m in json.loads(Path(path).read_text())["mutants"]}
        results = []
        for number in numbers:
            results += run_exercise(number, args.sample, tuple(int(v) for v in args.shard.split("/")), skip=skip)
    if args.out:
        on_gpu, where = here()
        Path(args.out).write_text(json.dumps({"gpu": on_gpu, "where": where, "mutants": [asdict(m) for m in results]}))
    for number, row in summary(results).items():
        print(number, " ".join(f"{k}={v}" for k, v in row.items()))
    if args.report:
        if args.shard != "0/1" or args.sample:
            raise SystemExit("--report needs every mutant: no --shard, no --sample")
        write_report(results, numbers, args.where, gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
