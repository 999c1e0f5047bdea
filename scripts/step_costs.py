"""Every method's wall time a training step over GRPO's, measured side by side: the board's cost.

    python scripts/step_costs.py RECORDS RUN [RUN ...] --out step_costs.csv [--rounds 3]

The campaign's runs record their median training step, but they ran beside other work whose
load changed from run to run (GRPO's hard runs took a median 2.2 to 4.4 s a step), so the ratio
of two methods' run medians mixes loads. Here one process builds the trainer of each RUN (a run
name in RECORDS, a results folder or a committed ``runs.csv``: its config is the setting's) and
gives every registered method one step in turn on it (:func:`creditbench.tools.perf.method_steps`,
GRPO among them), for ``--rounds`` rounds; a method's cost is the median of its steps over
GRPO's median. The outside CPU load while it ran is written beside (quiet: under 0.2 cores).

The board (``creditbench leaderboard``) reads ``step_costs.csv`` beside a ``runs.csv`` it
renders and shows these ratios in its cost column instead of the runs' own.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

COLUMNS = [
    "task",
    "options",
    "setting",
    "method",
    "rounds",
    "step_seconds",
    "wall_per_step_ratio",
    "flops_per_step_ratio",
    "outside_load_cores",
    "commit",
]


def setting_costs(records: str, run: str, rounds: int, methods: list[str] | None) -> list[dict]:
    """The rows of ``COLUMNS`` for the setting of the run ``run`` of ``records``."""
    import torch

    from creditbench.harness.config import load_config
    from creditbench.harness.records.provenance import capture_environment
    from creditbench.harness.training.trainer import Trainer
    from creditbench.leaderboard.collect import collect_runs
    from creditbench.tools.perf import method_steps
    from creditbench.tools.perf_compare import OutsideLoad

    table, _ = collect_runs([records])
    found = table[(table["kind"] == "run") & (table["run"] == run)]
    if found.empty:
        raise ValueError(f"{records}: no finished run named {run}")
    row = found.iloc[0]
    folder = Path(records) if Path(records).is_dir() else Path(records).parent
    config_path = folder / run / "config.yaml"
    if not config_path.is_file():
        raise ValueError(f"{config_path}: the run's config is missing")
    torch.set_num_threads(1)  # as the campaign's workers ran: one thread a run
    scratch = tempfile.mkdtemp(prefix="step_costs-")  # the trainer's folder, not the run's
    overrides = ["budget.unit=steps", "budget.amount=1000000", f"output_dir={scratch}"]
    trainer = Trainer(load_config(str(config_path), overrides))  # budget counted, never stops
    trainer.build()
    trainer.train_step()  # warm-up: the first step pays for allocations and caches
    steps: dict[str, list[float]] = {}
    flops: dict[str, list[float]] = {}
    with OutsideLoad() as load:
        for _ in range(rounds):
            for step in method_steps(trainer, methods):
                steps.setdefault(str(step["method"]), []).append(float(step["step"]))
                flops.setdefault(str(step["method"]), []).append(float(step["flops"]))
    shutil.rmtree(scratch, ignore_errors=True)
    grpo_step, grpo_flops = statistics.median(steps["grpo"]), statistics.median(flops["grpo"])
    environment = capture_environment()
    commit = environment["git_commit"] + ("-dirty" if environment["git_dirty"] else "")
    return [
        {
            "task": row["task"],
            "options": row["options"],
            "setting": row["setting"],
            "method": method,
            "rounds": len(seconds),
            "step_seconds": round(statistics.median(seconds), 4),
            "wall_per_step_ratio": round(statistics.median(seconds) / grpo_step, 4),
            "flops_per_step_ratio": round(statistics.median(flops[method]) / grpo_flops, 4),
            "outside_load_cores": None if load.cores is None else round(load.cores, 2),
            "commit": commit,
        }
        for method, seconds in steps.items()
    ]


def main(argv: list[str]) -> int:
    import pandas as pd

    parser = argparse.ArgumentParser(prog="python scripts/step_costs.py")
    parser.add_argument("records", help="a results folder or a committed runs.csv")
    parser.add_argument("runs", nargs="+", help="one run name a setting: its config is used")
    parser.add_argument("--out", required=True, help="the CSV to write (step_costs.csv)")
    parser.add_argument("--rounds", type=int, default=3, help="steps of each method (default 3)")
    parser.add_argument("--methods", help="NAME,NAME,... (default: every registered method)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # bad arguments: argparse printed the usage line; exit 2
        return int(stop.code or 0)
    if args.rounds < 1:
        print("step_costs: --rounds must be at least 1", file=sys.stderr)
        return 2
    methods = [m for m in args.methods.split(",") if m] if args.methods else None
    try:
        rows = [
            row
            for run in args.runs
            for row in setting_costs(args.records, run, args.rounds, methods)
        ]
    except (OSError, ValueError) as err:
        print(f"step_costs: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    part = out.with_name(out.name + ".part")  # nothing half-written: rename when complete
    pd.DataFrame(rows, columns=COLUMNS).to_csv(part, index=False)
    part.replace(out)
    for r in rows:
        print(f"{r['options']:<64} {r['method']:<24} {r['wall_per_step_ratio']:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
