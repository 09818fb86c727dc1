"""The instructor guide (workshop/README.md) and its troubleshooting page hold to the course they describe:
every notebook section an agenda names exists under that heading, every file, make target, module and
cell it names exists, its agendas add up, its lesson times are the README's, the check messages it quotes
are the ones the exercise tests hold the checks to, and the README links the guide."""
import ast
import importlib
import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "workshop" / "README.md"
TROUBLE = ROOT / "workshop" / "troubleshooting.md"
DOCS = [GUIDE, TROUBLE]

# named by the guide, built by other helpers of the same issue: checked like the rest once they exist;
# until then test_pending_names says which are still missing
PENDING = {"make doctor", "kernels/tools/doctor.py", "workshop/jupyterhub_config.py", "COURSE_RECORDED"}

SECTION = re.compile(r"§(\d\d)\.(\d+) “([^”]+)”")
BARE_SECTION = re.compile(r"§(\d\d)\.(\d+)(?!\d)(?! “)")  # a section named by number only (in the notes)
EX_SECTION = re.compile(r"§ex(\d\d) “([^”]+)”")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _text(path):
    return path.read_text(encoding="utf-8")


def _headings(path):
    """The markdown heading lines of a notebook, without the leading #s."""
    nb = nbformat.read(path, as_version=4)
    return {line.lstrip("#").strip() for cell in nb.cells if cell.cell_type == "markdown"
            for line in cell.source.splitlines() if line.startswith("#")}


def _notebook(folder, number):
    found = sorted((ROOT / folder).glob(f"{number}_*.ipynb"))
    assert len(found) == 1, f"{folder}/{number}_*.ipynb: {found}"
    return found[0]


def _code(folder="notebooks"):
    return "\n".join(cell.source for path in sorted((ROOT / folder).glob("*.ipynb"))
                     for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")


def _missing(name, exists):
    """None if ``name`` is fine, else why not: a pending name may be missing for now."""
    if exists or name in PENDING:
        return None
    return name


# ---- the agendas' sections --------------------------------------------------------------------------

def test_every_section_the_guide_names_is_a_heading_of_that_notebook():
    text = re.sub(r"\s*\n\s*", " ", _text(GUIDE))  # a heading may wrap across lines in the guide
    refs, bare, ex_refs = SECTION.findall(text), BARE_SECTION.findall(text), EX_SECTION.findall(text)
    assert len(refs) + len(bare) + len(ex_refs) == text.count("§"), \
        "a § reference the test cannot read: write §NN.k “Heading”, §NN.k or §exNN “Heading”"
    assert len({n for n, _, _ in refs}) == 6, "the agendas name sections of all six lessons"
    wrong = []
    for number, section, title in refs:
        path = _notebook("notebooks", number)
        if f"{section}. {title}" not in _headings(path):
            wrong.append(f"{path.name}: no heading '## {section}. {title}'")
    for number, section in bare:
        path = _notebook("notebooks", number)
        if not any(h.startswith(f"{section}. ") for h in _headings(path)):
            wrong.append(f"{path.name}: no section {section}")
    for number, title in ex_refs:
        path = _notebook("exercises", number)
        if title not in _headings(path):
            wrong.append(f"exercises/{path.name}: no heading '## {title}'")
    assert not wrong, "\n".join(wrong)


def _agenda(heading):
    """(start in minutes, length) of each row of the table under ``heading``."""
    text = _text(GUIDE)
    block = text[text.index(heading):]
    block = block[:block.index("\n## ", 1)]
    rows = re.findall(r"^\| (\d+):(\d\d) \| (\d+) \|", block, re.M)
    return [(int(h) * 60 + int(m), int(n)) for h, m, n in rows]


@pytest.mark.parametrize("heading, start, end", [("## 3. The 3-hour session", 0, 180),
                                                 ("## 4. The 1-day workshop", 9 * 60, 17 * 60)])
def test_each_agenda_runs_without_gaps_from_its_start_to_its_end(heading, start, end):
    rows = _agenda(heading)
    assert rows and rows[0][0] == start, rows
    for (t, n), (t_next, _) in zip(rows, rows[1:]):
        assert t + n == t_next, f"{heading}: the block at {t // 60}:{t % 60:02d} ends at {t + n}, the next starts at {t_next}"
    assert rows[-1][0] + rows[-1][1] == end, f"{heading}: ends at minute {rows[-1][0] + rows[-1][1]}, not {end}"


def test_the_guides_lesson_times_are_the_readmes():
    readme = dict((n, (a, b)) for n, a, b in
                  re.findall(r"^\| (\d\d) \| \[`notebooks/.*\| (\d+ min) \| (\d+ min) \|$", _text(ROOT / "README.md"), re.M))
    guide = dict((n, (a, b)) for n, a, b in re.findall(r"^\| (\d\d) \| (\d+ min) \| (\d+ min) \|$", _text(GUIDE), re.M))
    assert len(readme) == len(list((ROOT / "notebooks").glob("0[0-9]_*.ipynb"))) and guide == readme, f"README {readme}\nguide  {guide}"


# ---- what the guide names: files, targets, modules, cells, messages -----------------------------------

def _spans():
    return [(doc, span) for doc in DOCS for span in SPAN.findall(_text(doc))]


def _is_repo_path(token):
    if token.startswith(("/", "$", "http", "~", ".../")) or not re.fullmatch(r"[\w./-]+", token):
        return False
    return "/" in token or token.endswith((".py", ".ipynb", ".md", ".json", ".txt", ".yml", ".cfg"))


def test_every_path_the_guide_names_exists():
    wrong = []
    for doc, span in _spans():
        for token in span.split():
            if _is_repo_path(token):
                wrong.append(_missing(token, (ROOT / token).exists()))
    for doc in DOCS:
        for target in LINK.findall(_text(doc)):
            if not target.startswith(("http", "#")):
                path = (doc.parent / target.split("#")[0]).resolve()
                wrong.append(_missing(str(path.relative_to(ROOT)), path.exists()))
    wrong = [w for w in wrong if w]
    assert not wrong, f"named but not in the repository: {wrong}"


def test_every_make_target_and_module_the_guide_names_exists():
    makefile = _text(ROOT / "Makefile")
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    wrong, named = [], 0
    for doc, span in _spans():
        for target in re.findall(r"\bmake ([\w-]+)", span):
            named += 1
            wrong.append(_missing(f"make {target}", target in targets))
        for module in re.findall(r"python -m ([\w.]+)", span):
            named += 1
            path = ROOT / (module.replace(".", "/") + ".py")
            wrong.append(_missing(str(path.relative_to(ROOT)), path.exists()))
    assert named >= 4, "the guide names its commands in backticks"
    wrong = [w for w in wrong if w]
    assert not wrong, f"commands the Makefile or kernels/ do not have: {wrong}"


def test_every_course_function_the_guide_names_exists():
    wrong = []
    for doc, span in _spans():
        m = re.fullmatch(r"(kernels(?:\.\w+)+)(\(.*\))?", span)
        if not m:
            continue
        parts = m.group(1).split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                wrong.append(span)
            break
    assert not wrong, f"not in the course's code: {wrong}"


def test_every_cell_the_guide_points_at_is_a_notebook_cell():
    code = _code()
    cells = [span for doc, span in _spans() if span.startswith("lesson.") or f"cell `{span}`" in _text(doc)]
    assert len(cells) >= 10, cells
    wrong = [c for c in cells if (c[:-len("(...)")] + "(" if c.endswith("(...)") else c) not in code]
    assert not wrong, f"no notebook cell holds: {wrong}"


def test_the_check_messages_the_guide_quotes_are_the_ones_the_exercise_tests_assert():
    text, quoted = _text(GUIDE), 0
    for number, table in re.findall(r"^\| exercise (\d\d): the mistake \| what the check prints.*\n\|[-|]+\n((?:\|.*\n)+)",
                                    text, re.M):
        asserted = _text(ROOT / "tests" / f"test_exercise_{number}.py")
        for row in table.splitlines():
            message = re.findall(r"`([^`]+)`", row.rsplit("|", 2)[1])
            assert len(message) == 1, row
            quoted += 1
            assert message[0] in asserted, f"exercise {number}: the check is not held to print {message[0]!r}"
    assert quoted >= 6 * 6, f"only {quoted} check messages quoted"


def _strings(path):
    """The string constants of a module, each f-string's literal parts joined by '...'."""
    out = []
    for node in ast.walk(ast.parse(_text(path))):
        if isinstance(node, ast.JoinedStr):
            out.append("...".join(v.value for v in node.values if isinstance(v, ast.Constant)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
    return out


def test_the_tma_messages_the_troubleshooting_page_quotes_are_the_courses():
    rules = _strings(ROOT / "kernels" / "lab" / "tma_rules.py")
    text = _text(TROUBLE)
    table = text[text.index("| message begins | fix |"):].split("\n\n")[0].splitlines()[2:]
    assert len(table) == 6, table
    for row in table:
        pieces = [p.strip() for p in re.findall(r"`([^`]+)`", row.split("|")[1])[0].split("...") if p.strip()]
        assert any(all(p in s for p in pieces) for s in rules), f"no TMA rule message has {pieces}"


# ---- the README links it; the other helpers' names -----------------------------------------------------

def test_the_readme_links_the_guide_for_instructors():
    readme = _text(ROOT / "README.md")
    section = readme[readme.index("## For instructors"):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    assert "(workshop/README.md)" in section and "(workshop/troubleshooting.md)" in section, section


def test_pending_names():
    """The names that other helpers of the issue add; skipped (saying which) until all exist."""
    code = "\n".join(_text(p) for p in (ROOT / "kernels").rglob("*.py"))
    have = {"make doctor": re.search(r"^doctor:", _text(ROOT / "Makefile"), re.M) is not None,
            "kernels/tools/doctor.py": (ROOT / "kernels/tools/doctor.py").exists(),
            "workshop/jupyterhub_config.py": (ROOT / "workshop/jupyterhub_config.py").exists(),
            "COURSE_RECORDED": "COURSE_RECORDED" in code}
    assert set(have) == PENDING
    guide = "\n".join(_text(d) for d in DOCS)
    named = {"make doctor": "make doctor", "kernels/tools/doctor.py": "python -m kernels.tools.doctor",
             "workshop/jupyterhub_config.py": "jupyterhub_config.py", "COURSE_RECORDED": "COURSE_RECORDED=1"}
    assert all(named[name] in guide for name in PENDING)
    missing = sorted(n for n, ok in have.items() if not ok)
    if missing:
        pytest.skip(f"named by the guide, not in the repository yet: {missing}")


def test_the_recorded_labels_the_docs_quote_are_the_results():
    """A "recorded on <device>, <date>" the README or the guide quotes is the label a learner sees: the device and
    date of a run in results/ (kernels.lab.results.Store.label), not a placeholder and not an older run."""
    import json
    labels = {f"recorded on {d.get('device')}, {d.get('date', '?')}"
              for d in (json.loads(p.read_text()) for p in sorted((ROOT / "results").glob("*.json")))}
    quoted = [(path.name, m) for path in [ROOT / "README.md"] + DOCS
              for m in re.findall(r"recorded on [^\"\n]*?, [^\"\n]*?(?=\")", _text(path))]
    assert quoted, "the README and the guide quote no recorded label"
    wrong = [(name, m) for name, m in quoted if m not in labels]
    assert not wrong, f"labels quoted that no run in results/ has ({sorted(labels)}): {wrong}"



def test_the_guide_names_every_setting_of_the_room_and_no_other():
    """The room's settings are the environment variables the hub's config reads; the guide names each of them
    and no other, and never tells the instructor to set the participants' switch on the hub itself."""
    config = (ROOT / "workshop" / "jupyterhub_config.py").read_text()
    guide = (ROOT / "workshop" / "README.md").read_text()
    read = set(re.findall(r'environ(?:\.get)?[\[(]"(COURSE_ROOM_\w+)"', config))
    assert read >= {"COURSE_ROOM_PASSWORD", "COURSE_ROOM_RECORDED", "COURSE_ROOM_GPUS", "COURSE_ROOM_ADMIN"}
    assert set(re.findall(r"COURSE_ROOM_\w+", guide)) == read
    assert not re.search(r"hub\W[^.]*with `COURSE_RECORDED=1`", guide), "COURSE_RECORDED on the hub does nothing"


def _readme_exercise_minutes():
    """{lesson number: minutes} of the README's table: its last column is the exercise's time."""
    table = (ROOT / "README.md").read_text()
    return {n: int(m) for n, m in re.findall(r"^\| (\d\d) \| .*\| \d+ min \| (\d+) min \|$", table, re.M)}


@pytest.mark.parametrize("heading, whole", [("## 3. The 3-hour session", False), ("## 4. The 1-day workshop", True)])
def test_each_agenda_has_hands_on_time_slack_and_what_to_drop(heading, whole):
    """Each agenda gives the room an exercise by hand and some slack, says what to drop when running late, and a
    whole exercise in class gets at least the time the README gives it."""
    text = _text(GUIDE)
    block = text[text.index(heading):]
    block = block[:block.index("\n## ", 1)]
    rows = re.findall(r"^\| \d+:\d\d \| (\d+) \| (.*) \|$", block, re.M)
    exercises = [(int(n), what) for n, what in rows if what.startswith("exercise ")]
    assert exercises and any("slack" in what for _, what in rows), rows
    assert "**Running late?** Drop, in this order:" in block
    if whole:
        readme = _readme_exercise_minutes()
        for n, what in exercises:
            number = re.match(r"exercise (\d\d)", what).group(1)
            assert n >= readme[number], f"{what}: {n} min in the agenda, {readme[number]} in the README"


def test_the_rooms_sizing_the_guide_states_is_the_recorded_run():
    """The sizing figures of the guide are the H200 room runs' (python -m kernels.tools.room), as recorded."""
    import statistics
    runs = json.loads((ROOT / "workshop" / "room-nvidia-h200.json").read_text())["runs"]
    text = " ".join(_text(ROOT / "workshop" / "README.md").split())
    every = {k: runs["8"]["memory"][k] + runs["24"]["memory"][k] for k in ("servers", "kernels", "contexts")}
    assert f"their server {statistics.median(every['servers']):.0f} MiB of host memory" in text
    kernel, context = statistics.median(every["kernels"]), statistics.median(every["contexts"])
    assert f"each notebook's kernel {kernel:.0f} MiB of host memory (median; at most {max(every['kernels'])})" in text
    assert (f"{context:.0f} MiB of GPU memory for its CUDA context (median; at most {max(every['contexts'])}; " in text
            and f"with a mean of {statistics.mean(every['contexts']):.0f})" in text)
    # the estimate for a room of 30, from those figures
    gib = lambda mib: f"{30 * mib / 1024:.0f}"
    assert (f"about {gib(130 + kernel)} GiB of the server's memory ({gib(130 + max(every['kernels']))} if every kernel "
            f"peaks" in text)
    assert (f"and {gib(context)} GiB of one GPU's ({gib(statistics.mean(every['contexts']))} at the mean, "
            f"{gib(max(every['contexts']))} if every context peaks)" in text)
    for n, r in runs.items():
        assert r["device"] == "NVIDIA H200" and r["participants"] == int(n) and r["separated"]
        live = r["live"]
        moved = [abs(live["room"][k]["ms"] / live["alone_before"][k]["ms"] - 1) for k in live["room"]]
        assert round(max(moved) * 100, 1) <= 1.0 and "moved by 1.0% at most" in text, (n, moved)
        alone = {x["notebook"]: x["seconds"] for x in r["alone"]}
        ratios = [statistics.median([x["seconds"] for x in r["room"] if x["notebook"] == nb and not x["error"]])
                  / alone[nb] for nb in r["notebooks"]]
        assert f"{min(ratios):.1f} to {max(ratios):.1f} times" in text, (n, ratios)
        stopped = [x for x in r["alone"] + r["room"] if x["error"] and "deadline" not in x["error"]]
        assert not stopped, stopped  # every notebook ran whole, or to the end of the run's time
    gemm = [runs[n]["live"][k]["matmul_tma_persistent"]["ms"] for n in ("8", "24") for k in ("alone_before", "room")]
    assert "{:.3f} ms alone, {:.3f} ms beside 8 participants; {:.3f} and {:.3f} ms".format(*gemm) in text
    seconds = [x["seconds"] for r in runs.values() for x in r["alone"]]
    assert f"took {min(seconds):.0f} to {max(seconds):.0f} s alone" in text
