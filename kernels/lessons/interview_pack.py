"""The interview pack (``notebooks/interview_pack.ipynb``): every misconception and interview question of
the nine lessons (00-08), read from the lesson notebooks themselves (they stay the single source), plus questions on
topics the lessons touch only in passing, whiteboard problems and "explain this PTX/SASS" prompts whose
worked answers the course's own code computes; and the self-test that asks them one at a time.

Topic: a lesson's items take its topic (``LESSON_TOPIC``), except the few in ``TOPIC_OVERRIDES``.
Difficulty (1 warm-up, 2 core, 3 hard), by rule from the question's wording (``difficulty``): a scenario
to diagnose or a design choice is hard, a "why" or "how" is core, a fact to recall is a warm-up; a
misconception is a warm-up. ``DIFFICULTY_OVERRIDES`` holds the exceptions. Both tables are keyed by the
lesson and a few words of the question, and a test fails when a key stops matching exactly one item.

Answers are never in the notebook's markdown: the self-test shows one only when asked (``SelfTest``)."""
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
SMS = 132  # SMs of an H100 SXM / H200 (results/nvidia-h200.json records 132)

TOPICS = {
    "memory": "Memory hierarchy & measurement",
    "loads": "Loads & coalescing",
    "cp.async": "cp.async",
    "tma": "TMA",
    "pipelining": "Pipelining",
    "tilelang": "TileLang",
    "tma-by-hand": "TMA by hand: barriers, clusters, multicast",
    "occupancy": "Occupancy & register pressure",
    "banks": "Bank conflicts & swizzling",
    "waves": "Waves, split-K & stream-K",
    "fp8": "FP8 on Hopper",
    "profiling": "Profiling a kernel",
}
LEVELS = {1: "warm-up", 2: "core", 3: "hard"}
LESSON_TOPIC = {"00": "memory", "01": "loads", "02": "cp.async", "03": "tma", "04": "pipelining", "05": "tilelang",
                "06": "tma-by-hand", "07": "waves", "08": "fp8"}

# (lesson, words of the question or claim) -> topic, where the item is about an added topic
TOPIC_OVERRIDES = {
    ("00", "L2 latency benchmark reports"): "profiling",
    ("00", "Why time with a median"): "profiling",
    ("00", "A small array measures the cache"): "profiling",
    ("00", "What does the mask of a"): "loads",
    ("01", "huge tile with few warps"): "occupancy",
    ("01", "A wider tile is always better"): "occupancy",
    ("04", "ties cuBLAS at 8192^3"): "profiling",
    ("04", "A slow small GEMM"): "profiling",
    ("05", "the kernel launches with 384"): "occupancy",
    ("05", "Why not a 256 x 256 tile"): "occupancy",
    ("05", "swizzled into shared memory"): "banks",
    ("05", "Swizzling is an optional"): "banks",
}
# (lesson, words) -> level, where the rule in ``difficulty`` misjudges a question
DIFFICULTY_OVERRIDES = {
    ("00", "What is the arithmetic intensity of a BM x BN"): 2,
    ("01", "How many load instructions does a 128 x 64"): 2,
    ("03", "Which alignment rules does TMA impose"): 2,
    ("04", "Write the time of a double-buffered loop"): 2,
    ("05", "What does `T.Pipelined"): 2,
}

_HARD = re.compile(r"^(Your|The same|The program says)|went wrong|How would you|When would you|Why might")
_CORE = re.compile(r"^(Why|How does|How do|Where|What does \S+ free|Host-side or)")


def difficulty(kind, prompt):
    if kind == "misconception":
        return 1
    if _HARD.search(prompt):
        return 3
    return 2 if _CORE.search(prompt) else 1


@dataclass
class Item:
    """One thing to ask. ``prompt`` and ``answer`` are markdown, or functions returning markdown that the
    course's code computes (called when first shown, so nothing compiles until it is needed)."""
    key: str            # stable id, e.g. "03-q4", "03-m2", "wb-waves"
    topic: str
    level: int
    kind: str           # "question", "misconception", "whiteboard", "explain"
    prompt: object
    answer: object
    source: str = ""    # where it comes from, markdown (a link to the lesson for a lesson's item)

    def _text(self, name):
        v = getattr(self, name)
        if callable(v):
            v = v()
            setattr(self, name, v)
        return v

    def prompt_md(self):
        return self._text("prompt")

    def answer_md(self):
        return self._text("answer")


# ---- the lessons' own items --------------------------------------------------------------------

_SECTION = re.compile(r"^## \d+\. (Common misconceptions|Interview questions)\s*$", re.M)
_DETAILS = re.compile(r"<details>\s*<summary>\s*(\d+)\.\s*(.*?)</summary>\s*(.*?)\s*</details>", re.S)
_CLAIM = re.compile(r"^\*\*(.+?)\*\*\s*(.*)$", re.S)


def _html_to_md(s):
    return re.sub(r"<code>(.*?)</code>", r"`\1`", s).strip()


def _sections(path):
    """{"Common misconceptions": text, "Interview questions": text} of one lesson notebook."""
    text = "\n\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    out = {}
    for m in _SECTION.finditer(text):
        rest = text[m.end():]
        end = re.search(r"^## ", rest, re.M)
        out[m.group(1)] = rest[:end.start()] if end else rest
    return out


def _bullets(text):
    """The top-level '- ' items of a markdown list, continuation lines joined."""
    items = []
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line[2:])
        elif items and line.strip():
            items[-1] += " " + line.strip()
    return items


def _override(table, lesson, prompt):
    hits = [v for (n, words), v in table.items() if n == lesson and words in prompt]
    return hits[0] if hits else None


def lesson_items(notebooks=NOTEBOOKS):
    """Every misconception and interview question of the lessons, in lesson order."""
    items = []
    for path in sorted(notebooks.glob("0[0-9]_*.ipynb")):
        n = path.name[:2]
        link = f"[lesson {n}]({path.name})"
        parts = _sections(path)
        for k, bullet in enumerate(_bullets(parts.get("Common misconceptions", "")), 1):
            m = _CLAIM.match(bullet)
            if not m:
                continue
            claim = m.group(1).strip().strip('"“”')
            prompt = f'True or false, and why: "{claim}"'
            items.append(Item(f"{n}-m{k}", _override(TOPIC_OVERRIDES, n, claim) or LESSON_TOPIC[n],
                              _override(DIFFICULTY_OVERRIDES, n, claim) or difficulty("misconception", claim),
                              "misconception", prompt, "False. " + m.group(2).strip(),
                              f"{link}, misconception {k}"))
        for m in _DETAILS.finditer(parts.get("Interview questions", "")):
            k, q, answer = m.group(1), _html_to_md(m.group(2)), m.group(3)
            items.append(Item(f"{n}-q{k}", _override(TOPIC_OVERRIDES, n, q) or LESSON_TOPIC[n],
                              _override(DIFFICULTY_OVERRIDES, n, q) or difficulty("question", q),
                              "question", q, answer.strip(), f"{link}, question {k}"))
    return items


def override_matches(items=None):
    """{(table name, key): how many lesson items it matches}; each must match exactly one."""
    items = items if items is not None else lesson_items()
    out = {}
    for name, table in (("TOPIC_OVERRIDES", TOPIC_OVERRIDES), ("DIFFICULTY_OVERRIDES", DIFFICULTY_OVERRIDES)):
        for lesson, words in table:
            out[(name, (lesson, words))] = sum(i.key.startswith(lesson + "-") and words in i.prompt for i in items)
    return out


def all_items(notebooks=NOTEBOOKS):
    """The lessons' items, then the added topics', whiteboard problems and PTX/SASS prompts."""
    from .interview_extra import extra_items
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
        self._show(self.answer, f"**Answer** (from {item.source})\n\n{item.answer_md()}")
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


def waves(tiles, sms=SMS):
    """(waves, tiles in the last wave, fraction of SM-time busy) for ``tiles`` one-SM tiles."""
    n = math.ceil(tiles / sms)
    return n, tiles - (n - 1) * sms, tiles / (n * sms)


def gemm_tiles(shape, BM, BN):
    M, N, _ = shape
    return math.ceil(M / BM) * math.ceil(N / BN)

