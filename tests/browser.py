"""Pages in a real browser: Debian's headless Chromium driven by Playwright, at 1280 px.

:func:`check_pages` serves a folder on localhost, opens each page, waits for it (and MathJax)
to settle, takes a full-page screenshot and reports what a reader would see broken: a table
wider than its container (a horizontal scrollbar), an image that did not load, equations left
as raw TeX, text that keeps its white space drawn a character or two a line, a picture of text
shown too small to read, a table column narrower than a word in it (a column broken a letter a
line), an equation cut at the edge of its box (one that scrolls), and any request that left
localhost. Where asked, it also checks a page's first screen (1280 x 900) holds given texts
and images.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

WIDTH, HEIGHT = 1280, 900  # the first screen of a common laptop
CHROMIUM_ARGS = [  # as root, and on a machine whose network is closed
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MEASURE = """(legible) => {
  const wide = [];
  // Material wraps a table in a scrolling box (which bleeds into the margins by design):
  // that box must not scroll. A bare table must not be wider than its container.
  for (const el of document.querySelectorAll('.md-typeset__scrollwrap')) {
    if (el.scrollWidth > el.clientWidth + 1) {
      wide.push(`${el.scrollWidth}px in ${el.clientWidth}px: ` + el.innerText.slice(0, 50));
    }
  }
  for (const el of document.querySelectorAll('table')) {
    if (el.closest('.md-typeset__scrollwrap')) continue;
    const room = el.parentElement.clientWidth;
    const width = Math.max(el.scrollWidth, el.getBoundingClientRect().width);
    if (width > room + 1) {
      wide.push(`${Math.round(width)}px in ${room}px: ` + el.innerText.slice(0, 50));
    }
  }
  if (document.documentElement.scrollWidth > window.innerWidth + 1) {
    wide.push(`the page itself: ${document.documentElement.scrollWidth}px`);
  }
  const broken = [...document.images]
    .filter(img => !(img.complete && img.naturalWidth > 0))
    .map(img => img.getAttribute('src').slice(0, 80));
  const tex = document.querySelectorAll('.arithmatex').length;
  const typeset = document.querySelectorAll('.arithmatex mjx-container').length;
  // Text whose white space is kept, broken into a line every character or two: pieces
  // joined with newlines inside a pre-wrap block read as a column of letters.
  const scattered = [];
  for (const el of document.querySelectorAll('div, pre, p, td, code')) {
    if (!getComputedStyle(el).whiteSpace.startsWith('pre')) continue;
    const lines = el.innerText.split('\\n').filter(line => line.trim());
    const chars = lines.join('').replace(/\\s/g, '').length;
    if (chars >= 20 && lines.length > chars / 2) {
      const start = lines.slice(0, 6).join('|');
      scattered.push(`${lines.length} lines of ${chars} characters: ${start}`);
    }
  }
  // A picture of text shown narrower than its own size shrinks its letters with it.
  const shrunk = [], matched = [];
  for (const img of document.images) {
    const src = img.getAttribute('src') || '';
    const least = Object.entries(legible).find(([end]) => src.endsWith(end));
    if (!least || !img.naturalWidth) continue;
    matched.push(least[0]);
    const scale = img.getBoundingClientRect().width / img.naturalWidth;
    if (scale < least[1]) {
      shrunk.push(`${src} at ${Math.round(100 * scale)}% of its ${img.naturalWidth}px`);
    }
  }
  // A column narrower than a word of its own, drawn broken a letter or two a line: a header
  // narrower than any word of its name, or a body cell narrower than a short word (up to 6
  // letters; a longer identifier or a key=value label may break in a narrow column).
  const narrow = [];
  const probe = document.createElement('span');
  probe.style.cssText = 'white-space: nowrap; position: absolute; visibility: hidden';
  for (const cell of document.querySelectorAll('td, th')) {
    const longest = cell.tagName === 'TH' ? 24 : 6;
    const words = cell.innerText.split(/[^A-Za-z]+/)
      .filter(w => w.length >= 3 && w.length <= longest);
    if (!words.length) continue;
    const style = getComputedStyle(cell);
    const room = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    cell.appendChild(probe);
    for (const word of words) {
      probe.textContent = word;
      const need = probe.getBoundingClientRect().width;
      if (need > room + 1) {
        narrow.push(`"${word}" needs ${Math.round(need)}px, its column ${Math.round(room)}px`);
        break;
      }
    }
    probe.remove();
  }
  // An equation wider than its box: the box scrolls, and the page shows it cut at the edge.
  const cut = [];
  for (const box of document.querySelectorAll('.arithmatex')) {
    if (box.querySelector('mjx-container') && box.scrollWidth > box.clientWidth + 1) {
      cut.push(`${box.scrollWidth}px in ${box.clientWidth}px: ` + box.textContent.slice(0, 40));
    }
  }
  return {wide, broken, tex, typeset, scattered, shrunk, matched, narrow, cut};
}"""
# What of a page lies on its first screen: each text's first element and each image (by the
# start of its alt text), their tops against the window's height.
FIRST_SCREEN = """([texts, alts]) => {
  const seen = {};
  const all = [...document.querySelectorAll('p, h1, h2, figcaption, strong, li, td')];
  for (const text of texts) {
    const el = all.find(e => e.innerText.includes(text));
    seen[text] = el ? el.getBoundingClientRect().top : null;
  }
  for (const alt of alts) {
    const img = [...document.images].find(i => (i.getAttribute('alt') || '').startsWith(alt));
    seen[alt] = img ? img.getBoundingClientRect().top : null;
  }
  return seen;
}"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextmanager
def served(folder: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # noqa: D102 - no access log in test output
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()


def check_pages(
    folder: Path,
    pages: list[str],
    shots: Path,
    *,
    allowed_hosts=(),
    legible=None,
    first_screen=None,
    whole_equations=None,
) -> list[str]:
    """Every problem found on ``pages`` (paths under ``folder``), one line each; screenshots
    of each page into ``shots``. ``legible`` maps the end of an image's address to the least
    share of its own width it may be shown at (a picture of text whose letters must stay
    readable). ``first_screen`` maps a page to ``(texts, image alt starts)`` that must show on
    its first screen, before any scrolling (the top of each within the window's height).
    ``whole_equations``: the pages whose equations must fit their box (default: every page)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    unseen = set(legible or {})  # a legible picture no page shows is a check that never ran
    shots.mkdir(parents=True, exist_ok=True)
    with served(folder) as base, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        outside: list[str] = []

        def on_request(request) -> None:
            url = request.url
            if not url.startswith((base, "data:")) and not any(h in url for h in allowed_hosts):
                outside.append(url)

        page.on("request", on_request)
        for rel in pages:
            page.goto(base + rel, wait_until="load")
            page.wait_for_timeout(200)
            if page.evaluate("document.querySelectorAll('.arithmatex').length"):
                try:  # MathJax typesets after load; a page without it never does
                    page.wait_for_function(
                        "document.querySelectorAll('.arithmatex mjx-container').length"
                        " === document.querySelectorAll('.arithmatex').length",
                        timeout=15_000,
                    )
                except PlaywrightTimeout:
                    pass  # counted below as equations not typeset
            found = page.evaluate(MEASURE, dict(legible or {}))
            name = rel.strip("/").replace("/", "_") or "home"
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
            problems += [f"{rel}: table overflows, {w}" for w in found["wide"]]
            problems += [f"{rel}: image did not load: {src}" for src in found["broken"]]
            problems += [f"{rel}: text drawn a piece a line, {t}" for t in found["scattered"]]
            problems += [f"{rel}: picture of text shrunk, {t}" for t in found["shrunk"]]
            problems += [f"{rel}: column narrower than a word, {t}" for t in found["narrow"]]
            if whole_equations is None or rel in whole_equations:
                problems += [f"{rel}: equation cut at the edge, {t}" for t in found["cut"]]
            if first_screen and rel in first_screen:
                texts, alts = first_screen[rel]
                tops = page.evaluate(FIRST_SCREEN, [list(texts), list(alts)])
                page.screenshot(path=str(shots / f"{name}-first-screen.png"))
                for what, top in tops.items():
                    if top is None:
                        problems.append(f"{rel}: not on the page at all: {what}")
                    elif not 0 <= top < HEIGHT:
                        problems.append(f"{rel}: not on the first screen ({top:.0f}px): {what}")
            unseen -= set(found["matched"])
            if found["typeset"] < found["tex"]:
                problems.append(f"{rel}: {found['tex'] - found['typeset']} equations not typeset")
        browser.close()
    problems += [f"request outside localhost: {url}" for url in sorted(set(outside))]
    problems += [f"no page shows a picture ending {end} (legible=)" for end in sorted(unseen)]
    return problems
