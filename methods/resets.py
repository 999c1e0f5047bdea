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
      task's step spans (the testbed's lines and answer line), else a blank line; ``thought``
      cuts after each ``</thought>``, ``line`` after each newline.
    - Fresh attempts are drawn in rounds: N1 + 1 per prompt, then one per prompt still without
      a parent. The roles and the number of attempts equal the paper's one-at-a-time loop.
    - Correct means reward >= 1 (the paper: > 0.5 for 0/1 math, all tests for code). A failed
      response with no step cannot be a parent; it stays in G1 with its own reward.
    - Continuations may generate the run's full ``max_new_tokens`` after the prefix (the
      paper's response cap counts the prefix).
    - Localisation uses the task's ``localize`` prompt (the testbed answers ``Step: N``), or the
      paper's L2 prompt, paraphrased, when the task has none; no chat template. Its length
      defaults to the rollout's (``localize_max_new_tokens``; the paper's 4096). The parser
      reads the paper's formats and ``Step: N``; anything else gives k = 1, as the paper's code.
    - RRPO's k is drawn from a generator seeded by (run seed, step), for reproducible runs.
    - The harness scores every generated row (behaviour log-probs), the parent, surplus
      attempts and the localisation included; the paper's vLLM rollout does not. All charged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .base import CreditMethod, LossConfig
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

DELIMITERS = {"blank_line": "\n\n", "thought": "</thought>", "line": "\n"}
STEP_MODES = ("auto", "task", *DELIMITERS)
LOCALIZE_L2 = (
    "Find the first erroneous step in your previous solution to this problem.\n\n"
    "Problem: {question}\n\nYour incorrect reasoning chain:{steps}\n\n"
    "The final answer of this chain is incorrect, so at least one step is wrong. Find the step "
    "where the reasoning first went wrong, its origin rather than where the failure shows. Do "
    "not re-solve the problem. End your response with \\boxed{{N}}, N (1 to {n}) the number of "
    "the first erroneous step."
)


def reset_advantages(
    rewards: Tensor, group_ids: Tensor, response_mask: Tensor, std_floor: float = 1e-8
) -> Tensor:
    """``[B, T]``: ``(r_i - μ_g) / σ_g`` (population σ) on the trained tokens; 0 in a group
    whose ``σ_g < std_floor``."""
    mean, std, _ = group_mean_std(rewards, group_ids, std_kind="population")
    scores = (rewards - mean) / std.clamp(min=std_floor)
    return broadcast_to_tokens(torch.where(std >= std_floor, scores, 0.0), response_mask)


def num_steps(step_ids: Tensor) -> Tensor:
    """``[B]`` steps of each response from ``step_ids`` ``[B, T]`` (-1 outside steps)."""
    return step_ids.max(dim=-1).values.clamp(min=-1) + 1


def prefix_lengths(step_ids: Tensor, k: Tensor) -> Tensor:
    """``[B]`` tokens before step ``k`` (1-based, ``[B]``): the reset state keeps steps 1..k-1."""
    later = step_ids >= (k - 1).unsqueeze(-1)
    first = torch.where(later.any(-1), later.float().argmax(-1), step_ids.shape[-1])
    return torch.where(k <= 1, 0, first)


def uniform_reset_steps(n: Tensor, generator: torch.Generator) -> Tensor:
    """RRPO's ``k ~ Uniform{1..n}`` for every ``n`` in ``[P]``."""
    draw = (torch.rand(n.shape, generator=generator) * n).long()
    return 1 + torch.minimum(draw, n - 1)


def true_first_wrong(step_ids: Tensor, first_wrong_mask: Tensor) -> Tensor:
    """``[B]`` 0-based first wrong step from the ground truth; ``n`` when it is a missing line
    past the last step, -1 when none is marked."""
    marked = first_wrong_mask > 0
    big = step_ids.shape[-1] + 1
    first = torch.where(marked & (step_ids >= 0), step_ids, big).min(-1).values
    return torch.where(marked.any(-1), torch.where(first == big, num_steps(step_ids), first), -1)


def attempt_role(correct: bool, has_steps: bool, have_parent: bool, base_full: bool) -> str:
    """Where a fresh attempt goes, in the order drawn: ``parent``, ``base`` (G1) or ``discard``."""
    if not have_parent and not correct and has_steps:
        return "parent"
    return "discard" if base_full else "base"


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def parse_reset_step(text: str, n: int) -> int | None:
    """The step a localisation names, in 1..n, or None (the caller then resets at step 1).

    The paper's order: the last ``\\boxed{N}`` (0 reads as 1, out of range falls through),
    then the last ``Step N`` / ``Step: N`` in range.
    """
    boxed = (_last_boxed(text) or "").strip()
    if re.fullmatch(r"[0-9]{1,6}", boxed) and int(boxed) <= n:
        return max(int(boxed), 1)
    found = re.findall(r"[Ss]tep:?\s*([0-9]{1,6})", text)
    return int(found[-1]) if found and 1 <= int(found[-1]) <= n else None


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
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"{name}: {rule} (got {getattr(self, name)!r})")


class ResetMethod(CreditMethod):
    """The rollout, advantages and loss RRPO and SRPO share; they differ in `reset_steps`."""

    Config = ResetConfig
    config: ResetConfig

    def __init__(self, config: LossConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.rollout_stats: dict[str, float] = {}

    def reset_steps(self, parent: RolloutBatch, n: Tensor, services, stats: dict) -> Tensor:
        """``[P]`` the reset step k (1-based) of each parent."""
        raise NotImplementedError

    def rollout(self, services) -> RolloutBatch:
        cfg = self.config
        prompts, index = services.step_prompts()
        everyone = range(len(prompts))
        first = services.generate(prompts, cfg.base_size + 1, problem_index=index)
        first = self._steps(first, services)
        base: list[list[int]] = [[] for _ in prompts]
        parents: list[RolloutBatch | None] = [None] * len(prompts)
        tries = [cfg.base_size + 1] * len(prompts)
        self._place(first, first.group_ids.tolist(), base, parents)
        while pending := [p for p in everyone if parents[p] is None and tries[p] < cfg.max_fresh]:
            more = services.generate([prompts[p] for p in pending], 1, problem_index=index[pending])
            self._place(self._steps(more, services), pending, base, parents)
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
            more = self._steps(
                services.generate(
                    [prompts[p] for p in fallback], cfg.reset_size, problem_index=index[fallback]
                ),
                services,
            )
            parts.append(more)
            groups.append(2 * torch.tensor(fallback)[more.group_ids])
        if resets:
            parent = concat_batches([parents[p] for p in resets])  # type: ignore[misc]
            step_ids = _step_ids(parent)
            n = num_steps(step_ids)
            k = self.reset_steps(parent, n, services, stats)
            cut = prefix_lengths(step_ids, k).tolist()
            prefixes = [parent.response_ids[i, : cut[i]].tolist() for i in range(len(resets))]
            more = services.generate(
                [prompts[p] for p in resets], cfg.reset_size, prefixes, problem_index=index[resets]
            )
            parts.append(self._steps(more, services))
            groups.append(2 * torch.tensor(resets)[more.group_ids] + 1)
            stats.update(reset_diagnostics(parent, k, n))
        self.rollout_stats = stats
        for part in parts:  # the prefix stays in the context but carries no loss
            extras = part.extras = part.extras or {}
            keep = 1.0 - extras.setdefault("prefix_mask", torch.zeros_like(part.response_mask))
            part.response_mask = part.response_mask * keep
            part.old_logprobs = part.old_logprobs * keep
            if part.ref_logprobs is not None:
                part.ref_logprobs = part.ref_logprobs * keep
        batch = concat_batches(parts)
        batch.group_ids = torch.cat(groups)
        return batch

    def _place(self, batch: RolloutBatch, prompt_of_row: list[int], base, parents) -> None:
        """Give each attempt its role, in the order drawn (rows of a prompt are in order)."""
        steps = num_steps(_step_ids(batch)).tolist()
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

    def _steps(self, batch: RolloutBatch, services) -> RolloutBatch:
        """The batch with ``step_ids`` per the ``steps`` option."""
        mode = self.config.steps
        if mode in ("auto", "task") and batch.step_ids is not None:
            return batch
        if mode == "task":
            raise ValueError("steps: the task has no step spans; use blank_line, thought or line")
        batch.step_ids = services.delimited_step_ids(
            batch, DELIMITERS.get(mode, DELIMITERS["blank_line"])
        )
        return batch

    def advantages(self, batch, services=None):
        return reset_advantages(
            batch.rewards, batch.group_ids, batch.response_mask, self.config.std_floor
        )

    def loss(self, logprobs, batch, advantages, normalizers=None):
        cfg = self.config
        if cfg.loss_mode == "clip":
            loss, stats = super().loss(logprobs, batch, advantages, normalizers)
        else:
            mask = batch.response_mask
            if normalizers is None:
                normalizers = Normalizers.of(mask, cfg.horizon or None)
            # log π itself, not a ratio: the paper's loss, also on later minibatches
            loss = aggregate_loss(-advantages * logprobs, mask, cfg.aggregation, normalizers)
            stats = {
                "pg_loss": float(loss.detach()),
                "approx_kl": float(masked_mean((batch.old_logprobs - logprobs).detach(), mask)),
            }
        return loss, {**stats, **self.rollout_stats}


def _step_ids(batch: RolloutBatch) -> Tensor:
    if batch.step_ids is None:
        raise ValueError("steps: the batch has no step_ids")
    return batch.step_ids


def reset_diagnostics(parent: RolloutBatch, k: Tensor, n: Tensor) -> dict[str, float]:
    """Where the resets land: mean relative position, and against the step ground truth (when
    the batch has it) how often k is the true first wrong step and how often the kept prefix
    holds no wrong step."""
    out = {"reset_position": float(((k - 1) / n).mean())}
    first_wrong = (parent.extras or {}).get("first_wrong_mask")
    if first_wrong is not None:
        truth = true_first_wrong(_step_ids(parent), first_wrong)
        known = truth >= 0
        if bool(known.any()):
            out["reset_hits_first_wrong"] = float((k - 1 == truth)[known].float().mean())
            out["reset_clean_frac"] = float((k - 1 <= truth)[known].float().mean())
    return out


@register_method("rrpo")
class RRPO(ResetMethod):
    summary = "GRPO group + continuations from a uniformly random step of a failed response"
    paper = "Credit Assignment with Resets in Language Model Reasoning (arXiv 2605.25507)"

    def reset_steps(self, parent, n, services, stats):
        seed = getattr(services, "seed", 0) * 1_000_003 + services.step
        return uniform_reset_steps(n, torch.Generator().manual_seed(seed))


@register_method("srpo")
class SRPO(ResetMethod):
    summary = "GRPO group + continuations from the first wrong step the policy itself names"
    paper = "Credit Assignment with Resets in Language Model Reasoning (arXiv 2605.25507)"

    def reset_steps(self, parent, n, services, stats):
        cfg = self.config
        try:
            prompts = services.variant(parent, "localize")
        except ValueError:  # a task without the variant: the paper's own prompt
            prompts = self._l2_prompts(parent, services)
        answers = services.generate(
            prompts,
            1,
            temperature=cfg.localize_temperature,
            max_new_tokens=cfg.localize_max_new_tokens or None,
        )
        named = [
            parse_reset_step(text, int(m))
            for text, m in zip(services.decode(answers), n.tolist(), strict=True)
        ]
        stats["localize_parsed_frac"] = sum(k is not None for k in named) / len(named)
        return torch.tensor([k or 1 for k in named], dtype=torch.long)

    def _l2_prompts(self, parent: RolloutBatch, services) -> list[str]:
        delimiter = DELIMITERS.get(self.config.steps, DELIMITERS["blank_line"])
        out = []
        for problem, text in zip(services.problems(parent), services.decode(parent), strict=True):
            pieces = text.split(delimiter)
            if len(pieces) > 1 and not pieces[-1]:
                pieces.pop()
            steps = "".join(f"\nStep {i}: {s.strip()}" for i, s in enumerate(pieces, 1))
            out.append(
                LOCALIZE_L2.format(question=problem.prompt.strip(), steps=steps, n=len(pieces))
            )
        return out
