"""SRPO: resets to the first wrong step the policy itself names.

Paper: Samanta et al., "Credit Assignment with Resets in Language Model Reasoning",
arXiv 2605.25507 (2026); the authors' code is github.com/Ankur-Samanta/SRPO. The rollout, the
separate normalisation of the two groups and the loss are RRPO's (``methods/resets.py``, whose
docstring has the equations); SRPO differs in the reset step:

    k = the first wrong step the policy names when shown the failed parent ȳ and told only
        that its answer is wrong (the localisation call, never trained on)

Deviations (the rest are listed in ``methods/resets.py``):
    - Localisation uses the task's ``localize`` prompt (the testbed answers ``Step: N``), or the
      paper's L2 prompt, paraphrased, when the task has none; no chat template. Its length
      defaults to the rollout's (``localize_max_new_tokens``; the paper's 4096). The parser
      reads the paper's formats and ``Step: N``; anything else gives k = 1, as the paper's code.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from .contract import Services
from .core import RolloutBatch
from .registry import register_method
from .resets import ResetMethod
from .rollouts import STEP_DELIMITERS

LOCALIZE_L2 = (
    "Find the first erroneous step in your previous solution to this problem.\n\n"
    "Problem: {question}\n\nYour incorrect reasoning chain:{steps}\n\n"
    "The final answer of this chain is incorrect, so at least one step is wrong. Find the step "
    "where the reasoning first went wrong, its origin rather than where the failure shows. Do "
    "not re-solve the problem. End your response with \\boxed{{N}}, N (1 to {n}) the number of "
    "the first erroneous step."
)


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


@register_method("srpo")
class SRPO(ResetMethod):
    summary = "GRPO group + continuations from the first wrong step the policy itself names"
    paper = "Credit Assignment with Resets in Language Model Reasoning (arXiv 2605.25507)"

    def reset_steps(
        self, parent: RolloutBatch, n: Tensor, services: Services, stats: dict[str, float]
    ) -> Tensor:
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

    def _l2_prompts(self, parent: RolloutBatch, services: Services) -> list[str]:
        delimiter = STEP_DELIMITERS.get(self.config.steps, STEP_DELIMITERS["blank_line"])
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
