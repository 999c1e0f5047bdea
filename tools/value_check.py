"""Does the task's own value of a state agree with Monte Carlo? (``creditbench values``)

The exact-credit oracle can take its values V(s_k) = P(R = 1 | s_k) from the task
(``estimator=analytic``, ``Services.task_values``) instead of from continuations. That estimate
rests on approximations (``harness/tasks/chain/values.py``), so before it stands in for Monte
Carlo it is checked against it: ``creditbench values`` samples ``batches`` batches at the run's
starting policy (no step is taken), picks ``states`` distinct states of each at random, and
estimates each state's value both ways, Monte Carlo with ``samples`` continuations.

A Monte-Carlo value is itself noisy (standard error sqrt(V(1 - V)/M)), so the summary gives,
beside the mean absolute difference, the part of it that noise alone explains and the error of
the task's values once the Monte-Carlo variance is taken out:

- ``mae``: mean |analytic - mc|;
- ``noise_mae``: the mean |difference| Monte-Carlo noise alone would give,
  mean sqrt(2/pi * m(1 - m)/(M - 1)) (a normal approximation);
- ``bias``: mean (analytic - mc), with a 95% interval over states;
- ``rmse_corrected``: sqrt(max(0, mean (analytic - mc)^2 - mean m(1 - m)/(M - 1))), the root
  mean squared error of the analytic value against the true one (the estimator's noise has
  that variance, unbiasedly);
- ``abs_p50``, ``abs_p90``, ``abs_p99``, ``abs_max``: quantiles of |analytic - mc| over states,
  beside ``noise_p50`` ... ``noise_max``, the same quantiles had the analytic values been exact
  (Monte Carlo drawn from them, the median over 200 draws), so a tail that noise alone makes
  is told from the estimator's own;

over all states and separately for the states whose steps are all right so far and the states
after a wrong step.

Beside each state, ``credit``: the exact credit A_k = V(s_{k+1}) - V(s_k) of the step the
state begins (``credit_mean``, its mean |A_k|), the scale the values' error is read against.
The estimator's continuation changed at commit bf1dca0: before it (commit ce27b57 and
earlier) a state was continued in the response's own later fillers and forms, so V(s_k) read
the action at step k. Records of both, made on the same batches and states, are joined by
:func:`with_earlier` (``analytic_own``: the earlier values), and the summary then gives
``action_p50`` ... ``action_max``, the quantiles of |analytic - analytic_own|.

``--checkpoint DIR`` values the states of the policy saved in a run's checkpoint (its
``model.safetensors``), so the values are checked where the results live, not only at the start.
``--mc-from CSV`` takes the Monte-Carlo values of an earlier check of the same states (same
config, policy, batches and states) instead of sampling them again: a changed estimator is
checked in seconds against the Monte Carlo already paid for.
"""

from __future__ import annotations

import csv
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from creditbench.harness.services.step_plan import StepPlan
from creditbench.methods.contract import FIRST_WRONG_MASK, PROBLEM_INDEX
from creditbench.methods.values import mc_state_values, state_prefixes, state_starts, step_credit

CONTINUATIONS_PER_CALL = 4096
FIELDS = ("batch", "problem", "state", "right_so_far", "analytic", "credit", "mc", "samples")
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
NOISE_DRAWS = 200


def compare_values(
    trainer: Any, batches: int, states: int, samples: int, known: list[dict] | None = None
) -> list[dict]:
    """One record per compared state (:data:`FIELDS`). ``known``: the records of an earlier
    check of the same states (the same config, policy, batches and states), whose Monte-Carlo
    values are taken instead of sampled again, each checked to be the same state."""
    services = trainer.services
    records: list[dict] = []
    for b in range(batches):
        services.begin_step(StepPlan(b, reference_method=True))
        batch = services.sample_batch()
        analytic = services.task_values(batch)
        starts, valid = state_starts(batch.step_ids)
        credit = step_credit(analytic, valid, batch.rewards)
        index = batch.extra(PROBLEM_INDEX).tolist()
        first_wrong = batch.extra(FIRST_WRONG_MASK) > 0
        distinct: dict[tuple, tuple[int, int]] = {}
        for row, k, prefix in state_prefixes(batch)[0]:
            distinct.setdefault((index[row], prefix), (row, k))
        chosen = list(distinct.values())
        order = torch.randperm(len(chosen), generator=services.generator(7919)).tolist()
        chosen = [chosen[i] for i in order[:states]]
        mc = torch.full(valid.shape, float("nan"))
        per_call = max(1, CONTINUATIONS_PER_CALL // samples)
        if known is not None:  # the earlier check's Monte Carlo, state by state
            earlier = [r for r in known if r["batch"] == b]
            if [(r["problem"], r["state"]) for r in earlier] != [(index[r], k) for r, k in chosen]:
                raise ValueError(f"--mc-from: batch {b} holds other states than this check's")
            for (row, k), record in zip(chosen, earlier, strict=True):
                mc[row, k] = record["mc"]
            samples = int(earlier[0]["samples"]) if earlier else samples
            chosen_for_sampling: list[tuple[int, int]] = []
        else:
            chosen_for_sampling = chosen
        for start in range(0, len(chosen_for_sampling), per_call):  # a bounded cache per call
            only = torch.zeros_like(valid)
            for row, k in chosen_for_sampling[start : start + per_call]:
                only[row, k] = True
            with services.reference_passes():
                part = mc_state_values(services, batch, samples, only=only)
            mc = torch.where(only, part, mc)
        for row, k in chosen:
            records.append(
                {
                    "batch": b,
                    "problem": index[row],
                    "state": k,
                    # none of the state's own tokens lies on the first wrong step
                    "right_so_far": int(not first_wrong[row, : int(starts[row, k])].any()),
                    "analytic": float(analytic[row, k]),
                    "credit": float(credit[row, k]),  # of the step that state k begins
                    "mc": float(mc[row, k]),
                    "samples": samples,
                }
            )
    return records


def read_records(path: str | Path) -> list[dict]:
    """The records of a ``creditbench values --out`` CSV, numbers as numbers."""
    with Path(path).open(newline="", encoding="utf-8") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def with_earlier(records: list[dict], earlier: list[dict]) -> list[dict]:
    """``records`` with ``analytic_own``: the ``analytic`` value of the same state in
    ``earlier``, records of the same command on the same batches (the states come in the same
    order: several responses can reach one problem's state ``k`` by different prefixes, so the
    state is matched by its place, and its batch, problem, index and Monte-Carlo value must
    agree)."""
    key = lambda r: (r["batch"], r["problem"], r["state"], r["mc"])  # noqa: E731
    if len(records) != len(earlier) or any(
        key(a) != key(b) for a, b in zip(records, earlier, strict=True)
    ):
        raise ValueError("earlier records: not the same states in the same order")
    return [r | {"analytic_own": e["analytic"]} for r, e in zip(records, earlier, strict=True)]


def _quantiles(values: torch.Tensor, prefix: str) -> dict[str, float]:
    return {f"{prefix}_{name}": float(values.quantile(q)) for name, q in QUANTILES.items()}


def noise_quantiles(records: list[dict], draws: int = NOISE_DRAWS) -> dict[str, float]:
    """The quantiles of |analytic - mc| that Monte-Carlo noise alone would give, were the
    analytic values exact: each draw samples every state's Monte-Carlo value from them."""
    truth = torch.tensor([min(max(r["analytic"], 0.0), 1.0) for r in records], dtype=torch.float64)
    count = torch.tensor([float(r["samples"]) for r in records], dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    per_draw = []
    for _ in range(draws):
        mc = torch.binomial(count, truth, generator=generator) / count
        gaps = (truth - mc).abs()
        per_draw.append(torch.stack([gaps.quantile(q) for q in QUANTILES.values()]))
    medians = torch.stack(per_draw).median(dim=0).values
    return {f"noise_{name}": float(v) for name, v in zip(QUANTILES, medians, strict=True)}


def summarize(records: list[dict]) -> dict[str, float]:
    """The figures of the module docstring over ``records``."""
    diffs = [r["analytic"] - r["mc"] for r in records]
    noise = [r["mc"] * (1 - r["mc"]) / max(r["samples"] - 1, 1) for r in records]
    n = len(diffs)
    bias = statistics.mean(diffs)
    half = 1.96 * statistics.stdev(diffs) / math.sqrt(n) if n > 1 else math.nan
    squared = statistics.mean(d * d for d in diffs) - statistics.mean(noise)
    figures = {
        "states": n,
        "mae": statistics.mean(abs(d) for d in diffs),
        "noise_mae": statistics.mean(math.sqrt(2 / math.pi * v) for v in noise),
        "bias": bias,
        "bias_lo": bias - half,
        "bias_hi": bias + half,
        "rmse_corrected": math.sqrt(max(squared, 0.0)),
        "mean_value": statistics.mean(r["mc"] for r in records),
    }
    figures |= _quantiles(torch.tensor([abs(d) for d in diffs], dtype=torch.float64), "abs")
    figures |= noise_quantiles(records)
    if all("credit" in r for r in records):
        figures["credit_mean"] = statistics.mean(abs(r["credit"]) for r in records)
    if all("analytic_own" in r for r in records):
        action = [abs(r["analytic"] - r["analytic_own"]) for r in records]
        figures |= _quantiles(torch.tensor(action, dtype=torch.float64), "action")
    return figures


def run_value_check(
    config_path: str | None,
    overrides: list[str],
    batches: int,
    states: int,
    samples: int,
    out: str | None,
    checkpoint: str | None = None,
    mc_from: str | None = None,
) -> int:
    """Build the run of the config at its starting policy (or the policy of ``checkpoint``, a
    run's ``checkpoints/step-N`` folder, whose run's config is the default), compare, print
    (and write)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    from creditbench.harness.config import ConfigError, load_config
    from creditbench.harness.training.trainer import Trainer

    weights = None
    if checkpoint is not None:
        weights = Path(checkpoint) / "model.safetensors"
        if not weights.is_file():
            raise ConfigError(f"--checkpoint: {checkpoint} holds no model.safetensors")
        run_config = Path(checkpoint).parent.parent / "config.yaml"
        if config_path is None and run_config.is_file():
            config_path = str(run_config)
    config = load_config(config_path, overrides)
    with tempfile.TemporaryDirectory() as scratch:
        trainer = Trainer(config, scratch)
        trainer.build()
        if weights is not None:
            try:
                load_model(trainer.policy, str(weights), device=str(trainer.device))
            except (SafetensorError, RuntimeError) as err:
                message = str(err).splitlines()[0]
                raise ConfigError(
                    f"--checkpoint: {weights} does not fit the run's model: {message}"
                ) from None
            trainer.services.on_policy_updated()
        known = None
        if mc_from is not None:
            try:
                known = read_records(mc_from)
            except (OSError, ValueError, KeyError) as err:
                raise ConfigError(f"--mc-from: {mc_from}: not a values record ({err})") from None
        records = compare_values(trainer, batches, states, samples, known)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        with partial.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(records)
        partial.replace(path)
    policy = f"checkpoint {checkpoint}" if checkpoint else "the starting policy"
    print(
        f"{len(records)} states of {batches} batches of {config.rollout.prompts_per_step} x "
        f"{config.rollout.group_size} at {policy} of task {config.task} "
        f"{config.task_options}; Monte Carlo with {samples} continuations each"
    )
    print(
        f"  {'states':<14} {'n':>4} {'mean V':>7} {'mae':>6} {'noise_mae':>9} "
        f"{'bias [95%]':>24} {'rmse_corrected':>14}   |error| p50 p90 p99 max (noise alone)"
    )
    groups = {
        "all": records,
        "right so far": [r for r in records if r["right_so_far"]],
        "after a wrong": [r for r in records if not r["right_so_far"]],
    }
    for name, group in groups.items():
        if not group:
            continue
        s = summarize(group)
        interval = f"{s['bias']:+.3f} [{s['bias_lo']:+.3f}, {s['bias_hi']:+.3f}]"
        print(
            f"  {name:<14} {s['states']:>4} {s['mean_value']:7.3f} {s['mae']:6.3f} "
            f"{s['noise_mae']:9.3f} {interval:>24} {s['rmse_corrected']:14.3f}   "
            + " ".join(f"{s['abs_' + q]:.3f} ({s['noise_' + q]:.3f})" for q in QUANTILES)
        )
    s = summarize(records)
    print(f"  mean |credit| of the steps these states begin: {s['credit_mean']:.4f}")
    return 0
