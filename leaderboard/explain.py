"""The credit picture: a response's tokens coloured by each method's advantage, side by side.

Input is what the trainer logs (``responses.jsonl``, see ``harness.diagnostics.explain``): per
response its prompt, one text piece per token, its reward, the indices of its first wrong step
and, per column (a method, or a run), the token advantages. :func:`credit_html` writes one
self-contained HTML page and :func:`credit_png` one PNG of the same picture.

Colours: red is negative credit (blame), blue positive; the intensity is the token's advantage
relative to the largest ``|A|`` of that column on that response, so methods whose advantages
differ in scale (GRPO's ±1 against an exact value difference of ±0.02) are compared by where
they put credit, not by how much. The tokens of the true first wrong step are underlined in
black. Tokens a column gives exactly 0 are left white.
"""

from __future__ import annotations

import html
import io
import math
import re
import textwrap
from typing import Any

NEGATIVE, POSITIVE = (0.84, 0.15, 0.16), (0.13, 0.40, 0.80)
WIDTH = 44  # characters a panel's line holds at most; longer lines wrap
PANELS_PER_ROW = 6  # at most this many columns side by side; more wrap onto further rows
# The PNG's scale (ours): a glyph is GLYPH_PX (about 10) pixels tall at the picture's own size,
# and the picture is at most MAX_PICTURE_INCHES (about 660 px) wide, under the docs theme's text
# column at a 1280 px window, so a page shows it at its own size instead of shrinking the letters.
DPI = 110
FONT_PT = 6.5
GLYPH_PX = FONT_PT * DPI / 72
MAX_PICTURE_INCHES = 6.0
MIN_PANEL_CHARS = 20  # a panel never narrower than its title (a method's name)


def _scale(values: list[float]) -> float:
    top = max((abs(v) for v in values), default=0.0)
    return top if top > 0 and math.isfinite(top) else 1.0


def _rgba(value: float, scale: float) -> tuple[float, float, float, float]:
    strength = min(1.0, abs(value) / scale)
    base = NEGATIVE if value < 0 else POSITIVE
    return (*base, 0.85 * strength)


def _css(value: float, scale: float) -> str:
    r, g, b, a = _rgba(value, scale)
    return f"rgba({int(255 * r)},{int(255 * g)},{int(255 * b)},{a:.2f})"


def _caption(response: dict[str, Any]) -> str:
    outcome = "passed" if response["reward"] > 0.5 else "failed"
    wrong = "first wrong step underlined" if response["first_wrong"] else "no wrong step"
    return f"reward {response['reward']:g} ({outcome}); {wrong}"


STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1240px; }
.credit { display: grid; gap: 0.6em; margin-bottom: 1.6em; }
.panel { font: 12px/1.5 ui-monospace, monospace; white-space: pre-wrap;
         overflow-wrap: anywhere; border: 1px solid #ddd; padding: 0.4em; min-width: 0; }
.panel h4 { font: bold 12px system-ui, sans-serif; margin: 0 0 0.3em; }
.wrong { border-bottom: 2px solid #000; }
.prompt { color: #555; font-size: 0.9em; }
"""


def credit_html(responses: list[dict[str, Any]], columns: list[str], title: str) -> str:
    """One page: per response a caption and one panel per column. ``responses[i]["advantages"]``
    maps a column to its token advantages, or to None when the column lacks that response."""
    esc = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        "<p>Red: negative credit (blame), blue: positive, each column scaled to its own largest "
        "|advantage| on the response; white: exactly 0. Underlined: the step checker's first "
        "wrong step.</p>",
    ]
    for number, response in enumerate(responses, start=1):
        out.append(f"<h2>Response {number}: {esc(_caption(response))}</h2>")
        out.append(f'<p class="prompt">Prompt: {esc(response["prompt"].strip())}</p>')
        out.append(
            f'<div class="credit" style="grid-template-columns: '
            f'repeat({min(len(columns), PANELS_PER_ROW)}, 1fr)">'
        )
        wrong = set(response["first_wrong"])
        for column in columns:
            values = response["advantages"].get(column)
            head = f'<div class="panel"><h4>{esc(column)}</h4>'
            if values is None:
                out.append(head + "(not in this column's batch)</div>")
                continue
            scale = _scale(values)
            spans = []
            for i, (piece, value) in enumerate(zip(response["tokens"], values, strict=True)):
                cls = ' class="wrong"' if i in wrong else ""
                style = f' style="background:{_css(value, scale)}"' if value != 0 else ""
                title_attr = f' title="{value:+.4g}"'
                spans.append(f"<span{cls}{style}{title_attr}>{esc(piece)}</span>")
            # one run of spans: the panel keeps white space, so a newline between two spans
            # would be drawn as a line break after every token
            out.append(head + "".join(spans) + "</div>")
        out.append("</div>")
    out.append("</body></html>\n")
    return "\n".join(out)


def shown_columns(page: str) -> list[str]:
    """The columns a page of :func:`credit_html` shows, in order (its first response's panels)."""
    first = page.split('<div class="credit"', 2)
    if len(first) < 2:
        return []
    heads = re.findall(r'<div class="panel"><h4>(.*?)</h4>', first[1])
    return [html.unescape(h) for h in heads]


def credit_ansi(responses: list[dict[str, Any]], columns: list[str], title: str) -> str:
    """The picture of :func:`credit_html` as terminal text: each token on a background of its
    advantage's colour (24-bit ANSI, blended onto white as the page blends it), the first wrong
    step underlined, one block per response and column."""
    out = [title]
    for response in responses:
        out.append("")
        out.append(_caption(response))
        wrong = set(response["first_wrong"])
        for column in columns:
            values = response["advantages"].get(column)
            out.append(f"-- {column}")
            if values is None:
                out.append("(not in this batch)")
                continue
            scale = _scale(values)
            pieces = []
            for index, token in enumerate(response["tokens"]):
                r, g, b, a = _rgba(values[index], scale)
                rgb = [int(255 * (1 - a + a * c)) for c in (r, g, b)]  # over white
                style = f"\x1b[48;2;{rgb[0]};{rgb[1]};{rgb[2]};38;2;0;0;0m"
                if index in wrong:
                    style += "\x1b[4m"
                lines = token.split("\n")  # colour each line's part, never the line break
                pieces.append("\n".join(f"{style}{part}\x1b[0m" if part else "" for part in lines))
            out.append("".join(pieces))
    return "\n".join(out) + "\n"


def _layout(tokens: list[str]) -> list[tuple[int, int, int, str]]:
    """``(token index, line, column, character)`` of every drawn character, ``WIDTH`` a line."""
    cells, line, col = [], 0, 0
    for index, piece in enumerate(tokens):
        for char in piece:
            if char == "\n":
                line, col = line + 1, 0
                continue
            if col == WIDTH:
                line, col = line + 1, 0
            cells.append((index, line, col, char))
            col += 1
    return cells


def credit_png(responses: list[dict[str, Any]], columns: list[str], title: str) -> bytes:
    """The picture of :func:`credit_html` as one PNG: per response its caption and a panel per
    column. A panel is as wide as the longest line drawn; a row holds as many panels as fit
    :data:`MAX_PICTURE_INCHES` (at most :data:`PANELS_PER_ROW`), and no more than the fewest
    rows need (four panels where three fit: two rows of two, not three and one)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    char_w, line_h = 0.075, 0.19  # inches
    layouts = [_layout(r["tokens"]) for r in responses]
    lines = [max((c[1] for c in cells), default=0) + 1 for cells in layouts]
    chars = max([c[2] + 2 for cells in layouts for c in cells] + [MIN_PANEL_CHARS])  # a margin
    # a caption sits just above its own panels, a wider gap (apart) above it: a reader pairs
    # each caption with the response below it, not the one above
    panel_w, gap, head, caption, apart = chars * char_w, 0.25, 0.22, 0.12, 0.45
    fits = max(1, int((MAX_PICTURE_INCHES - gap) // (panel_w + gap)))
    n_rows = math.ceil(len(columns) / min(len(columns), PANELS_PER_ROW, fits))
    per_row = math.ceil(len(columns) / n_rows)
    rows_of_panels = [columns[i : i + per_row] for i in range(0, len(columns), per_row)]
    width = per_row * panel_w + (per_row + 1) * gap
    # the title wrapped to the figure's width (10 pt: about 0.09 inch a character), so no end
    # of it is cut off
    title_lines = textwrap.wrap(title, width=max(20, int((width - 2 * gap) / 0.09))) or [""]
    title_h = 0.2 + 0.2 * len(title_lines)
    heights = [apart + caption + len(rows_of_panels) * (n * line_h + head) for n in lines]
    height = sum(heights) - apart + title_h + 0.1  # none above the first; a bottom margin
    fig = Figure(figsize=(width, height), dpi=DPI)
    fig.text(0.5, 1 - 0.1 / height, "\n".join(title_lines), ha="center", va="top", fontsize=10)
    top = height - title_h
    for number, (response, cells, n_lines) in enumerate(
        zip(responses, layouts, lines, strict=True)
    ):
        top -= apart if number else 0.0
        fig.text(gap / width, top / height, _caption(response), fontsize=7, va="top")
        top -= caption
        wrong = set(response["first_wrong"])
        panel_h = n_lines * line_h
        for row in rows_of_panels:
            for k, column in enumerate(row):
                left = gap + k * (panel_w + gap)
                ax = fig.add_axes(
                    (
                        left / width,
                        (top - head - panel_h) / height,
                        panel_w / width,
                        panel_h / height,
                    )
                )
                ax.set_xlim(0, chars)
                ax.set_ylim(n_lines, 0)
                ax.set_xticks([])
                ax.set_yticks([])
                ax.set_title(column, fontsize=8, pad=2)
                values = response["advantages"].get(column)
                if values is None:
                    ax.text(chars / 2, n_lines / 2, "not in this batch", ha="center", fontsize=7)
                    continue
                scale = _scale(values)
                for index, line, col, char in cells:
                    if values[index] != 0:
                        color = _rgba(values[index], scale)
                        ax.add_patch(Rectangle((col, line), 1, 1, color=color, linewidth=0))
                    if index in wrong:
                        ax.plot([col, col + 1], [line + 0.97, line + 0.97], color="black", lw=1)
                    ax.text(col + 0.5, line + 0.8, char, fontsize=FONT_PT, ha="center",
                            family="monospace")  # fmt: skip
            top -= head + panel_h
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def side_by_side(samples: dict[str, list[dict[str, Any]]], count: int) -> list[dict[str, Any]]:
    """The first ``count`` failed responses with a first wrong step of the first column's
    batch, each with every column's advantages on the same response (None where a column's
    batch lacks it): the input of :func:`credit_html` for several methods."""
    columns = list(samples)
    keyed = {
        column: {(r["prompt"], tuple(r["tokens"])): r["advantages"] for r in rows}
        for column, rows in samples.items()
    }
    picked = [r for r in samples[columns[0]] if r["reward"] <= 0.5 and r["first_wrong"]]
    out = []
    for response in picked[:count]:
        key = (response["prompt"], tuple(response["tokens"]))
        advantages = {column: keyed[column].get(key) for column in columns}
        out.append({**response, "advantages": advantages})
    return out


def run_panels(record: dict[str, Any], label: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` failed responses (reward <= 0.5) of a run's logged step (one
    ``responses.jsonl`` record), as one column named ``label``; empty when none failed."""
    failed = [r for r in record["responses"] if r["reward"] <= 0.5]
    return [{**r, "advantages": {label: r["advantages"]}} for r in failed[:count]]
