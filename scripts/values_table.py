"""The values table of docs/methods/oracle.md from the committed ``creditbench values`` records.

    python scripts/values_table.py docs/results/values

Reads every ``<setting>-<policy>.csv`` of the folder (the records of ``creditbench values
--out``) and prints one markdown row per record file and group of states (all, right so far,
after a wrong step). Where ``earlier/state/<name>.csv`` and ``earlier/own/<name>.csv`` exist
(the same states valued before the wiped tens digits were scored, continued alone and in the
response's own later lines) the last column says how far the continuation alone moved them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from creditbench.tools.value_check import (
    QUANTILES,
    read_records,
    summarize,
    with_earlier,
)

GROUPS = {
    "all": lambda r: True,
    "right so far": lambda r: r["right_so_far"] == 1,
    "after a wrong step": lambda r: r["right_so_far"] == 0,
}


def rows(folder: Path) -> list[str]:
    out = [
        "| base, policy | which states | n | mean V (MC) | MAE (of it MC noise) | bias [95%] "
        "| RMSE without MC noise | abs. error p50 / p90 / p99 / max (MC noise alone) "
        "| mean abs. credit | moved by the earlier continuation p90 / max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(folder.glob("*.csv")):
        records = read_records(path)
        state, own = (folder / "earlier" / kind / path.name for kind in ("state", "own"))
        joined = (
            with_earlier(read_records(state), read_records(own))
            if state.exists() and own.exists()
            else []
        )
        for name, keep in GROUPS.items():
            group = [r for r in records if keep(r)]
            if len(group) < 2:
                continue
            s = summarize(group)
            quantiles = " / ".join(f"{s['abs_' + q]:.3f}" for q in QUANTILES)
            noise = " / ".join(f"{s['noise_' + q]:.3f}" for q in QUANTILES)
            moved = "n/a"
            earlier = [r for r in joined if keep(r)]
            if len(earlier) >= 2:
                e = summarize(earlier)
                moved = f"{e['action_p90']:.3f} / {e['action_max']:.3f}"
            out.append(
                f"| {path.stem} | {name} | {s['states']} | {s['mean_value']:.3f} "
                f"| {s['mae']:.3f} ({s['noise_mae']:.3f}) "
                f"| {s['bias']:+.3f} [{s['bias_lo']:+.3f}, {s['bias_hi']:+.3f}] "
                f"| {s['rmse_corrected']:.3f} | {quantiles} ({noise}) "
                f"| {s['credit_mean']:.3f} | {moved} |"
            )
    return out


if __name__ == "__main__":
    print("\n".join(rows(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/values"))))
