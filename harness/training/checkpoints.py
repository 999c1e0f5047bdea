"""A run's checkpoints: what the trainer saves every ``checkpoint_every`` steps, and how a
resumed run takes it back so that it continues exactly as an uninterrupted one.

A checkpoint holds the policy's weights, the optimizer's state, the auxiliary models' state (a
teacher, a reward model), the random-number state and the trainer's own state: the step, the
budget meter, the evaluations so far, the responses trained, and the config it was trained
under, so that a resume refuses a ``config.yaml`` edited since (a run that silently mixed two
learning rates is no run of either).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from creditbench.harness.config import to_dict
from creditbench.harness.records.rundir import RunDirError, config_differences, restore_rng_state

if TYPE_CHECKING:
    from creditbench.harness.training.trainer import Trainer


def trainer_state(trainer: Trainer) -> dict[str, Any]:
    """The trainer's part of a checkpoint, JSON-ready."""
    config = json.loads(json.dumps(to_dict(trainer.config)))
    return {"step": trainer.step, "meter": trainer.meter.state_dict(), "evals": trainer.evals,
            "responses_trained": trainer.responses_trained, "config": config}  # fmt: skip


def save_checkpoint(trainer: Trainer) -> None:
    trainer.run_dir.save_checkpoint(
        trainer.step,
        model=trainer.policy,
        tokenizer=trainer.tokenizer,
        optimizer_state=trainer.optimizer.state_dict(),
        trainer_state=trainer_state(trainer),
        auxiliary_state=trainer.services.scorers.auxiliary_state(),
    )


def restore(trainer: Trainer) -> None:
    """Continue from the latest complete checkpoint, or start over if there is none."""
    run_dir = trainer.run_dir
    latest = run_dir.latest_checkpoint()
    if latest is None:
        run_dir.truncate_metrics(-1)
        return
    saved = run_dir.load_checkpoint(latest)
    state = saved.get("trainer_state")
    check_unchanged(trainer, state.get("config") if isinstance(state, dict) else None, latest)
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    try:
        weights = str(Path(saved["path"]) / "model.safetensors")
        load_model(trainer.policy, weights, device=str(trainer.device))
        trainer.optimizer.load_state_dict(saved["optimizer_state"])
        trainer.services.scorers.load_auxiliary_state(saved["auxiliary_state"])
        state = saved["trainer_state"]
        trainer.step = int(state["step"])
        trainer.meter.load_state_dict(state["meter"])
        trainer.evals = list(state["evals"])
        trainer.responses_trained = int(state["responses_trained"])
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, RuntimeError) as err:
        # a checkpoint damaged after it was marked complete (a truncated copy, an edit)
        missing = f"missing {err}" if isinstance(err, KeyError) else str(err).splitlines()[0]
        raise RunDirError(
            f"{latest}: cannot resume from this checkpoint ({missing}); move it away to "
            "resume from the one before"
        ) from None
    run_dir.truncate_metrics(trainer.step)
    trainer.services.on_policy_updated()
    restore_rng_state(saved["rng_state"])


def check_unchanged(trainer: Trainer, trained_under: dict[str, Any] | None, checkpoint: Path):
    """`RunDirError` naming the fields when the run's config differs from the one
    ``checkpoint`` was trained under (checkpoints older than this check carry none)."""
    if trained_under is None:
        return
    now = json.loads(json.dumps(to_dict(trainer.config)))
    differ = config_differences(trained_under, now)
    if differ:
        raise RunDirError(
            f"{trainer.run_dir.config_path}: changed since {checkpoint.name} was written "
            f"(differs in {', '.join(differ[:5])}); put the old values back to resume, or "
            "start a new run"
        )
