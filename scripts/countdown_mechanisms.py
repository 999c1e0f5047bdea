"""Where each mechanism class acts in the countdown world, at a base policy: the figures of
:func:`creditbench.harness.tasks.countdown.diagnostics.measure`, averaged over a few batches
of the default rollout (4 prompts x 8 responses).

    python scripts/countdown_mechanisms.py --batches 3 --task-option blunder_rate=0.0

The base policy is the one the run config names (``creditbench bootstrap --task countdown``
builds or finds it; ``$CREDITBENCH_CACHE`` is honoured).
"""

from __future__ import annotations

import argparse
import json
import tempfile

from creditbench.harness.config import load_config
from creditbench.harness.services.step_plan import StepPlan
from creditbench.harness.tasks.countdown.diagnostics import measure
from creditbench.harness.training.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    settings = ["task=countdown", "rollout.max_new_tokens=96", *args.set]
    settings += [f"task_options.{option}" for option in args.task_option]
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(load_config(None, settings), run_dir)
        trainer.build()
        trainer.services.begin_step(StepPlan(0, reference_method=False))
        shares = measure(trainer.services, args.batches)
    print(json.dumps({key: round(value, 4) for key, value in shares.items()}, indent=1))


if __name__ == "__main__":
    main()
