"""`make site`: the course as a static website (website/build.py, mystmd under myst.yml), built offline from
the committed notebooks. Every lesson, exercise, solution (behind a notice) and course document is a page, the
list taken from the files, not from myst.yml; the lessons' PNG figures are on their pages, the H200 outputs are
there as recorded, answers stay folded, links go to pages (never a notebook's JSON), and the search box finds them;
the interview pack also comes as one printable file with every answer open.

Needs Node.js (mystmd runs on it): skipped, saying why, without `node`, except under COURSE_BROWSER_TEST=1
(.ci/run, which installs Debian's nodejs), where a missing node fails."""
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "_build" / "html"
# every page the site must hold, from the files themselves (a new lesson, exercise or solution that myst.yml's table
# of contents does not take is a page missing here): the lessons, exercises and solutions, the glossary, the
# interview pack, the instructor guide and its troubleshooting page
SOURCES = ["README.md"] + sorted(str(p.relative_to(ROOT)) for d, pattern in
                                 [("notebooks", "*.ipynb"), ("notebooks", "*.md"), ("exercises", "*.ipynb"),
                                  ("solutions", "*.ipynb"), ("workshop", "*.md")] for p in (ROOT / d).glob(pattern))
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb") if re.match(r"\d\d_", p.name))
PRINT = "notebooks/interview_pack_print.html"  # one file, every answer open: the pack to print or take along
MISSING = None if shutil.which("node") else "no `node` on PATH (mystmd runs on Node.js 20+: apt-get install nodejs)"
pytestmark = pytest.mark.skipif(MISSING is not None and os.environ.get("COURSE_BROWSER_TEST") != "1",
                                reason=MISSING or "")


@pytest.fixture(scope="module")
def site():
    if MISSING:
        pytest.fail(f"COURSE_BROWSER_TEST=1 but {MISSING}", pytrace=False)
    run = subprocess.run([sys.executable, "website/build.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, f"the site build failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


def page(source):
    target = "index.html" if source == "README.md" else str(Path(source).with_suffix(".html"))
    path = OUT / target
    assert path.exists(), f"{source} has no page ({target})"
    return path.read_text()


def text(markup):
    return html.unescape(re.sub(r"<[^>]+>", "", markup)).replace("\u2019", "'")  # mystmd curls apostrophes


def test_build_is_clean(site):
    assert "unknown node types" not in site.stderr, site.stderr
    assert "⛔" not in site.stdout + site.stderr, "mystmd reported an error:\n" + site.stdout + site.stderr


@pytest.mark.parametrize("source", SOURCES)
def test_every_page_is_there_with_its_title(site, source):
    markup = page(source)
    if source.endswith(".ipynb"):
        first = "".join(json.loads((ROOT / source).read_text())["cells"][0]["source"])
    else:
        first = (ROOT / source).read_text()
    title = next(line[2:].strip() for line in first.splitlines() if line.startswith("# "))
    title = title.replace("`", "").replace("**", "")  # the markdown of code and bold, which the page draws
    assert text(title) in text(markup), f"{source}: its title {title!r} is not on its page"


def test_the_pages_are_the_files(site):
    """Every lesson 00-NN, exercise and solution is a page, and every page comes from one of the course's files."""
    assert len(LESSONS) >= 9 and all((ROOT / d / f"{s}.ipynb").exists() for d in ("exercises", "solutions") for s in LESSONS)
    pages = {str(p.relative_to(OUT)) for p in OUT.rglob("*.html") if p.relative_to(OUT).parts[0] != "_static"}
    pages.discard(PRINT)  # the interview pack's printable copy: test_the_pack_prints_with_every_answer_open
    expected = {"index.html" if s == "README.md" else str(Path(s).with_suffix(".html")) for s in SOURCES}
    assert pages == expected, f"pages without a file: {sorted(pages - expected)}; files without a page: " \
                              f"{sorted(expected - pages)} (myst.yml's toc)"


@pytest.mark.parametrize("lesson", LESSONS)
def test_solutions_are_behind_a_notice(site, lesson):
    """A solution's page first says what it is and sends the reader to the exercise; the answer is folded."""
    markup = page(f"solutions/{lesson}.ipynb")
    main = markup[markup.index("<main>"):]
    notice = re.search(r'<aside class="admonition warning solution-notice">(.*?)</aside>', main, re.S)
    assert notice and main.index(notice.group(0)) < main.index("<details"), f"{lesson}: no notice before the solution"
    assert f'href="../exercises/{lesson}.html"' in notice.group(1), f"{lesson}: the notice does not link the exercise"
    fold = main[notice.end():]
    assert fold.startswith('<details class="solution"><summary>') and fold.rstrip().endswith(
        "</details></main></body></html>"), f"{lesson}: the solution is not folded behind the notice"
    code = json.loads((ROOT / "solutions" / f"{lesson}.ipynb").read_text())["cells"]
    solved = next("".join(c["source"]) for c in code if "### BEGIN SOLUTION" in "".join(c["source"]))
    first = next(line for line in solved.split("### BEGIN SOLUTION")[1].splitlines() if line.strip())
    assert text(first.strip()) in text(fold), f"{lesson}: the solution's code is not on its page"


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_figure_of_a_lesson_is_on_its_page(site, lesson):
    """Every PNG output the notebook holds appears on its page, and each image the page shows is in the build."""
    cells = json.loads((ROOT / "notebooks" / f"{lesson}.ipynb").read_text())["cells"]
    pngs = sum("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", []))
    markup = page(f"notebooks/{lesson}.ipynb")
    images = re.findall(r'<img class="out" src="([^"]+)"', markup)
    assert len(images) == pngs, f"{lesson}: {pngs} PNG outputs in the notebook, {len(images)} on the page"
    for src in images:
        file = (OUT / "notebooks" / src).resolve()
        assert file.is_file() and file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{lesson}: {src} missing or not a PNG"


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_h200_outputs_are_on_the_page(site, lesson):
    """The committed outputs, as recorded: every stream line the notebook printed is on the page."""
    cells = json.loads((ROOT / "notebooks" / f"{lesson}.ipynb").read_text())["cells"]
    printed = [line.strip() for c in cells for o in c.get("outputs", []) if o.get("output_type") == "stream"
               for line in "".join(o["text"]).splitlines() if line.strip()]
    assert printed, f"{lesson} has no outputs: it is committed unexecuted"
    shown = text(page(f"notebooks/{lesson}.ipynb"))
    lost = [line for line in printed if line not in shown]
    assert not lost, f"{lesson}: {len(lost)} printed lines are not on the page, e.g. {lost[:3]}"
    assert "NVIDIA H200" in shown, f"{lesson}: the page does not show the H200 it was run on"


def test_lesson_00_says_where_its_figures_come_from(site):
    assert "measured live on NVIDIA H200" in text(page("notebooks/00_memory_wall.ipynb"))


def test_links_between_pages_resolve(site):
    for path in OUT.rglob("*.html"):
        for href in re.findall(r'href="([^"#:]+)(?:#[^"]*)?"', path.read_text()):
            assert (path.parent / html.unescape(href)).exists(), f"{path.relative_to(OUT)} links to missing {href}"



def test_no_page_links_to_a_notebooks_json():
    """A link to a course notebook goes to its page: a notebook left out of myst.yml's toc is linked as its raw JSON
    (_static/NAME-hash.ipynb), as lessons 07 and 08 were from the README, the glossary and the interview pack."""
    raw = [(str(path.relative_to(OUT)), href) for path in OUT.rglob("*.html")
           for href in re.findall(r'href="([^"#]+\.ipynb)(?:#[^"]*)?"', path.read_text())]
    assert not raw, f"{len(raw)} links to a notebook's JSON where its page exists, e.g. {raw[:5]}"


@pytest.mark.parametrize("source", [s for s in SOURCES if s.endswith(".ipynb")])
def test_folded_answers_stay_folded(site, source):
    """Each <details> of the notebook is a fold on its page that holds its answer (a `</details>` left at the end of
    the answer's line made an empty fold and the answer showed below it)."""
    cells = json.loads((ROOT / source).read_text())["cells"]
    folds = sum("".join(c["source"]).count("<details>") for c in cells if c["cell_type"] == "markdown")
    markup = page(source)
    if source.startswith("solutions/"):
        markup = markup.replace('<details class="solution">', "", 1)
    assert markup.count("<details>") == folds, f"{source}: {folds} folds in the notebook, {markup.count('<details>')} on the page"
    empty = re.findall(r"<summary>((?:(?!</summary>).)*)</summary></details>", markup)
    assert not empty, f"{source}: folds with nothing in them, their answers shown unfolded: {empty[:3]}"


def test_the_pack_prints_with_every_answer_open(site):
    """The interview pack's printable copy: one self-contained file (its stylesheet inside, no script), every answer
    of the notebook there and open, the numbers card with its recorded device and date; the pack's page links it."""
    cells = json.loads((ROOT / "notebooks" / "interview_pack.ipynb").read_text())["cells"]
    folds = sum("".join(c["source"]).count("<details>") for c in cells if c["cell_type"] == "markdown")
    markup = (OUT / PRINT).read_text()
    assert folds >= 100 and markup.count("<details open>") == folds, \
        f"{folds} answers in the pack, {markup.count('<details open>')} open on the printable page"
    assert "<details>" not in markup, "a closed fold on the printable page prints as its summary alone"
    assert "<style>" in markup and not re.search(r"<script|<link|<img", markup), "the printable page is not one file"
    assert "@media print" in markup
    title = re.search(r"<h1>(.+?)</h1>", page("notebooks/interview_pack.ipynb")).group(1)
    assert f"<main><h1>{title}</h1>" in markup, "the printed pack starts without its title"
    shown = text(markup)
    run = json.loads((ROOT / "results" / "nvidia-h200.json").read_text())
    assert "Numbers to know" in shown and f"recorded on {run['device']}, {run['date']}" in shown
    for c in cells:
        source = "".join(c["source"])
        if c["cell_type"] == "markdown" and "<details>" in source:  # every answer's text, e.g. its source line
            for line in re.findall(r"^\*Source:\* (.+)$", source, re.M):
                words = re.sub(r"[*`]", "", re.sub(r"\[([^]]+)\]\([^)]+\)", r"\1", line))  # the markdown drawn
                assert text(words) in shown, f"an answer is not on the printable page: its source {line!r}"
    assert "Pick a topic and a level" not in shown and "SelfTest(" not in shown, "the self-test's cells are on paper"
    assert 'href="interview_pack_print.html"' in page("notebooks/interview_pack.ipynb")


def test_the_landing_page_shows_the_recorded_device_and_date(site):
    """The README's "recorded on ..." is the label of the run in results/, and the page shows it whole."""
    shown = text(page("README.md"))
    runs = [json.loads(p.read_text()) for p in sorted((ROOT / "results").glob("*.json"))]
    assert runs and any(f"recorded on {r['device']}, {r['date']}" in shown for r in runs), \
        f"the landing page shows no recorded label of results/: {re.findall(r'recorded on [^.;|]{0,40}', shown)}"
    assert not re.search(r"recorded on\W*,", shown), "a placeholder vanished from the page: 'recorded on , '"


@pytest.mark.parametrize("source", [s for s in SOURCES if s.endswith(".ipynb")])
def test_instruction_tables_line_up(site, source):
    """isa.table's columns on the page: each row as long as its header, each number under its kernel's name (a
    label longer than the label column, "  cp.async.bulk.tensor store", pushed its row right)."""
    for block in re.findall(r'<pre class="out[^"]*">(.*?)</pre>', page(source), re.S):
        lines = html.unescape(block).splitlines()
        for i, header in enumerate(lines):
            if not header.startswith("instruction "):
                continue
            for row in lines[i + 1:]:
                if not re.search(r"\s\d+$", row):
                    break
                assert len(row) == len(header), f"{source}: a row out of line with its header:\n{header}\n{row}"


def test_the_search_box_has_every_page(site):
    """The site's search (website/search.js over mystmd's myst.search.json): each page has the box and the scripts,
    and the index points at the pages of this site."""
    index = (OUT / "_static" / "search-index.js").read_text()
    records = json.loads(index[index.index("["):index.rindex("]") + 1])
    pages = {r["u"].partition("#")[0] for r in records}
    for source in SOURCES:
        target = "index.html" if source == "README.md" else str(Path(source).with_suffix(".html"))
        assert target in pages, f"{source}: its page is not in the search index"
        markup = page(source)
        assert 'id="search"' in markup and "search-index.js" in markup and "search.js" in markup, f"{source}: no search box"
    for r in records:
        assert (OUT / r["u"].partition("#")[0]).is_file(), f"the search index points at a missing page: {r['u']}"
    assert (OUT / "_static" / "search.js").is_file()


def _build_module():
    """website/build.py as a module (it is a script, not part of the package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("site_build", ROOT / "website" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build


def _commit_all(repo):
    """``repo`` made a git repository holding everything in it as one commit."""
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_the_build_fails_when_mystmd_warns_something_is_missing():
    """mystmd only warns about a missing figure or link target and --strict fails on errors alone: build.py fails."""
    build = _build_module()
    log = ("⚠️  notebooks/07_shapes_and_waves.ipynb:12 No target for internal reference \"#fig-waves\" was found.\n"
           "⚠️  workshop/README.md Cross reference target was not found: fig-room\n"
           "⚠️  exercises/00_memory_wall.ipynb Duplicate identifier in project \"99917698\"\n"
           "  - ⚠️  Cross reference target was not found: fig-room\n📖 Built README.md in 1.2 s.\n")
    found = build.missing(log)
    assert len(found) == 2 and "#fig-waves" in found[0] and "fig-room" in found[1], found
    assert build.missing("📖 Built README.md in 1.2 s.\n") == []


def test_a_notebook_run_since_the_commit_is_shown_as_committed(tmp_path):
    """JupyterLab saves a lesson a learner ran: the site still shows the committed outputs (README: the H200's).
    build.py lists the notebooks that differ from the commit, and its copy of the course holds them as committed."""
    build = _build_module()
    repo = tmp_path / "course"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "notebooks" / "00_x.ipynb").write_text('{"outputs": "[hopper] H200"}')
    (repo / "README.md").write_text("the course")
    _commit_all(repo)
    (repo / "notebooks" / "00_x.ipynb").write_text('{"outputs": "[cpu] run since"}')
    build.ROOT = repo
    assert build.not_committed() == ["notebooks/00_x.ipynb"]
    copy = tmp_path / "copy"
    build.committed_copy({"notebooks/00_x.ipynb"}, copy)
    assert (copy / "notebooks" / "00_x.ipynb").read_text() == '{"outputs": "[hopper] H200"}'
    assert (copy / "README.md").read_text() == "the course"
    subprocess.run(["git", "checkout", "--", "notebooks"], cwd=repo, check=True)
    assert build.not_committed() == []


def test_the_site_of_a_checkout_where_a_lesson_was_run_shows_the_committed_outputs(tmp_path):
    """The same, as a learner meets it: a copy of the course committed, lesson 00's banner output rewritten as a
    run in CPU mode would leave it, `python website/build.py`: the page shows the committed banner."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
    course = tmp_path / "course"
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (course / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, course / name)
    _commit_all(course)
    lesson = course / "notebooks" / "00_memory_wall.ipynb"
    nb = json.loads(lesson.read_text())
    banner = next(o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
                  if o.get("output_type") == "stream")
    committed = "".join(banner["text"]).splitlines()[0]
    banner["text"] = ["[cpu] a learner's run, saved by JupyterLab\n"]
    lesson.write_text(json.dumps(nb))
    run = subprocess.run([sys.executable, "website/build.py"], cwd=course, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "notebooks/00_memory_wall.ipynb is not as committed" in run.stdout
    shown = text((course / "_build" / "html" / "notebooks" / "00_memory_wall.html").read_text())
    assert committed in shown and "a learner's run" not in shown


def test_the_search_ranks_a_section_named_by_the_words_first(site):
    """website/search.js, run by node over the built index: "swizzle" finds lesson 06's swizzle section first (it
    was result 24, after every page that mentions the word earlier in the site's order), "mbarrier" the glossary's
    entry or a section whose heading names it, and each section is listed once."""
    script = ("global.window = {}; require(process.argv[1]); const {rank} = require(process.argv[2]);"
              "const q = JSON.parse(process.argv[3]);"
              "console.log(JSON.stringify(q.map((w) => rank(window.COURSE_SEARCH, w).map((r) => [r.u, r.t]))));")
    queries = ["swizzle", "mbarrier", "the"]
    run = subprocess.run(["node", "-e", script, str(OUT / "_static" / "search-index.js"),
                          str(ROOT / "website" / "search.js"), json.dumps(queries)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    swizzle, mbarrier, common = json.loads(run.stdout)
    assert swizzle[0][0] == "notebooks/06_tma_by_hand.html#id-4-swizzle-and-banks", swizzle[:3]
    assert "mbarrier" in mbarrier[0][1].split(" > ")[-1].lower(), mbarrier[:3]
    assert len(common) == 30 and len({u for u, _ in common}) == 30
