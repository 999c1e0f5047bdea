"""The built docs in a real browser: every page at 1280 px, tables that fit, images that load,
equations typeset by the MathJax the build ships (no CDN), nothing fetched from elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser import check_pages, chromium

from creditbench.leaderboard.explain import GLYPH_PX

ROOT = Path(__file__).resolve().parents[1]
# Material's header asks GitHub for the repository's star count; offline the request fails and
# the page is the same, so it is the one request to another host that is not a fault.
ALLOWED_HOSTS = ("api.github.com",)
# The home page's first screen holds the verdict in a sentence and the titled figure
# (leaderboard/home.py writes them from the records).
HOME = {"": (["The verdict, at equal compute", "Figure: every method's gain over GRPO"],
             ["AUC gain over GRPO per method"])}  # fmt: skip


# Pages whose every equation fits the text column. The method pages' display equations (a
# method's whole objective on one line) still scroll sideways at 1280 px; each page's own
# equations are to be split as the tutorial's were before they join this list.
WHOLE_EQUATIONS = {"", "tutorial/", "testbed/", "harness/"}


def not_in_nav(log: str) -> list[str]:
    """The pages ``mkdocs build`` lists as existing but "not included in the nav"."""
    lines = log.splitlines()
    heads = [i for i, line in enumerate(lines) if 'not included in the "nav"' in line]
    pages = []
    for i in heads:
        for line in lines[i + 1 :]:
            if not line.startswith("  - "):
                break
            pages.append(line[4:].strip())
    return pages


@pytest.mark.slow  # builds the whole site (half a minute) and opens every page
@pytest.mark.skipif(chromium() is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_every_docs_page_fits_1280px_loads_its_images_and_typesets_its_math(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    assert not_in_nav(build.stderr) == [], "pages missing from mkdocs.yml's nav"
    assert (site / "assets" / "mathjax" / "tex-mml-chtml.js").is_file()
    pages = sorted(
        p.parent.relative_to(site).as_posix() + "/"
        for p in site.rglob("index.html")
        if "assets" not in p.relative_to(site).parts
    )
    pages = [p.removeprefix("./") for p in pages]
    assert {"", "tutorial/", "results/quick/leaderboard/"} <= set(pages)
    shots = Path(os.environ.get("CREDITBENCH_SCREENSHOTS") or tmp_path / "shots")
    # the home page's credit picture: its letters at least 8 px tall, as a page's small print
    legible = {"results/credit/few/credit.png": 8 / GLYPH_PX}
    problems = check_pages(
        site,
        pages,
        shots,
        allowed_hosts=ALLOWED_HOSTS,
        legible=legible,
        first_screen=HOME,
        whole_equations=WHOLE_EQUATIONS,
    )
    assert problems == [], "\n".join(problems)
    # a full-page shot a page, and the home page's first screen (1280x900) beside them
    full_pages = [shot for shot in shots.glob("*.png") if not shot.stem.endswith("-first-screen")]
    assert len(full_pages) == len(pages) and (shots / "home-first-screen.png").is_file()


@pytest.mark.skipif(chromium() is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_page_check_catches_what_a_reader_would_see_broken(tmp_path):
    (tmp_path / "bad.html").write_text(
        "<!DOCTYPE html><html><body style='width:600px'>"
        f"<table><tr><td>{'x' * 400}</td></tr></table>"
        "<table style='width:300px'><tr><th style='overflow-wrap:anywhere'>setting</th>"
        f"<th>{'word ' * 200}</th></tr><tr><td style='overflow-wrap:anywhere'>card</td>"
        f"<td>{'word ' * 200}</td></tr></table>"
        "<div class='arithmatex' style='overflow-x:auto;width:300px'>"
        "<mjx-container style='display:inline-block;width:700px'>L(θ)</mjx-container></div>"
        "<p style='margin-top:1200px'>The verdict, far down</p>"
        "<img src='missing.png'><span class='arithmatex'>\\(x^2\\)</span>"
        "<div style='white-space: pre-wrap'>"
        + "\n".join(f"<span>{c}</span>" for c in "so 21+5=26 then 26*2=52")
        + "</div><img src='words.png' style='width:100%'></body></html>"
    )
    from PIL import Image

    Image.new("RGB", (1200, 40), "white").save(tmp_path / "words.png")  # shown at 600 px: 50%
    legible = {"words.png": 0.8, "gone.png": 0.8}
    first = {"bad.html": (["The verdict", "no such text"], ["no such picture"])}
    problems = check_pages(
        tmp_path, ["bad.html"], tmp_path / "shots", legible=legible, first_screen=first
    )
    assert any("table overflows" in p for p in problems)
    assert any("image did not load: missing.png" in p for p in problems)
    assert any("1 equations not typeset" in p for p in problems)
    assert any("text drawn a piece a line" in p for p in problems)
    assert any("picture of text shrunk, words.png at 50% of its 1200px" in p for p in problems)
    assert "no page shows a picture ending gone.png (legible=)" in problems
    assert any("column narrower than a word" in p and '"setting"' in p for p in problems)
    assert any("column narrower than a word" in p and '"card"' in p for p in problems)
    assert any("equation cut at the edge, 700px in 300px" in p for p in problems)
    assert any("not on the first screen" in p and "The verdict" in p for p in problems)
    assert "bad.html: not on the page at all: no such text" in problems
    assert "bad.html: not on the page at all: no such picture" in problems


def test_mkdocs_pages_missing_from_the_nav_are_read_from_its_log():
    log = (
        "INFO    -  Building documentation\n"
        "INFO    -  The following pages exist in the docs directory, but are not included in "
        'the "nav" configuration:\n  - results/standard/leaderboard.md\n  - methods/x.md\n'
        "INFO    -  Documentation built in 15.80 seconds\n"
    )
    assert not_in_nav(log) == ["results/standard/leaderboard.md", "methods/x.md"]
    assert not_in_nav("INFO    -  Documentation built in 1 seconds\n") == []


@pytest.mark.skipif(chromium() is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_credit_picture_reads_as_text_in_a_browser(tmp_path):
    """``credit.html``'s panels hold a response's tokens as spans; drawn, they read as the
    response's lines, not a column of letters."""
    from creditbench.leaderboard.explain import credit_html

    tokens = list("so 21+5=26\nthen 26*2=52\nAnswer: 52")  # the testbed's tokens: characters
    response = {
        "prompt": "start 21; +5; *2",
        "reward": 1.0,
        "first_wrong": [],
        "tokens": tokens,
        "advantages": {"grpo": [0.5] * len(tokens), "oracle": [0.01 * i for i in range(34)]},
    }
    (tmp_path / "credit.html").write_text(credit_html([response], ["grpo", "oracle"], "t"))
    assert check_pages(tmp_path, ["credit.html"], tmp_path / "shots") == []
