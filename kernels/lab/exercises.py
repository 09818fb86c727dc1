"""Generate exercises/ from solutions/: the solutions are the single source.

Inside a code cell, the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` become a stub
at the same indentation: ``raise NotImplementedError("YOUR CODE HERE")`` by default, or the text
after the marker (``### BEGIN SOLUTION pass``, for a kernel body, where raising cannot compile).
Outputs are dropped. ``python -m kernels.lab.exercises`` rewrites exercises/;
``--check`` exits 1 when the committed exercises differ from a fresh generation."""
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*(.*)$")
END = re.compile(r"^\s*### END SOLUTION\s*$")


def strip_solution(source):
    out, inside = [], False
    for line in source.split("\n"):
        if (m := BEGIN.match(line)):
            indent, stub = m.group(1), m.group(2).strip() or 'raise NotImplementedError("YOUR CODE HERE")'
            out.append(f"{indent}# YOUR CODE HERE")
            out.append(f"{indent}{stub}")
            inside = True
        elif END.match(line):
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("### BEGIN SOLUTION without ### END SOLUTION")
    return "\n".join(out)


def exercise_from(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(solution)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = strip_solution(cell.source)
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


def generate():
    """{exercise path: notebook text} for every solution notebook."""
    out = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = exercise_from(nbformat.read(path, as_version=4))
        out[ROOT / "exercises" / path.name] = nbformat.writes(nb) + "\n"
    return out


def main(argv):
    stale = []
    for path, text in generate().items():
        if argv[:1] == ["--check"]:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        sys.exit(f"exercises/ out of date for {stale}: run `python -m kernels.lab.exercises`")


if __name__ == "__main__":
    main(sys.argv[1:])
