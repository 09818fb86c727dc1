"""Notebook hygiene, and the exercise contract: the layout gives every lesson one name; solutions
pass their checks (their hidden assertion, run by nbval); untouched exercises run cleanly and say
"not attempted yet"."""
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
ALL = sorted(p for d in ("notebooks", "solutions", "exercises") for p in (ROOT / d).glob("*.ipynb"))


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_hygiene(path):
    nb = nbformat.read(path, as_version=4)
    assert "kernelspec" in nb.metadata
    assert path.stat().st_size < 2 * 2**20, "keep notebooks small: no huge embedded images"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.source.strip(), f"cell {i} is empty"
        if cell.outputs:
            assert cell.execution_count is not None, f"cell {i} has outputs but was never run"
        last = cell.source.rstrip().splitlines()[-1]
        assert not last.endswith(";") or last.lstrip().startswith("#"), f"cell {i}: trailing ';'"
        assert not re.search(r"(_experimental_make_tensor_descriptor|make_block_ptr)\s*\(", cell.source), \
            f"cell {i} calls an API removed or deprecated in current Triton"
        if "interact" in cell.source or "explore(" in cell.source:
            assert "NBVAL_IGNORE_OUTPUT" in cell.source, f"cell {i}: widget cell without NBVAL_IGNORE_OUTPUT"


MARKDOWN = ALL + sorted(p for d in (".", "notebooks", "workshop") for p in (ROOT / d).glob("*.md"))


def markdown_of(path):
    """(where, text) of each markdown cell of a notebook, or of a markdown file, fenced code left out."""
    if path.suffix == ".md":
        cells = [("", path.read_text())]
    else:
        cells = [(f"cell {c.get('id', i)}: ", c.source) for i, c in enumerate(nbformat.read(path, as_version=4).cells)
                 if c.cell_type == "markdown"]
    for where, source in cells:
        yield where, re.sub(r"(?ms)^(```|~~~).*?^\1[^\n]*$", "", source)


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_folded_answers_close_on_a_line_of_their_own(path):
    """A `</details>` at the end of an answer's last line is raw HTML inside a paragraph to CommonMark
    (mystmd, the site): the fold never closes there and the answer shows unfolded. JupyterLab forgives it."""
    for where, text in markdown_of(path):
        for n, line in enumerate(text.splitlines()):
            if "</details>" in line:
                assert line.strip() == "</details>", (
                    f"{where}line {n + 1}: `</details>` must stand on a line of its own: {line.strip()[-80:]!r}")
        assert text.count("<details>") == text.count("</details>"), f"{where}a <details> is never closed"


HTML_TAGS = {"a", "abbr", "b", "br", "code", "details", "div", "em", "i", "img", "kbd", "li", "ol", "p", "pre",
             "span", "strong", "sub", "summary", "sup", "table", "td", "th", "tr", "u", "ul"}


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_placeholder_in_angle_brackets(path):
    """"recorded on <device>, <date>" outside a code span is two unknown HTML tags to mystmd: the site drops
    them and prints "recorded on , ". Put such a placeholder in backticks, or write the real value."""
    for where, text in markdown_of(path):
        prose = re.sub(r"(`+)[^`]*?\1", "", text)
        unknown = sorted({t for t in re.findall(r"</?([A-Za-z][\w-]*)(?=[\s/>])", prose) if t.lower() not in HTML_TAGS})
        assert not unknown, f"{where}<{'>, <'.join(unknown)}> outside a code span: the site drops it as HTML"


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.name)
def test_solution_shows_its_grade(path):
    # the check cell is nbgrader's graded cell: its hidden test (dropped from the exercise) shows the points earned,
    # which nbgrader reads as partial credit; nbval runs the solution and grade_plugin fails it short of full marks
    check = [c for c in nbformat.read(path, as_version=4).cells if "exercise.check(" in c.source]
    assert len(check) == 1
    points = check[0].metadata["nbgrader"]["points"]
    assert f"### BEGIN HIDDEN TESTS\npassed.score({points})" in check[0].source


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("*.ipynb")), ids=lambda p: p.name)
def test_untouched_exercise_says_not_attempted(path):
    nb = nbformat.read(path, as_version=4)
    # a kernel took over 60 s (nbclient's default) to answer at the start of a 16-worker run on the H100: wait longer
    NotebookClient(nb, timeout=600, startup_timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert re.search(r"exercise \d\d: not attempted yet", text), text[-2000:]
