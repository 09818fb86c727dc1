"""The interpreter's twin of a check on a GPU: the notebook's cells replayed in Triton's interpreter, in a CPU process.

On a GPU a check sees values and compiled code, never a single access: a load that lets lanes past an edge whose
values no kept lane uses (a W load masked ``rn <= N`` in a GEMM whose store is masked ``rn < N``) changes nothing it
can see, and such a kernel passed exercise 02's check on the H100 (2026-12-06) while the same check named it in CPU
mode, where the interpreter shows it every load and store (``trace``). So when every check passes on a GPU, the
cells that brought the notebook to the check are run again in a child process with no GPU - the course's CPU mode -
and whatever the check says there is said here too: on a GPU a check is as strict as without one.

Which cells: a Jupyter kernel's own history (IPython's ``In``: the cells in the order they ran, the check's cell
last), or what the mutation tester sets with ``replaying``. Earlier cells that call a check are left out (each
would check again). Where there is no history (a check called from a test), there is no twin."""
import contextlib
import json
import os
import re
import subprocess
import sys

# a cell that calls a check (or times at size): replayed, it would check again
CHECK_CALL = re.compile(r"\bexercise\.(check\w*|stretch)\(")
TIMEOUT_S = 300  # two interpreted checks take seconds each (11 s at most, CPU mode, 2026-12-02)
_CELLS = []  # the mutation tester's cells, innermost last


@contextlib.contextmanager
def replaying(cells):
    """While the block runs, a twin replays ``cells`` (a list of sources, the check's cell last)."""
    _CELLS.append(cells)
    try:
        yield
    finally:
        _CELLS.pop()


def cells():
    """The sources to replay, the check's cell last, or None where they are not known."""
    if _CELLS:
        found = list(_CELLS[-1])
    else:
        try:
            from IPython import get_ipython
        except ImportError:
            return None
        shell = get_ipython()
        found = list(shell.user_ns.get("In", []))[1:] if shell is not None else []
    if not found:
        return None
    return [c for c in found[:-1] if c.strip() and not CHECK_CALL.search(c)] + found[-1:]


def verdicts(text):
    """{title: [(\"pass\" | \"FAIL\" | \"todo\", the rest of the line: the check's name and what it said)]} from what
    ``check.run`` printed."""
    found, current = {}, []
    for line in text.splitlines():
        m = re.match(r"  (pass|FAIL|todo)  (.*)$", line)
        if m:
            current.append((m.group(1), m.group(2)))
            continue
        m = re.match(r"(.+?): (all \d+ checks pass|not attempted yet|\d+ of \d+ checks pass)", line)
        if m and current:
            found[m.group(1)] = current
            current = []
    return found


def said(lines, name):
    """(kind, what the check ``name`` said) among ``verdicts``' lines of one title, or None."""
    for kind, rest in lines:
        if rest == name or rest.startswith(name + ": "):
            return kind, rest[len(name) + 2:]
    return None


def run(sources, timeout=TIMEOUT_S):
    """Replay ``sources`` in a CPU child: (what the last cell printed, None) or (None, why it could not)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "COURSE_TWIN": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("TRITON_INTERPRET", None)  # the child's `import kernels` sets it, before Triton loads
    try:
        done = subprocess.run([sys.executable, "-m", "kernels.lab.twin"], input=json.dumps(sources), text=True,
                              capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"it ran past {timeout} s"
    reply = next((line for line in reversed(done.stdout.splitlines()) if line.startswith("{")), None)
    if reply is None:
        return None, f"the process ended ({done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}"
    reply = json.loads(reply)
    return (reply["printed"], None) if reply["error"] is None else (None, reply["error"])


def _replay():
    """In the child: run the cells in one namespace, as a notebook does; print what the last one printed (JSON)."""
    import io
    import linecache
    import types
    import matplotlib
    matplotlib.use("Agg")
    sources = json.loads(sys.stdin.read())
    shell = types.SimpleNamespace(run_line_magic=lambda *a, **k: None, run_cell_magic=lambda *a, **k: None,
                                  system=lambda *a, **k: None)
    from IPython.display import display
    ns = {"__name__": "__main__", "get_ipython": lambda: shell, "display": display}
    printed, errors = io.StringIO(), []
    for i, source in enumerate(sources):
        name = f"<twin-cell-{i}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)  # Triton reads a kernel's source
        try:
            with contextlib.redirect_stdout(printed if i == len(sources) - 1 else io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                exec(compile(source, name, "exec"), ns)
        except Exception as e:  # noqa: BLE001 - a learner's experiment may fail here and matter to nothing
            errors.append(f"cell {i + 1} of {len(sources)} raised {type(e).__name__}"
                          + (f": {str(e).splitlines()[0][:200]}" if str(e) else ""))
    error = None if verdicts(printed.getvalue()) else "; ".join(errors) or "the check's cell printed no verdict"
    print(json.dumps({"printed": printed.getvalue(), "error": error}))


if __name__ == "__main__":
    _replay()
