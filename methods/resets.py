"""RRPO and SRPO: credit assignment with resets to a state inside a failed response.

Paper: Samanta et al., "Credit Assignment with Resets in Language Model Reasoning",
arXiv 2605.25507 (2026); the authors' code is github.com/Ankur-Samanta/SRPO.

A response is a sequence of steps y_1..y_n. Per prompt q (the paper's "1x4" layout):

    G1 = N1 fresh responses y ~ π(·|q), every token trained
    ȳ  = the first failed fresh response, the parent (never trained on)
    k  = the reset step:  RRPO  k ~ Uniform{1..n(ȳ)}
                          SRPO  k = the first wrong step the policy itself names, shown ȳ and
                                told only that its answer is wrong (not trained on)
    G2 = N2 continuations z ~ π(·|q, ȳ_1..ȳ_{k-1}), trained on their own tokens only

    A_i = (r_i - μ_G) / σ_G  within G1 and within G2 separately; σ the population std,
          A_i = 0 when σ_G < 1e-8

    L(θ) = -(1/B) Σ_i A_i (1/|S_i|) Σ_{t∈S_i} log π_θ(y_it | q, y_i,<t)     (no ratio, clip, KL)

S_i is what response i sampled itself: all of a G1 response, the continuation of a G2 one (its
prefix stays in the context). G2's baseline μ_G2 estimates V(q, ȳ_1..ȳ_{k-1}). With no failure
within ``max_fresh`` attempts, all N1 + N2 slots are fresh and form one group: plain GRPO.

Defaults (the paper's code): N1 = N2 = 4, max_fresh = 12, localisation temperature 0.3, the
unclipped REINFORCE loss with seq-mean-token-mean aggregation (its main runs).

Deviations:
    - ``loss_mode="reinforce"`` (default) is the main runs' loss; ``"clip"`` is the paper's
      ``srpo_clip`` ablation, PPO's clipped ratio with dual clip c = 3. Both keep
      ``aggregation`` (default seq-mean-token-mean; the ablation used token-mean) so that the
      switch changes one thing. ``kl_coef`` needs ``"clip"``: the paper's loss has no KL.
    - Steps (``steps``) are cut after generation, not generated one per call with a stop
      string; the paper's caps (20 thoughts, 256 tokens each) are not applied. ``auto``: the
      task's step spans (the testbed's lines and answer line; GSM8K's lines, MATH's sentences
      outside LaTeX), else a blank line; ``thought``
      cuts after each ``</thought>``, ``line`` after each newline.
    - Fresh attempts are drawn in rounds: N1 + 1 per prompt, then one per prompt still without
      a parent. The roles and the number of attempts equal the paper's one-at-a-time loop.
    - Correct means reward >= 1 (the paper: > 0.5 for 0/1 math, all tests for code). A failed
      response with no step cannot be a parent; it stays in G1 with its own reward.
    - Continuations may generate the run's full ``max_new_tokens`` after the prefix (the
      paper's response cap counts the prefix).
    - SRPO's localisation call and its parsing: see ``methods/srpo.py``.
    - RRPO's k is drawn from a generator seeded by (run seed, step), for reproducible runs.
    - The harness scores every generated row (behaviour log-probs), the parent, surplus
      attempts and the localisation included; the paper's vLLM rollout does not. All charged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig, check_fields, loss_normalizers
from .contract import Services
from .core import (
    Normalizers,
    RolloutBatch,
    aggregate_loss,
    broadcast_to_tokens,
    concat_batches,
    group_mean_std,
    masked_mean,
)
from .registry import register_method
from .rollouts import (
    STEP_MODES,
    continue_prefixes,
    num_steps,
    own_tokens_only,
    prefix_lengths,
    step_ids_of,
    true_first_wrong,
    with_step_ids,
)

RNG_STREAM = 1_000_003  # services.generator stream of RRPO's reset steps (ours)


def reset_advantages(
    rewards: Tensor, group_ids: Tensor, response_mask: Tensor, std_floor: float = 1e-8
) -> Tensor:
    """``[B, T]``: ``(r_i - μ_g) / σ_g`` (population σ) on the trained tokens; 0 in a group
    whose ``σ_g < std_floor``."""
    mean, std, _ = group_mean_std(rewards, group_ids, std_kind="population")
    scores = (rewards - mean) / std.clamp(min=std_floor)
    return broadcast_to_tokens(torch.where(std >= std_floor, scores, 0.0), response_mask)


def uniform_reset_steps(n: Tensor, generator: torch.Generator) -> Tensor:
    """RRPO's ``k ~ Uniform{1..n}`` for every ``n`` in ``[P]``."""
    draw = (torch.rand(n.shape, generator=generator) * n).long()
    return 1 + torch.minimum(draw, n - 1)


def attempt_role(correct: bool, has_steps: bool, have_parent: bool, base_full: bool) -> str:
    """Where a fresh attempt goes, in the order drawn: ``parent``, ``base`` (G1) or ``discard``."""
    if not have_parent and not correct and has_steps:
        return "parent"
    return "discard" if base_full else "base"


@dataclass
class ResetConfig(LossConfig):
    """RRPO/SRPO settings (loss fields from :class:`LossConfig`); see the module docstring."""

    aggregation: str = "seq-mean-token-mean"
    dual_clip: float | None = 3.0
    loss_mode: str = "reinforce"
    base_size: int = 4
    reset_size: int = 4
    max_fresh: int = 12
    steps: str = "auto"
    localize_temperature: float = 0.3
    localize_max_new_tokens: int = 0
    std_floor: float = 1e-8

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = [
            ("loss_mode", self.loss_mode in ("reinforce", "clip"), "must be reinforce or clip"),
            ("kl_coef", self.kl_coef == 0 or self.loss_mode == "clip", "needs loss_mode=clip"),
            ("base_size", self.base_size >= 1, "must be >= 1"),
            ("reset_size", self.reset_size >= 1, "must be >= 1"),
            ("max_fresh", self.max_fresh > self.base_size, "must be > base_size"),
            ("steps", self.steps in STEP_MODES, f"must be one of {', '.join(STEP_MODES)}"),
            ("localize_temperature", self.localize_temperature >= 0, "must be >= 0"),
            ("localize_max_new_tokens", self.localize_max_new_tokens >= 0, "must be >= 0"),
            ("std_floor", self.std_floor > 0, "must be > 0"),
        ]
        check_fields(self, checks)


class ResetMethod(CreditMethod):
    """The rollout, advantages and loss RRPO and SRPO share; they differ in `reset_steps`."""

    Config = ResetConfig
    config: ResetConfig

    def reset_steps(
        self, parent: RolloutBatch, n: Tensor, services: Services, stats: dict[str, float]
    ) -> Tensor:
        """``[P]`` the reset step k (1-based) of each parent."""
        raise NotImplementedError

    def rollout(self, services: Services) -> RolloutBatch:
        cfg = self.config
        prompts, index = services.step_prompts()
        everyone = range(len(prompts))
        first = with_step_ids(
            services.generate(prompts, cfg.base_size + 1, problem_index=index), services, cfg.steps
        )
        base: list[list[int]] = [[] for _ in prompts]
        parents: list[RolloutBatch | None] = [None] * len(prompts)
        tries = [cfg.base_size + 1] * len(prompts)
        self._place(first, first.group_ids.tolist(), base, parents)
        while pending := [p for p in everyone if parents[p] is None and tries[p] < cfg.max_fresh]:
            more = services.generate([prompts[p] for p in pending], 1, problem_index=index[pending])
            self._place(with_step_ids(more, services, cfg.steps), pending, base, parents)
            for p in pending:
                tries[p] += 1
        rows = torch.tensor([r for kept in base for r in kept], dtype=torch.long)
        parts, groups = [first.select(rows)], [2 * first.group_ids[rows]]
        fallback = [p for p in everyone if parents[p] is None]
        resets = [p for p in everyone if parents[p] is not None]
        stats = {
            "reset_fallback_frac": len(fallback) / len(prompts),
            "fresh_per_prompt": (sum(tries) + cfg.reset_size * len(fallback)) / len(prompts),
        }
        if fallback:  # no failure: top G1 up to N1 + N2 fresh responses, one group (GRPO)
            more = with_step_ids(
                services.generate(
                    [prompts[p] for p in fallback], cfg.reset_size, problem_index=index[fallback]
                ),
                services,
                cfg.steps,
            )
            parts.append(more)
            groups.append(2 * torch.tensor(fallback)[more.group_ids])
        if resets:
            parent = concat_batches([parents[p] for p in resets])  # type: ignore[misc]
            step_ids = step_ids_of(parent)
            n = num_steps(step_ids)
            k = self.reset_steps(parent, n, services, stats)
            cut = prefix_lengths(step_ids, k).tolist()
            more = continue_prefixes(
                services, [prompts[p] for p in resets], index[resets], parent, cut, cfg.reset_size
            )
            parts.append(with_step_ids(more, services, cfg.steps))
            groups.append(2 * torch.tensor(resets)[more.group_ids] + 1)
            stats.update(reset_diagnostics(parent, k, n))
        services.report(stats)
        batch = concat_batches([own_tokens_only(part) for part in parts])
        batch.group_ids = torch.cat(groups)
        return batch

    def _place(
        self,
        batch: RolloutBatch,
        prompt_of_row: list[int],
        base: list[list[int]],
        parents: list[RolloutBatch | None],
    ) -> None:
        """Give each attempt its role, in the order drawn (rows of a prompt are in order)."""
        steps = num_steps(step_ids_of(batch)).tolist()
        for row, p in enumerate(prompt_of_row):
            role = attempt_role(
                correct=float(batch.rewards[row]) >= 1.0,
                has_steps=steps[row] > 0,
                have_parent=parents[p] is not None,
                base_full=len(base[p]) >= self.config.base_size,
            )
            if role == "parent":
                parents[p] = batch.select(torch.tensor([row]))
            elif role == "base":
                base[p].append(row)

    def advantages(self, batch: RolloutBatch, services: Services | None = None) -> Tensor:
        return reset_advantages(
            batch.rewards, batch.group_ids, batch.response_mask, self.config.std_floor
        )

    def loss(
        self,
        logprobs: Tensor,
        batch: RolloutBatch,
        advantages: Tensor,
        normalizers: Normalizers | None = None,
        services: Services | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        cfg = self.config
        if cfg.loss_mode == "clip":
            loss, stats = super().loss(logprobs, batch, advantages, normalizers, services)
        else:
            mask = batch.response_mask
            normalizers = loss_normalizers(cfg, mask, normalizers, services)
            # log π itself, not a ratio: the paper's loss, also on later minibatches
            loss = aggregate_loss(-advantages * logprobs, mask, cfg.aggregation, normalizers)
            stats = {
                "pg_loss": float(loss.detach()),
                "approx_kl": float(masked_mean((batch.old_logprobs - logprobs).detach(), mask)),
            }
        return loss, stats


def reset_diagnostics(parent: RolloutBatch, k: Tensor, n: Tensor) -> dict[str, float]:
    """Where the resets land: mean relative position, and against the step ground truth (when
    the batch has it) how often k is the true first wrong step and how often the kept prefix
    holds no wrong step."""
    out = {"reset_position": float(((k - 1) / n).mean())}
    first_wrong = (parent.extras or {}).get("first_wrong_mask")
    if first_wrong is not None:
        truth = true_first_wrong(step_ids_of(parent), first_wrong)
        known = truth >= 0
        if bool(known.any()):
            out["reset_hits_first_wrong"] = float((k - 1 == truth)[known].float().mean())
            out["reset_clean_frac"] = float((k - 1 <= truth)[known].float().mean())
    return out


@register_method("rrpo")
class RRPO(ResetMethod):
    summary = "GRPO group + continuations from a uniformly random step of a failed response"
    paper = "Credit Assignment with Resets in Language Model Reasoning (arXiv 2605.25507)"

    def reset_steps(
        self, parent: RolloutBatch, n: Tensor, services: Services, stats: dict[str, float]
    ) -> Tensor:
        return uniform_reset_steps(n, services.generator(RNG_STREAM))
