"""The reasoning steps of a GSM8K or MATH response: character spans, the real-data tasks'
``step_spans`` (the ``STEPS`` capability of :class:`harness.tasks.base.Task`).

VinePPO's code lets the task cut a response (``split_solution_into_intermediate_steps`` in
McGill-NLP/VinePPO ``src/treetune/tasks/gsm8k.py`` and ``src/treetune/tasks/math.py``); its
``reasoning_step_delimiter`` is only the string the steps re-join with to check the split (``''``
in the MATH and GSM8K configs). The rules here follow those splitters; the code is our own:

- GSM8K (:func:`gsm8k_step_spans`): one step per line (the task's ``intermediate_step_delimiter``
  ``'\\n'``); a closing ``#### N`` answer line belongs to the step before it, as the code joins
  the answer to the last step.
- MATH and MATH-500 (:func:`math_step_spans`), after the code's in-place splitter
  (``src/treetune/tasks/math_extract_steps_inplace.py``, ``split_solution_inplace``, chosen by
  ``configs/tasks/math_inplace_no_answer_prefix.jsonnet``): LaTeX (``$...$``, ``$$...$$``,
  ``\\(...\\)``, ``\\[...\\]``, ``\\begin{env}...\\end{env}``, ``[asy]...[/asy]``) is set aside
  first; outside it a step ends at a newline and at a sentence end (a period followed by space
  and a capital letter, not after a one- or two-letter word such as "Mr." or "e.g."); a
  formula that ends with a period ends a step too; a piece shorter than
  :data:`MIN_STEP_CHARS` characters joins the next (the last joins the one before).

Where ours differs from the code: nothing is cut inside LaTeX (the code also cuts at each
newline inside a formula, the rows of an ``align*``), and a long step is not broken further
(the code breaks a part over 100 characters at a comma, "and", ":" or "to", or inside a formula
at "=" or "+"). Spans leave out the whitespace between steps, as the testbed's spans leave out
its newlines: that whitespace goes with the step before.
"""

from __future__ import annotations

import re

Span = tuple[int, int]

MIN_STEP_CHARS = 20  # the code's merge threshold for short parts (math_extract_steps_inplace)

LATEX = re.compile(
    r"\[asy\].*?\[/asy\]"
    r"|\\begin\{(?P<env>[^}]*)\}.*?\\end\{(?P=env)\}"
    r"|\$\$.*?\$\$"
    r"|\\\[.*?\\\]"
    r"|\\\(.*?\\\)"
    r"|(?<!\\)\$(?:\\.|[^$\\])+\$",  # inline; an escaped \$ (money) neither opens nor closes
    re.DOTALL,
)
CLOSING = re.compile(r"(\$\$|\$|\\\]|\\\)|\\end\{[^}]*\})\Z")
SENTENCE_END = re.compile(r"\.(?=\s+[A-Z])")
SHORT_WORD = re.compile(r"(?<![A-Za-z])[A-Za-z]{1,2}\Z")  # "Mr", "e.g" before the period
ANSWER_LINE = "####"


def _pieces(text: str, cuts: set[int]) -> list[Span]:
    """The text between consecutive ``cuts``, each without its outer whitespace; empty pieces
    dropped."""
    spans = []
    bounds = sorted({0, len(text), *cuts})
    for start, end in zip(bounds, bounds[1:], strict=False):
        piece = text[start:end]
        stripped = piece.strip()
        if stripped:
            left = start + len(piece) - len(piece.lstrip())
            spans.append((left, left + len(stripped)))
    return spans


def gsm8k_step_spans(text: str) -> list[Span]:
    """GSM8K: one step per non-blank line, a closing ``#### N`` line joined to the step before."""
    spans = _pieces(text, {m.start() for m in re.finditer("\n", text)})
    if len(spans) > 1 and text.startswith(ANSWER_LINE, spans[-1][0]):
        spans[-2:] = [(spans[-2][0], spans[-1][1])]
    return spans


def latex_spans(text: str) -> list[Span]:
    """Where the LaTeX of ``text`` lies (leftmost first, not overlapping); an unclosed formula
    (a response cut off inside it) is read as text."""
    return [m.span() for m in LATEX.finditer(text)]


def math_step_spans(text: str) -> list[Span]:
    """MATH: sentences and lines outside LaTeX (see the module docstring)."""
    formulas = latex_spans(text)
    prose = list(text)
    for start, end in formulas:  # blank out LaTeX, keeping every position where it was
        prose[start:end] = "\0" * (end - start)
    outside = "".join(prose)
    cuts = {m.start() for m in re.finditer("\n", outside)}
    cuts |= {
        m.end()
        for m in SENTENCE_END.finditer(outside)
        if not SHORT_WORD.search(outside, max(0, m.start() - 2), m.start())
    }
    cuts |= {
        end for start, end in formulas if CLOSING.sub("", text[start:end]).rstrip().endswith(".")
    }
    spans = _pieces(text, cuts)
    merged: list[Span] = []
    pending: int | None = None  # the start of short pieces waiting for the next one
    for start, end in spans:
        start = start if pending is None else pending
        if end - start < MIN_STEP_CHARS:
            pending = start
            continue
        merged.append((start, end))
        pending = None
    if pending is not None:
        if merged:
            merged[-1] = (merged[-1][0], spans[-1][1])
        else:
            merged.append((pending, spans[-1][1]))
    return merged
