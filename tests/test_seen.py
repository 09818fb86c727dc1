"""Every figure and listing a cell makes is seen: in the committed notebooks (what the site shows) and in every
notebook nbval executes (``seen_plugin``). Jupyter shows only a cell's last expression, and a matplotlib figure
made off pyplot shows as ``<Figure size ...>`` when it is a cell's value."""
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from kernels.lab import show

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.relative_to(ROOT).as_posix() for d in ("notebooks", "solutions", "exercises")
                   for p in (ROOT / d).glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_the_committed_outputs_show_every_figure_and_listing(path):
    assert show.unseen(json.loads((ROOT / path).read_text())) == []


def test_the_check_names_a_dropped_listing_and_a_figure_left_as_text():
    nb = {"cells": [{"cell_type": "code", "source": "show.source(a)\nshow.source(b)", "outputs": []},
                    {"cell_type": "code", "source": "display(show.source(a))\nshow.source(b)", "outputs": []},
                    {"cell_type": "code", "source": "swizzle.draw('128B')",
                     "outputs": [{"output_type": "execute_result", "data": {"text/plain": "<Figure size 640x290 with 2 Axes>"}}]}]}
    problems = show.unseen(nb)
    assert len(problems) == 2 and problems[0].startswith("cell 0: the value of show.source") \
        and problems[1].startswith("cell 2: a figure shows only as '<Figure size 640x290"), problems


def test_nbval_fails_a_cell_that_leaves_a_figure_unseen(tmp_path):
    # a figure made without pyplot (as the course's widget figures are): left as the cell's value, or passed to
    # display() (neither draws it: no pyplot, no inline backend), or shown through plots.show. Run by nbval with
    # the course's plugin: the first two cells fail, the third passes.
    made = "from matplotlib.figure import Figure\nfig = Figure()\nfig.add_subplot().plot([1, 2])\n"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(made + "fig"),
                                         nbformat.v4.new_code_cell(made + "display(fig)"),
                                         nbformat.v4.new_code_cell("from kernels.lab import plots\n" + made
                                                                   + "plots.show(fig)")])
    path = tmp_path / "figures.ipynb"
    nbformat.write(nb, path)
    run = subprocess.run([sys.executable, "-m", "pytest", str(path), "--nbval-lax", "--nbval-current-env", "-q",
                          "-p", "no:xdist", "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "2 failed, 1 passed" in run.stdout, run.stdout[-3000:]
    assert "a figure shows only as '<Figure size" in run.stdout, run.stdout[-3000:]
