"""`make site`: the course as a static website (website/build.py, mystmd under myst.yml), built offline from
the committed notebooks. Every page the table of contents promises exists, the lessons' PNG figures are on
their pages, and the H200 outputs are there as recorded.

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
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("0[0-6]_*.ipynb"))
# pages whose files may not exist yet: each must have a page exactly when its file is there
OPTIONAL = ["notebooks/interview_pack.ipynb", "workshop/README.md", "workshop/troubleshooting.md"]
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


@pytest.mark.parametrize("source", ["README.md", "notebooks/glossary.md"]
                         + [f"notebooks/{s}.ipynb" for s in LESSONS] + [f"exercises/{s}.ipynb" for s in LESSONS]
                         + [f for f in OPTIONAL if (ROOT / f).exists()])
def test_every_page_is_there_with_its_title(site, source):
    markup = page(source)
    if source.endswith(".ipynb"):
        first = "".join(json.loads((ROOT / source).read_text())["cells"][0]["source"])
    else:
        first = (ROOT / source).read_text()
    title = next(line[2:].strip() for line in first.splitlines() if line.startswith("# "))
    title = title.replace("`", "").replace("**", "")  # the markdown of code and bold, which the page draws
    assert text(title) in text(markup), f"{source}: its title {title!r} is not on its page"


@pytest.mark.parametrize("source", OPTIONAL)
def test_pages_of_files_that_may_come_later(site, source):
    """The interview pack and the instructor guide: a page when the file exists, and none when it does not."""
    target = OUT / Path(source).with_suffix(".html")
    there = (ROOT / source).exists()
    assert target.exists() == there, f"{source} exists: {there}; its page exists: {target.exists()}"


def test_solutions_stay_off_the_site(site):
    assert not (OUT / "solutions").exists(), "the site would give the exercises' answers away"


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
