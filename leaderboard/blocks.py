"""A page as blocks, written as Markdown or as one self-contained HTML file.

A block is a tuple ``(kind, *body)``: ``("h1" | "h2" | "h3", text)``, ``("p", text)``,
``("table", headers, rows)``, ``("img", figure name, caption)`` and ``("list", items)``. The
leaderboard's report builds its page as blocks (:func:`.report.build_blocks`) and writes both
forms from them, so the Markdown page and the HTML file say the same thing; the HTML file embeds
its figures, so it travels alone. Every text is escaped: a method label or a suite name from a
contributed ``runs.csv`` is shown, never run.
"""

from __future__ import annotations

import base64
import html


def _md_text(text: object) -> str:
    """Text as Markdown shows it, never as HTML: a method label or a suite name from a
    contributed ``runs.csv`` may hold ``<script>``, which a docs page would otherwise run."""
    return html.escape(str(text), quote=False)


def _md_cell(text: object) -> str:
    return _md_text(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[tuple]) -> str:
    out = []
    for kind, *body in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append(f"{'#' * int(kind[1])} {_md_text(body[0])}\n")
        elif kind == "p":
            out.append(f"{_md_text(body[0])}\n")
        elif kind == "table":
            headers, rows = body
            out.append("| " + " | ".join(map(_md_cell, headers)) + " |")
            out.append("|" + "|".join("---" for _ in headers) + "|")
            out.extend("| " + " | ".join(map(_md_cell, row)) + " |" for row in rows)
            out.append("")
        elif kind == "img":
            out.append(f"![{body[1]}]({body[0]}.png)\n")
        elif kind == "list":
            out.extend(f"- {_md_cell(item)}" for item in body[0])
            out.append("")
    return "\n".join(out)


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em;
       color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; overflow-wrap: anywhere; }
th { background: #f3f3f3; }
figure { margin: 1em 0; } img { max-width: 100%; }
p { line-height: 1.45; }
"""


def to_html(blocks: list[tuple], figures: dict[str, bytes], title: str) -> str:
    esc = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
    ]
    for kind, *body in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{esc(body[0])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{esc(body[0])}</p>")
        elif kind == "table":
            headers, rows = body
            out.append("<table>")
            out.append("<tr>" + "".join(f"<th>{esc(str(h))}</th>" for h in headers) + "</tr>")
            out.extend(
                "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows
            )
            out.append("</table>")
        elif kind == "img":
            data = base64.b64encode(figures[body[0]]).decode("ascii")
            out.append(
                f'<figure><img alt="{esc(body[1])}" src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(body[1])}</figcaption></figure>"
            )
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in body[0]) + "</ul>")
    out += ["</body>", "</html>", ""]
    return "\n".join(out)
