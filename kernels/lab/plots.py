"""Plots the lessons share: a roofline, and throughput against a parameter.

Two ways to draw. A static cell uses pyplot (``roofline``/``throughput`` without ``ax``, then
``plt.show()``), and the inline backend shows the figure when the cell ends. A widget callback draws
on a figure of its own (``subplots`` here: a ``matplotlib.figure.Figure`` that pyplot never sees) and
hands it to ``show``, which draws it to PNG there and then, on the callback's thread, and displays
that image; nothing keeps the figure after that. Why: in JupyterLab a widget's comm messages run on a
subshell thread, and after each one the comm package fires IPython's post-execute event, on which
matplotlib's inline backend draws, shows and closes every open pyplot figure - so a pyplot figure in a
callback was drawn by two threads at once (blank or half-drawn figures, mathtext ParseExceptions from
the log axes' tick labels). A figure pyplot does not know is drawn by its owner only."""
import base64
import contextvars
import io
import threading

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

_DRAWING = threading.Lock()  # matplotlib's text layout (pyparsing for mathtext) is not thread-safe
# where ``show`` puts a figure: a widget's collector while its callback runs (widgets.explore), else the cell
_SINK = contextvars.ContextVar("figure_sink", default=None)


def subplots(figsize, nrows=1, ncols=1, layout=None, **kw):
    """``plt.subplots`` without pyplot: a figure of its own and its axes, for ``show`` (which lays it out
    and draws it; ``layout="tight"`` instead of calling ``tight_layout``, which draws too)."""
    fig = Figure(figsize=figsize, layout=layout)
    return fig, fig.subplots(nrows, ncols, **kw)


def png(fig):
    """The figure drawn to PNG bytes, as the inline backend draws it (tight bounding box)."""
    buf = io.BytesIO()
    with _DRAWING:
        fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def show(fig):
    """Draw a figure of its own (``subplots``) now and display it: into the widget's output while a
    widget callback runs, else into the cell; outside IPython (the tests) nowhere, undrawn, as
    ``plt.show()`` under Agg."""
    from IPython import get_ipython
    sink = _SINK.get()
    if sink is None and get_ipython() is None:
        return
    w, h = fig.get_size_inches() * fig.dpi
    data = {"image/png": base64.b64encode(png(fig)).decode("ascii"),
            "text/plain": f"<Figure size {w:.0f}x{h:.0f} with {len(fig.axes)} Axes>"}
    if sink is not None:
        sink({"output_type": "display_data", "data": data, "metadata": {}})
    else:
        from IPython.display import display
        display(data, raw=True)


def roofline(ceilings, points=(), ax=None, x_range=(1, 10_000)):
    """Log-log roofline from measured ceilings; ``points`` are (label, FLOP/byte, TFLOP/s)."""
    if ax is None:  # a static cell's pyplot figure (a widget passes the axes of its own figure)
        _, ax = plt.subplots(figsize=(6.4, 4))
    x = np.logspace(np.log10(x_range[0]), np.log10(x_range[1]), 200)
    ax.plot(x, np.minimum(x * ceilings.tbps, ceilings.tflops), color="k", lw=2,
            label=f"roof: {ceilings.tbps:.2f} TB/s, {ceilings.tflops:.0f} TFLOP/s")
    ax.axvline(ceilings.ridge, color="grey", ls=":", lw=1)
    ax.annotate(f"ridge {ceilings.ridge:.0f} FLOP/B", (ceilings.ridge, ceilings.tflops / 40), rotation=90,
                ha="right", fontsize=8, color="grey")
    for label, intensity, rate in points:
        ax.plot([intensity], [rate], "o", ms=7, label=label)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per byte of HBM traffic)",
           ylabel="TFLOP/s", title=ceilings.label)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    return ax


def throughput(xs, series: dict, xlabel, ylabel, baseline=None, title=None, ax=None):
    """Lines of throughput against a parameter; ``baseline`` = (label, value) draws a reference."""
    if ax is None:  # a static cell's pyplot figure
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, ys in series.items():
        ax.plot(xs, ys, "o-", label=label)
    if baseline:
        ax.axhline(baseline[1], color="k", ls="--", lw=1, label=baseline[0])
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title, xticks=list(xs))
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return ax


def versus(label, rate, base_label, base, unit, title):
    """Two horizontal bars: a kernel and its baseline (a widget's figure: its own, not pyplot's)."""
    fig, ax = subplots((6, 1.6))
    ax.barh([base_label, label], [base, rate], color=["grey", "C0"])
    ax.set(xlabel=unit, xlim=(0, max(base, rate) * 1.1), title=title)
    show(fig)
