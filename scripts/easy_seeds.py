"""Which rows of the standard suite run easy seeds 5-9: the rule of docs/testbed.md, "The easy
setting's seeds 5-9" (``creditbench.tools.campaign.easy_seeds``), on the command line.

    python scripts/easy_seeds.py RECORDS [--methods all|NAME,NAME,...]
    python scripts/easy_seeds.py RECORDS --plan

Prints one method a line: GRPO and the oracle, then every method whose easy AUC gain over GRPO
at seeds 0-4 the claim rule leaves undecided. RECORDS is a results folder or a committed
``runs.csv``. Exit 2, printing nothing, while a method of ``--methods`` (default: every
registered method and the oracle) lacks one of its easy seeds 0-4.

``--plan`` prints the campaign's plan as a suite manifest (JSON, the board's
``suite-standard.json``, which ``creditbench campaign standard --sync`` writes): the standard
suite's runs less the easy seeds 5-9 of the rows the rule has not chosen.
"""

from __future__ import annotations

import sys

from creditbench.leaderboard.stats import ORACLE
from creditbench.tools.campaign.easy_seeds import campaign_manifest, easy_seeds

__all__ = ["campaign_manifest", "easy_seeds", "main"]


def main(argv: list[str]) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python scripts/easy_seeds.py")
    parser.add_argument("records", help="a results folder or a committed runs.csv")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--methods", default="all", help="all, or NAME,NAME,...")
    choice.add_argument(
        "--plan", action="store_true", help="print the campaign's plan as a suite manifest"
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # bad arguments: argparse printed the usage line; exit 2
        return int(stop.code or 0)
    try:
        if args.plan:
            print(json.dumps(campaign_manifest(args.records), indent=1))
            return 0
        if args.methods == "all":
            from creditbench.methods.registry import list_methods

            methods = sorted({*list_methods(), ORACLE})
        else:
            methods = [m for m in args.methods.split(",") if m]
        chosen = easy_seeds(args.records, methods)
    except (OSError, ValueError) as err:
        print(f"easy_seeds: {err}", file=sys.stderr)
        return 2
    print("\n".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
