"""A small deterministic stand-in for the harness services, for methods whose ``advantages``
asks the harness for more (scoring under other prompts, a teacher, fresh samples).

Its scores depend only on the token id, its position and which model/prompt was asked, so
they move with the rows when a batch is permuted and ignore padding added on the right:
every conformance invariant that holds for a method holds with these services too.

Part of the installed conformance suite, which hands them to every method it checks; the
tests import them as ``from fakes import FakeServices``.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.conformance.strategies import build_batch
from creditbench.methods.contract import BEHAVIOUR_STATISTICS, PROBLEM_INDEX
from creditbench.methods.core import RolloutBatch


class StepServices:
    """The per-step services every fake shares: the seeded generator and the stats channel,
    as the harness implements them. A subclass (a dataclass) defines ``step`` and ``seed``;
    ``budget_fraction`` (the budget spent before the step) is 0.0 unless a subclass sets it."""

    step: int
    seed: int
    budget_fraction: float = 0.0

    def generator(self, stream: int) -> torch.Generator:
        """Seeded as the harness seeds it: ``seed * stream + step``."""
        return torch.Generator().manual_seed(self.seed * stream + self.step)

    def report(self, stats: Any) -> None:
        """Keeps what a method reports, as the harness does for the step's record."""
        if not hasattr(self, "stats"):
            self.stats: dict[str, float] = {}
        self.stats.update({key: float(value) for key, value in stats.items()})


@dataclass
class FakeServices(StepServices):
    """Deterministic services. ``calls`` records what was asked, in order. The generation
    limit is the fake batches' longest response (8 tokens); ``budget_fraction`` is what a
    test sets (0.0: the run's start)."""

    step: int = 0
    seed: int = 0
    calls: list[str] = field(default_factory=list)
    max_new_tokens: int = 8
    budget_fraction: float = 0.0

    def sample_batch(self) -> RolloutBatch:
        """Three groups (sizes 4, 4, 1) of 0/1-rewarded responses, fixed by ``seed + step``,
        with the step ground truth and a behaviour entropy."""
        self.calls.append("sample_batch")
        gen = torch.Generator().manual_seed(self.seed + self.step)
        sizes = [4, 4, 1]
        lengths = torch.randint(1, 9, (sum(sizes),), generator=gen).tolist()
        rewards = (torch.rand(sum(sizes), generator=gen) < 0.5).float().tolist()
        seed = self.seed + self.step
        return build_batch(sizes, lengths, rewards, seed=seed, statistics=BEHAVIOUR_STATISTICS)

    def score(self, batch: RolloutBatch, prompts: Any = None, model: str = "policy") -> Tensor:
        """Per-token log-probs ``[B, T]`` of the batch's responses, 0 where the mask is 0.

        A function of (token id, position, model, whether other prompts were given) only.
        """
        self.calls.append(f"score:{model}")
        offset = sum(map(ord, model)) + (11 if prompts is not None else 0)
        position = torch.arange(batch.response_ids.shape[-1])
        code = (batch.response_ids * 31 + position * 17 + offset) % 97
        return -(0.05 + code.float() / 40.0) * batch.response_mask

    def variant(self, batch: RolloutBatch, kind: str, hints: Any = None) -> list[str]:
        """One prompt text per row naming the variant and the row's group (and hint, if any)."""
        self.calls.append(f"variant:{kind}")
        groups = batch.group_ids.tolist()
        tails = [f" {h}" for h in hints] if hints is not None else [""] * len(groups)
        return [f"{kind} of group {g}{tail}" for g, tail in zip(groups, tails, strict=True)]

    def decode(self, batch: RolloutBatch) -> list[str]:
        """The token ids of every response's masked positions, as text."""
        self.calls.append("decode")
        rows = zip(batch.response_ids.tolist(), batch.response_mask.tolist(), strict=True)
        return [" ".join(str(t) for t, m in zip(ids, mask, strict=True) if m) for ids, mask in rows]

    def fit_auxiliary(
        self,
        batch: RolloutBatch,
        row_loss: Any,
        *,
        lr_ratio: float,
        grad_clip: float | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """``score(model="auxiliary")``'s log-probs, with the method's loss taken on them
        (with gradient, in two micro-batches, as the harness does) and checked to be one
        finite value per row; nothing is trained. It reports one update before the pass: a
        model that has left the initial policy, so the method's use of its log-probs is
        exercised."""
        self.calls.append("fit_auxiliary")
        logprobs = self.score(batch, model="auxiliary")
        total = 0.0
        for rows in torch.arange(batch.size).chunk(2):
            leaf = logprobs[rows].clone().requires_grad_(True)
            loss = row_loss(leaf, rows)
            if loss.shape != (len(rows),) or not torch.isfinite(loss).all():
                raise ValueError("fit_auxiliary: row_loss must give one finite loss per row")
            loss.sum().backward()
            total += float(loss.detach().sum()) / batch.size
        return logprobs, {"aux_loss": total, "aux_grad_norm": 0.0, "aux_updates": 1.0}

    def track_ema(self, rate: float) -> None:
        """Records the rate; ``score(model="ema")`` is then one more named model."""
        self.calls.append(f"track_ema:{rate}")

    def distribution(
        self,
        batch: RolloutBatch,
        prompts: Any = None,
        model: str = "policy",
        *,
        top_k: int | None = None,
        indices: Tensor | None = None,
        grad: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Log-probs ``[B, T, K]`` of a softmax over 32 entries that is a function of (entry,
        position, response token, model, whether other prompts were given) only. With ``grad``
        the full log-softmax is a fresh leaf kept as ``last_grad_input``."""
        self.calls.append(f"distribution:{model}" + (":grad" if grad else ""))
        offset = sum(map(ord, model)) + (11 if prompts is not None else 0)
        width = batch.response_ids.shape[-1]
        entry = torch.arange(32).view(1, 1, -1)
        position = torch.arange(width).view(1, -1, 1)
        code = (entry * 13 + position * 7 + batch.response_ids.unsqueeze(-1) * 5 + offset) % 23
        logp = torch.log_softmax(code.float() / 5.0, dim=-1)
        if grad:
            logp = logp.requires_grad_(True)
            self.last_grad_input = logp
        if indices is None:
            k = 32 if top_k is None else min(top_k, 32)
            indices = logp.detach().topk(k, dim=-1).indices
        mask = batch.response_mask.unsqueeze(-1)
        return logp.gather(-1, indices) * mask, indices * mask.long()

    def delimited_step_ids(self, batch: RolloutBatch, delimiter: str) -> Tensor:
        """Every response token a step of its own (the fake texts have no delimiters), -1 on
        padding."""
        self.calls.append("delimited_step_ids")
        position = torch.arange(batch.response_ids.shape[-1]).expand_as(batch.response_ids)
        return torch.where(batch.response_mask > 0, position, -1)

    def state_ids(self, batch: RolloutBatch) -> Tensor:
        """Steps of two tokens, each taken in the state its response's tokens before it name
        (two responses with a common prefix share its states), -1 on padding: the ids depend
        on the tokens alone, never on row positions."""
        self.calls.append("state_ids")
        out = torch.full(batch.response_ids.shape, -1, dtype=torch.long)
        for row, length in enumerate(batch.response_mask.sum(-1).long().tolist()):
            ids = batch.response_ids[row].tolist()
            for t in range(length):
                start = t - t % 2
                out[row, t] = hash((start, *ids[:start])) % (2**31)
        return out

    # --- continuations (value estimates) ------------------------------------------------------

    def problems(self, batch: RolloutBatch) -> list[Any]:
        """One problem per row, named by its ``PROBLEM_INDEX`` (else its group id)."""
        self.calls.append("problems")
        extras = batch.extras or {}
        index = extras.get(PROBLEM_INDEX, batch.group_ids).tolist()
        return [SimpleNamespace(prompt=f"problem {i}", answer="0") for i in index]

    def batch_from_responses(
        self, problem_index: Sequence[int] | Tensor, responses: Sequence[Any]
    ) -> RolloutBatch:
        """Responses (token ids, or text: a number word is its id, any other word a hash) as
        a batch, one group per row, rewarded 0, scored by :meth:`score`."""
        self.calls.append(f"batch_from_responses:{len(responses)}")

        def ids(response: Any) -> list[int]:
            if not isinstance(response, str):
                return [int(t) for t in response]
            return [
                int(w) if w.isdigit() else 1 + zlib.crc32(w.encode()) % 7 for w in response.split()
            ]

        rows = [ids(response) or [0] for response in responses]
        width = max(len(r) for r in rows)
        count = len(rows)
        batch = RolloutBatch(
            prompt_ids=torch.ones(count, 1, dtype=torch.long),
            prompt_mask=torch.ones(count, 1),
            response_ids=torch.tensor([r + [0] * (width - len(r)) for r in rows]),
            response_mask=torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows]),
            group_ids=torch.arange(count),
            rewards=torch.zeros(count),
            old_logprobs=torch.zeros(count, width),
            extras={PROBLEM_INDEX: torch.as_tensor(list(problem_index), dtype=torch.long)},
        )
        batch.old_logprobs = self.score(batch)
        return batch

    def answer_texts(self, batch: RolloutBatch) -> list[str]:
        """The problem's answer ("0") stated as an answer line, one per row."""
        self.calls.append("answer_texts")
        return [f"answer {problem.answer}" for problem in self.problems(batch)]

    def task_values(self, batch: RolloutBatch) -> Tensor:
        """``[B, S]`` a value in [0, 1] for every state, a hash of (problem, prefix), NaN past a
        row's states (the states of ``methods.values.state_starts``)."""
        from creditbench.methods.values import state_prefixes

        self.calls.append("task_values")
        prefixes, valid = state_prefixes(batch)
        index = (batch.extras or {}).get(PROBLEM_INDEX, batch.group_ids).tolist()
        values = torch.full(valid.shape, float("nan"))
        for row, k, prefix in prefixes:
            values[row, k] = zlib.crc32(f"{index[row]}|{list(prefix)}".encode()) % 1000 / 999
        return values

    @contextlib.contextmanager
    def reference_passes(self) -> Iterator[None]:
        """Records that a reference block was opened (nothing here is charged anyway)."""
        self.calls.append("reference_passes")
        yield

    def generate(
        self,
        prompts: Sequence[str],
        n: int = 1,
        prefixes: Sequence[Any] | None = None,
        *,
        problem_index: Any = None,
        **options: Any,
    ) -> RolloutBatch:
        """``n`` continuations of each prefix: the prefix and one more token, rewarded 0/1 by a
        hash of (prompt, prefix, sample number), so a row's estimate depends on its content
        alone and moves with it when a batch is permuted."""
        self.calls.append(f"generate:{len(prompts)}x{n}")
        prefixes = list(prefixes) if prefixes is not None else [[] for _ in prompts]
        rows, rewards = [], []
        for prompt, prefix in zip(prompts, prefixes, strict=True):
            tokens = [int(t) for t in prefix]
            for m in range(n):
                code = zlib.crc32(f"{prompt}|{tokens}|{m}|{self.seed}".encode())
                rows.append([*tokens, 1 + code % 7])
                rewards.append(float(code % 2))
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.long)
        mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
        count = len(rows)
        return RolloutBatch(
            prompt_ids=torch.ones(count, 1, dtype=torch.long),
            prompt_mask=torch.ones(count, 1),
            response_ids=ids,
            response_mask=mask,
            group_ids=torch.arange(len(prompts)).repeat_interleave(n),
            rewards=torch.tensor(rewards),
            old_logprobs=torch.full((count, width), float("nan")),
        )
