"""What a run reports about itself: the budget counters of every record and ``summary.json``."""

from __future__ import annotations

from typing import Any

from creditbench.harness.budget import BudgetMeter
from creditbench.harness.config import RunConfig
from creditbench.harness.records.files import budget_auc, spent_fraction


def default_run_name(config: RunConfig) -> str:
    return config.run_name or f"{config.method}-{config.task}-s{config.seed}"


def budget_fields(meter: BudgetMeter) -> dict[str, Any]:
    """The meter's counters as every step and eval record carries them."""
    return {
        "budget_fraction": meter.fraction() if meter.unit != "seconds" else None,
        "flops": meter.flops,
        "generated_tokens": meter.generated_tokens,
        "forward_tokens": meter.forward_tokens,
        "trained_tokens": meter.trained_tokens,
        "optimizer_steps": meter.optimizer_steps,
        # A reference method's uncharged passes, in the records of a run that has them (their
        # wall clock goes under "time" with the other clocks: it differs between identical runs)
        **{
            f"reference_{k}": v
            for k, v in meter.reference.items()
            if meter.reference["flops"] and k != "seconds"
        },
    }


def run_summary(
    config: RunConfig,
    *,
    steps: int,
    meter: BudgetMeter,
    evals: list[dict[str, Any]],
    wall_seconds: float,
    status: str = "finished",
    error: str | None = None,
) -> dict[str, Any]:
    """``summary.json``: status, identity, budget spent, first/last/best evaluation and the
    area under the accuracy-versus-budget-fraction curve (:func:`budget_auc`; left out when the
    evaluations end short of the budget). ``evals``: the evaluations at budget fractions."""
    summary: dict[str, Any] = {
        "status": status,
        "method": config.method,
        "task": config.task,
        "task_options": config.task_options,
        "seed": config.seed,
        "run_name": default_run_name(config),
        "steps": steps,
        "budget": {
            "unit": config.budget.unit,
            "amount": config.budget.amount,
            **budget_fields(meter),
        },
    }
    if error is not None:
        summary["error"] = error
    if evals:
        summary["initial_eval"] = evals[0]
        summary["final_eval"] = evals[-1]
        key = "sampled_accuracy" if "sampled_accuracy" in evals[-1] else "greedy_accuracy"
        summary["best_eval"] = max(evals, key=lambda e: e.get(key, 0.0))
        summary["improvement"] = evals[-1].get(key, 0.0) - evals[0].get(key, 0.0)
        if spent_fraction(evals[-1]) >= 1.0:  # a run stopped early has no AUC over its budget
            summary["auc"] = {
                metric: budget_auc(evals, metric)
                for metric in ("sampled_accuracy", "greedy_accuracy")
                if all(metric in e for e in evals)
            }
    summary["time"] = {"wall_seconds": wall_seconds, "budget_seconds": meter.seconds}
    return summary
