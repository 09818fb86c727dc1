"""The interview pack: generated from the lessons (the committed page equals a fresh generation, and
holds every misconception and interview question they have), no answer on the page, every item with a
topic and a level, and a self-test that shows an answer only when asked."""
import re

import nbformat
import pytest

from kernels.lessons import interview_pack as pack
from kernels.tools import interview

LESSONS = sorted(pack.NOTEBOOKS.glob("0[0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def items():
    return pack.all_items()


def test_committed_pack_is_a_fresh_generation():
    assert interview.PATH.read_text() == interview.text(), "run `python -m kernels.tools.interview`"


def test_every_lesson_question_and_misconception_is_in_the_pack(items):
    page = "\n".join(c.source for c in nbformat.read(interview.PATH, as_version=4).cells)
    for path in LESSONS:
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
        # counted here independently of the pack's parser: every folded question, every bold-quoted myth
        questions = len(re.findall(r"<details><summary>\s*\d+\.", text))
        myths = len(re.findall(r'^- \*\*"', text, re.M))
        mine = [i for i in items if i.key.startswith(path.name[:2] + "-")]
        assert sum(i.kind == "question" for i in mine) == questions, path.name
        assert sum(i.kind == "misconception" for i in mine) == myths, path.name
        for i in mine:
            assert i.prompt in page, f"{i.key} is not on the page"


def test_no_answer_is_on_the_page(items):
    page = "\n".join(c.source for c in nbformat.read(interview.PATH, as_version=4).cells)
    assert "<details" not in page
    for i in items:
        if isinstance(i.answer, str):
            head = i.answer.removeprefix("False. ")[:60]
            assert head not in page, f"the answer of {i.key} is on the page"


def test_topics_levels_and_overrides(items):
    assert {k: n for k, n in pack.override_matches(items).items() if n != 1} == {}, \
        "an override no longer matches exactly one lesson item: reworded or renumbered?"
    for topic, group in pack.by_topic(items).items():
        assert len(group) >= 2, f"topic {topic} has {len(group)} items"
    assert all(i.level in pack.LEVELS and i.topic in pack.TOPICS for i in items)
    assert len({i.key for i in items}) == len(items)


def test_whiteboard_answers_are_computed(items):
    by_key = {i.key: i for i in items}
    assert pack.waves(pack.gemm_tiles((3072, 3072, 3072), 128, 256)) == (3, 24, 288 / 396)
    assert "**3 waves**" in by_key["wb-waves"].answer_md()
    assert "**97 us**" in by_key["wb-pipeline"].answer_md() and "**160 us**" in by_key["wb-pipeline"].answer_md()
    tma = by_key["wb-tma"].answer_md()
    assert tma.count("fits") == 1 and tma.count("breaks a rule") == 5
    assert "**32-way**" in by_key["wb-banks"].answer_md() and "**8-way**" in by_key["wb-banks"].answer_md()
    assert "**144.0 KiB**" in by_key["wb-smem"].answer_md()  # lesson 02's answer, from the compiled kernel


@pytest.mark.parametrize("key, marks", [
    ("ex-chase", ["ld.global.cg.b32", "bra"]), ("ex-cp-async", ["cp.async.wait_group 2", "cp.async.commit_group"]),
    ("ex-tma-copy", ["cp.async.bulk.tensor.2d", "mbarrier.try_wait"]), ("ex-tma-sass", ["UTMALDG", "SYNCS"]),
    ("ex-tma-gemm", ["expect_tx", "wgmma.mma_async"]), ("ex-spill", ["STL"]), ("ex-fp8", ["k32.f32.e4m3.e4m3"])])
def test_listings_come_from_the_compiled_kernels(items, key, marks):
    prompt = next(i for i in items if i.key == key).prompt_md()
    lines = prompt.split("```")[1].strip().splitlines()
    assert 2 <= len(lines) <= 15
    assert all(m in prompt for m in marks), key


def _shown(out):
    return "".join(o["data"].get("text/markdown", "") for o in out.outputs)


def test_self_test_reveals_only_when_asked(items):
    deck = [i for i in items if i.kind in ("question", "misconception")][:5]
    t = pack.SelfTest(items=deck, seed=1)
    assert [i.key for i in t.deck] != [i.key for i in deck] and sorted(t.deck, key=deck.index) == deck  # shuffled
    first = t.current
    assert first.prompt in _shown(t.question) and _shown(t.answer) == ""
    t.score(1.0)  # no score before the answer is shown
    assert t.current is first and t.scores == []
    t.reveal()
    assert first.answer_md() in _shown(t.answer)
    t.score(0.5)
    assert t.current is t.deck[1] and _shown(t.answer) == "" and "0.5 / 1" in t.tally.value
    for _ in range(4):
        t.reveal()
        t.score(1.0)
    assert t.current is None and "Done: 5 answered" in t.header.value and "4.5 / 5" in t.tally.value
    t.topic.value = "tma"
    t.start()
    assert all(i.topic == "tma" for i in t.deck) and t.scores == []
