"""The interview pack's ground floor: what an item is (``Item``: a prompt, its answer in three parts, where
it comes from), the topics and levels, and every misconception and interview question of the nine lessons
(00-08), read from the lesson notebooks themselves (they stay the single source). Nothing here imports the
rest of the pack: ``extra`` adds the pack's own items, ``card`` the numbers card, ``deck`` deals them all.

Topic: a lesson's items take its topic (``LESSON_TOPIC``), except the few in ``TOPIC_OVERRIDES``.
Difficulty (1 warm-up, 2 core, 3 hard), by rule from the question's wording (``difficulty``): a scenario
to diagnose or a design choice is hard, a "why" or "how" is core, a fact to recall is a warm-up; a
misconception is a warm-up. ``DIFFICULTY_OVERRIDES`` holds the exceptions. Both tables are keyed by the
lesson and a few words of the question, and a test fails when a key stops matching exactly one item.

An answer is shown in three parts (``Item.parts``): the short version where it opens with one (a
misconception's "False.", a "No."), the evidence, and the lessons it comes from, as links."""
import math
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

    def parts(self):
        """(short, evidence, links): the short version where the answer opens with one (a verdict such as
        "False." or "No."; else ""), the rest of the answer, and its source with every lesson it names linked."""
        answer = self.answer_md()
        m = _VERDICT.match(answer)
        short, evidence = (m.group(1), answer[m.end():].strip()) if m else ("", answer)
        return short, evidence, self.links()

    def links(self):
        """Where the answer comes from, then a link to each lesson its answer names that the source does not."""
        named = sorted(set(re.findall(r"\blessons? (\d\d)\b", self.answer_md()))
                       - set(re.findall(r"\[lesson (\d\d)\]", self.source)))
        more = [lesson_link(n) for n in named if lesson_link(n)]
        return self.source + (f"; see {', '.join(more)}" if more else "")

    def answer_key_md(self):
        """The answer as a fold: the short version first, the evidence, then the links, last."""
        short, evidence, links = self.parts()
        head = f"**In short:** {short}\n\n" if short else ""
        return (f"<details><summary>Answer</summary>\n\n{head}{evidence}\n\n*Source:* {links}.\n\n</details>")


_VERDICT = re.compile(r"^(False\.|True\.|No\.|Yes\.)\s+")


def lesson_link(n, notebooks=None):
    """``[lesson 03](03_tma_descriptors.ipynb)``, a link from the pack's page to a lesson's ("" if none)."""
    path = next(iter(sorted((notebooks or NOTEBOOKS).glob(f"{n}_*.ipynb"))), None)
    return f"[lesson {n}]({path.name})" if path else ""


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
        link = lesson_link(n, notebooks)
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


def waves(tiles, sms=SMS):
    """(waves, tiles in the last wave, fraction of SM-time busy) for ``tiles`` one-SM tiles."""
    n = math.ceil(tiles / sms)
    return n, tiles - (n - 1) * sms, tiles / (n * sms)


def gemm_tiles(shape, BM, BN):
    M, N, _ = shape
    return math.ceil(M / BM) * math.ceil(N / BN)

