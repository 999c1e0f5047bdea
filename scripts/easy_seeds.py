"""Which rows of the standard suite run easy seeds 5-9: the rule of docs/testbed.md, "The easy
setting's seeds 5-9", applied to the records of easy seeds 0-4.

    python scripts/easy_seeds.py RECORDS [--methods all|NAME,NAME,...]

Prints one method a line: GRPO and the oracle, then every method whose easy AUC gain over GRPO
at seeds 0-4 the claim rule leaves undecided (its bootstrap or its t interval contains 0).
RECORDS is a results folder or a committed ``runs.csv``. Exit 2, printing nothing, while a
method of ``--methods`` (default: every registered method and the oracle) lacks one of its
easy seeds 0-4: the rule reads all of them at once.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd

from creditbench.leaderboard.board import summarize
from creditbench.leaderboard.collect import collect_runs
from creditbench.leaderboard.headline import setting_rows
from creditbench.leaderboard.stats import BASELINE, ORACLE

FIRST_SEEDS = range(5)


def undecided(frame: pd.DataFrame) -> list[str]:
    """The methods of ``frame`` (one setting's rows of ``summarize()["methods"]``) whose AUC
    gain over GRPO is neither ahead nor behind by the claim rule, best first."""
    rows = frame[~frame["method"].isin([BASELINE, ORACLE])]
    decided = rows["gain_auc_separates"].fillna(False).astype(bool) | rows[
        "gain_auc_reversed"
    ].fillna(False).astype(bool)
    return [str(m) for m in rows.loc[~decided].sort_values("gain_auc", ascending=False)["method"]]


def easy_seeds(records: str, methods: Sequence[str]) -> list[str]:
    """GRPO, the oracle and the undecided methods; ValueError naming the missing runs."""
    table, _ = collect_runs([records])
    easy = setting_rows(table, "easy")
    first = easy[easy["seed"].isin(FIRST_SEEDS)]
    runs = first[first["kind"] == "run"]
    missing = [m for m in methods if (runs["method"] == m).sum() < len(FIRST_SEEDS)]
    if missing:
        raise ValueError(f"easy seeds 0-4 missing for: {', '.join(missing)}")
    frame = summarize(first)["methods"]
    frame = frame[frame["method"].isin(methods)]
    return [BASELINE, ORACLE, *undecided(frame)]


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--methods"):
        print("usage: python scripts/easy_seeds.py RECORDS [--methods all|A,B]", file=sys.stderr)
        return 2
    names = argv[2] if len(argv) == 3 else "all"
    if names == "all":
        from creditbench.methods.registry import list_methods

        methods = sorted({*list_methods(), ORACLE})
    else:
        methods = [m for m in names.split(",") if m]
    try:
        chosen = easy_seeds(argv[0], methods)
    except (OSError, ValueError) as err:
        print(f"easy_seeds: {err}", file=sys.stderr)
        return 2
    print("\n".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
