"""The interpreter's twin of a check on a GPU (kernels/lab/twin.py): the notebook's cells replayed in a CPU process,
where Triton's interpreter follows every load and store. Run here in CPU mode, the child is what a GPU would start."""
import contextlib
import io

import pytest

from kernels.lab import check, twin
from kernels.tools import mutants


W_PAST_N = "w = tl.load(w_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] <= N), other=0.0)"


def _cells(change=None):
    """Exercise 02's solution cells up to its check, with the first answer cell's W load mask changed to ``change``."""
    _, nb = mutants.solution("02")
    code = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    check_at = next(k for k, (_, src) in enumerate(code) if "exercise.check(" in src)
    cells = [mutants.HIDDEN.sub("", src) for _, src in code[:check_at + 1]]
    if change:
        m = next(m for m in mutants.mutants("02") if m.change == change)
        cells[[i for i, _ in code].index(m.cell)] = m.source
    return cells


def test_only_the_check_being_run_is_replayed():
    cells = ["import kernels", "passed = exercise.check(f, k)", "def f(): pass", "exercise.check_at_size(f)",
             "passed = exercise.check(f, k)"]
    with twin.replaying(cells):
        assert twin.cells() == ["import kernels", "def f(): pass", "passed = exercise.check(f, k)"]
    assert twin.cells() is None  # no notebook, no history: a check called from a test has no twin


def test_the_verdicts_are_read_by_the_checks_names():
    text = ("  pass  linear: values: within 1e-2\n  FAIL  linear: cp.async at 3 stages: no cp.async\n"
            "exercise 02: 1 of 2 checks pass\n")
    lines = twin.verdicts(text)["exercise 02"]
    assert twin.said(lines, "linear: values") == ("pass", "within 1e-2")
    assert twin.said(lines, "linear: cp.async at 3 stages") == ("FAIL", "no cp.async")
    assert twin.said(lines, "linear: bias") is None


@pytest.mark.parametrize("change, failed", [(W_PAST_N, 1), (None, 0)])
def test_a_load_past_an_edge_the_values_hide_fails_in_the_twin(change, failed):
    """A W load masked rn <= N reads a column past W that no stored element uses: the values are right, and on the
    H100 (2026-12-06) exercise 02's check passed it. Its twin names the lanes past the edge; the solution passes."""
    out = io.StringIO()
    with twin.replaying(_cells(change)), contextlib.redirect_stdout(out):
        assert check._twin("exercise 02", {"linear: values": "pass", "linear: cp.async at 3 stages": "pass"}) == failed
    text = out.getvalue()
    if failed:
        assert "FAIL  linear: values (in Triton's interpreter" in text and "outside W" in text, text
    else:
        assert "pass  the same checks in Triton's interpreter" in text, text
