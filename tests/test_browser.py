"""The widgets in a real browser: JupyterLab 4 in headless Chromium, driven by Playwright, with
JupyterLab's default settings (comms over subshells included). For each lesson notebook: open it,
run all cells, then move every slider of its widget to new values (both extremes; a slider at its
maximum moves left) and after every move check what a learner sees: the output changed, every
figure is fully drawn (a real image, not blank, its data in colour), a refusal is the course's
one-line message, and no traceback appears - neither on the page nor in any kernel message on the
websocket (a late traceback can miss the page text). Last, three quick presses on one slider: the
queued callbacks must still leave a whole drawing. COURSE_BROWSER_ROUNDS=N tours every slider N times.
The interview pack's self-test is driven too: no answer on the page before Reveal, then answer, score, next;
and lesson 06's dropdown explorers, every choice of every dropdown.

Skipped only when Chromium or Playwright are missing; with COURSE_BROWSER_TEST=1 (set by .ci/run)
a missing one fails instead. A screenshot of each lesson's widget after a slider move is kept under
test-artifacts/browser/ (git-ignored), with a JSON summary of every move."""
import contextlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REFUSAL_LIMITS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("COURSE_BROWSER_TEST") == "1"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# figures a widget draws at a setting that runs (a refused one draws none): lesson 04 adds the model's timeline
FIGURES = {"04": 2}
RUN_ALL_S, MOVE_S = 600, 180
ROUNDS = int(os.environ.get("COURSE_BROWSER_ROUNDS", "1"))  # tours of every slider per lesson (more: hunt races)
QUIET_S = 0.8  # a move is over when every message the page sent is answered and the websocket was quiet this long


def _missing():
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -r requirements.txt)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


MISSING = _missing()
pytestmark = pytest.mark.skipif(MISSING is not None and not REQUIRED, reason=MISSING or "")


@pytest.fixture(scope="module", autouse=True)
def _required():
    if MISSING:  # only reached with COURSE_BROWSER_TEST=1: a missing browser fails the test, not skips it
        pytest.fail(f"COURSE_BROWSER_TEST=1 but {MISSING}", pytrace=False)


# ---- the kernel's messages, as the page's websockets carry them -----------------------------------

def parse(payload):
    """A Jupyter message from a kernel websocket frame: JSON (legacy) or the v1 binary framing
    (a count of offsets, the offsets, then channel, header, parent header, metadata, content, buffers)."""
    if isinstance(payload, str):
        return json.loads(payload)
    n = struct.unpack_from("<Q", payload, 0)[0]
    offsets = list(struct.unpack_from(f"<{n}Q", payload, 8)) + [len(payload)]
    parts = [payload[offsets[i]:offsets[i + 1]] for i in range(n)]
    msg = {"channel": parts[0].decode()}
    for key, part in zip(("header", "parent_header", "metadata", "content"), parts[1:5]):
        msg[key] = json.loads(part)
    return msg


class Wire:
    """Every kernel message on the page's websockets: which requests are still unanswered, when the
    last frame passed, and every error or traceback the kernel sent."""

    def __init__(self, page):
        self.sent, self.answered, self.errors = {}, set(), []
        self.last = time.monotonic()
        self.replies = []
        page.on("websocket", self._watch)

    def _watch(self, ws):
        if "/api/kernels/" not in ws.url:
            return
        ws.on("framesent", lambda p: self._frame(p, sent=True))
        ws.on("framereceived", lambda p: self._frame(p, sent=False))

    def _frame(self, payload, sent):
        self.last = time.monotonic()
        try:
            msg = parse(payload)
        except (ValueError, struct.error, UnicodeDecodeError):
            return
        kind = msg.get("header", {}).get("msg_type")
        if sent:
            if msg.get("channel") == "shell":
                self.sent[msg["header"]["msg_id"]] = kind
            return
        content, parent = msg.get("content", {}), msg.get("parent_header", {})
        if kind == "status" and content.get("execution_state") == "idle":
            self.answered.add(parent.get("msg_id"))
        elif kind == "execute_reply":
            self.replies.append(content.get("status"))
        if kind == "error":
            self.errors.append(f"{content.get('ename')}: {content.get('evalue')}")
        elif kind == "stream" and content.get("name") == "stderr" and "Traceback" in content.get("text", ""):
            self.errors.append(content["text"][-500:])

    def pending(self):
        return [m for m in self.sent if m not in self.answered]

    def settle(self, page, timeout):
        """Wait until every request the page sent is answered and nothing passed for QUIET_S."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            page.wait_for_timeout(100)
            if not self.pending() and time.monotonic() - self.last > QUIET_S:
                return
        raise AssertionError(f"kernel still busy after {timeout} s: {[self.sent[m] for m in self.pending()]}")


# ---- JupyterLab and Chromium -----------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """jupyter lab on 127.0.0.1 with a token, serving a copy of notebooks/ (so nothing can overwrite the
    committed outputs) with its own settings and runtime folders; default settings except no news popup."""
    home = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", home / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    port, token = _free_port(), os.urandom(12).hex()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               COURSE_PROGRESS=str(home / "interview.json"),  # the pack's scores: this lab's own file
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    log = open(home / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={home}", "--LabApp.expose_app_in_browser=True"],
        cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if server.poll() is not None:
                raise RuntimeError(f"jupyter lab exited:\n{(home / 'lab.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("jupyter lab did not answer within 120 s")
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


@contextlib.contextmanager
def _lab_page(browser, base, token):
    """A page of its own on the lab and the websocket watch over it (page, wire); closed, and every kernel it
    started shut down, however the test ends."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    try:
        yield page, Wire(page)
    finally:
        page.close()
        _shutdown_kernels(base, token)


def _shutdown_kernels(base, token):
    for session in json.load(urllib.request.urlopen(f"{base}/api/sessions?token={token}")):
        req = urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(req).close()


# ---- what a learner sees ---------------------------------------------------------------------------

NOTEBOOK = "window.jupyterapp.shell.currentWidget"
KERNEL_IDLE = (f"() => {{ const nb = window.jupyterapp && {NOTEBOOK}; const s = nb && nb.sessionContext;"
               f" const k = s && s.session && s.session.kernel; return !!k && k.status === 'idle'; }}")

# every <img> of the widget's output: its natural size, and how its pixels look: how many distinct
# colours (a blank image has one) and how many are clearly coloured (the course's figures draw their
# data - bars, points, timeline - in colour; axes, ticks and text alone are black and grey)
LOOK = """(out) => [...out.querySelectorAll('img')].map(img => {
  const r = {w: img.naturalWidth, h: img.naturalHeight, complete: img.complete, colours: 0, coloured: 0};
  if (!img.complete || !img.naturalWidth) return r;
  const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data; const seen = new Set();
  for (let i = 0; i < d.length; i += 4) {
    if (seen.size < 256) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    if (Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) r.coloured++;
  }
  r.colours = seen.size; return r; })"""


def _slider_value(slider):
    return slider.locator(".widget-readout").inner_text().strip()


def _tour(count, index):
    """Where one slider goes from ``index``, one key press each: both ends (Home, End), and a slider that
    ends at its maximum moves one step left; each target differs from the one before."""
    last = count - 1
    if index == 0:
        return [last, 0]
    return [0, last] + ([last - 1] if last > 1 else [])


def look(out, lesson, cfg):
    """What is wrong with the widget's output now (empty when nothing): its figures, refusal, errors."""
    problems = []
    text = out.inner_text()
    images = out.evaluate(LOOK)
    if re.search(r"Traceback|Error displaying widget|Exception in interact", text):
        problems.append(f"traceback or widget error on the page: {text[-600:]}")
    refusals = [line for line in text.splitlines() if line.startswith("cannot run ")]
    want = ", ".join(f"{k}={v}" for k, v in cfg.items())
    for line in refusals:
        m = re.fullmatch(r"cannot run (.*?): (.+)", line)
        if not m or m.group(1) != want or not any(limit in m.group(2) for limit in REFUSAL_LIMITS):
            problems.append(f"not the course's refusal for {want}: {line!r}")
    expected = 0 if refusals else FIGURES.get(lesson, 1)
    if len(images) != expected:
        problems.append(f"{len(images)} figure(s) shown, {expected} expected")
    for i, im in enumerate(images):
        if not (im["complete"] and im["w"] > 0 and im["h"] > 0):
            problems.append(f"figure {i} is not a loaded image: {im}")
        elif im["colours"] < 2:
            problems.append(f"figure {i} is blank (one colour, {im['w']}x{im['h']})")
        elif im["coloured"] < 50:
            problems.append(f"figure {i} is half drawn: axes and text but no data in colour ({im})")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_widget_redraws_after_every_slider_move(lab, browser, path):
    base, token = lab
    lesson = path.name[:2]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob(f"{path.stem}*"):
        old.unlink()
    print(f"screenshots and move log: {ARTIFACTS}")
    log, t0 = {"notebook": path.name, "moves": []}, time.monotonic()
    with _lab_page(browser, base, token) as (page, wire):
        try:
            # a workspace of its own: the default one remembers the lessons opened before and reopens them all
            # (a kernel each) beside this one, which once left "run all" waiting on another notebook
            page.goto(f"{base}/lab/workspaces/{path.stem}/tree/notebooks/{path.name}?token={token}")
            page.wait_for_function(KERNEL_IDLE, timeout=RUN_ALL_S * 1000, polling=250)
            wire.settle(page, RUN_ALL_S)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(f"() => {NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code')"
                                   f".every(c => c.model.executionCount !== null) || {NOTEBOOK}.content.widgets"
                                   f".some(c => (c.model.outputs ? c.model.outputs.toJSON() : [])"
                                   f".some(o => o.output_type === 'error'))", timeout=RUN_ALL_S * 1000, polling=500)
            wire.settle(page, RUN_ALL_S)
            log["run_all_s"] = round(time.monotonic() - t0, 1)
            assert wire.replies and set(wire.replies) == {"ok"}, f"a cell failed: {wire.errors}"
            assert not wire.errors, f"kernel errors while running all cells: {wire.errors}"

            area = page.locator(".jp-OutputArea-output:has(.widget-slider)")
            assert area.count() == 1, f"expected one widget with sliders, found {area.count()}"
            area.scroll_into_view_if_needed()  # JupyterLab draws only the cells in view: labels off-screen read empty
            out = area.locator(".widget-output")
            sliders = area.locator(".widget-slider")
            names = [s.locator(".widget-label").text_content().strip() for s in sliders.all()]  # drawn or not
            problems, shots = [], []

            def move(n, keys, target):
                """Press ``keys`` on slider ``n`` without waiting in between, wait for the kernel, check."""
                slider = sliders.nth(n)
                handle, before = slider.locator(".noUi-handle"), out.inner_html()
                handle.focus()
                for key in keys:
                    handle.press(key)
                wire.settle(page, MOVE_S)
                index = int(float(handle.get_attribute("aria-valuenow")))
                assert index == target, f"{names[n]}: pressed {keys}, slider at {index}, wanted {target}"
                cfg = {name: _coerce(_slider_value(s)) for name, s in zip(names, sliders.all())}
                found = look(out, lesson, cfg)
                if out.inner_html() == before:
                    found.append("the output did not change")
                errors, wire.errors = wire.errors, []
                found += [f"kernel error message: {e}" for e in errors]
                refused = "cannot run " in out.inner_text()
                log["moves"].append({"slider": names[n], "keys": keys, "config": cfg, "refused": refused,
                                     "figures": out.locator("img").count(), "problems": found})
                problems.extend(f"{names[n]} {'+'.join(keys)} -> {cfg}: {p}" for p in found)
                first_refusal = refused and not any(m["refused"] for m in log["moves"][:-1])
                if not shots or found or first_refusal or len(keys) > 1:  # and the quick presses
                    shots.append(ARTIFACTS / f"{path.stem}-{len(log['moves']):02d}-{names[n]}.png")
                    area.screenshot(path=str(shots[-1]))  # the first move, the first refusal, every failure

            def position(n):
                handle = sliders.nth(n).locator(".noUi-handle")
                value = lambda name: int(float(handle.get_attribute(name)))  # noqa: E731
                return value("aria-valuemax") + 1, value("aria-valuenow")

            for _ in range(ROUNDS):
                for n in range(len(names)):
                    count, index = position(n)
                    for target in _tour(count, index):
                        move(n, [{0: "Home", count - 1: "End"}.get(target, "ArrowLeft")], target)
            # three presses at once: the callbacks queue up, and the last one must still be drawn whole
            count, index = position(0)
            move(0, ["Home", "End", "Home"] if index == count - 1 else ["End", "Home", "End"],
                 0 if index == count - 1 else count - 1)
            log["seconds"] = round(time.monotonic() - t0, 1)
            log["problems"] = len(problems)
            assert len(log["moves"]) >= 2 * len(names) * ROUNDS + 1
            assert not problems, (f"{len(problems)} of {len(log['moves'])} moves went wrong (screenshots in "
                                  f"{ARTIFACTS}):\n" + "\n".join(problems[:20]))
        finally:
            (ARTIFACTS / f"{path.stem}.json").write_text(json.dumps(log, indent=1))


def _open_and_run_all(page, wire, base, token, name):
    """Open notebooks/``name`` in a workspace of its own, run all cells, and wait until every cell ran."""
    stem = Path(name).stem
    page.goto(f"{base}/lab/workspaces/{stem}/tree/notebooks/{name}?token={token}")
    page.wait_for_function(KERNEL_IDLE, timeout=RUN_ALL_S * 1000, polling=250)
    wire.settle(page, RUN_ALL_S)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(f"() => {NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code')"
                           f".every(c => c.model.executionCount !== null)", timeout=RUN_ALL_S * 1000, polling=500)
    wire.settle(page, RUN_ALL_S)
    assert wire.replies and set(wire.replies) == {"ok"}, f"a cell failed: {wire.errors}"


def test_a_learners_lab_has_no_validate_button(lab, browser):
    """nbgrader's Validate button ran the notebook and said "Success! Your notebook passes all the tests" of an
    untouched exercise: its checks print their verdicts and raise nothing. A learner's lab (`make lab`) has none
    of nbgrader's buttons (the instructor grades from the command line, README), as a room's participants have
    none (workshop/jupyterhub_config.py)."""
    base, token = lab
    with _lab_page(browser, base, token) as (page, wire):
        page.goto(f"{base}/lab/workspaces/validate/tree/notebooks/00_memory_wall.ipynb?token={token}")
        page.wait_for_function(KERNEL_IDLE, timeout=RUN_ALL_S * 1000, polling=250)
        toolbar = page.locator(".jp-NotebookPanel-toolbar").first
        toolbar.locator("button").first.wait_for(timeout=30_000)
        assert toolbar.locator("button").count() > 3  # the toolbar is drawn: save, insert, run...
        page.wait_for_timeout(2000)  # the extensions' buttons are added once the panel is ready
        assert page.locator(".validate-button").count() == 0, "nbgrader's Validate button is on the toolbar"


def test_dropdown_explorers_redraw_on_every_choice(lab, browser):
    """Lesson 06's explorers without sliders (swizzle, cluster size): every choice of every dropdown redraws a
    whole figure, or prints the course's refusal, and no traceback appears."""
    base, token = lab
    with _lab_page(browser, base, token) as (page, wire):
        _open_and_run_all(page, wire, base, token, "06_tma_by_hand.ipynb")
        areas = page.locator(".jp-OutputArea-output:has(.widget-dropdown):not(:has(.widget-slider))")
        assert areas.count() == 2, f"expected the swizzle and cluster explorers, found {areas.count()}"
        problems = []
        for a in range(areas.count()):
            area = areas.nth(a)
            area.scroll_into_view_if_needed()
            for d in range(area.locator("select").count()):
                select = area.locator("select").nth(d)
                for value in select.locator("option").all_text_contents()[::-1]:
                    select.select_option(label=value)
                    wire.settle(page, MOVE_S)
                    out = area.locator(".widget-output")
                    text, images = out.text_content(), out.evaluate(LOOK)
                    if "Traceback" in text or wire.errors:
                        problems.append(f"explorer {a} {value}: {text[-300:]} {wire.errors}")
                    elif "refuses" not in text and not (images and images[0]["colours"] > 1):
                        problems.append(f"explorer {a} {value}: no figure and no refusal: {text[-200:]!r}")
                    wire.errors = []
        assert not problems, "\n".join(problems[:10])


def _pack_widget(page, wire, base, token, button, first):
    """The interview pack opened and run, and the output of the widget with ``button``, once its first card
    (text matching ``first``) is drawn."""
    from playwright.sync_api import expect
    _open_and_run_all(page, wire, base, token, "interview_pack.ipynb")
    card = page.locator(f".jp-OutputArea-output:has(button:has-text('{button}'))").first
    card.scroll_into_view_if_needed()  # JupyterLab draws only the cells in view
    expect(card).to_contain_text(re.compile(first), timeout=30_000)  # the widget drawn
    return card


def test_interview_self_test_hides_the_answer_until_asked(lab, browser):
    """The interview pack's self-test as a candidate uses it: a question shows, no answer anywhere on the
    page; Reveal shows the answer and the checklist of a strong answer; ticking counts the points, Score deals the
    next card and counts them."""
    base, token = lab
    with _lab_page(browser, base, token) as (page, wire):
        card = _pack_widget(page, wire, base, token, "Reveal the answer", r"1 / \d+ · ")
        reveal = card.locator("button:has-text('Reveal the answer')")
        knew = card.locator("button:has-text('Score')")
        text = card.text_content()
        first = re.search(r"1 / (\d+) · [^·]+·[^·]+· \w+(.+?)Think it through", text, re.S)
        assert first and first.group(2).strip(), f"no question on the card: {text[-400:]!r}"
        assert "Answer (from" not in page.locator(".jp-Notebook").text_content(), "an answer shows before Reveal"
        assert not knew.is_visible(), "a score can be given before the answer was revealed"
        reveal.click()
        wire.settle(page, MOVE_S)
        assert "Answer (from" in card.text_content(), f"Reveal showed no answer: {card.text_content()[-400:]!r}"
        assert reveal.is_disabled() and knew.is_enabled()
        boxes = card.locator(".strong-answer .widget-checkbox input")
        n = boxes.count()
        assert n >= 2 and "A strong answer contains" in card.text_content(), "no checklist after Reveal"
        for k in range(n):
            boxes.nth(k).check()
        wire.settle(page, MOVE_S)
        assert re.search(rf"Score: {n} of {n} points", knew.text_content()), knew.text_content()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        card.screenshot(path=str(ARTIFACTS / "interview_pack-checklist.png"))
        knew.click()
        wire.settle(page, MOVE_S)
        text = card.text_content()
        assert re.search(rf"2 / {first.group(1)} · ", text), f"no next card: {text[-400:]!r}"
        assert "Answer (from" not in text, "the next card came with the last answer still shown"
        assert re.search(r"all\s*1 / 1", text), f"the tally did not count the score: {text[-300:]!r}"
        assert not wire.errors, wire.errors
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        card.screenshot(path=str(ARTIFACTS / "interview_pack-self-test.png"))


def test_interview_mock_round_runs_a_clock_and_deals_the_missed_first(lab, browser):
    """The mock interview as a candidate uses it: a round of nine against a clock that ticks in the browser;
    an answer scored with no point ticked comes first in the next round, marked, from the progress file."""
    base, token = lab
    with _lab_page(browser, base, token) as (page, wire):
        card = _pack_widget(page, wire, base, token, "New round", r"1 / 9 · ")
        time.sleep(3)  # three ticks of the clock
        text = card.text_content()
        first = re.search(r"1 / 9 · ([^·]+)·([^·]+)· (\w+)", text)
        assert first, f"no first card: {text[-400:]!r}"
        played = card.locator(".widget-hprogress .progress-bar").first.evaluate("b => parseFloat(b.style.width)")
        assert played > 0, f"the clock did not tick: its bar is {played}% long after 3 s"
        card.locator("button:has-text('Reveal the answer')").click()
        wire.settle(page, MOVE_S)
        card.locator("button:has-text('Score: 0 of')").click()  # no point ticked: missed
        wire.settle(page, MOVE_S)
        assert re.search(r"2 / 9 · ", card.text_content())
        card.locator("button:has-text('New round')").click()
        wire.settle(page, MOVE_S)
        text = card.text_content()
        again = re.search(r"1 / 9 · ([^·]+)·([^·]+)· (\w+) · missed last time", text)
        assert again and again.groups() == first.groups(), f"the missed item is not first again: {text[-400:]!r}"
        assert not wire.errors, wire.errors
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        card.screenshot(path=str(ARTIFACTS / "interview_pack-mock.png"))


def test_interview_scores_of_two_widgets_are_both_kept_after_a_reload(lab, browser):
    """A candidate misses a card in the self-test, then one in the mock round (each widget read the progress file
    when drawn): the file keeps both, and when the pack is opened again and run the self-test deals a missed card
    first, marked. (The widgets once wrote their own copies whole: the last to score erased the other.)"""
    base, token = lab
    with _lab_page(browser, base, token) as (page, wire):
        test = _pack_widget(page, wire, base, token, "Reveal the answer", r"1 / \d+ · ")
        mock = page.locator(".jp-OutputArea-output:has(button:has-text('New round'))").first
        kept = _progress(base, token)
        for card in (test, mock):
            card.scroll_into_view_if_needed()
            card.locator("button:has-text('Reveal the answer')").click()
            wire.settle(page, MOVE_S)
            card.locator("button:has-text('Score: 0 of')").click()  # no point ticked: missed
            wire.settle(page, MOVE_S)
        now = _progress(base, token)
        # two scores, on two cards or on one (earlier tests' misses come first in both decks)
        added = {k: now[k]["seen"] - kept.get(k, {}).get("seen", 0) for k in now}
        assert sum(added.values()) == 2 and all(now[k]["last"] == 0 for k, n in added.items() if n), added
        assert not wire.errors, wire.errors
    # the pack opened again, in a page of its own (a reload would wait on JupyterLab's "leave the page?" question)
    with _lab_page(browser, base, token) as (page, wire):
        test = _pack_widget(page, wire, base, token, "Reveal the answer", r"1 / \d+ · ")
        assert "missed last time" in test.text_content(), test.text_content()[-400:]
        assert not wire.errors, wire.errors


def _progress(base, token):
    """The pack's progress file of this lab (COURSE_PROGRESS, set by the ``lab`` fixture), read through the lab's
    contents API as a learner's file browser would."""
    url = f"{base}/api/contents/interview.json?content=1&type=file&format=text&token={token}"
    try:
        return json.loads(json.load(urllib.request.urlopen(url))["content"])["items"]
    except urllib.error.HTTPError:
        return {}


def _coerce(text):
    """A slider's readout as the value the callback gets (ints, booleans, words)."""
    return {"True": True, "False": False}.get(text, int(text) if re.fullmatch(r"-?\d+", text) else text)
