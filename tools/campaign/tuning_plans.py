"""The campaign plans the tuning rule's choices are run by: stage 2's, and protocol 2's board,
OTB's ablation rows and the claims' own rows (docs/testbed.md, "The tuning rule" and "Protocol
2's board"), each pinned to one clean commit. :mod:`.tuning` writes them beside their suites;
:func:`plan_paths` checks the paths and the pin before anything is written."""

from __future__ import annotations

from typing import Any

from creditbench.tools.campaign.tuning_rule import TUNING_SEEDS


def stage2_plan(suite_file: str, suite: dict[str, Any], records: str, commit: str) -> str:
    """Stage 2's campaign plan (docs/campaign.md): every configuration of ``suite`` (written to
    ``suite_file``, relative to the repository) pinned to ``commit``, on the tuning seeds in
    the hard setting, its runs kept in ``records`` beside stage 1's, whose tuning table its sync
    renders again."""
    import yaml

    names = [entry["name"] for entry in suite["methods"]]
    plan = {
        "description": (
            f"Stage 2 of the tuning rule (docs/testbed.md): two more configurations a method (a "
            f"scale-tied knob's two alternatives at its stage-1 lr, or that lr a quarter-decade "
            f"either side), hard setting, tuning seeds {TUNING_SEEDS[0]}-{TUNING_SEEDS[-1]} "
            f"({len(names) * len(TUNING_SEEDS)} runs), from one clean commit later than stage "
            "1's (the rule's note on stage 2)."
        ),
        "suite": suite_file,
        "records": {"board": records},
        "pages": {"tuning": f"{records}/tuning.md"},
        "pins": {commit: names},
        "phases": [{"setting": "hard", "seeds": f"{TUNING_SEEDS[0]}-{TUNING_SEEDS[-1]}"}],
    }
    head = (
        "# The tuning rule's stage 2, written with its suite by tools/campaign/tuning.py from "
        "stage 1's records:\n# `creditbench campaign tuning-stage2 --dry-run`.\n"
    )
    return head + yaml.safe_dump(plan, sort_keys=False, width=100)


# protocol 2's board (docs/testbed.md, "Protocol 2's board"): the scale's two ends run first,
# and its records stay apart from the published board's until its whole plan is in
SCALE_ENDS = ("grpo", "oracle")
PROTOCOL2_RECORDS = "docs/results/protocol-2"
PROTOCOL2_ABLATIONS = "docs/results/protocol-2-ablations"
PROTOCOL2_CLAIMS_ROWS = "docs/results/protocol-2-claims-rows"


def protocol2_plans(
    suite_file: str,
    suite: dict[str, Any],
    ablation_file: str,
    ablations: dict[str, Any],
    commit: str,
) -> tuple[str, str, str]:
    """The campaign plans of protocol 2's board, of OTB's ablation rows and of the claims' own
    rows (docs/testbed.md, "Protocol 2's board"), each pinned to ``commit``, run in that order:
    the board's phases in the rule's order (GRPO and the oracle first, every method's hard
    seeds, the easy seeds 0-4, the easy-seeds rule's 5-9, the confirmatory 10-19 of GRPO and
    the oracle); the ablation rows at hard seeds 0-9 and easy seeds 0-9 (the ladder reads the
    seeds its rungs share); the claims' own rows by ``reproduce CARD --suite`` on the tuned
    suite, at their method's seeds in the board's records."""
    import yaml

    from creditbench.reference.cards import load_cards
    from creditbench.tools.reproduce.claims import cards_with_own_rows

    names = [entry["name"] for entry in suite["methods"]]
    ends = [name for name in SCALE_ENDS if name in names]
    board = {
        "description": (
            "Protocol 2's board (docs/testbed.md): every method at the tuning rule's chosen "
            "configuration, with the equal-samples evaluations, from one clean commit; its "
            "records stay apart from the published board's until the whole plan is in."
        ),
        "suite": suite_file,
        "records": {"board": PROTOCOL2_RECORDS},
        "pins": {commit: ends + [name for name in names if name not in ends]},
        "phases": [
            {"setting": "hard", "seeds": "0-9", "methods": ends},
            {"setting": "easy", "seeds": "0-4", "methods": ends},
            {"setting": "hard", "seeds": "0-9"},
            {"setting": "easy", "seeds": "0-4"},
            {"setting": "easy", "seeds": "5-9", "rule": "easy-seeds"},
            {"setting": "hard", "seeds": "10-19", "methods": ends},
            {"setting": "easy", "seeds": "10-19", "methods": ends},
        ],
    }
    rows = [entry["name"] for entry in ablations["methods"]]
    ablation = {
        "description": (
            "OTB's ablation rows (docs/testbed.md, \"OTB's ablation rows\"), at OTB's chosen "
            "configuration and protocol 2's settings, after the board's GRPO and OTB rows."
        ),
        "suite": ablation_file,
        "records": {"board": PROTOCOL2_ABLATIONS},
        "pins": {commit: rows},
        "phases": [{"setting": "hard", "seeds": "0-9"}, {"setting": "easy", "seeds": "0-9"}],
    }
    # a card's id names its method; a card whose method the suite lacks has no rows to host
    hosts = [c.id for c in cards_with_own_rows(load_cards().values()) if c.id in names]
    claims_rows = {
        "description": (
            "The claims' own rows of protocol 2 (docs/testbed.md, \"Protocol 2's board\"): each "
            "card's rows the board does not run, at their method's chosen configuration, in both "
            "settings at the seeds their method runs there; after the board's and the ablation "
            "rows' plans."
        ),
        "suite": suite_file,
        "methods": hosts,
        "records": {"board": PROTOCOL2_RECORDS, "claims_rows": PROTOCOL2_CLAIMS_ROWS},
        "pins": {commit: hosts},
        "phases": [{"reproduce": card} for card in hosts],
    }
    head = "# Written with its suite by tools/campaign/tuning.py from the tuning records.\n"
    return tuple(  # type: ignore[return-value]
        head + yaml.safe_dump(plan, sort_keys=False, width=100)
        for plan in (board, ablation, claims_rows)
    )


def plan_paths(paths: dict[str, str], pin: str) -> tuple[dict[str, str], str]:
    """``paths`` (flag -> path) relative to the repository, as a plan names them (it reads its
    paths from its root), and the full id of the commit ``pin``; ValueError naming the argument
    that cannot be."""
    from pathlib import Path

    from creditbench.tools.campaign.worktrees import REPOSITORY, CheckoutError, resolve_commit

    named = {}
    for flag, value in paths.items():
        path = Path(value).resolve()
        if not path.is_relative_to(REPOSITORY):
            raise ValueError(f"{flag}: {value} lies outside the repository, where a plan reads")
        named[flag] = path.relative_to(REPOSITORY).as_posix()
    try:
        commit = resolve_commit(pin)
    except CheckoutError as err:
        raise ValueError(f"--pin: {err}") from None
    return named, commit
