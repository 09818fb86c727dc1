"""Sliders for a lesson: one description of the parameters, a callback, and clear messages.

A lesson declares its callback once with ``@sliders(...)``: the values each slider offers (only
values the kernel can take: Triton block sizes are powers of two) and the defaults. ``explore``
turns it into ipywidgets sliders. The callback runs the kernel on a GPU, or recompiles and looks
up the recorded sweep on a CPU. A configuration that cannot run (shared memory overflow, a TMA
rule, a compile error) prints a one-line reason instead of a traceback. The registry lets the
tests drive every callback through every combination of its slider values."""
import itertools

from .aot import CompileError
from .errors import CourseError

REGISTRY = {}


def sliders(defaults=None, **grid):
    """Declare a widget callback's slider values: ``@sliders(BLOCK_M=[64, 128], stages=[1, 2, 3, 4])``."""
    def wrap(fn):
        fn.grid = grid
        fn.defaults = {k: (defaults or {}).get(k, v[len(v) // 2]) for k, v in grid.items()}
        REGISTRY[f"{fn.__module__}.{fn.__name__}"] = fn
        return fn
    return wrap


def run_safely(fn, **config):
    """Call a widget callback; turn a configuration that cannot run into one printed line.
    Returns True when the configuration ran, False when it was refused."""
    from triton.runtime.errors import OutOfResources
    try:
        fn(**config)
        return True
    except (CourseError, CompileError) as e:
        print(f"cannot run {_fmt(config)}: {e}")
    except OutOfResources as e:
        print(f"cannot run {_fmt(config)}: does not fit this GPU ({e})")
    return False


def explore(fn, **defaults):
    """The interactive widget for a registered callback (runs once at the defaults)."""
    import ipywidgets as W
    values = {**fn.defaults, **defaults}
    controls = {name: W.SelectionSlider(options=opts, value=values[name], description=name,
                                        continuous_update=False, style={"description_width": "initial"})
                for name, opts in fn.grid.items()}
    return W.interactive(lambda **cfg: run_safely(fn, **cfg) and None, **controls)


def combinations(fn):
    """Every combination of a callback's slider values, as keyword dicts."""
    names = list(fn.grid)
    for values in itertools.product(*(fn.grid[n] for n in names)):
        yield dict(zip(names, values))


def _fmt(config):
    return ", ".join(f"{k}={v}" for k, v in config.items())
