"""The pack's top floor: every item in the order the page lists them (``all_items``: the lessons' own, then
the pack's added topics, whiteboard problems and PTX/SASS prompts), grouped by topic, and the self-test that
deals them in JupyterLab one at a time, the answer rendered only when asked (``SelfTest``)."""
import random

from .extra import extra_items
from .items import LEVELS, NOTEBOOKS, TOPICS, lesson_items


def all_items(notebooks=NOTEBOOKS):
    """The lessons' items, then the added topics', whiteboard problems and PTX/SASS prompts."""
    return lesson_items(notebooks) + extra_items()


def by_topic(items):
    return {t: [i for i in items if i.topic == t] for t in TOPICS}


# ---- the self-test -------------------------------------------------------------------------------

class SelfTest:
    """Question, think, reveal, self-score, next: a shuffled deck of the pack's items, filtered by topic
    and level. The answer is rendered only when Reveal is pressed, so it is nowhere in the page before."""

    def __init__(self, topic="all", level="all", shuffle=True, seed=None, items=None):
        import ipywidgets as w
        self._items = items if items is not None else all_items()
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
        self.score_buttons = [w.Button(description=d, disabled=True) for d in ("knew it", "partly", "missed it")]
        self.tally = w.HTML()
        self.rng = random.Random(seed)
        self.start_button.on_click(lambda _: self.start())
        self.reveal_button.on_click(lambda _: self.reveal())
        for score, b in zip((1.0, 0.5, 0.0), self.score_buttons):
            b.on_click(lambda _, s=score: self.score(s))
        self.widget = w.VBox([w.HBox([self.topic, self.level, self.shuffle, self.start_button]), self.header,
                              self.question, w.HBox([self.reveal_button, *self.score_buttons]), self.answer,
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
        self.pos, self.scores = 0, []
        self._card()

    @property
    def current(self):
        return self.deck[self.pos] if self.pos < len(self.deck) else None

    def _card(self):
        self._show(self.answer, "")
        item = self.current
        self.reveal_button.disabled = item is None
        for b in self.score_buttons:
            b.disabled = True
        if item is None:
            self.header.value = f"<b>Done: {len(self.scores)} answered.</b>"
            self._show(self.question, "")
        else:
            self.header.value = (f"<b>{self.pos + 1} / {len(self.deck)}</b> &middot; {TOPICS[item.topic]} "
                                 f"&middot; {LEVELS[item.level]} &middot; {item.kind}")
            self._show(self.question, item.prompt_md() + "\n\n*Think it through (aloud, or on paper), "
                       "then reveal.*")
        self._tally()

    def reveal(self):
        item = self.current
        if item is None:
            return
        self._show(self.answer, f"**Answer** (from {item.links()})\n\n{item.answer_md()}")
        self.reveal_button.disabled = True
        for b in self.score_buttons:
            b.disabled = False

    def score(self, value):
        if self.current is None or self.reveal_button.disabled is False:
            return  # score only what was revealed
        self.scores.append((self.current, value))
        self.pos += 1
        self._card()

    def _tally(self):
        if not self.scores:
            self.tally.value = ""
            return
        per = {}
        for item, s in self.scores:
            got, n = per.get(item.topic, (0.0, 0))
            per[item.topic] = (got + s, n + 1)
        rows = "".join(f"<tr><td>{TOPICS[t]}</td><td>{got:g} / {n}</td></tr>" for t, (got, n) in per.items())
        total = sum(s for _, s in self.scores)
        self.tally.value = (f"<table><tr><th>topic</th><th>score</th></tr>{rows}"
                            f"<tr><td><b>all</b></td><td><b>{total:g} / {len(self.scores)}</b></td></tr></table>")
