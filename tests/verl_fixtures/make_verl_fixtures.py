"""Regenerate the verl golden fixtures that ``tests/test_verl_fixtures.py`` replays.

CI never runs this script and never imports verl: it only replays the JSON files written here.
Run it by hand when the pinned verl version changes.

verl pins an older transformers and pulls in ray, so it is installed into a separate folder
without its dependencies, never into the project's environment::

    VERL_SITE=$(mktemp -d)
    pip install --no-deps --target "$VERL_SITE" verl==0.9.1 omegaconf codetiming orjson \\
        "tensordict<=0.10" pyvers cloudpickle importlib_metadata
    PYTHONPATH="$VERL_SITE" python tests/verl_fixtures/make_verl_fixtures.py

Only ``verl/protocol.py`` needs ray, so a stub module stands in for it below.

The inputs are random but chosen so that the comparison is exact where it should be: rewards
are dyadic (multiples of 1/8, so a group of equal rewards has a standard deviation of exactly
0 in float32), every row of a mask has at least one valid token, some masks have holes (tokens
kept as context but not trained on), group sizes are unequal and include a group of one, and
group members are not always adjacent. Everything is float32, as in verl's trainer.

Files written next to this script, one per case family: ``grpo.json``, ``rloo.json``,
``reinforce_pp.json``, ``reinforce_pp_baseline.json``, ``ppo_loss.json``, ``agg_loss.json``.
Each records the verl and torch versions and a list of cases (inputs and verl's outputs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from unittest.mock import MagicMock

import numpy as np
import torch


def _stub_ray() -> None:
    ray = ModuleType("ray")
    ray.__getattr__ = lambda name: MagicMock(name=f"ray.{name}")  # type: ignore[method-assign]
    sys.modules["ray"] = ray


_stub_ray()

import verl  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

VERL_VERSION = "0.9.1"
SEEDS = (0, 1, 2, 3)
# group-based estimators also get batches with no group of one, which compare cleanly even
# where the singleton conventions differ
NO_SINGLETON_SEEDS = (4, 5)
WIDTH = 11  # padded response length T
OUT_DIR = Path(__file__).resolve().parent
AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


def to_list(t: torch.Tensor) -> list:
    """A float32 tensor as nested lists; 9 significant digits round-trip a float32 exactly."""
    array = t.detach().to(torch.float32).numpy()
    return np.vectorize(lambda x: float(f"{x:.9g}"), otypes=[object])(array).tolist()


def random_mask(gen: torch.Generator, batch: int, holes: bool) -> torch.Tensor:
    """``[B, T]`` right-padded mask, optionally with interior holes; >= 1 valid token a row."""
    lengths = torch.randint(1, WIDTH + 1, (batch,), generator=gen)
    mask = (torch.arange(WIDTH).unsqueeze(0) < lengths.unsqueeze(1)).float()
    if holes:
        for row in range(batch):
            if lengths[row] >= 3 and torch.rand((), generator=gen) < 0.5:
                start = int(torch.randint(1, int(lengths[row]) - 1, (), generator=gen))
                mask[row, start : start + int(torch.randint(1, 3, (), generator=gen))] = 0.0
    mask[:, 0] = 1.0
    return mask


def random_groups(gen: torch.Generator, seed: int) -> tuple[list[str], list[int]]:
    """Group labels as verl sees them (uid strings) with unequal sizes and one singleton
    (none for ``NO_SINGLETON_SEEDS``).

    Returns the per-row labels and the list of group sizes. Odd seeds shuffle the rows so that
    group members are not adjacent (verl groups by label equality, not by position).
    """
    sizes = [int(torch.randint(2, 6, (), generator=gen)) for _ in range(3)]
    if seed not in NO_SINGLETON_SEEDS:
        sizes = [1, *sizes]
    labels = [f"uid-{seed}-{g}" for g, size in enumerate(sizes) for _ in range(size)]
    if seed % 2 == 1:
        order = torch.randperm(len(labels), generator=gen).tolist()
        labels = [labels[i] for i in order]
    return labels, sizes


def outcome_rewards(gen: torch.Generator, labels: list[str], mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` token rewards: a dyadic outcome at the last valid token plus sparse dyadic
    shaping on other valid tokens. The first multi-member group gets equal row sums."""
    batch = len(labels)
    rewards = torch.zeros(batch, WIDTH)
    shaping = torch.randint(-2, 3, (batch, WIDTH), generator=gen).float() / 8
    keep = (torch.rand(batch, WIDTH, generator=gen) < 0.2).float()
    rewards += shaping * keep * mask
    last = (mask * torch.arange(1, WIDTH + 1)).argmax(-1)
    outcome = torch.randint(0, 3, (batch,), generator=gen).float() / 2
    rewards[torch.arange(batch), last] += outcome
    counts = {label: labels.count(label) for label in labels}
    tie = next(label for label in labels if counts[label] > 1)
    for row, label in enumerate(labels):
        if label == tie:  # a zero-variance group: every member scores 0.5 in total
            rewards[row] = 0.0
            rewards[row, last[row]] = 0.5
    return rewards


def advantage_inputs(seed: int, holes: bool = True) -> dict:
    gen = torch.Generator().manual_seed(1000 + seed)
    labels, sizes = random_groups(gen, seed)
    mask = random_mask(gen, len(labels), holes)
    rewards = outcome_rewards(gen, labels, mask)
    return {"labels": labels, "group_sizes": sizes, "mask": mask, "token_rewards": rewards}


def grpo_cases() -> list[dict]:
    cases = []
    for seed in SEEDS + NO_SINGLETON_SEEDS:
        inp = advantage_inputs(seed)
        index = np.array(inp["labels"], dtype=object)
        for norm in (True, False):
            adv, _ = core_algos.compute_grpo_outcome_advantage(
                inp["token_rewards"].clone(), inp["mask"], index, norm_adv_by_std_in_grpo=norm
            )
            cases.append(
                {
                    "seed": seed,
                    "norm_adv_by_std_in_grpo": norm,
                    "epsilon": 1e-6,
                    "index": inp["labels"],
                    "group_sizes": inp["group_sizes"],
                    "token_level_rewards": to_list(inp["token_rewards"]),
                    "response_mask": to_list(inp["mask"]),
                    "advantages": to_list(adv),
                }
            )
    return cases


def scalar_estimator_cases(fn) -> list[dict]:
    cases = []
    for seed in SEEDS + NO_SINGLETON_SEEDS:
        inp = advantage_inputs(seed)
        index = np.array(inp["labels"], dtype=object)
        adv, _ = fn(
            token_level_rewards=inp["token_rewards"].clone(),
            response_mask=inp["mask"],
            index=index,
            config=AlgoConfig(),
        )
        cases.append(
            {
                "seed": seed,
                "index": inp["labels"],
                "group_sizes": inp["group_sizes"],
                "token_level_rewards": to_list(inp["token_rewards"]),
                "response_mask": to_list(inp["mask"]),
                "advantages": to_list(adv),
            }
        )
    return cases


def reinforce_pp_cases() -> list[dict]:
    cases = []
    for seed in SEEDS:
        for holes in (False, True):
            gen = torch.Generator().manual_seed(2000 + seed)
            batch = 9
            mask = random_mask(gen, batch, holes)
            dense = torch.randint(-4, 5, (batch, WIDTH), generator=gen).float() / 8
            rewards = dense * (torch.rand(batch, WIDTH, generator=gen) < 0.5).float() * mask
            for gamma in (1.0, 0.9):
                adv, returns = core_algos.compute_reinforce_plus_plus_outcome_advantage(
                    token_level_rewards=rewards.clone(),
                    response_mask=mask,
                    config=AlgoConfig(gamma=gamma),
                )
                cases.append(
                    {
                        "seed": seed,
                        "gamma": gamma,
                        "mask_has_holes": holes,
                        "token_level_rewards": to_list(rewards),
                        "response_mask": to_list(mask),
                        "advantages": to_list(adv),
                        "returns": to_list(returns),
                    }
                )
    return cases


def ppo_loss_cases() -> list[dict]:
    cases = []
    for seed in SEEDS:
        gen = torch.Generator().manual_seed(3000 + seed)
        batch = 10
        mask = random_mask(gen, batch, holes=True)
        old = -torch.rand(batch, WIDTH, generator=gen) * 3
        delta = torch.randn(batch, WIDTH, generator=gen) * 0.3
        # a few large ratios (up to e^1.6 ~ 5) so that dual-clip at c = 3 acts
        delta += (torch.rand(batch, WIDTH, generator=gen) < 0.15).float() * 1.6
        new = old + delta
        new = torch.where(mask.bool(), new, new - 7.0)  # garbage on masked tokens
        adv = torch.randn(batch, WIDTH, generator=gen) * mask
        for clip_c, mode in (
            (1e9, "token-mean"),
            (3.0, "token-mean"),
            (3.0, "seq-mean-token-mean"),
        ):
            config = ActorConfig(
                strategy="fsdp",
                rollout_n=1,
                ppo_micro_batch_size_per_gpu=1,
                clip_ratio=0.2,
                clip_ratio_low=0.2,
                clip_ratio_high=0.28,
                clip_ratio_c=clip_c,
            )
            log_prob = new.clone().requires_grad_(True)
            loss, metrics = core_algos.compute_policy_loss_vanilla(
                old_log_prob=old,
                log_prob=log_prob,
                advantages=adv,
                response_mask=mask,
                loss_agg_mode=mode,
                config=config,
            )
            loss.backward()
            cases.append(
                {
                    "seed": seed,
                    "clip_ratio_low": 0.2,
                    "clip_ratio_high": 0.28,
                    "clip_ratio_c": clip_c,
                    "loss_agg_mode": mode,
                    "old_log_prob": to_list(old),
                    "log_prob": to_list(new),
                    "advantages": to_list(adv),
                    "response_mask": to_list(mask),
                    "loss": float(loss.detach()),
                    "grad_log_prob": to_list(log_prob.grad),
                    "pg_clipfrac": metrics["actor/pg_clipfrac"],
                    "pg_clipfrac_lower": metrics["actor/pg_clipfrac_lower"],
                    "ppo_kl": metrics["actor/ppo_kl"],
                }
            )
    return cases


def agg_loss_cases() -> list[dict]:
    """Every mode on the whole batch, and on two micro-batches given the whole batch's counts
    (``batch_num_tokens``, ``global_batch_size``); the last row is fully masked."""
    cases = []
    for seed in SEEDS:
        gen = torch.Generator().manual_seed(4000 + seed)
        batch = 8
        mask = random_mask(gen, batch, holes=True)
        mask[-1] = 0.0
        loss_mat = torch.randn(batch, WIDTH, generator=gen)
        num_tokens = mask.sum()
        num_seqs = (mask.sum(-1) > 0).float().sum()
        split = 3
        for mode in AGG_MODES:
            factors = (None, 16) if mode == "seq-mean-token-sum-norm" else (None,)
            for factor in factors:
                whole = core_algos.agg_loss(loss_mat, mask, mode, loss_scale_factor=factor)
                micro = [
                    core_algos.agg_loss(
                        loss_mat[rows],
                        mask[rows],
                        mode,
                        batch_num_tokens=num_tokens,
                        global_batch_size=num_seqs,
                        loss_scale_factor=factor,
                    )
                    for rows in (slice(0, split), slice(split, batch))
                ]
                cases.append(
                    {
                        "seed": seed,
                        "loss_agg_mode": mode,
                        "loss_scale_factor": factor,
                        "loss_mat": to_list(loss_mat),
                        "loss_mask": to_list(mask),
                        "loss": float(whole),
                        "micro_batch_split": split,
                        "batch_num_tokens": float(num_tokens),
                        "global_batch_size": float(num_seqs),
                        "micro_batch_losses": [float(m) for m in micro],
                    }
                )
    return cases


def write(name: str, function: str, cases: list[dict]) -> None:
    payload = {
        "verl_version": verl.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "verl_function": f"verl.trainer.ppo.core_algos.{function}",
        "cases": cases,
    }
    path = OUT_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, separators=(",", ":")) + "\n")
    print(f"{path.name}: {len(cases)} cases, {path.stat().st_size / 1024:.0f} KiB")


def main() -> None:
    if verl.__version__ != VERL_VERSION:
        raise SystemExit(f"verl {VERL_VERSION} expected, found {verl.__version__}")
    torch.set_num_threads(1)
    write("grpo", "compute_grpo_outcome_advantage", grpo_cases())
    write(
        "rloo",
        "compute_rloo_outcome_advantage",
        scalar_estimator_cases(core_algos.compute_rloo_outcome_advantage),
    )
    write(
        "reinforce_pp_baseline",
        "compute_reinforce_plus_plus_baseline_outcome_advantage",
        scalar_estimator_cases(core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage),
    )
    write("reinforce_pp", "compute_reinforce_plus_plus_outcome_advantage", reinforce_pp_cases())
    write("ppo_loss", "compute_policy_loss_vanilla", ppo_loss_cases())
    write("agg_loss", "agg_loss", agg_loss_cases())


if __name__ == "__main__":
    main()
