"""One widget skeleton that every lesson fills in.

A lesson's widget is a ``Widget`` subclass: its sliders (only values the kernel can take: Triton
block sizes are powers of two), and what it does at one setting - compile the kernel for sm_90,
budget its shared memory, name the instructions that matter, and ask ``measure`` for its figure
against the baseline (live on a GPU, recorded otherwise). ``explore`` turns it into ipywidgets
sliders. A setting that cannot run (shared memory, a TMA rule, a compile error) prints a one-line
reason naming the limit instead of a traceback. The same object records its sweep on a GPU
(``sweep``), so the recorded figures the CPU shows are exactly the widget's settings, and the
tests drive it through all of them (``REGISTRY``)."""
import contextlib
import io
import itertools
import json
import sys
import threading
import traceback
from dataclasses import dataclass

from triton.runtime.errors import OutOfResources

from . import bench, measure, plots, results
from .aot import CompileError
from .errors import CourseError

REGISTRY = {}


@dataclass
class Shown:
    """What one setting showed: a figure (with its label), or the reason it was refused."""
    config: dict
    figure: measure.Figure = None
    refused: str = None


class Widget:
    lesson = ""          # "03"
    sliders = {}         # name -> values offered
    defaults = {}        # name -> value at start (the middle value where not given)
    title = ""           # what is timed, e.g. "16384^2 fp16 copy"
    base_label = ""      # the baseline, e.g. "torch copy"

    def __init__(self):
        self.defaults = {k: self.defaults.get(k, v[len(v) // 2]) for k, v in self.sliders.items()}
        REGISTRY[f"{type(self).__module__}.{type(self).__name__}"] = self

    # ---- what a lesson fills in ----------------------------------------------------------------
    def compile(self, cfg):
        """The sm_90 code of this setting (aot.Compiled), or None where there is none to read."""
        return None

    def budget(self, cfg, compiled):
        """The shared-memory budget (smem.Budget) of this setting, or None where it holds no ring."""
        return None

    def evidence(self, cfg, compiled):
        """Lines about the compiled code (instruction counts) printed under the budget."""
        return []

    def query(self, cfg) -> measure.Query:
        """The measurement of this setting against its baseline."""
        raise NotImplementedError

    def label(self, cfg):
        return _fmt(cfg)

    def show(self, cfg, fig):
        """Print the figure against its baseline and draw both (a lesson may draw something else)."""
        print(f"{self.title}: {fig.rate:.0f} {fig.unit_text} = {fig.ratio:.2f}x {self.base_label} "
              f"({fig.base:.0f} {fig.unit_text}), {fig.label}")
        plots.versus(self.label(cfg), fig.rate, self.base_label, fig.base, fig.unit_text, fig.label)

    # ---- the skeleton ----------------------------------------------------------------------------
    def check(self, cfg):
        """Compile and budget one setting, print the budget; raises when it cannot run."""
        compiled = self.compile(cfg)
        budget = self.budget(cfg, compiled)
        if budget is not None:
            print(budget.text())
            budget.require()
        return compiled

    def __call__(self, **cfg):
        """One setting, as the slider callback runs it. Returns what was shown."""
        try:
            compiled = self.check(cfg)
            for line in self.evidence(cfg, compiled):
                print(line)
            fig = measure.versus(self.query(cfg))
        except REFUSALS as e:
            reason = refusal(e)
            print(f"cannot run {_fmt(cfg)}: {reason}")
            return Shown(cfg, refused=reason)
        except measure.NoRecord as e:
            print(e)
            return Shown(cfg)
        self.show(cfg, fig)
        return Shown(cfg, figure=fig)

    def settings(self):
        """Every combination of the slider values, as keyword dicts."""
        names = list(self.sliders)
        for values in itertools.product(*(self.sliders[n] for n in names)):
            yield dict(zip(names, values))

    def fits(self, cfg):
        """Whether a setting compiles and fits (what the widget checks before measuring)."""
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                self.check(cfg)
            return True
        except REFUSALS:
            return False

    def sweep(self, settings=None):
        """Every setting that fits (or those of ``settings``), timed now, and the baseline once before
        them: the records CPU mode shows for this widget (``kernels.tools.record``). Each kernel's
        output is checked first. Settings that measure the same thing (a slider the kernel ignores)
        are timed once."""
        records, base, seen = [], None, set()
        for cfg in settings or self.settings():
            q = self.query(cfg)
            key = json.dumps(q.config, sort_keys=True)
            if key in seen or not self.fits(cfg):
                continue  # timed already, or refused by the widget with its reason
            seen.add(key)
            live = q.setup()
            if base is None:
                base = results.record(q.base, bench.median_ms(live.baseline), shape=q.shape,
                                      **{_WORK[q.unit]: live.work})
                records.append(base)
            if live.out is not None:
                bench.check_writes(q.name, live.kernel, live.out, live.ref, live.tol)
            records.append(results.record(q.name, bench.median_ms(live.kernel), shape=q.shape, config=q.config,
                                          baseline=q.base, **{_WORK[q.unit]: live.work}))
        return records


_WORK = {"gbps": "nbytes", "tflops": "flops"}


REFUSALS = (CourseError, CompileError, OutOfResources)  # what a setting that cannot run raises


def refusal(e):
    """The one-line reason a setting cannot run; Triton's own resource error names its limit."""
    if isinstance(e, OutOfResources):
        return f"does not fit this GPU ({e})"
    return str(e)


# what a notebook saved with an explorer's output shows where no kernel draws it (JupyterLab before the cell is run,
# a viewer): the widget's text form, otherwise ipywidgets' `VBox(children=(SelectionSlider(...`
UNDRAWN = "an interactive explorer ({}): run this cell to draw it"


def _explorer(children, names):
    """A VBox whose text form says what it is and how to draw it."""
    import ipywidgets as W

    class Explorer(W.VBox):
        def __repr__(self):
            return UNDRAWN.format(", ".join(names))
    return Explorer(children)


def explore(widget, **defaults):
    """The interactive widget: a slider per setting and one output, drawn once at the defaults.

    Not ``ipywidgets.interact``: its output widget captures what a callback prints through the front
    end, which echoes it back as comm messages; in JupyterLab those run on a subshell thread and end
    in matplotlib's post-execute redraw of open pyplot figures, racing the callback (see plots). Here
    the callback's figures are its own (``plots.show``), and what it prints and draws is collected in
    the kernel and set as the output's whole content, one callback at a time."""
    import ipywidgets as W
    values = {**widget.defaults, **defaults}
    controls = {name: W.SelectionSlider(options=opts, value=values[name], description=name,
                                        continuous_update=False, style={"description_width": "initial"})
                for name, opts in widget.sliders.items()}
    return _explorer([*controls.values(), _output(controls, widget)], list(controls))


def choices(draw, **options):
    """A small explorer without sliders: a dropdown per keyword of ``draw`` (``options``: name -> values,
    the first one shown first) and one output, redrawn when one changes, as ``explore`` does (``draw``
    prints, or shows its figures with ``plots.show``)."""
    import ipywidgets as W
    controls = {name: W.Dropdown(options=opts, value=opts[0], description=name,
                                 style={"description_width": "initial"}) for name, opts in options.items()}
    return _explorer([W.HBox(list(controls.values())), _output(controls, draw)], list(controls))


def _output(controls, draw):
    """The output of an explorer: what ``draw`` shows at the controls' values, drawn now and again after
    every change, one callback at a time (see ``explore``)."""
    import ipywidgets as W
    out = W.Output()

    def update(_change=None):
        with _ONE_AT_A_TIME:
            _Collector(out).run(draw, {name: c.value for name, c in controls.items()})

    for control in controls.values():
        control.observe(update, "value")
    update()
    return out


# one callback at a time, of any widget: comms may run on more than one thread (JupyterLab's
# "one subshell per comm" setting); each reads the sliders when its turn comes, so the last move is drawn last
_ONE_AT_A_TIME = threading.Lock()


class _Collector:
    """What one callback prints and draws, in order, as the output's content: set whole when a figure
    is added, when the callback flushes (a progress line before a slow compile) and at its end; never
    cleared in between."""

    def __init__(self, out):
        self.out, self.items, self.thread, self.shown = out, [], threading.get_ident(), None

    def run(self, widget, cfg):
        token = plots._SINK.set(self._add)
        stdout, sys.stdout = sys.stdout, _ThreadWriter(sys.stdout, self.thread, self)
        try:
            widget(**cfg)
        except Exception as e:  # a bug, not a refusal: show it where the learner looks, as Jupyter would
            self._add({"output_type": "error", "ename": type(e).__name__, "evalue": str(e),
                       "traceback": traceback.format_exception(e)})
        finally:
            sys.stdout = stdout
            plots._SINK.reset(token)
        self._publish()

    def _write(self, text):
        if self.items and self.items[-1]["output_type"] == "stream":
            self.items[-1] = {**self.items[-1], "text": self.items[-1]["text"] + text}
        else:
            self.items.append({"output_type": "stream", "name": "stdout", "text": text})

    def _add(self, output):
        self.items.append(output)
        self._publish()

    def _publish(self):
        if self.items != self.shown:
            self.shown = list(self.items)
            self.out.outputs = tuple(self.items)


class _ThreadWriter:
    """sys.stdout while a callback runs: its own thread's writes go to the collector, any other
    thread's (a cell running meanwhile) where they went before."""

    def __init__(self, stream, thread, collector):
        self._stream, self._thread, self._to = stream, thread, collector

    def write(self, text):
        if threading.get_ident() == self._thread:
            self._to._write(text)
            return len(text)
        return self._stream.write(text)

    def flush(self):  # print(..., flush=True) before a long compile: show the line now
        if threading.get_ident() == self._thread:
            self._to._publish()
        else:
            self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _fmt(config):
    return ", ".join(f"{k}={v}" for k, v in config.items())
