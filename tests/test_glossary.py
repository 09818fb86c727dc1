"""The glossary (notebooks/glossary.md) against the lessons: every term in it is defined in a lesson, where
the glossary says, and no lesson uses a term before the cell that defines it.

The rule, mechanical on purpose:
- Terms come from the glossary. An entry is a heading ``### <a id="ANCHOR"></a>English · 中文``, a line
  ``First defined: [lesson NN, section S](...)`` and a comment ``<!-- forms: a; b; c -->`` listing the
  words that count as the term in a lesson (plural and spelling variants included).
- A form matches as a whole word (letters, digits and ``_`` around it do not continue it), inside code spans
  too; a form in lower case matches in any case, any other form only as written (``SM`` is not ``sm_90``).
- The lessons' markdown cells are read in order, 00 to 05. Each lesson's first cell (title, goals, time)
  announces what is coming: it neither uses nor defines a term.
- A cell defines a term when a bold span of at most four words (backticks dropped), not a quoted claim,
  holds one of its forms, e.g. ``**warp**``, ``**Tensor Memory Accelerator** (TMA)`` but not a
  misconception's ``**"cp.async is TMA."**``, or when one of its headings, after the
  section number and a leading "The", "A" or "An", starts with a form (``## 5. Coalescing: ...``).
- The first defining cell must be in the lesson and section the glossary names (the section is the last
  ``## N.`` heading at or above the cell).
- Every cell before it that uses the term must be a forward reference: the paragraph or list item of the use
  names the defining lesson ("lesson 03", "lessons 02-04", "lessons 01 and 03").
"""
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "notebooks" / "glossary.md"
LESSONS = sorted((ROOT / "notebooks").glob("0[0-9]_*.ipynb"))
WORDS_LINE = ("**Words:** a term in bold is defined where it first appears; every term is in the "
              "[glossary](glossary.md) (English / 中文).")
CJK = re.compile(r"[\u4e00-\u9fff]")


def entries(text=None):
    """anchor -> {"title", "lesson", "section", "forms", "body"} for every entry of the glossary."""
    text = GLOSSARY.read_text() if text is None else text
    found = {}
    for block in [b for b in re.split(r"\n(?=### )", text) if b.startswith("### ")]:
        head = re.match(r'### <a id="([a-z0-9-]+)"></a>(.+)', block)
        assert head, f"glossary entry without an anchor: {block[:80]!r}"
        anchor, title = head.groups()
        assert anchor not in found, f"anchor {anchor!r} used twice"
        where = re.search(r"First defined: \[lesson (\d\d), section (\d+)\]", block)
        forms = re.search(r"<!-- forms: (.+?) -->", block)
        assert where and forms, f"glossary entry {anchor!r} needs 'First defined: [lesson NN, section S]' and forms"
        found[anchor] = {"title": title, "lesson": where.group(1), "section": int(where.group(2)),
                         "forms": [f.strip() for f in forms.group(1).split(";") if f.strip()],
                         "body": block[head.end():where.start()].strip()}
    return found


def pattern(form):
    flags = re.IGNORECASE if form == form.lower() else 0
    return re.compile(r"(?<![A-Za-z0-9_])" + re.escape(form) + r"(?![A-Za-z0-9_])", flags)


def cells():
    """(lesson, index, section, source) of every markdown cell but each lesson's first, in reading order."""
    out = []
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        section = 0
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "markdown":
                continue
            heads = re.findall(r"^## (\d+)\.", cell.source, re.MULTILINE)
            section = int(heads[-1]) if heads else section
            if i > 0:
                out.append((path.name[:2], i, section, cell.source))
    return out


def defines(source, patterns):
    for span in re.findall(r"\*\*(.+?)\*\*", source, re.DOTALL):
        span = span.replace("`", "")
        if span.startswith(('"', "“")):  # a quoted claim (the misconceptions), not a definition
            continue
        if len(span.split()) <= 4 and any(p.search(span) for p in patterns):
            return True
    for title in re.findall(r"^#{1,6}\s+(?:\d+\.\s*)?(?:(?:The|A|An)\s+)?(.*)$", source, re.MULTILINE):
        title = title.replace("`", "")
        if any(m.start() == 0 for p in patterns for m in [p.search(title)] if m):
            return True
    return False


def paragraphs(source):
    """Blocks between blank lines, each list item and table row a block of its own."""
    return [p for block in re.split(r"\n\s*\n", source)
            for p in re.split(r"\n(?=\s*(?:[-*] |\d+\. |\|))", block)]


def names_lesson(text, lesson):
    for run in re.findall(r"[Ll]essons? ((?:\d\d)(?:\s*(?:,|-|–|to|and|or)\s*\d\d)*)", text):
        numbers = [int(n) for n in re.findall(r"\d\d", run)]
        ranges = re.findall(r"(\d\d)\s*(?:-|–|to)\s*(\d\d)", run)
        if int(lesson) in numbers or any(int(a) <= int(lesson) <= int(b) for a, b in ranges):
            return True
    return False


def problems(glossary, lesson_cells):
    """What does not hold, one line each (empty when the glossary and the lessons agree)."""
    out = []
    for anchor, e in glossary.items():
        pats = [pattern(f) for f in e["forms"]]
        where = next(((lesson, i, section) for lesson, i, section, src in lesson_cells if defines(src, pats)), None)
        if where is None:
            out.append(f"{anchor}: no lesson defines it (bold, at most four words, or a heading) with one of "
                       f"{e['forms']}")
            continue
        lesson, index, section = where
        if (lesson, section) != (e["lesson"], e["section"]):
            out.append(f"{anchor}: the glossary says lesson {e['lesson']}, section {e['section']}; its first "
                       f"definition is in lesson {lesson}, section {section} (cell {index})")
        for les, i, _, src in lesson_cells:
            if (les, i) == (lesson, index):
                break
            for para in paragraphs(src):
                hit = next((m.group(0) for p in pats for m in [p.search(para)] if m), None)
                if hit and not names_lesson(para, lesson):
                    out.append(f"{anchor}: lesson {les} cell {i} uses {hit!r} before lesson {lesson} cell {index} "
                               f"defines it (define it there, or name lesson {lesson} in that paragraph): "
                               f"{' '.join(para.split())[:100]!r}")
                    break
    return out


def test_glossary_entries_are_bilingual_and_complete():
    glossary = entries()
    assert len(glossary) >= 50
    for anchor, e in glossary.items():
        assert CJK.search(e["title"]), f"{anchor}: the heading needs the Chinese term"
        assert CJK.search(e["body"]) and re.search(r"[A-Za-z]{3,}.*\.", e["body"]), \
            f"{anchor}: a definition in English and one in Chinese"
    for anchor in ["tma", "tensor-map", "double-buffering", "shared-memory", "stages", "thread", "warp",
                   "warpgroup", "thread-block", "program", "sm", "cluster", "occupancy", "registers", "bank",
                   "l2", "hbm", "ptx", "sass", "tensor-core", "wgmma", "mbarrier", "coalescing",
                   "vectorised-load", "cp-async", "box", "swizzle", "expect-tx", "phase", "producer-consumer",
                   "warp-specialisation", "persistent-kernel", "wave", "epilogue", "roofline",
                   "arithmetic-intensity", "ridge-point", "latency", "bandwidth", "littles-law"]:
        assert anchor in glossary, f"the glossary has no entry #{anchor}"


def test_each_term_is_filed_under_the_lesson_that_defines_it():
    """A term sits under the "## Lesson NN" heading of the lesson its "First defined" names (lesson 09's terms were
    filed under lesson 08)."""
    misfiled, under = [], None
    for line in GLOSSARY.read_text().splitlines():
        heading = re.match(r"## Lesson (\d\d)\b", line)
        if heading:
            under = heading.group(1)
        term = re.match(r"### <a id=\"([^\"]+)\"></a>", line)
        if term:
            name = term.group(1)
        defined = re.match(r"First defined: \[lesson (\d\d)", line)
        if defined and defined.group(1) != under:
            misfiled.append(f"{name}: defined in lesson {defined.group(1)}, filed under lesson {under}")
    assert not misfiled, misfiled


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_first_cell_links_the_glossary(path):
    first = nbformat.read(path, as_version=4).cells[0].source
    assert WORDS_LINE in first, f"{path.name}: the first cell lacks the line {WORDS_LINE!r}"


def test_every_term_defined_where_the_glossary_says_and_before_its_use():
    found = problems(entries(), cells())
    assert not found, f"{len(found)} problems:\n" + "\n".join(found)


def test_the_rule_catches_a_use_before_its_definition():
    # the checker itself, on a lesson made up here: a use, a forward reference, then the definition
    glossary = entries("### <a id=\"warp\"></a>warp · 线程束\n32 threads. 32 个线程。\n"
                       "First defined: [lesson 00, section 2](x) <!-- forms: warp; warps -->\n")
    use = ("00", 1, 1, "## 1. Start\n\nOne warp waits.")
    forward = ("00", 1, 1, "## 1. Start\n\n- warps come later (lesson 00)")
    definition = ("00", 2, 2, "## 2. Words\n\nA **warp** is 32 threads.")
    assert problems(glossary, [forward, definition]) == []
    assert "uses 'warp' before" in problems(glossary, [use, definition])[0]
    assert "no lesson defines it" in problems(glossary, [use])[0]
    assert "its first definition is in lesson 00, section 1" in problems(
        glossary, [("00", 1, 1, "## 1. The warp")])[0]
