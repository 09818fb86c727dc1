"""The pack's top floor: every item in the order the page lists them (``all_items``: the lessons' own, then
the pack's added topics, whiteboard problems and PTX/SASS prompts), grouped by topic; the self-test that
deals them in JupyterLab one at a time, the answer rendered only when asked (``SelfTest``); the mock
interview, a timed mixed set (``MockInterview``); and the candidate's scores kept between sessions in a
small JSON file (``Progress``), which both read: the items missed last time come first."""
import datetime
import html
import json
import os
import random
import re
import time
from pathlib import Path

from .extra import extra_items
from .items import LEVELS, NOTEBOOKS, TOPICS, lesson_items
from .strong import STRONG


def all_items(notebooks=NOTEBOOKS):
    """The lessons' items, then the added topics', whiteboard problems and PTX/SASS prompts, each with what a
    strong answer contains."""
    items = lesson_items(notebooks) + extra_items()
    for i in items:
        i.strong = STRONG.get(i.key, ())
    return items


def by_topic(items):
    return {t: [i for i in items if i.topic == t] for t in TOPICS}


# ---- progress kept between sessions ---------------------------------------------------------------

class Progress:
    """Each item's last score and how often it was missed, in a JSON file of the candidate's own
    (COURSE_PROGRESS, or ~/.gpu-course/interview.json: in a JupyterHub room, each participant's home). The pack's
    fifteen widgets, and any other notebook open on it, share the file: a score is added to what the file holds
    when it is written (under a lock), never written over it from a copy read earlier."""

    def __init__(self, path=None):
        self.path = Path(path or os.environ.get("COURSE_PROGRESS") or Path.home() / ".gpu-course" / "interview.json")
        self.items = self._read()

    def _read(self):
        try:
            return json.loads(self.path.read_text())["items"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}  # none yet, or unreadable: start afresh rather than stop the self-test

    def record(self, item, score):
        import fcntl
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another widget's write, read-modify-write, is whole before this one
            self.items = self._read()
            seen = self.items.setdefault(item.key, {"seen": 0, "missed": 0})
            seen["seen"] += 1
            seen["missed"] += score < 1
            seen["last"], seen["when"] = score, datetime.date.today().isoformat()
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"items": self.items}, indent=1))
            tmp.replace(self.path)  # whole or not at all: a kernel stopped mid-write leaves the old file

    def missed_last_time(self, item):
        return self.items.get(item.key, {}).get("last", 1) < 1

    def first_the_missed(self, items):
        """``items`` with the ones missed last time first, each group in its own order (as the file has them now:
        another widget may have scored since this one read it)."""
        self.items = self._read()
        return sorted(items, key=lambda i: not self.missed_last_time(i))


# ---- the self-test -------------------------------------------------------------------------------

class SelfTest:
    """Question, think, reveal, tick, next: a shuffled deck of the pack's items, filtered by topic and level. The
    answer is rendered only when Reveal is pressed, so it is nowhere in the page before; with it comes what a
    strong answer contains, one box per point, and an answer's score is the fraction of points ticked."""

    def __init__(self, topic="all", level="all", shuffle=True, seed=None, items=None, progress=None):
        import ipywidgets as w
        self._items = items if items is not None else all_items()
        self.progress = progress or Progress()
        self.topic = w.Dropdown(options=[("all topics", "all")] + [(v, k) for k, v in TOPICS.items()],
                                value=topic, description="topic")
        self.level = w.Dropdown(options=[("all levels", "all")] + [(v, k) for k, v in LEVELS.items()],
                                value=level, description="level")
        self.shuffle = w.Checkbox(value=shuffle, description="shuffle")
        self.start_button = w.Button(description="Start", button_style="primary")
        self.header = w.HTML()
        self.question = w.Output()
        self.answer = w.Output()
        self.reveal_button = w.Button(description="Reveal the answer")
        self.checklist = w.VBox()  # after Reveal: one box per point a strong answer contains
        self.checklist.add_class("strong-answer")
        self.score_button = w.Button(description="Score", disabled=True, button_style="success")
        self.tally = w.HTML()
        self.rng = random.Random(seed)
        self.start_button.on_click(lambda _: self.start())
        self.reveal_button.on_click(lambda _: self.reveal())
        self.score_button.on_click(lambda _: self.score(self.ticked()))
        self.widget = w.VBox([w.HBox([self.topic, self.level, self.shuffle, self.start_button]), self.header,
                              self.question, self.reveal_button, self.checklist, self.score_button, self.answer,
                              self.tally])
        self.start()

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)

    @staticmethod
    def _show(out, markdown):
        from IPython.display import Markdown
        out.outputs = ()
        if markdown:
            out.append_display_data(Markdown(markdown))

    def start(self):
        self.deck = [i for i in self._items if self.topic.value in ("all", i.topic)
                     and self.level.value in ("all", i.level)]
        if self.shuffle.value:
            self.rng.shuffle(self.deck)
        self.deck = self.progress.first_the_missed(self.deck)
        self.pos, self.scores = 0, []
        self._card()

    @property
    def current(self):
        return self.deck[self.pos] if self.pos < len(self.deck) else None

    def _card(self):
        self._show(self.answer, "")
        item = self.current
        self.reveal_button.disabled = item is None
        self.checklist.children = ()
        self.score_button.disabled, self.score_button.description = True, "Score"
        self.score_button.layout.display = "none"  # shown with the checklist, after Reveal
        if item is None:
            self.header.value = f"<b>Done: {len(self.scores)} answered.</b>"
            self._show(self.question, "")
        else:
            again = " &middot; <i>missed last time</i>" if self.progress.missed_last_time(item) else ""
            self.header.value = (f"<b>{self.pos + 1} / {len(self.deck)}</b> &middot; {TOPICS[item.topic]} "
                                 f"&middot; {LEVELS[item.level]} &middot; {item.kind}{again}{self._clock()}")
            self._show(self.question, item.prompt_md() + "\n\n*Think it through (aloud, or on paper), "
                       "then reveal.*")
        self._tally()

    def reveal(self):
        item = self.current
        if item is None:
            return
        self._show(self.answer, f"**Answer** (from {item.links()})\n\n{item.answer_md()}")
        self.reveal_button.disabled = True
        self._checklist(item.strong or ("your answer matched the one shown",))
        self.score_button.disabled, self.score_button.layout.display = False, None

    def _checklist(self, points):
        """One box per point, ticked by the candidate for each point their answer made; the Score button
        counts them."""
        import ipywidgets as w
        rows = []
        for p in points:
            box = w.Checkbox(value=False, indent=False, layout=w.Layout(width="28px"))
            box.observe(lambda _: self._count(), "value")
            label = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(p, quote=False))
            rows.append(w.HBox([box, w.HTML(label)]))
        self.checklist.children = [w.HTML("<b>A strong answer contains</b> (tick what yours said):"), *rows]
        self._count()

    def _boxes(self):
        return [row.children[0] for row in self.checklist.children[1:]]

    def ticked(self):
        """The fraction of the checklist's points ticked (0 with no checklist shown)."""
        boxes = self._boxes()
        return sum(b.value for b in boxes) / len(boxes) if boxes else 0.0

    def _count(self):
        boxes = self._boxes()
        self.score_button.description = f"Score: {sum(b.value for b in boxes)} of {len(boxes)} points"

    def score(self, value):
        if self.current is None or self.reveal_button.disabled is False:
            return  # score only what was revealed
        self.scores.append((self.current, value))
        self.progress.record(self.current, value)
        self.pos += 1
        self._card()

    def _clock(self):
        return ""

    def _tally(self):
        if not self.scores:
            self.tally.value = ""
            return
        per = {}
        for item, s in self.scores:
            got, n = per.get(item.topic, (0.0, 0))
            per[item.topic] = (got + s, n + 1)
        rows = "".join(f"<tr><td>{TOPICS[t]}</td><td>{got:.3g} / {n}</td></tr>" for t, (got, n) in per.items())
        total = sum(s for _, s in self.scores)
        self.tally.value = (f"<table><tr><th>topic</th><th>score</th></tr>{rows}"
                            f"<tr><td><b>all</b></td><td><b>{total:.3g} / {len(self.scores)}</b></td></tr></table>")


# ---- the mock interview ----------------------------------------------------------------------------

# a 45-minute round for a kernel role: (what to draw, how many), each from the whole pack
MOCK_PLAN = ((("level", 1), 2), (("level", 2), 3), (("level", 3), 2), (("kind", "whiteboard"), 1),
             (("kind", "explain"), 1))
MOCK_MINUTES = 45


def mock_deck(items, progress, rng, plan=MOCK_PLAN):
    """A mixed set by ``plan``: whiteboard and PTX/SASS items by kind, the rest (questions and true-or-false
    claims) by level; in each draw the items missed last time first, then a random pick; no item twice."""
    deck = []
    for (field, value), n in plan:
        pool = [i for i in items if i not in deck and getattr(i, field) == value
                and (field == "kind" or i.kind in ("question", "misconception"))]
        rng.shuffle(pool)
        deck += progress.first_the_missed(pool)[:n]
    return deck


class MockInterview(SelfTest):
    """The self-test as a timed round: a mixed set (``MOCK_PLAN``) against a clock of ``minutes`` that runs in
    the browser (a Play widget: it ticks with no kernel work), the time used shown on every card, each score
    kept in ``Progress`` so the next round starts with what was missed."""

    def __init__(self, minutes=MOCK_MINUTES, seed=None, items=None, progress=None):
        import ipywidgets as w
        self.minutes = minutes
        self.clock = w.Play(value=0, min=0, max=minutes * 60, interval=1000, description="clock", show_repeat=False)
        self.bar = w.IntProgress(value=0, min=0, max=minutes * 60, description=f"{minutes} min")
        w.jslink((self.clock, "value"), (self.bar, "value"))
        super().__init__(shuffle=False, seed=seed, items=items, progress=progress)
        self.widget.children = (w.HBox([self.start_button, self.clock, self.bar]),) + self.widget.children[1:]
        self.start_button.description = "New round"

    def start(self):
        self.deck = mock_deck(self._items, self.progress, self.rng)
        self.pos, self.scores, self.started = 0, [], time.monotonic()
        self._restart_clock()
        self._card()

    def _restart_clock(self):
        # the browser's Play starts ticking on a change of `playing`, not on a widget created playing
        self.clock.playing = False
        self.clock.value = 0
        self.clock.playing = True

    def _ipython_display_(self):
        super()._ipython_display_()
        self._restart_clock()

    def _clock(self):
        used = time.monotonic() - self.started
        if self.current is None:
            self.clock.playing = False
        over = " (over time)" if used > self.minutes * 60 else ""
        return f" &middot; {int(used // 60)}:{int(used % 60):02d} of {self.minutes}:00{over}"
