"""Generate exercises/ from solutions/ with nbgrader's own preprocessors: the solutions are the
single source, and valid nbgrader source notebooks an instructor can also give to nbgrader itself.

``ClearSolutions`` turns every region between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` into
nbgrader's stub (``# YOUR CODE HERE`` / ``raise NotImplementedError()``) at the region's indentation;
inside a ``@triton.jit`` kernel that stub cannot compile, which the exercise checks report as "not
attempted yet". ``ClearHiddenTests`` drops ``### BEGIN HIDDEN TESTS`` regions (the solution's
assertion that its checks pass); ``ClearOutput`` drops outputs. Run through nbconvert, no database.

    python -m kernels.tools.exercises            # rewrite exercises/
    python -m kernels.tools.exercises --check    # exit 1 if the committed exercises are stale
"""
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]


def exporter():
    from nbconvert.exporters import NotebookExporter
    from nbgrader.preprocessors import ClearHiddenTests, ClearOutput, ClearSolutions
    ex = NotebookExporter()
    for pre in (ClearSolutions(), ClearHiddenTests(), ClearOutput()):
        ex.register_preprocessor(pre, enabled=True)
    return ex


def exercise_from(solution: nbformat.NotebookNode, ex=None) -> nbformat.NotebookNode:
    nb, _ = (ex or exporter()).from_notebook_node(solution)
    nb = nbformat.reads(nb, as_version=4)
    nb.metadata.pop("widgets", None)  # the learner's own run makes these: none from the solution's machine
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


def generate():
    """{exercise path: notebook text} for every solution notebook."""
    ex, out = exporter(), {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = exercise_from(nbformat.read(path, as_version=4), ex)
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
        sys.exit(f"exercises/ out of date for {stale}: run `python -m kernels.tools.exercises`")


if __name__ == "__main__":
    main(sys.argv[1:])
