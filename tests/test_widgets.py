"""nbval runs each notebook with the sliders at their defaults; a learner moves them. Drive every
registered widget callback through every combination of its slider values."""
import contextlib
import io

import matplotlib.pyplot as plt
import pytest

import kernels
import kernels.cp_async  # noqa: F401  (each lesson module registers its widget)
import kernels.descriptors  # noqa: F401
import kernels.loads  # noqa: F401
import kernels.pipeline  # noqa: F401
import kernels.roofline  # noqa: F401
import kernels.side_by_side  # noqa: F401
from kernels.lab.widgets import REGISTRY, combinations, run_safely


def _cases(fn):
    """Every combination in CPU mode, where a callback compiles and looks up. On a GPU each one
    also times a kernel, so there: the defaults and the corners (largest and smallest settings)."""
    combos = list(combinations(fn))
    if kernels.MODE == "cpu":
        return combos
    return [fn.defaults, combos[0], combos[-1]]


CASES = [(name, cfg) for name, fn in sorted(REGISTRY.items()) for cfg in _cases(fn)]


def test_every_lesson_has_tile_and_stage_sliders():
    assert REGISTRY
    for name, fn in REGISTRY.items():
        assert "stages" in fn.grid and any(k.startswith("BLOCK") for k in fn.grid), name
        for k, values in fn.grid.items():
            if k.startswith("BLOCK"):  # other sliders (e.g. host/device descriptor) may offer words
                assert all(v & (v - 1) == 0 for v in values), f"{name}: {k} offers a non power of two"


@pytest.mark.parametrize("name, config", CASES, ids=[f"{n.split('.')[-1]}-{'-'.join(map(str, c.values()))}"
                                                     for n, c in CASES])
def test_widget_callback(name, config):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ran = run_safely(REGISTRY[name], **config)
    plt.close("all")
    text = out.getvalue()
    assert "Traceback" not in text
    assert ran or "\ncannot run " in "\n" + text, text
