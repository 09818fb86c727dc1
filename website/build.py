"""The course as a static website, offline: python website/build.py (what `make site` runs).

mystmd (Jupyter Book 2's engine) reads myst.yml's table of contents and the committed notebooks, executes
nothing, and writes each page as a MyST syntax tree (_build/site). Its HTML themes are downloaded from the
internet on first use, so this file renders those trees into plain HTML itself (_build/html): the notebooks'
recorded outputs (text, tables, PNG figures) as they were committed, math as MathML, widgets as a note. Solutions
are folded behind a notice that sends the reader to the exercise first; a search box (website/search.js) searches
mystmd's own index (myst.search.json) in the browser, with no server. The interview pack also comes as one
printable file (PRINT): the same page with every answer unfolded, no code cells, no scripts, its stylesheet inside
it. The build fails on mystmd's errors, on its warnings that a figure, file or link target is missing, on node types
this renderer does not know, and on outputs a reader of the site would miss.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "site"
OUT = ROOT / "_build" / "html"
STATIC = "_static"
PACK = "notebooks/interview_pack.html"
PRINT = "notebooks/interview_pack_print.html"  # the pack to print or take along: one file, every answer open
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def myst_site():
    """mystmd's content build; --strict fails on any error it reports (a missing page, a broken link)."""
    if not shutil.which("node"):
        sys.exit("website/build.py: mystmd runs on Node.js 20 or newer, and there is no `node` on PATH: "
                 "apt-get install nodejs (Debian's; .ci/run does), or your system's package")
    shutil.rmtree(SITE, ignore_errors=True)
    run = subprocess.run([sys.executable, "-m", "mystmd_py.main", "build", "--site", "--ci", "--strict"],
                         cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "MYSTMD_ALLOW_NODEENV": "no"})  # never a download
    print(run.stdout, end="")
    print(run.stderr, end="", file=sys.stderr)
    if run.returncode:
        sys.exit(f"website/build.py: mystmd failed (exit {run.returncode}): its errors are above")
    return missing(run.stdout + run.stderr)


# mystmd only warns about these, and --strict fails on errors alone: a figure, a file or a link target that is not
# there ("No target for internal reference "#fig-..." was found", "Cross reference target was not found: ...")
MISSING = re.compile(r"not found|no target|cannot find|could not find|could not load|does not exist|missing",
                     re.IGNORECASE)


def missing(log):
    """mystmd's warnings (the lines it marks ⚠️) that something a page points at is not there: the build fails on
    any."""
    found = sorted({line.strip() for line in ANSI.sub("", log).splitlines()
                    if line.lstrip().startswith("⚠") and MISSING.search(line)})  # not "- ⚠", the summary
    for line in found:
        print(f"website/build.py: mystmd warned that something is missing: {line}", file=sys.stderr)
    return found


class Page:
    """One page's HTML: its syntax tree rendered, links made relative to where the page lands."""

    def __init__(self, path, targets):
        self.path, self.targets, self.unknown, self.files = path, targets, set(), set()

    def href(self, url):
        if url.startswith("/") and not url.startswith("//"):  # internal: /slug#anchor or /file.png
            slug, _, anchor = url[1:].partition("#")
            target = self.targets.get(slug, f"{STATIC}/{slug}")
            rel = os.path.relpath(target, os.path.dirname(self.path) or ".")
            return rel + (f"#{anchor}" if anchor else "")
        local = Path(os.path.dirname(self.path)) / url.partition("#")[0]
        if ":" not in url and (ROOT / local).is_file():  # a file of the course the page names: copied beside it
            self.files.add(local)
        return url

    def children(self, node):
        return "".join(self.render(c) for c in node.get("children", []))

    def render(self, n):
        t, kids = n["type"], lambda: self.children(n)
        if n.get("visibility") == "remove" or t == "comment":
            return ""
        if t == "text":
            return html.escape(n["value"])
        simple = {"paragraph": "p", "strong": "strong", "emphasis": "em", "superscript": "sup",
                  "subscript": "sub", "delete": "del", "blockquote": "blockquote", "listItem": "li",
                  "tableRow": "tr", "summary": "summary", "caption": "figcaption", "admonitionTitle": "p",
                  "table": "table", "details": "details"}
        if t in simple:
            return f"<{simple[t]}>{kids()}</{simple[t]}>"
        if t in ("root", "span"):
            return kids()
        if t == "container":
            return f"<figure>{kids()}</figure>"
        if t == "block":
            cls = "cell" if n.get("kind") == "notebook-code" else "md"
            body = kids()
            return f'<details class="{cls}"><summary>code</summary>{body}</details>' if n.get(
                "visibility") == "hide" else f'<div class="{cls}">{body}</div>'
        if t == "heading":
            d = n["depth"]
            return f'<h{d} id="{html.escape(n.get("html_id", ""))}">{kids()}</h{d}>'
        if t == "inlineCode":
            return f"<code>{html.escape(n['value'])}</code>"
        if t == "code":
            lang = html.escape(n.get("lang", ""))
            return f'<pre class="code"><code class="language-{lang}">{html.escape(n["value"])}</code></pre>'
        if t == "list":
            tag = "ol" if n.get("ordered") else "ul"
            start = f' start="{n["start"]}"' if n.get("ordered") and n.get("start", 1) != 1 else ""
            return f"<{tag}{start}>{kids()}</{tag}>"
        if t == "link":
            url, text = n.get("url", ""), kids()
            if not url and n.get("identifier"):  # an <a id="..."></a> anchor in markdown
                return f'<a id="{html.escape(n["identifier"])}"></a>{text}'
            if url == "http://" + re.sub("<[^>]+>", "", text):  # a bare word such as ld.global, linkified
                return text
            return f'<a href="{html.escape(self.href(url))}">{text}</a>'
        if t == "image":
            return f'<img src="{html.escape(self.href(n["url"]))}" alt="{html.escape(n.get("alt", ""))}">'
        if t in ("math", "inlineMath"):  # mystmd's KaTeX HTML carries MathML, which browsers draw natively
            return n.get("html") or f"<code>{html.escape(n['value'])}</code>"
        if t == "tableCell":
            tag = "th" if n.get("header") else "td"
            return f"<{tag}>{kids()}</{tag}>"
        if t == "admonition":
            return f'<aside class="admonition {n.get("kind", "note")}">{kids()}</aside>'
        if t in ("thematicBreak", "break"):
            return "<hr>" if t == "thematicBreak" else "<br>"
        if t == "html":
            return n["value"]
        if t == "outputs":
            return f'<div class="outputs">{kids()}</div>' if n.get("children") else ""
        if t == "output":
            return self.output(n.get("jupyter_data") or {})
        self.unknown.add(t)
        return kids()

    def output(self, out):
        kind = out.get("output_type")
        if kind == "stream":
            return f'<pre class="out {out.get("name", "")}">{html.escape(ANSI.sub("", out["text"]))}</pre>'
        if kind == "error":
            return f'<pre class="out stderr">{html.escape(ANSI.sub("", chr(10).join(out["traceback"])))}</pre>'
        data = out.get("data", {})

        def content(mime):
            item = data[mime]
            if "content" in item:
                return item["content"]
            return (SITE / "public" / item["path"].lstrip("/")).read_text()

        if "application/vnd.jupyter.widget-view+json" in data:
            return ('<p class="widget">An interactive widget (sliders) sits here: open the notebook in '
                    "JupyterLab to use it.</p>")
        for mime in ("image/png", "image/jpeg", "image/svg+xml"):
            if mime in data:
                alt = html.escape(content("text/plain")) if "text/plain" in data else "figure"
                return f'<img class="out" src="{html.escape(self.href(data[mime]["path"]))}" alt="{alt}">'
        if "text/html" in data:
            return f'<div class="out html">{content("text/html")}</div>'
        if "text/plain" in data:
            return f'<pre class="out">{html.escape(ANSI.sub("", content("text/plain")))}</pre>'
        return ""


class PrintPage(Page):
    """The interview pack for paper: every fold open (a closed <details> prints as its summary alone), code cells
    and their outputs (the self-test widgets) and the self-test's introduction left out."""

    def render(self, n):
        if n["type"] == "block" and (n.get("kind") == "notebook-code" or any(
                k.get("type") == "heading" and words(k) == "Self-test" for k in n.get("children", []))):
            return ""  # the self-test's cells and the words that introduce them: nothing to do on paper
        if n["type"] == "details":
            return f"<details open>{self.children(n)}</details>"
        return super().render(n)


def heading(content):
    """A page's title as its first heading, unless its content starts with it."""
    title = content["frontmatter"].get("title", content["slug"])
    return "" if content["frontmatter"].get("content_includes_title") else f"<h1>{html.escape(title)}</h1>"


def print_page(content, targets):
    """PRINT, one self-contained HTML file: the pack's page rendered by PrintPage, website/print.css inside it."""
    page = PrintPage(PRINT, targets)
    body = page.render(content["mdast"])
    css = (ROOT / "website" / "print.css").read_text()
    title = content["frontmatter"].get("title", content["slug"])
    (OUT / PRINT).write_text(
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} (printable)</title>'
        f"<style>{css}</style></head>\n<body><main>{heading(content)}{body}</main></body></html>\n")
    return page.unknown


def print_notice():
    """What the pack's page says first: where its printable copy is."""
    href = os.path.relpath(PRINT, os.path.dirname(PACK))
    return (f'<aside class="admonition print-notice"><p>To print it or take it along: <a href="{html.escape(href)}">'
            "the pack as one HTML file</a>, with every answer open and the numbers card.</p></aside>")


def nav(pages, targets, here):
    items = []
    for p in pages:
        if "slug" not in p:
            items.append(f'<li class="group">{html.escape(p["title"])}</li>')
            continue
        href = os.path.relpath(targets[p["slug"]], os.path.dirname(here) or ".")
        cur = ' class="here"' if targets[p["slug"]] == here else ""
        items.append(f'<li{cur}><a href="{html.escape(href)}">{html.escape(p["title"])}</a></li>')
    return "<ul>" + "".join(items) + "</ul>"


def solution_notice(path):
    """What a solution's page says before it shows anything: the answers are folded behind it."""
    exercise = os.path.relpath(str(Path("exercises") / Path(path).name), os.path.dirname(path))
    return ('<aside class="admonition warning solution-notice"><p><strong>A worked solution.</strong> '
            f'Try <a href="{html.escape(exercise)}">the exercise</a> first (open it in JupyterLab: its check tells '
            "you what is wrong); the solution below answers it.</p></aside>")


def words(node):
    """The text of a syntax tree, for the search index."""
    if node.get("type") in ("text", "inlineCode", "code"):
        return node.get("value", "")
    return " ".join(filter(None, (words(c) for c in node.get("children", []))))


def search_index(targets, contents):
    """The site's search: mystmd's index (myst.search.json, what its book theme searches: one record per heading
    and paragraph) with each URL pointed at this site's page, as a script (a page opened from disk may not fetch
    JSON); website/search.js searches it in the browser, no server. A page mystmd leaves out of its index
    (workshop/README.md, slug "readme") gets one record of its whole text."""
    records = []
    for r in json.loads((SITE / "myst.search.json").read_text())["records"]:
        slug, _, anchor = r["url"].lstrip("/").partition("#")
        page = targets.get(slug or next(s for s, t in targets.items() if t == "index.html"))
        if page is None:
            continue
        title = " > ".join(v for k, v in sorted(r["hierarchy"].items()) if v)
        records.append({"t": title, "c": r.get("content", ""), "u": page + (f"#{anchor}" if anchor else "")})
    indexed = {r["u"].partition("#")[0] for r in records}
    for c in contents:
        if targets[c["slug"]] not in indexed:
            records.append({"t": c["frontmatter"].get("title", c["slug"]), "c": words(c["mdast"]),
                            "u": targets[c["slug"]]})
    (OUT / STATIC / "search-index.js").write_text("window.COURSE_SEARCH = " + json.dumps(records) + ";\n")
    shutil.copy(ROOT / "website" / "search.js", OUT / STATIC / "search.js")
    return records


def render_site():
    config = json.loads((SITE / "config.json").read_text())
    project = config["projects"][0]
    contents = [json.loads(f.read_text()) for f in sorted((SITE / "content").glob("*.json"))]
    # each page lands where its source sits: notebooks/03_tma_descriptors.ipynb -> notebooks/03_tma_descriptors.html
    targets = {c["slug"]: "index.html" if c["slug"] == project["index"]
               else str(Path(c["location"].lstrip("/")).with_suffix(".html")) for c in contents}
    shutil.rmtree(OUT, ignore_errors=True)
    shutil.copytree(SITE / "public", OUT / STATIC)
    shutil.copy(ROOT / "website" / "style.css", OUT / STATIC / "style.css")
    home = [{"slug": project["index"], "title": "Home"}] + project["pages"]
    search_index(targets, contents)
    unknown = set()
    for c in contents:
        path = targets[c["slug"]]
        page = Page(path, targets)
        title = c["frontmatter"].get("title", c["slug"])
        css = os.path.relpath(f"{STATIC}/style.css", os.path.dirname(path) or ".")
        root = os.path.relpath(".", os.path.dirname(path) or ".")
        body = page.render(c["mdast"])
        if path.startswith("solutions/"):
            body = solution_notice(path) + f'<details class="solution"><summary>Show the worked solution</summary>{body}</details>'
        if path == PACK:
            body = print_notice() + body
            unknown |= print_page(c, targets)
        unknown |= page.unknown
        for f in page.files:
            (OUT / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / f, OUT / f)
        (OUT / path).parent.mkdir(parents=True, exist_ok=True)
        (OUT / path).write_text(
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{html.escape(title)}</title><link rel="stylesheet" href="{css}">'
            f'<script defer src="{root}/{STATIC}/search-index.js"></script>'
            f'<script defer src="{root}/{STATIC}/search.js"></script></head>\n'
            f'<body data-root="{root}"><nav><p class="project">{html.escape(project["title"])}</p>'
            f'<input type="search" id="search" placeholder="Search the course" aria-label="Search the course">'
            f'<ol id="search-results"></ol>{nav(home, targets, path)}</nav>\n'
            f'<main>{heading(c)}{body}</main></body></html>\n')
    if unknown:  # a kind of node this renderer does not know yet: its text is kept, its form is not
        print(f"website/build.py: rendered only the children of unknown node types: {sorted(unknown)}",
              file=sys.stderr)
    print(f"{len(contents)} pages in {OUT.relative_to(ROOT)}/ (open {OUT.relative_to(ROOT)}/index.html)")
    return unknown


def unseen_outputs():
    """What a reader of the site would miss in the committed notebooks (kernels.lab.show.unseen): a figure left
    as its text, a listing a cell dropped. The build fails on any."""
    sys.path.insert(0, str(ROOT))
    from kernels.lab.show import unseen
    found = [f"{p.relative_to(ROOT)}: {problem}" for d in ("notebooks", "exercises", "solutions")
             for p in sorted((ROOT / d).glob("*.ipynb")) for problem in unseen(json.loads(p.read_text()))]
    for line in found:
        print(f"website/build.py: {line}", file=sys.stderr)
    return found


def not_committed():
    """The notebooks whose file is not the last commit's (a learner ran a lesson and JupyterLab saved it, or one was
    deleted): [] where all are, or outside a git checkout."""
    run = subprocess.run(["git", "diff", "--name-only", "HEAD", "--", "notebooks", "exercises", "solutions"],
                         cwd=ROOT, capture_output=True, text=True)
    return [f for f in run.stdout.splitlines() if f.endswith(".ipynb")] if run.returncode == 0 else []


def committed_copy(changed, into):
    """The course's tracked files copied to ``into``, the ``changed`` notebooks as the last commit holds them."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if name in changed:
            target.write_bytes(subprocess.run(["git", "show", f"HEAD:{name}"], cwd=ROOT, capture_output=True,
                                              check=True).stdout)
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, target)


def build():
    lost = myst_site()
    return 1 if render_site() or unseen_outputs() or lost else 0


def build_from_the_commit():
    """The site shows the outputs the course committed (README: the H200's), whatever this checkout's notebooks
    hold now: where one differs from the commit, the build runs in a copy with the committed notebooks."""
    global ROOT, SITE, OUT
    changed = not_committed()
    if not changed:
        return build()
    import tempfile
    for name in changed:
        print(f"website/build.py: {name} is not as committed (run or edited since): the site shows the committed one")
    here = OUT
    with tempfile.TemporaryDirectory(prefix="course-site-") as tmp:
        committed_copy(set(changed), Path(tmp))
        ROOT = Path(tmp)
        SITE, OUT = ROOT / "_build" / "site", ROOT / "_build" / "html"
        code = build()
        shutil.rmtree(here, ignore_errors=True)
        shutil.copytree(OUT, here)
    print(f"the site is in {here}")
    return code


if __name__ == "__main__":
    sys.exit(build_from_the_commit())
