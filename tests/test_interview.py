"""The interview pack: generated from the lessons (the committed page equals a fresh generation, and
holds every misconception and interview question they have), every item's answer folded under it (short
version, evidence, lesson link), the numbers card read from the recorded results, every item with a topic
and a level, a self-test that shows an answer only when asked, and a room of its own with no import circle."""
import ast
import json
import re
from pathlib import Path

import nbformat
import pytest

from kernels.lab import results
from kernels.pack import card, deck
from kernels.pack import items as pack
from kernels.tools import interview

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(pack.NOTEBOOKS.glob("0[0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def items():
    return deck.all_items()


def _cells():
    return nbformat.read(interview.PATH, as_version=4).cells


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


def _folds(markdown):
    """{item number: its fold} of one topic cell: each item's listing and the <details> right under it."""
    return dict(re.findall(r"^\*\*(\d+)\.\*\*.*?\n\n(<details><summary>Answer</summary>\n.*?\n</details>)", markdown,
                           re.S | re.M))


def test_every_item_has_its_answer_folded_under_it(items):
    """The answer key: under each item of its topic's cell, a fold holding the short version (where the answer
    opens with one) first, then the evidence, then the source with a link to each lesson it names, last."""
    topic_cells = {c.source.splitlines()[0][3:]: c.source for c in _cells()
                   if c.cell_type == "markdown" and c.source.startswith("## ") and "**1.**" in c.source}
    for topic, group in deck.by_topic(items).items():
        folds = _folds(topic_cells[pack.TOPICS[topic]])
        assert len(folds) == len(group), f"{topic}: {len(group)} items, {len(folds)} folded answers"
        for n, item in enumerate(group, 1):
            fold = folds[str(n)]
            short, evidence, links = item.parts()
            assert evidence and evidence in fold, f"{item.key}: its answer is not in its fold"
            if short:
                assert fold.index(f"**In short:** {short}") < fold.index(evidence), item.key
            strong = fold.index("**A strong answer contains:**")
            assert strong < fold.index(evidence) and all(f"- {p}" in fold for p in item.strong), item.key
            assert fold.rstrip().endswith(f"*Source:* {links}.\n\n</details>"), f"{item.key}: the source is not last"
            for lesson in re.findall(r"\blessons? (\d\d)\b", item.answer_md() + item.source):
                assert pack.lesson_link(lesson) in links, f"{item.key} names lesson {lesson} without a link to it"
    misconceptions = [i for i in items if i.kind == "misconception"]
    assert misconceptions and {i.parts()[0] for i in misconceptions} == {"True.", "False."}


def test_true_or_false_items_are_balanced_and_a_true_one_names_the_myth_it_corrects(items):
    """Every lesson's misconception is a false claim: asked only as they are, "False" would always be the answer.
    Between 40 and 60 percent are asked in a true form; a true form's answer quotes the lesson's claim, so the
    candidate meets the misconception either way."""
    asked = [i for i in items if i.kind == "misconception"]
    true = [i for i in asked if i.parts()[0] == "True."]
    assert 0.4 <= len(true) / len(asked) <= 0.6, f"{len(true)} of {len(asked)} true"
    for i in true:
        assert i.claim not in i.prompt and f'common misconception, "{i.claim}"' in i.answer_md(), i.key
    for i in asked:
        if i not in true:
            assert f'"{i.claim}"' in i.prompt, i.key


def test_every_item_says_what_a_strong_answer_contains(items):
    """Every item has its checklist by hand (2 to 5 points), no checklist names an item that is not there, and a
    true-or-false item's first point gives its answer's verdict."""
    from kernels.pack.strong import STRONG
    assert {i.key for i in items} == set(STRONG), "an item without its checklist, or a checklist without its item"
    for i in items:
        assert 2 <= len(i.strong) <= 5 and len(set(i.strong)) == len(i.strong), i.key
        if i.kind == "misconception":
            verdict = i.parts()[0].rstrip(".")
            assert i.strong[0].startswith(verdict + ":"), f"{i.key}: the answer says {verdict}, its checklist not"


def test_the_answer_key_stays_folded(items):
    """No answer shows unfolded: outside the <details> the page holds none of them."""
    page = "\n".join(c.source for c in _cells())
    unfolded = re.sub(r"<details>.*?</details>", "", page, flags=re.S)
    for i in items:
        head = i.parts()[1][:60]
        assert head not in unfolded, f"the answer of {i.key} is on the page outside its fold"


def test_the_numbers_card_is_the_recorded_run():
    """Each measured figure on the card is the results file's, read independently here, with its device and date;
    a changed record changes the card (nothing on it is typed in by hand)."""
    data = json.loads((results.RESULTS / f"{results.REFERENCE_DEVICE}.json").read_text())
    page = next(c.source for c in _cells() if c.source.startswith("## Numbers to know"))
    assert page == card.markdown()
    find = lambda lesson, run, name, **cfg: next(r for r in data["records"] if (r["lesson"], r["run"], r["name"]) == (
        lesson, run, name) and all(r["config"].get(k) == v for k, v in cfg.items()))  # noqa: E731
    copy, gemm = find("00", "ceilings", "torch_copy"), find("00", "ceilings", "cublas_gemm")
    hbm = find("00", "latency", "pointer_chase", level="HBM")
    fp8 = next(r for r in data["records"] if r["name"] == "scaled_mm" and r["run"] == "best"
               and r["shape"] == [8192, 8192, 4096])
    expected = [f"recorded on {data['device']}, {data['date']}", f"**{copy['gbps'] / 1000:.2f} TB/s**",
                f"**{gemm['tflops']:.0f} TFLOP/s**", f"HBM **{hbm['ms'] * 1e6 / hbm['config']['steps']:.0f} ns**",
                f"**{fp8['tflops']:.0f} TFLOP/s** `torch._scaled_mm`", f"| SMs | **{data['sm_count']}** |",
                f"**{find('04', 'launch', 'cublas_gemm', timer='host')['ms'] * 1e3:.1f} us** cuBLAS"]
    for figure in expected:
        assert figure in page, f"the card does not show the recorded {figure!r}"
    changed = json.loads(json.dumps(data))
    next(r for r in changed["records"] if (r["lesson"], r["run"], r["name"]) == (
        "00", "ceilings", "torch_copy"))["gbps"] = 1234.5
    changed["date"] = "2099-01-01"
    other = card.markdown(results.Store("changed", changed))
    assert "**1.23 TB/s**" in other and "2099-01-01" in other and "**1.23 TB/s**" not in page


def test_the_cards_specifications_are_the_courses():
    """The card's specifications are the figures the course states elsewhere: the ones the H200 reported in lesson
    00's recorded run, the shared-memory limit of kernels/lab/smem.py, lesson 00's datasheet table."""
    facts, device = card.device_reported()
    assert device == "NVIDIA H200"
    from kernels.lab import smem
    from kernels.lessons import l00_memory_wall as l00
    assert facts["32-bit registers per SM"] == card.REGS_PER_SM
    assert facts["threads per SM, at most"] == card.MAX_THREADS == card.MAX_WARPS * 32
    assert facts["shared memory per block, bytes (opt-in)"] == smem.HOPPER_LIMIT
    assert facts["shared memory per SM, bytes"] == card.SMEM_PER_SM
    page = card.markdown()
    assert f"**{facts['L2 cache, bytes'] / card.MiB:.0f} MiB** ({facts['L2 cache, bytes']:,} B)" in page
    sheet = l00.DATASHEET["H200"]
    assert f"**{sheet['tbps']} TB/s**" in page and f"**{sheet['tflops']} TFLOP/s**" in page
    glossary = (ROOT / "notebooks" / "glossary.md").read_text()
    assert f"{card.REGS_PER_THREAD} 32-bit registers per thread and {card.REGS_PER_SM:,} per SM" in glossary


def _pack_imports():
    """{module of kernels/pack: the kernels.pack modules it imports}."""
    found = {}
    for path in sorted((ROOT / "kernels" / "pack").glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names |= {node.module} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernels.pack."):
                names.add(node.module.split(".")[2])
        found[path.stem] = names - {"__init__"}
    return found


def test_the_pack_has_no_import_circle():
    """The pack's modules import each other downwards only (items, card, extra, deck); no circle, even a deferred
    import inside a function (interview_pack and interview_extra once imported each other that way)."""
    graph = _pack_imports()
    assert set(graph) >= {"items", "card", "extra", "deck"}
    order = []
    while graph:
        ground = sorted(m for m, deps in graph.items() if deps <= set(order))
        assert ground, f"an import circle among {sorted(graph)}: {graph}"
        order += ground
        graph = {m: d for m, d in graph.items() if m not in ground}
    assert order.index("items") < order.index("extra") < order.index("deck")
    assert not (ROOT / "kernels" / "lessons" / "interview_pack.py").exists(), "the pack sits in the lessons' room"


def test_topics_levels_and_overrides(items):
    assert {k: n for k, n in pack.override_matches(items).items() if n != 1} == {}, \
        "an override no longer matches exactly one lesson item: reworded or renumbered?"
    assert pack.level_mismatches(items) == [], "a lesson question without its level by hand: added, reworded?"
    levels = {i.key: i.level for i in items}
    # the examples of levels a wording rule got wrong, now by the rubric
    assert levels["07-q5"] == 3 and levels["07-q9"] == 3 and levels["08-q8"] == 2
    for topic, group in deck.by_topic(items).items():
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
    # the profiler's view: the recorded ncu figures in the prompt, and the verdicts its answer gives hold for them
    store = results.recorded()
    gemm, copy = store.find("04", "ncu", "matmul_tma_persistent")["ncu"], store.find("03", "ncu", "copy_tma")["ncu"]
    prompt, answer = by_key["wb-ncu"].prompt_md(), by_key["wb-ncu"].answer_md()
    assert f"| {gemm['tensor_pct']:.1f}% | {copy['tensor_pct']:.1f}% |" in prompt
    assert f"| {gemm['dram_pct']:.1f}% | {copy['dram_pct']:.1f}% |" in prompt
    assert "Kernel B is bound by memory" in answer and "Kernel A is bound by compute" in answer
    assert copy["dram_pct"] > 50 and copy["sm_pct"] < 30 and gemm["tensor_pct"] > 70 and gemm["dram_pct"] < 50


@pytest.mark.parametrize("key, marks", [
    ("ex-chase", ["ld.global.cg.b32", "bra"]), ("ex-cp-async", ["cp.async.wait_group 2", "cp.async.commit_group"]),
    ("ex-tma-copy", ["cp.async.bulk.tensor.2d", "mbarrier.try_wait"]), ("ex-tma-sass", ["UTMALDG", "SYNCS"]),
    ("ex-tma-gemm", ["expect_tx", "wgmma.mma_async"]), ("ex-spill", ["STL"]), ("ex-fp8", ["k32.f32.e4m3.e4m3"]),
    ("ex-wgmma", ["wgmma.fence", "3 more wgmma.mma_async", "wgmma.commit_group", "wgmma.wait_group.sync.aligned 1",
                  "wgmma.wait_group.sync.aligned 0"])])
def test_listings_come_from_the_compiled_kernels(items, key, marks):
    prompt = next(i for i in items if i.key == key).prompt_md()
    lines = prompt.split("```")[1].strip().splitlines()
    assert 2 <= len(lines) <= 15
    assert all(m in prompt for m in marks), key


def _shown(out):
    return "".join(o["data"].get("text/markdown", "") for o in out.outputs)


def test_self_test_reveals_only_when_asked(items):
    cards = [i for i in items if i.kind in ("question", "misconception")][:5]
    t = deck.SelfTest(items=cards, seed=1)
    assert [i.key for i in t.deck] != [i.key for i in cards] and sorted(t.deck, key=cards.index) == cards  # shuffled
    first = t.current
    assert first.prompt in _shown(t.question) and _shown(t.answer) == ""
    t.score(1.0)  # no score before the answer is shown
    assert t.current is first and t.scores == []
    t.reveal()
    assert first.answer_md() in _shown(t.answer)
    boxes = t._boxes()  # the checklist, one box per point of a strong answer, none ticked yet
    assert len(boxes) == len(first.strong) and t.score_button.description == f"Score: 0 of {len(boxes)} points"
    boxes[0].value = True
    assert t.score_button.description == f"Score: 1 of {len(boxes)} points"
    t.score_button.click()
    assert t.current is t.deck[1] and _shown(t.answer) == "" and t.checklist.children == ()
    part = 1 / len(boxes)
    assert t.scores[0] == (first, part) and f"{part:.3g} / 1" in t.tally.value
    for _ in range(4):
        t.reveal()
        t.score(1.0)
    assert t.current is None and "Done: 5 answered" in t.header.value and f"{4 + part:.3g} / 5" in t.tally.value
    t.topic.value = "tma"
    t.start()
    assert all(i.topic == "tma" for i in t.deck) and t.scores == []


def test_the_mock_interview_deals_the_plan_against_a_clock_and_keeps_what_was_missed(items, tmp_path):
    """A round holds what MOCK_PLAN asks, no item twice; each score lands in the candidate's progress file; the
    next round, and the self-test, deal the missed items first and say so; a broken file starts afresh."""
    path = tmp_path / "progress.json"
    mock = deck.MockInterview(seed=3, items=items, progress=deck.Progress(path))
    wanted = {f"{f}={v}": n for (f, v), n in deck.MOCK_PLAN}
    got = {}
    for i in mock.deck:
        key = f"kind={i.kind}" if i.kind in ("whiteboard", "explain") else f"level={i.level}"
        got[key] = got.get(key, 0) + 1
    assert got == wanted and len({i.key for i in mock.deck}) == len(mock.deck)
    assert mock.clock.max == deck.MOCK_MINUTES * 60 and mock.clock.playing
    assert re.search(rf"0:0\d of {deck.MOCK_MINUTES}:00", mock.header.value), mock.header.value
    missed, knew = mock.deck[0], mock.deck[1]
    mock.reveal()
    mock.score(0.0)
    mock.reveal()
    mock.score(1.0)
    kept = json.loads(path.read_text())["items"]
    assert kept[missed.key]["last"] == 0.0 and kept[missed.key]["missed"] == 1 and kept[knew.key]["missed"] == 0
    again = deck.MockInterview(seed=4, items=items, progress=deck.Progress(path))
    assert again.deck[0] is missed and "missed last time" in again.header.value
    same_topic = deck.SelfTest(items=[i for i in items if i.topic == missed.topic], seed=5,
                               progress=deck.Progress(path))
    assert same_topic.deck[0] is missed and "missed last time" in same_topic.header.value
    path.write_text("{not json")
    assert deck.Progress(path).items == {}


def test_two_widgets_scoring_in_turn_keep_both_scores(items, tmp_path):
    """The pack's widgets each read the progress file when made; each score is added to what the file holds when
    written, so a widget made before another scored does not erase that score, and deals it first on a new deck."""
    path = tmp_path / "progress.json"
    test = deck.SelfTest(items=items, seed=1, shuffle=False, progress=deck.Progress(path))
    mock = deck.MockInterview(seed=2, items=items, progress=deck.Progress(path))
    first = test.current
    test.reveal()
    test.score(0.0)
    second = next(i for i in mock.deck if i.key != first.key)
    mock.pos = mock.deck.index(second)
    mock.reveal()
    mock.score(0.5)
    kept = json.loads(path.read_text())["items"]
    assert set(kept) == {first.key, second.key}, sorted(kept)
    assert kept[first.key]["last"] == 0.0 and kept[second.key]["last"] == 0.5
    test.start()
    assert test.deck[0].key in (first.key, second.key) and "missed last time" in test.header.value


def test_the_spill_item_counts_as_lesson_01_does():
    """The pack said 857 STL where lesson 01 prints 913 for the same kernel: it counted unpredicated lines only."""
    from kernels.lessons import l01_naive_loads as l01
    from kernels.pack import strong
    stl = l01.spill_stores(l01.compile_tile(128, 256, num_warps=1))
    assert f"{stl} `STL`" in " ".join(strong.STRONG["ex-spill"])
    from kernels.pack import extra
    assert f"{stl} `STL` and" in extra._spill_answer()
