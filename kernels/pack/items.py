"""The interview pack's ground floor: what an item is (``Item``: a prompt, its answer in three parts, where
it comes from), the topics and levels, and every misconception and interview question of the ten lessons
(00-09), read from the lesson notebooks themselves (they stay the single source). Nothing here imports the
rest of the pack: ``extra`` adds the pack's own items, ``card`` the numbers card, ``deck`` deals them all.

Topic: a lesson's items take its topic (``LESSON_TOPIC``), except the few in ``TOPIC_OVERRIDES``.
Level (1 warm-up, 2 core, 3 hard), by one rubric (``RUBRIC``): a definition or a fact to recall is a warm-up;
a mechanism, with its number where it has one, is core; a diagnosis or a design trade-off made from data is
hard. Every lesson question's level is assigned by hand in ``QUESTION_LEVELS`` (keyed by the item and the
question's first words: a test fails when a lesson renumbers or rewords one); a true-or-false claim is a
warm-up. A lesson states its misconceptions as false claims; ``TRUE_FORMS`` asks about half of them in a true
form written by hand. The tables keyed by a lesson and a few words fail a test when a key stops matching
exactly one item.

An answer is shown in three parts (``Item.parts``): the short version where it opens with one (a
misconception's "False.", a "No."), the evidence, and the lessons it comes from, as links; with it, what a
strong answer contains (``Item.strong``, from ``strong.STRONG``)."""
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
    "attention": "Attention: FlashAttention on Hopper",
}
LEVELS = {1: "warm-up", 2: "core", 3: "hard"}
LESSON_TOPIC = {"00": "memory", "01": "loads", "02": "cp.async", "03": "tma", "04": "pipelining", "05": "tilelang",
                "06": "tma-by-hand", "07": "waves", "08": "fp8", "09": "attention"}

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
    ("04", "Low occupancy makes a kernel slow"): "profiling",
    ("04", "A profiler shows the kernel as it runs"): "profiling",
    ("04", "Nsight Compute reports your GEMM"): "profiling",
    ("04", "How would you see where, inside"): "profiling",
    ("05", "the kernel launches with 384"): "occupancy",
    ("05", "Why not a 256 x 256 tile"): "occupancy",
    ("05", "swizzled into shared memory"): "banks",
    ("05", "Swizzling is an optional"): "banks",
}
RUBRIC = {1: "a definition or a fact to recall", 2: "a mechanism, with its number where it has one",
          3: "a diagnosis or a design trade-off made from data"}
# every lesson question: (level by RUBRIC, assigned by hand; the first words of the question)
QUESTION_LEVELS = {
    "00-q1": (1, 'What is the ridge point'),
    "00-q2": (2, 'How would you measure HBM'),
    "00-q3": (3, 'Your L2 latency benchmark reports'),
    "00-q4": (2, 'How many bytes must be'),
    "00-q5": (1, 'A copy of a 512'),
    "00-q6": (2, 'Why time with a median'),
    "00-q7": (2, 'What is the arithmetic intensity'),
    "00-q8": (1, 'What does the mask of'),
    "01-q1": (2, 'What does `tl.load` of a'),
    "01-q2": (2, 'Why is a one-element-per-thread copy'),
    "01-q3": (1, 'What is coalescing, and what'),
    "01-q4": (3, 'Why might the same Triton'),
    "01-q5": (2, 'How many load instructions does'),
    "01-q6": (1, 'Does `num_stages` change a copy'),
    "01-q7": (2, 'Why does a huge tile'),
    "02-q1": (1, 'What does `cp.async` do that'),
    "02-q2": (2, 'What does `cp.async.wait_group 2` mean'),
    "02-q3": (2, 'How does Triton decide to'),
    "02-q4": (2, 'How much shared memory does'),
    "02-q5": (2, 'Why does a 1-stage GEMM'),
    "02-q6": (3, 'When would you stop adding'),
    "02-q7": (1, 'Is cp.async still used on'),
    "03-q1": (1, 'What is in a TMA'),
    "03-q2": (2, 'How does a kernel know'),
    "03-q3": (2, 'Host-side or device-side descriptor: what'),
    "03-q4": (2, 'Which alignment rules does TMA'),
    "03-q5": (3, 'Why is a one-stage TMA'),
    "03-q6": (2, 'Where does TMA not help?'),
    "03-q7": (2, 'How does a TMA-based kernel'),
    "03-q8": (2, 'What does TMA free up,'),
    "03-q9": (3, "Why did the article's TMA"),
    "04-q1": (2, 'Write the time of a'),
    "04-q2": (2, 'What is the largest speed-up'),
    "04-q3": (3, 'How would you measure C'),
    "04-q4": (2, 'Why can more than two'),
    "04-q5": (2, 'What does the compiler build'),
    "04-q6": (2, 'What does a persistent kernel'),
    "04-q7": (2, 'Why store the output through'),
    "04-q8": (3, 'Where do stages stop paying,'),
    "04-q9": (3, 'Your TMA GEMM ties cuBLAS'),
    "04-q10": (3, 'Nsight Compute reports your GEMM'),
    "04-q11": (2, 'How would you see where,'),
    "05-q1": (2, 'What does `T.Pipelined(num_stages=3)` become on'),
    "05-q2": (3, 'The program says 256 threads;'),
    "05-q3": (2, 'Why is B loaded as'),
    "05-q4": (2, 'What is `fence_proxy_async` doing before'),
    "05-q5": (2, 'How do you check whether'),
    "05-q6": (3, 'When would you reach for'),
    "05-q7": (2, 'Why not a 256 x'),
    "05-q8": (3, 'The same TileLang GEMM with'),
    "05-q9": (2, 'Why does the TMA engine'),
    "06-q1": (2, 'Which instructions make up a'),
    "06-q2": (2, 'What is the phase bit,'),
    "06-q3": (3, 'The expect-tx count is 16'),
    "06-q4": (2, 'Why is the tensor map'),
    "06-q5": (2, 'Why may the inner box'),
    "06-q6": (2, 'A warp reads one fp16'),
    "06-q7": (2, 'What does `setmaxnreg` do, and'),
    "06-q8": (2, 'What does TMA multicast save,'),
    "06-q9": (2, 'An interviewer says the A100'),
    "07-q1": (2, 'Why does one GEMM configuration'),
    "07-q2": (2, 'What is wave quantization? Compute'),
    "07-q3": (3, 'At 3072³, 128x256 has more'),
    "07-q4": (2, "Split-K, stream-K, and the course's"),
    "07-q5": (3, 'A Triton GEMM is 3x'),
    "07-q6": (2, 'Why does do_bench hide host'),
    "07-q7": (2, 'What does triton.autotune do, and'),
    "07-q8": (2, 'Why is GROUP_M not part'),
    "07-q9": (3, 'For a decode-like GEMM with'),
    "07-q10": (3, 'Your TMA copy of a'),
    "08-q1": (1, 'What are e4m3 and e5m2,'),
    "08-q2": (2, 'Why does an FP8 GEMM'),
    "08-q3": (2, 'Why is B stored transposed'),
    "08-q4": (2, 'What happens if you hand'),
    "08-q5": (2, 'How does BLOCK_K change from'),
    "08-q6": (1, 'What is "fast accumulation" in'),
    "08-q7": (2, 'What does FP8 change in'),
    "08-q8": (2, 'How would you check that'),
    "08-q9": (2, 'Why compare against _scaled_mm with'),
    "08-q10": (3, 'Why does FP8 gain less'),
    "09-q1": (2, 'How does FlashAttention avoid writing'),
    "09-q2": (2, 'Write the online-softmax update for'),
    "09-q3": (2, 'How many bytes does one'),
    "09-q4": (3, 'What limits a FlashAttention-2-style kernel'),
    "09-q5": (2, 'Why is decode attention bandwidth-bound,'),
    "09-q6": (3, 'Your Triton attention kernel runs'),
    "09-q7": (1, 'Why does the kernel fold'),
}


# (lesson, words of a misconception's claim) -> the claim's true form, written by hand. A lesson lists only false
# claims; asked as they are, every true-or-false item is "False" and the pattern gives the answer away. About half
# are asked in their true form instead, each answered from the same lesson text: the misconception it corrects and
# the lesson's evidence.
TRUE_FORMS = {
    ("00", "A GPU is fast because it computes fast"): "A kernel below the ridge point is limited by memory "
                                                      "bandwidth, not by arithmetic.",
    ("00", "The datasheet bandwidth is what"): "Even a well-tuned copy reaches only a fraction of the datasheet "
                                               "bandwidth; plan against the measured ceiling.",
    ("00", "Latency and bandwidth are the same"): "Latency and bandwidth are linked by Little's law but fixed "
                                                  "differently.",
    ("00", "A small array measures the cache"): "A small array measures the cache only if the cache still holds it "
                                                "when the timing starts.",
    ("00", "Zeros are fine test data"): "Zeros as test data can hide an output the kernel never wrote.",
    ("00", "A point above the roof"): "A measured point above the memory roof means caches served some of the bytes "
                                      "you counted.",
    ("01", "TMA is needed to stop issuing"): "Vectorised loads alone cut a tile's load count four to eight times, "
                                             "without TMA.",
    ("01", "Reading a matrix by columns"): "Reading a row-major matrix by columns moves more bytes across HBM than "
                                           "reading it by rows.",
    ("01", "Alignment is the programmer's business"): "The compiler emits 16-byte loads only when it can prove "
                                                      "alignment from what the launch tells it.",
    ("01", "num_stages speeds up any kernel"): "num_stages leaves the code of a kernel without a loop unchanged.",
    ("02", "cp.async is TMA"): "cp.async is per thread: each thread issues its own 16-byte copies and computes their "
                               "addresses.",
    ("02", "num_stages pipelines every loop"): "num_stages pipelines the loads that feed tl.dot; another loop needs "
                                               "tl.range(num_stages=...).",
    ("02", "Asynchronous copies make a kernel faster"): "With one stage, Triton emits plain loads where more stages "
                                                        "would use cp.async.",
    ("02", "Shared memory is free"): "At 48 KiB per stage, five stages of a 128 x 256 x 64 fp16 tile do not fit in "
                                     "227 KiB of shared memory.",
    ("03", "Data moved by TMA is ready"): "Data moved by TMA is ready when the mbarrier's phase flips, after the "
                                          "expected bytes have arrived.",
    ("03", "A descriptor needs masks"): "A TMA load past a tensor's edge reads zeros and a TMA store past it is "
                                        "clipped, without any mask.",
    ("03", "Any tensor can be described"): "A TMA descriptor needs a 16-byte aligned base and strides and a "
                                           "contiguous last dimension.",
    ("03", "Device-side and host-side descriptors"): "A host-side descriptor travels as a launch parameter; a "
                                                     "device-side one is written to global memory by each program.",
    ("04", "Double buffering doubles the speed"): "Double buffering gains at most (C + M) / max(C, M), which is 2 "
                                                  "only when compute and load times are equal.",
    ("04", "Pipelining hides memory time"): "Pipelining hides whichever of compute and memory time is the smaller.",
    ("04", "Stages are free"): "Each pipeline stage holds a full A tile and B tile in shared memory.",
    ("04", "Warp specialisation is always on"): "On sm_90, Triton 3.6 left the course's GEMM unchanged when asked "
                                                "for warp specialisation.",
    ("04", "A slow small GEMM has a slow kernel"): "At a small GEMM shape the host's work per launch can outlast the "
                                                   "kernel.",
    ("04", "A profiler shows the kernel as it runs"): "Unless told otherwise, Nsight Compute locks the SM clock to "
                                                      "its base while it profiles a kernel.",
    ("05", "`T.copy` means TMA"): "T.copy says only 'move this tile': the compiler picks plain loads, cp.async or "
                                  "TMA.",
    ("05", "Warp specialisation has to be written"): "TileLang can build a producer warpgroup from a T.Pipelined "
                                                     "loop, with no warp specialisation written by hand.",
    ("05", "Without a GPU there is nothing"): "Without a GPU, nvcc still compiles for sm_90a, so the code a Hopper "
                                              "GPU runs can be read anywhere.",
    ("05", "Swizzling is an optional speed trick"): "For wgmma reading from shared memory, the tensor map and the "
                                                    "wgmma descriptor must name the same swizzle.",
    ("06", "TMA is a library call"): "A TMA copy is one PTX instruction, issued by one thread.",
    ("06", "Waiting on the barrier's phase 0"): "A barrier reused by a ring alternates parity each round, so the "
                                                "wait's phase bit must flip when the ring wraps.",
    ("06", "Multicast makes loads faster"): "Multicast cuts L2 reads, and can leave a kernel's time where it was.",
    ("06", "Fewer registers means a slower kernel"): "A TMA producer needs few registers, and setmaxnreg can hand "
                                                     "the rest to the consumers.",
    ("07", "A kernel tuned at one shape is tuned"): "A GEMM configuration near cuBLAS at one shape can be far from "
                                                    "it at another.",
    ("07", "`do_bench` measures the GPU"): "do_bench measures the GPU only while the host keeps up with it.",
    ("07", "Wave quantization only matters"): "On 132 SMs, 3072^3 with 128 x 128 tiles is 4.36 waves: about 13% of "
                                              "all SM time idles, all of it in the last wave.",
    ("07", "Split-K is free parallelism"): "Each extra split-K slice writes and reads an fp32 partial tile and needs "
                                           "a final sum.",
    ("08", "FP8 halves the time of everything"): "FP8 doubles the tensor cores' peak and halves the bytes of A and "
                                                 "B, but not those of the output.",
    ("08", "Any layout works"): "For FP8, wgmma reads only K-major operands.",
    ("08", "FP8 accumulates in FP8"): "An FP8 GEMM on Hopper accumulates in fp32; only its inputs are 8-bit.",
    ("08", "The kernel's error is FP8's error"): "Against the same e4m3 values an FP8 GEMM is nearly exact; its "
                                                 "percent-level error comes from quantizing the inputs.",
    ("09", "FlashAttention computes an approximation"): "FlashAttention computes the exact softmax; its online "
                                                        "rescale changes only the order of the sums.",
    ("09", "The softmax is free beside the GEMMs"): "In a fused attention kernel on Hopper, the softmax's "
                                                    "exponentials take a time comparable to the two GEMMs'.",
    ("09", "Decode is the same kernel with"): "At decode with few sequences, one program per head leaves most SMs "
                                              "idle; splitting the keys among programs fills the card.",
}

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
    claim: str = ""     # a misconception's claim as its lesson states it (asked in its true form or as it is)
    strong: tuple = ()  # what a strong answer contains (``strong.STRONG``): the points a candidate scores against

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

    def strong_md(self):
        """What a strong answer contains, as a markdown list ("" if the item has no checklist)."""
        return ("**A strong answer contains:**\n\n" + "\n".join(f"- {p}" for p in self.strong)) if self.strong else ""

    def answer_key_md(self):
        """The answer as a fold: the short version first, what a strong answer contains, the evidence, then the
        links, last."""
        short, evidence, links = self.parts()
        head = "".join(f"{part}\n\n" for part in (f"**In short:** {short}" if short else "", self.strong_md()) if part)
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
            true = _override(TRUE_FORMS, n, claim)
            answer = (f'True. It is what is left of a common misconception, "{claim}": {m.group(2).strip()}' if true
                      else "False. " + m.group(2).strip())
            items.append(Item(f"{n}-m{k}", _override(TOPIC_OVERRIDES, n, claim) or LESSON_TOPIC[n],
                              1,
                              "misconception", f'True or false, and why: "{true or claim}"', answer,
                              f"{link}, misconception {k}", claim))
        for m in _DETAILS.finditer(parts.get("Interview questions", "")):
            k, q, answer = m.group(1), _html_to_md(m.group(2)), m.group(3)
            items.append(Item(f"{n}-q{k}", _override(TOPIC_OVERRIDES, n, q) or LESSON_TOPIC[n],
                              QUESTION_LEVELS[f"{n}-q{k}"][0],
                              "question", q, answer.strip(), f"{link}, question {k}"))
    return items


def override_matches(items=None):
    """{(table name, key): how many lesson items it matches}; each must match exactly one."""
    items = items if items is not None else lesson_items()
    out = {}
    for name, table in (("TOPIC_OVERRIDES", TOPIC_OVERRIDES), ("TRUE_FORMS", TRUE_FORMS)):
        for lesson, words in table:  # a misconception by its lesson's claim, whichever form it is asked in
            out[(name, (lesson, words))] = sum(i.key.startswith(lesson + "-") and words in (i.claim or i.prompt)
                                               for i in items)
    return out


def level_mismatches(items=None):
    """The lesson questions whose QUESTION_LEVELS entry is missing or names other words; none is right."""
    items = items if items is not None else lesson_items()
    questions = {i.key: i.prompt for i in items if i.kind == "question" and re.fullmatch(r"\d\d-q\d+", i.key)}
    return sorted({k for k, q in questions.items() if k not in QUESTION_LEVELS or
                   " ".join(q.split()).find(QUESTION_LEVELS[k][1]) != 0} | (set(QUESTION_LEVELS) - set(questions)))


def waves(tiles, sms=SMS):
    """(waves, tiles in the last wave, fraction of SM-time busy) for ``tiles`` one-SM tiles."""
    n = math.ceil(tiles / sms)
    return n, tiles - (n - 1) * sms, tiles / (n * sms)


def gemm_tiles(shape, BM, BN):
    M, N, _ = shape
    return math.ceil(M / BM) * math.ceil(N / BN)

