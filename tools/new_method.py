"""``creditbench new-method NAME``: every file a built-in method needs, from a GRPO twin.

The tests ask more of a built-in method than its file (docs/contributing.md, "The checklist"):
a docs page whose Config table cites every default and says what the leaderboard runs, a paper
card, a test file, a replay fixture, an entry in the site's navigation, a row in the engines'
table and a name in what `import verl` registers there, its card id on the reproducing page and
a pin in the standard campaign and in the tuning rule's. This writes all of them at once, from
templates that make the new method GRPO's twin (GRPO's config, GRPO's advantage), so the whole
suite passes before the first line of the paper's method is written; then the contributor
replaces the twin's advantage with the paper's, and its page, card and test with what the paper
says.

Every file is planned before any is written: a name that is taken, or a file of the checkout
that is not where it is expected, stops the command with nothing written.
"""

from __future__ import annotations

import keyword
import re
import subprocess
import sys
import textwrap
from pathlib import Path

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# the template's config table copies GRPO's rows: the twin's fields, defaults and sources
GRPO_PAGE = "docs/methods/grpo.md"
NAV = "mkdocs.yml"
ENGINES_PAGE = "docs/engines.md"
REPRODUCING_PAGE = "docs/reproducing.md"
CAMPAIGN = "tools/campaigns/standard.yaml"
TUNING_CAMPAIGN = "tools/campaigns/tuning.yaml"  # the tuning rule's stage 1 runs every method
FIXTURE_MAKER = "tests/replay_fixtures/make_replay_fixtures.py"
# A method's page is the page whose Quick facts line "Registered name(s):" lists its name in
# backticks, as the template writes it (docs/contributing.md); the docs tests and the scripts
# that rewrite method pages find a page's methods with registered_names
REGISTERED = re.compile(r"^\s*[-*]\s+Registered names?:(.*)$", re.MULTILINE)
BACKTICKED = re.compile(r"`([^`]+)`")


def registered_names(text: str) -> list[str]:
    """The method names of a page's "Registered name(s):" lines, in backticks."""
    return [name for line in REGISTERED.findall(text) for name in BACKTICKED.findall(line)]


class NewMethodError(ValueError):
    """The method cannot be added as asked; the message names the name or the file."""


def class_name(name: str) -> str:
    """``my_method`` -> ``MyMethod``."""
    return "".join(part.capitalize() for part in name.split("_"))


def _method_file(name: str, title: str) -> str:
    cls = class_name(name)
    return f'''"""{title}.

Paper: (authors), "{title}", arXiv (id) (year), (section).

Key equations (G responses o_1..o_G to one question q, rewards r_1..r_G), GRPO's until the
paper's replace them:

    A_i = (r_i - mean(r_1..r_G)) / std(r_1..r_G)              (every token t of o_i gets A_i)

Defaults: GRPO's (methods/grpo.py), each cited on docs/methods/{name}.md.

Deviations:
    - None yet: written by ``creditbench new-method`` as GRPO's twin. Replace the advantage with
      the paper's, and list here what the paper leaves open and what this file chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .base import CreditMethod, Needs
from .contract import Services
from .core import RolloutBatch, broadcast_to_tokens
from .grpo import GRPOConfig, grpo_scores
from .registry import register_method


def {name}_advantages(
    rewards: Tensor, response_mask: Tensor, group_ids: Tensor, cfg: {cls}Config
) -> Tensor:
    """The credit of every response token: GRPO's z-scored group reward, for now.

    Args:
        rewards: ``[B]`` scalar rewards.
        response_mask: ``[B, T]``.
        group_ids: ``[B]``.
        cfg: the method's settings (std, eps, the rule for a group of one).

    Returns:
        ``[B, T]``, zero on padding.
    """
    return broadcast_to_tokens(grpo_scores(rewards, group_ids, cfg), response_mask)


@dataclass
class {cls}Config(GRPOConfig):
    """{cls} hyper-parameters: GRPO's (loss fields inherited from `LossConfig`)."""


@register_method("{name}")
class {cls}(CreditMethod):
    summary = "GRPO's twin, to become {title}"
    paper = "{title} (arXiv (id))"
    Config = {cls}Config
    needs = Needs(behaviour_logprobs=False)  # its rollout and advantages never read them
    config: {cls}Config

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return {name}_advantages(batch.rewards, batch.response_mask, batch.group_ids, self.config)
'''


def _test_file(name: str) -> str:
    cls = class_name(name)
    return f'''"""{cls}: the properties its paper states. Written by ``creditbench new-method``
as GRPO's twin; once the advantage is the paper's, the twin check goes and the paper's
properties (a sum that telescopes, a bound, a limit in which it is another method) take its
place."""

from __future__ import annotations

import torch
from hypothesis import given

from creditbench.methods.grpo import GRPO
from creditbench.methods.registry import get_method
from creditbench.methods.{name} import {cls}

from strategies import rollout_batches


def test_registered_under_its_name() -> None:
    assert get_method("{name}") is {cls}


@given(batch=rollout_batches())
def test_twin_of_grpo_until_the_papers_advantage_replaces_it(batch) -> None:
    assert torch.equal({cls}().advantages(batch), GRPO().advantages(batch))
'''


def _config_rows(root: Path) -> list[str]:
    """The rows of GRPO's Config table: the twin has GRPO's fields, defaults and sources."""
    text = (root / GRPO_PAGE).read_text(encoding="utf-8")
    section = text.split("## Config fields", 1)[-1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    if not rows:
        raise NewMethodError(f"{GRPO_PAGE}: no Config fields table to copy")
    return rows


def _page(name: str, title: str, rows: list[str]) -> str:
    cls = class_name(name)
    table = "\n".join(rows)
    return f"""# {title}

GRPO's twin, written by `creditbench new-method`: replace this paragraph with what the method
does to GRPO's credit, in a sentence a newcomer follows.

## Quick facts

- Advantage level: **sequence** (GRPO's, until the paper's advantage replaces it).
- Group-local: yes.
- Extra compute per step: none.
- Registered name: `{name}`.
- Train it: `creditbench train --method {name}`.

## Key equations

GRPO's, for now: $A_i = (r_i - \\operatorname{{mean}}(r)) / \\operatorname{{std}}(r)$ on every
token of response $i$.

## Documentation

::: methods.{name}
    options:
      heading_level: 3
      show_if_no_docstring: true
      filters: ["!^_"]

## Config fields

Every field of `{cls}Config`, its default and where the default comes from (GRPO's, until the
paper's replace them). Set a field with `--set method_options.<field>=<value>`.

| field | default | source |
|---|---|---|
{table}

## On the leaderboard

**What runs.** Not yet on the board: the standard campaign runs it once it is pinned at the
commit that adds it (docs/campaign.md, "Re-pinning a method").

**What its mechanism needs that the suite lacks.** To be read from the paper.

**Measured in the hard setting.** Nothing yet.

## Where the mechanism acts

GRPO's, for now: one credit a response, acting in groups that hold a pass and a fail. Replace
the rows' second and third cells with what the method's mechanism acts on in each world and the
diagnostic that shows it; `python scripts/mechanism_lines.py` fills the chain rows' measured
cells from the board's records.

| world · setting | what it has to act on | diagnostic | measured |
|---|---|---|---|
| chain · hard | groups with a pass and a fail | `mixed_frac` | no runs on the board yet |
| chain · easy | groups with a pass and a fail | `mixed_frac` | no runs on the board yet |
| countdown | groups with a pass and a fail | `mixed_frac` | not measured: no runs yet |
| ledger | groups with a pass and a fail | `mixed_frac` | not measured: no runs yet |

## References

- (authors), *{title}*, (year). arXiv (id).
"""


def _card(name: str, title: str) -> str:
    recipe = [
        "base_model",
        "training_data",
        "group_size",
        "prompts_per_step",
        "learning_rate",
        "max_response_length",
        "temperature",
        "steps_or_budget",
        "kl_coef",
        "clip",
        "aggregation",
    ]
    unknown = "".join(f"  {field}: unknown\n" for field in recipe)
    return f"""# Written by creditbench new-method: fill in the paper (docs/reproducing.md).
id: {name}
title: "{title}"
authors: [Unknown]
arxiv: "0000.00000"
year: 2026
code: null

methods:
  - name: {name}
    registered: true
    role: proposed
  - name: grpo
    registered: true
    role: baseline

recipe:
{unknown}
results: []
"""


# --- the checkout's shared files, each edited where the tests read it -------------------------


def _nav(text: str, name: str, title: str) -> str:
    """mkdocs.yml with the page in the Methods section, before the reference (the oracle)."""
    entry = f'      - "{title}": methods/{name}.md\n'
    anchor = "      - Oracle credit (reference): methods/oracle.md\n"
    if anchor not in text:
        raise NewMethodError(f"{NAV}: no Methods entry for the oracle to insert before")
    return text.replace(anchor, entry + anchor, 1)


VERL_REGISTERED = re.compile(r"^# \[('creditbench_.*)\]$", re.M)
VERL_COUNT = re.compile(
    r"^# creditbench: (\d+) verl estimators and losses registered \((creditbench_[a-z0-9_]+), "
    r"\.\.\.\)",
    re.M,
)


def _engines(text: str, name: str) -> str:
    """docs/engines.md with the method in the table of what runs where, and in what its
    ``import verl`` check prints: GRPO's twin runs in both engines, as GRPO does."""
    anchor = "| `grpo` | yes | yes | |\n"
    if anchor not in text:
        raise NewMethodError(f"{ENGINES_PAGE}: no row for grpo to add the method's beside")
    text = text.replace(anchor, anchor + f"| `{name}` | yes | yes | |\n", 1)
    printed, count = VERL_REGISTERED.search(text), VERL_COUNT.search(text)
    if printed is None or count is None:
        raise NewMethodError(f"{ENGINES_PAGE}: no list of what `import verl` registers")
    names = sorted(
        {*re.findall(r"'(creditbench_[a-z0-9_]+)'", printed.group(1)), f"creditbench_{name}"}
    )
    text = text[: printed.start(1)] + ", ".join(f"'{n}'" for n in names) + text[printed.end(1) :]
    count = VERL_COUNT.search(text)
    assert count is not None  # the list's edit left the count line as it was
    return (
        text[: count.start(1)] + str(len(names)) + text[count.end(1) : count.start(2)]
        + names[0] + text[count.end(2) :]
    )  # fmt: skip


CARD_LIST = re.compile(
    r"Card ids are the file names of `reference/cards/`, one per paper: (.*?) \("
)


def _reproducing(text: str, name: str) -> str:
    """docs/reproducing.md with the card id in its sorted list, the paragraph rewrapped."""
    paragraphs = text.split("\n\n")
    for index, paragraph in enumerate(paragraphs):
        flat = " ".join(paragraph.split())
        found = CARD_LIST.search(flat)
        if found:
            ids = sorted({*re.findall(r"`([^`]+)`", found.group(1)), name})
            listed = ", ".join(f"`{card}`" for card in ids)
            flat = flat[: found.start(1)] + listed + flat[found.end(1) :]
            paragraphs[index] = textwrap.fill(flat, width=100, break_on_hyphens=False)
            return "\n\n".join(paragraphs)
    raise NewMethodError(f"{REPRODUCING_PAGE}: no list of card ids")


def _pin(text: str, name: str, commit: str, campaign: str = CAMPAIGN) -> str:
    """A campaign plan with the method pinned, at HEAD until its own commit exists."""
    line = f"  {commit}: [{name}]  # re-pin at the commit that adds it\n"
    if "\npins:\n" not in text:
        raise NewMethodError(f"{campaign}: no pins")
    if f"\n  {commit}: [" in text:  # HEAD is pinned already: the method joins its list
        return re.sub(rf"(\n  {commit}: \[)", rf"\g<1>{name}, ", text, count=1)
    return text.replace("\npins:\n", "\npins:\n" + line, 1)


def plan(root: Path, name: str, title: str, commit: str | None = None) -> dict[Path, str]:
    """Every file to write and its content; raises `NewMethodError` before anything is written.
    ``commit`` is where the campaign pins the method (default: the checkout's HEAD)."""
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise NewMethodError(f"NAME: {name!r} must be a lower-case Python identifier")
    if not title.strip() or any(c in title for c in '"\\\n'):
        raise NewMethodError(f"--title: {title!r} must be one line without quotes or backslashes")
    from creditbench.methods.registry import list_methods

    if name in list_methods() or (root / "methods" / f"{name}.py").exists():
        raise NewMethodError(f"NAME: {name!r} is taken (a registered method or a module)")
    new = {
        root / "methods" / f"{name}.py": _method_file(name, title),
        root / "docs" / "methods" / f"{name}.md": _page(name, title, _config_rows(root)),
        root / "reference" / "cards" / f"{name}.yaml": _card(name, title),
        root / "tests" / f"test_{name}.py": _test_file(name),
    }
    for path in new:
        if path.exists():
            raise NewMethodError(f"{path.relative_to(root)}: exists already")
    commit = commit or head_commit(root)
    edits = {
        NAV: lambda text: _nav(text, name, title),
        ENGINES_PAGE: lambda text: _engines(text, name),
        REPRODUCING_PAGE: lambda text: _reproducing(text, name),
        CAMPAIGN: lambda text: _pin(text, name, commit),
        TUNING_CAMPAIGN: lambda text: _pin(text, name, commit, TUNING_CAMPAIGN),
    }
    for relative, edit in edits.items():
        path = root / relative
        if not path.is_file():
            raise NewMethodError(f"{relative}: not found; run it in a clone of creditbench")
        new[path] = edit(path.read_text(encoding="utf-8"))
    return new


def head_commit(root: Path) -> str:
    """The checkout's HEAD, where the new method is pinned until its own commit exists."""
    found = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        raise NewMethodError(f"{root}: not a git checkout ({found.stderr.strip()})")
    return found.stdout.strip()


def write(files: dict[Path, str]) -> None:
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")


def make_fixture(root: Path, name: str) -> int:
    """Record the method's replay fixture with the repository's own maker (a short run, about
    a minute on a shared core); its exit code."""
    return subprocess.run([sys.executable, str(root / FIXTURE_MAKER), name], cwd=root).returncode
