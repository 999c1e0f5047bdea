"""The words of the chain task: how a problem is phrased, and the texts of its prompt variants.

Every text here is lowercase words, digits and a little punctuation (see ``ALPHABET``), so the
character tokenizer of the testbed covers it. Rewrites never touch a number: a semifactual
rewrite keeps the problem and its answer (SCAPO, arXiv 2609.40360, §2 and App. B.1).
"""

from __future__ import annotations

import random
import re

from creditbench.harness.tasks.chain.grammar import Op, layout

LETTERS = "abcdefghijklmnopqrstuvwxyz"

# Phrasings of a problem. The first is the default prompt; rewrite_template uses the others.
TEMPLATES = (
    {"start": "start at {k}.", "+": "add {k}.", "-": "minus {k}.", "*": "times {k}.",
     "%": "last digit.", "end": "work mod 100."},
    {"start": "begin with {k},", "+": "plus {k},", "-": "subtract {k},", "*": "multiply by {k},",
     "%": "keep the last digit,", "end": "all mod 100."},
    {"start": "the number is {k}.", "+": "it grows by {k}.", "-": "it drops by {k}.",
     "*": "it is multiplied by {k}.", "%": "only its last digit stays.", "end": "answer mod 100."},
)  # fmt: skip

# Irrelevant framing sentences (SCAPO's "scenario wrap"): no numbers, no hints.
FRAMINGS = (
    "a student works through this on paper.",
    "this chain comes from a puzzle book.",
    "during a card game, someone keeps score.",
    "a teacher reads the steps aloud.",
)

LOCALIZE_QUESTION = "the answer is wrong. which step is the first wrong one?"


def render_prompt(start: int, ops: list[Op], template: int = 0) -> str:
    """The problem in words, ending with a newline (the solution starts on the next line)."""
    words = TEMPLATES[template]
    parts = [words["start"].format(k=start)]
    parts += [words[s].format(k=k) for s, k in ops]
    return " ".join([*parts, words["end"]]) + "\n"


def typo(prompt: str, rng: random.Random) -> str:
    """One character-level edit (delete, swap, substitute, insert) inside one word of four or
    more letters, keeping its first and last letter so that it stays recognisable."""
    words = list(re.finditer(r"[a-z]{4,}", prompt))
    while True:
        s, e = rng.choice(words).span()
        i = rng.randrange(s + 1, e - 1)
        edit = rng.choice(("delete", "swap", "substitute", "insert"))
        letter = rng.choice(LETTERS)
        if edit == "delete":
            new = prompt[:i] + prompt[i + 1 :]
        elif edit == "swap":
            new = prompt[:i] + prompt[i + 1] + prompt[i] + prompt[i + 2 :]
        elif edit == "substitute":
            new = prompt[:i] + letter + prompt[i + 1 :]
        else:
            new = prompt[:i] + letter + prompt[i:]
        if new != prompt:
            return new


def suffix_tag(prompt: str, rng: random.Random) -> str:
    """The prompt with a meaningless bracketed tag at its end (letters only, no numbers)."""
    tag = "".join(rng.choice(LETTERS) for _ in range(rng.randint(5, 8)))
    return f"{prompt.rstrip()} [tag: {tag}]\n"


def localize_prompt(prompt: str, response: str) -> str:
    """The response with numbered lines and the question; the answer reads ``Step: N``, the
    1-based number of the first wrong line (SRPO's localisation, told only that it is wrong)."""
    numbered = "".join(
        f"step {i + 1}: {response[s:e]}\n" for i, (s, e) in enumerate(layout(response).spans)
    )
    return f"{prompt}{numbered}{LOCALIZE_QUESTION}\n"


def parse_step_answer(text: str) -> int | None:
    """The 1-based step number of a localisation answer ``Step: N``, or None."""
    match = re.search(r"Step: ?(\d{1,4})", text)
    return int(match.group(1)) if match else None


def solution_hint_prompt(prompt: str, solution: str) -> str:
    """The problem, a correct solution (another attempt's), and the request to solve it again:
    SDPO's re-prompt (arXiv 2601.20802, Table 2) in the testbed's alphabet."""
    return f"{prompt}a correct solution:\n{solution.strip()}\nsolve the problem again.\n"


def repair_prompt(prompt: str, response: str, reference: str) -> str:
    """A failed solution and a correct reference; the answer is the failed one, minimally fixed."""
    return (
        f"{prompt}a wrong solution:\n{response.strip()}\n"
        f"a correct one:\n{reference.strip()}\nfix the wrong solution.\n"
    )
