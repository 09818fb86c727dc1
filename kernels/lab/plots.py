"""Plots the lessons share: a roofline, and throughput against a parameter."""
import matplotlib.pyplot as plt
import numpy as np


def roofline(ceilings, points=(), ax=None, x_range=(1, 10_000)):
    """Log-log roofline from measured ceilings; ``points`` are (label, FLOP/byte, TFLOP/s)."""
    if ax is None:
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
    if ax is None:
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
    """Two horizontal bars: a kernel and its baseline."""
    _, ax = plt.subplots(figsize=(6, 1.6))
    ax.barh([base_label, label], [base, rate], color=["grey", "C0"])
    ax.set(xlabel=unit, xlim=(0, max(base, rate) * 1.1), title=title)
    plt.show()
