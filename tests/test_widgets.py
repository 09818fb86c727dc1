"""Every widget, as a learner meets it: nbval runs each notebook with the sliders at their defaults;
a learner moves them. Here every widget runs at every setting (a sample on a GPU, where each one
times kernels): the default must show a number with its label, and every other setting a number
or a refusal that names the limit it hit."""
import contextlib
import io
import re

import matplotlib.pyplot as plt
import pytest

import kernels
from conftest import REFUSAL_LIMITS as LIMITS
from kernels.lab.widgets import REGISTRY
from kernels.lessons import LESSONS

for _module in LESSONS.values():  # importing a lesson registers its widget
    __import__(f"kernels.lessons.{_module}")

LABELS = ("measured live on ", "recorded on ")


def _settings(widget):
    """Every setting in CPU mode, where a callback compiles and looks up. On a GPU each one also times
    kernels, so there: the defaults and the corners (smallest and largest settings)."""
    every = list(widget.settings())
    return every if kernels.MODE == "cpu" else [widget.defaults, every[0], every[-1]]


def _show(widget, cfg):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        shown = widget(**cfg)
    plt.close("all")
    return shown, out.getvalue()


CASES = [(name, cfg) for name, w in sorted(REGISTRY.items()) for cfg in _settings(w)]


def test_every_lesson_has_a_widget_with_tile_and_stage_sliders():
    assert {w.lesson for w in REGISTRY.values()} == set(LESSONS)
    for name, w in REGISTRY.items():
        assert "stages" in w.sliders and any(k.startswith("BLOCK") for k in w.sliders), name
        for k, values in w.sliders.items():
            if k.startswith("BLOCK"):  # other sliders (e.g. host/device descriptor) may offer words
                assert all(v & (v - 1) == 0 for v in values), f"{name}: {k} offers a non power of two"


@pytest.mark.parametrize("name", sorted(REGISTRY), ids=lambda n: n.split(".")[-1])
def test_the_default_setting_shows_a_number(name):
    widget = REGISTRY[name]
    shown, text = _show(widget, widget.defaults)
    assert shown.figure is not None, f"{name} at its defaults showed no figure:\n{text}"
    assert shown.figure.rate > 0 and shown.figure.base > 0
    assert shown.figure.label.startswith(LABELS) and shown.figure.label in text, text


@pytest.mark.parametrize("name, config", CASES, ids=[f"{n.split('.')[-1]}-{'-'.join(map(str, c.values()))}"
                                                     for n, c in CASES])
def test_every_setting_shows_a_number_or_names_its_limit(name, config):
    shown, text = _show(REGISTRY[name], config)
    assert "Traceback" not in text
    if shown.refused is not None:
        assert any(limit in shown.refused for limit in LIMITS), f"refusal names no limit: {shown.refused}"
        assert f"cannot run {', '.join(f'{k}={v}' for k, v in config.items())}: " in text
    else:
        assert shown.figure is not None, f"neither a figure nor a refusal:\n{text}"
        assert shown.figure.rate > 0 and shown.figure.label in text


def test_a_tile_above_the_roof_says_why():
    """Lesson 00's roofline: a tile whose rate stands above the roof at its counted intensity says why
    (tiles shared by programs come again from the L2), and one under it does not."""
    from kernels.lessons import l00_memory_wall as l00
    widget, ceil, above = l00.tile_on_roofline, l00.ceilings(), 0
    for cfg in _settings(widget):
        shown, text = _show(widget, cfg)
        if shown.figure is None:
            continue
        over = shown.figure.rate > l00.tile_intensity(cfg["BLOCK_M"], cfg["BLOCK_N"]) * ceil.tbps
        above += over
        assert ("above the roof at" in text) == over, text
    assert above or kernels.MODE != "cpu", "no recorded tile stands above the roof: the test checks nothing"


def test_lesson06_cluster_explorer_draws_every_choice_from_one_run(monkeypatch):
    # the dropdowns of lesson 06's cluster explorer: each (cluster, data) draws two panels and prints its
    # ratio, read from one run (the recorded one here), never a traceback
    from kernels.lessons import l06_tma_by_hand as l06
    got = {}
    monkeypatch.setattr(l06, "choices", lambda draw, **options: got.update(draw=draw, options=options))
    shown = []
    monkeypatch.setattr(l06.plots, "show", shown.append)
    l06.explore_clusters()
    assert got["options"] == {"cluster": [2, 4], "data": ["split", "shared"]}
    for cluster in got["options"]["cluster"]:
        for data in got["options"]["data"]:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                got["draw"](cluster, data)
            assert re.match(r"multicast / own copies: \d\.\d{3}x in time, [24]x fewer L2 reads \((recorded|measured)",
                            out.getvalue()), out.getvalue()
    assert len(shown) == 4 and all(len(f.axes) == 2 for f in shown)


def test_a_saved_explorer_says_what_it_is_where_no_kernel_draws_it():
    """JupyterLab shows a saved widget output's text form until its cell is run: an explorer's says what it is and
    how to draw it (ipywidgets' own is `VBox(children=(SelectionSlider(...`), in every committed lesson too."""
    import json
    from pathlib import Path

    from kernels.lab import widgets
    shown = widgets.choices(lambda mode, rows: print(mode, rows), mode=["128B", "none"], rows=[8, 16])
    assert repr(shown) == widgets.UNDRAWN.format("mode, rows")
    assert shown._repr_mimebundle_()["text/plain"] == repr(shown)
    pattern = re.escape(widgets.UNDRAWN).replace(re.escape("{}"), r"[\w, ]+")
    found = 0
    for path in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                if "application/vnd.jupyter.widget-view+json" in out.get("data", {}):
                    found += 1
                    plain = "".join(out["data"]["text/plain"])
                    assert re.fullmatch(pattern, plain), (path.name, plain)
    assert found >= 12
