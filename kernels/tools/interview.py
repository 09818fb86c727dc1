"""Generate notebooks/interview_pack.ipynb from the lessons: every misconception and interview question
they hold (read from their markdown now, so the lessons stay the single source), with the pack's own
questions, whiteboard problems and "explain this PTX/SASS" prompts (``kernels/pack/``), grouped by topic,
each with its level and its answer folded under it (the answer key: the short version, the evidence, the
lesson last), and the numbers card (``kernels.pack.card``) from the recorded H200 results. In JupyterLab the
self-test cells deal the same items one at a time and show an answer only when asked; the website shows the
folds, and website/build.py writes a printable copy of this page with every fold open.

    python -m kernels.tools.interview            # rewrite notebooks/interview_pack.ipynb
    python -m kernels.tools.interview --check    # exit 1 if the committed pack is stale
"""
import sys
from collections import Counter

import nbformat

from ..pack import card, deck
from ..pack.items import LESSON_TOPIC, LEVELS, NOTEBOOKS, TOPICS

PATH = NOTEBOOKS / "interview_pack.ipynb"


def _intro(items):
    levels = Counter(i.level for i in items)
    kinds = Counter(i.kind for i in items)
    true = sum(i.kind == "misconception" and i.parts()[0] == "True." for i in items)
    rows = "\n".join(f"| {title} | {sum(i.topic == t for i in items)} |" for t, title in TOPICS.items())
    lessons = sorted(LESSON_TOPIC)
    return f"""# Interview pack: how data reaches Hopper's tensor cores

Every common misconception and interview question of the {len(lessons)} lessons ({lessons[0]}-{lessons[-1]}),
gathered by topic, with questions on the topics interviews ask about that the lessons touch only in passing,
whiteboard problems, and "explain this PTX/SASS" prompts cut from the course's own compiled kernels. {len(items)} items:
{kinds['question']} questions, {kinds['misconception']} "true or false, and why" claims from the lessons' misconceptions
({true} of them in a true form written by hand, the others false, as the lessons state them),
{kinds['whiteboard']} whiteboard problems, {kinds['explain']} PTX/SASS listings.

**How to use it.** In JupyterLab, run the first code cell, then the self-test: it deals the items shuffled,
one at a time; think your answer through (say it aloud, or write it down), press *Reveal the answer*, tick
each point of *a strong answer contains* that your answer made, then *Score*: the points ticked are the score. Under each topic below, a cell runs the same self-test over that topic alone, in order.
On the page itself (the website, GitHub, a printout), each item's answer is folded under it: open *Answer*
only after you have answered. An answer gives the short version first where there is one, then what a strong
answer contains (the points an interviewer listens for, written by hand for every item), then the evidence,
then where it comes from, with a link to the lesson; section numbers in a lesson's answer are
that lesson's. Every figure in a worked answer is computed by the course's code when this page is generated
(compiled kernels, the shared-memory model, the TMA rules, lesson 04's timeline, the recorded H200 results);
every other claim names its source. The *numbers to know* card below is the one table to learn by heart.
On the website, this page also comes as one printable HTML file with every answer open.

**Levels**, by one rubric: *warm-up*, a definition or a fact to recall; *core*, a mechanism, with its number
where it has one; *hard*, a diagnosis or a design trade-off made from data. Every question's level is assigned
by hand (`QUESTION_LEVELS` in `kernels/pack/items.py` for the lessons' questions); a true-or-false claim is a
warm-up. Warm-up {levels[1]}, core {levels[2]}, hard {levels[3]}.

| topic | items |
|---|---|
{rows}

This page is generated from the lessons by `python -m kernels.tools.interview`; edit the lessons, not this.
**Words:** every term is in the [glossary](glossary.md) (English / 中文)."""


def _listing(item, n):
    tag = f"*{LEVELS[item.level]}*"
    prompt = item.prompt_md().strip()
    where = f" ({item.source})" if item.source.startswith("[") else ""
    kind = f", {item.kind}" if item.kind in ("whiteboard", "explain") else ""
    return f"**{n}.** {tag}{kind}{where}: {prompt}\n\n{item.answer_key_md()}"


def notebook():
    items = deck.all_items()
    cells = [nbformat.v4.new_markdown_cell(_intro(items)),
             nbformat.v4.new_code_cell("import kernels\nfrom kernels.pack.deck import MockInterview, SelfTest\n\n"
                                       "kernels.banner()"),
             nbformat.v4.new_markdown_cell(card.markdown()),
             nbformat.v4.new_markdown_cell("## Self-test\n\nPick a topic and a level, or take them all; "
                                           "*Start* deals a fresh shuffle."),
             nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nSelfTest()"),
             nbformat.v4.new_markdown_cell(
                 f"## Mock interview\n\nA {deck.MOCK_MINUTES}-minute round for a kernel role, as a panel might run "
                 "it: " + ", ".join(f"{n} {LEVELS[v] if f == 'level' else v}" for (f, v), n in deck.MOCK_PLAN)
                 + " (a PTX/SASS listing to explain), drawn from the whole pack. The clock runs in your browser; "
                 "the time used shows on every card. Answer aloud, as in the room, then reveal and tick, honestly, "
                 "each point of the strong answer that yours made: a number or a mechanism you left out is a "
                 "point missed. Your scores are kept in a file of your own (`~/.gpu-course/interview.json`, or `COURSE_PROGRESS`); "
                 "the next round, and the self-test above, deal what you missed first, marked *missed last time*."),
             nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nMockInterview()")]
    for topic, group in deck.by_topic(items).items():
        lines = [f"## {TOPICS[topic]}"] + [_listing(i, n) for n, i in enumerate(group, 1)]
        cells.append(nbformat.v4.new_markdown_cell("\n\n".join(lines)))
        cells.append(nbformat.v4.new_code_cell(f'# NBVAL_IGNORE_OUTPUT\nSelfTest(topic="{topic}", shuffle=False)'))
    for k, cell in enumerate(cells):  # stable ids: a fresh generation is byte for byte the committed one
        cell.id = f"pack-{k:02d}"
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    return nb


def text():
    return nbformat.writes(notebook()) + "\n"


def main(argv):
    fresh = text()
    if argv[:1] == ["--check"]:
        if not PATH.exists() or PATH.read_text() != fresh:
            sys.exit(f"{PATH.name} is out of date: run `python -m kernels.tools.interview`")
        return
    PATH.write_text(fresh)


if __name__ == "__main__":
    main(sys.argv[1:])
