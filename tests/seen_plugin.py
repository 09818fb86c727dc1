"""A pytest plugin (pyproject: ``-p seen_plugin``): a notebook cell that nbval runs fails when a reader would not
see what it makes: a figure left as its ``<Figure size ...>`` text, or a listing or figure whose value the cell
drops (``kernels.lab.show.unseen``). Lessons, solutions and exercises are executed this way by ``make test``."""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call" or type(item).__name__ != "IPyNbCell":
        return
    report = outcome.get_result()
    if report.failed or report.skipped:
        return
    from kernels.lab import show  # by now the suite has chosen its mode
    cell = {"cell_type": "code", "source": item.cell.source, "outputs": item.test_outputs or []}
    problems = [p.replace("cell 0:", f"cell {item.cell_num}:") for p in show.unseen({"cells": [cell]})]
    if problems:
        report.outcome = "failed"
        report.longrepr = "what this cell makes is not seen:\n  " + "\n  ".join(problems)
