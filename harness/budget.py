"""The compute-budget meter: every forward, generation and training pass is charged here.

FLOP formula (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", arXiv 2001.08361,
Table 1). For a decoder with ``N`` non-embedding parameters, ``n_layer`` layers and attention
width ``d_attn`` (``d_model`` in most models), one token whose attention context holds ``n_ctx``
tokens costs, in a forward pass,

    C_forward(n_ctx) = 2 N + 2 n_layer n_ctx d_attn

and a training step (forward + backward) costs ``3 C_forward``: about ``6 N`` per token plus
three times the attention term. The embedding and de-embedding matrices are left out of ``N``,
as in the paper.

What each pass is charged:
    - a teacher-forced forward over a sequence of length ``L`` (scoring: log-probs of fixed
      responses, under any prompt, by the policy or a frozen model): token ``t`` (0-based) has
      context ``t + 1``, so ``sum_t C_forward(t + 1) = 2 N L + 2 n_layer d_attn L (L + 1) / 2``;
    - generation from a prompt of ``P`` tokens with ``G`` new tokens: the prefill is a forward
      over the ``P`` prompt tokens (as above), and each generated token costs one forward at its
      context length, ``P + j`` for the ``j``-th new token (``j = 1..G``);
    - training on sequences: three times their teacher-forced forward.

Deviations from the paper: Kaplan's ``n_ctx`` is the full context window; we charge each token
its causal context (the tokens it attends to), which is the work a causal pass does with a KV
cache. Padding is never charged: the meter counts the work a method needs, not what a
particular backend spends, so two backends of different efficiency get the same budget.

Evaluation is outside the budget: run it inside ``with meter.outside_budget():`` and nothing is
charged and the clock is stopped. A reference method's knowledge passes (the exact-credit
oracle's value estimates) run inside ``with meter.as_reference():``: they are counted in the
``reference_*`` counters and the clock's seconds go there too, but nothing is charged.
A run is budgeted in one unit (``flops``, ``seconds`` of wall clock, ``tokens`` generated,
or optimizer ``steps``); all counters are recorded whatever the unit.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

UNITS = ("flops", "seconds", "tokens", "steps")
CATEGORIES = ("generation", "scoring", "training")
REFERENCE_COUNTERS = ("flops", "generated_tokens", "forward_tokens", "seconds")


def _as_ints(values: Any) -> list[int]:
    """A list of ints from a list, tuple, tensor or array of lengths."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    out = [int(v) for v in values]
    if any(v < 0 for v in out):
        raise ValueError(f"lengths must be >= 0, got {out}")
    return out


def _triangle(n: int) -> int:
    """1 + 2 + ... + n."""
    return n * (n + 1) // 2


def crossed_marks(before: float | None, after: float, marks: Iterable[float]) -> list[float]:
    """The marks ``m`` in ``(before, after]`` (every ``m <= after`` when ``before`` is None):
    the evaluation points a step passed, shares of the budget or counts of trained responses."""
    return [m for m in marks if (before is None or before < m) and m <= after]


def count_non_embedding_params(model: Any) -> int:
    """Parameters of a transformers model minus its input and output embedding matrices."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    excluded: set[int] = set()
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        module = getattr(model, getter, lambda: None)()
        weight = getattr(module, "weight", None)
        if weight is not None and id(weight) not in excluded:
            excluded.add(id(weight))
            total -= weight.numel()
    return total


class BudgetMeter:
    """Counts FLOPs, tokens, optimizer steps and wall-clock seconds of a run.

    Counters (all restored by :meth:`load_state_dict`):
        flops: every charged FLOP; ``flops_by_category`` splits it (generation, scoring,
            training, or any category a caller names).
        generated_tokens: new tokens sampled (``charge_generation``).
        forward_tokens: tokens of scoring forwards (``charge_forward``, ``charge_forward_batch``).
        trained_tokens: tokens of training passes (``charge_training``).
        optimizer_steps: ``charge_optimizer_step`` calls.
        seconds: wall clock while the clock runs (``start``/``pause`` or ``with clock()``).
    """

    def __init__(
        self,
        *,
        non_embedding_params: int,
        n_layers: int,
        d_model: int,
        unit: str = "flops",
        amount: float = 0.0,
    ) -> None:
        if unit not in UNITS:
            raise ValueError(f"unit: must be one of {', '.join(UNITS)} (got {unit!r})")
        if non_embedding_params <= 0 or n_layers <= 0 or d_model <= 0:
            raise ValueError("non_embedding_params, n_layers and d_model must be positive")
        self.non_embedding_params = int(non_embedding_params)
        self.n_layers = int(n_layers)
        self.d_model = int(d_model)
        self.unit = unit
        self.amount = float(amount)
        self.flops = 0  # Python ints: exact, so the total never depends on charging order
        self.flops_by_category: dict[str, int] = {c: 0 for c in CATEGORIES}
        self.generated_tokens = 0
        self.forward_tokens = 0
        self.trained_tokens = 0
        self.optimizer_steps = 0
        self._seconds = 0.0
        self._started_at: float | None = None
        self._suspended = 0
        # Passes counted but not charged (``as_reference``); restored with the state.
        self.reference: dict[str, float] = {k: 0 for k in REFERENCE_COUNTERS}
        self.reference["seconds"] = 0.0
        self._to_reference = 0

    @classmethod
    def for_model(cls, model: Any, *, unit: str = "flops", amount: float = 0.0) -> BudgetMeter:
        """A meter sized from a transformers model (its config and parameters)."""
        config = model.config
        heads = getattr(config, "num_attention_heads", None)
        head_dim = getattr(config, "head_dim", None)
        d_attn = heads * head_dim if heads and head_dim else config.hidden_size
        return cls(
            non_embedding_params=count_non_embedding_params(model),
            n_layers=config.num_hidden_layers,
            d_model=d_attn,
            unit=unit,
            amount=amount,
        )

    # --- the formula -------------------------------------------------------------------------

    def forward_flops(self, n_tokens: int, mean_context: float) -> float:
        """Forward FLOPs of ``n_tokens`` tokens whose contexts average ``mean_context`` tokens."""
        per_token = 2 * self.non_embedding_params + 2 * self.n_layers * mean_context * self.d_model
        return n_tokens * per_token

    def _flops_exact(self, n_tokens: int, context_sum: int) -> int:
        return (
            2 * self.non_embedding_params * n_tokens
            + 2 * self.n_layers * self.d_model * context_sum
        )

    def _add(self, category: str, flops: int) -> None:
        if self._to_reference:
            self.reference["flops"] += flops
            return
        self.flops += flops
        self.flops_by_category[category] = self.flops_by_category.get(category, 0) + flops

    def _count_tokens(self, counter: str, n: int) -> None:
        if self._to_reference:
            self.reference[counter] += n
        else:
            setattr(self, counter, getattr(self, counter) + n)

    # --- charges -----------------------------------------------------------------------------

    def charge_forward(self, token_contexts: Any, category: str = "scoring") -> int:
        """One forward over tokens with the given context lengths (one entry per token)."""
        contexts = _as_ints(token_contexts)
        if self._suspended:
            return 0
        flops = self._flops_exact(len(contexts), sum(contexts))
        self._count_tokens("forward_tokens", len(contexts))
        self._add(category, flops)
        return flops

    def charge_forward_batch(self, lengths: Any, category: str = "scoring") -> int:
        """Teacher-forced forwards over sequences of these lengths (prompt + response)."""
        lengths = _as_ints(lengths)
        if self._suspended:
            return 0
        flops = self._flops_exact(sum(lengths), sum(_triangle(n) for n in lengths))
        self._count_tokens("forward_tokens", sum(lengths))
        self._add(category, flops)
        return flops

    def charge_generation(
        self, prompt_lengths: Any, new_token_counts: Any, category: str = "generation"
    ) -> int:
        """Prefill of each prompt plus one forward per generated token at its context length."""
        prompts, news = _as_ints(prompt_lengths), _as_ints(new_token_counts)
        if len(prompts) != len(news):
            raise ValueError(f"{len(prompts)} prompt lengths but {len(news)} new-token counts")
        if self._suspended:
            return 0
        # Prefill: contexts 1..P. Decode: the j-th new token has context P + j, j = 1..G.
        context_sum = sum(
            _triangle(p) + g * p + _triangle(g) for p, g in zip(prompts, news, strict=True)
        )
        flops = self._flops_exact(sum(prompts) + sum(news), context_sum)
        self._count_tokens("generated_tokens", sum(news))
        self._add(category, flops)
        return flops

    def charge_training(self, lengths: Any, category: str = "training") -> int:
        """Forward + backward (3x the forward) over sequences of these lengths."""
        lengths = _as_ints(lengths)
        if self._suspended:
            return 0
        flops = 3 * self._flops_exact(sum(lengths), sum(_triangle(n) for n in lengths))
        self.trained_tokens += sum(lengths)
        self._add(category, flops)
        return flops

    def charge_flops(
        self, flops: int, *, forward_tokens: int = 0, category: str = "scoring"
    ) -> int:
        """Charge FLOPs priced elsewhere: a pass of a model of another size (a frozen teacher),
        priced by that model's own meter (``BudgetMeter.for_model(teacher).charge_...``)."""
        if self._suspended:
            return 0
        self._count_tokens("forward_tokens", int(forward_tokens))
        self._add(category, int(flops))
        return int(flops)

    def charge_optimizer_step(self) -> None:
        """Count one optimizer step (its FLOPs, O(N), are negligible and not charged)."""
        if not self._suspended and not self._to_reference:
            self.optimizer_steps += 1

    # --- wall clock --------------------------------------------------------------------------

    @property
    def seconds(self) -> float:
        running = time.perf_counter() - self._started_at if self._started_at is not None else 0.0
        return self._seconds + running

    @property
    def running(self) -> bool:
        return self._started_at is not None

    def start(self) -> None:
        """Start (or keep running) the wall clock."""
        if self._started_at is None:
            self._started_at = time.perf_counter()

    def pause(self) -> None:
        """Stop the wall clock, keeping the seconds counted so far."""
        if self._started_at is not None:
            self._seconds += time.perf_counter() - self._started_at
            self._started_at = None

    @contextlib.contextmanager
    def clock(self) -> Iterator[BudgetMeter]:
        """Run the wall clock inside the block (restoring its previous state after)."""
        was_running = self.running
        self.start()
        try:
            yield self
        finally:
            if not was_running:
                self.pause()

    @contextlib.contextmanager
    def outside_budget(self) -> Iterator[BudgetMeter]:
        """Charges inside the block are ignored and the clock is stopped (evaluation)."""
        was_running = self.running
        self.pause()
        self._suspended += 1
        try:
            yield self
        finally:
            self._suspended -= 1
            if was_running:
                self.start()

    @contextlib.contextmanager
    def as_reference(self) -> Iterator[BudgetMeter]:
        """Passes inside the block are counted in ``reference`` (FLOPs, tokens, seconds) and
        not charged; the budget's clock is stopped. For a reference method's knowledge (the
        exact-credit oracle's value estimates): "perfect credit at the others' sample budget"
        has a cost the run reports but does not pay."""
        was_running = self.running
        self.pause()
        self._to_reference += 1
        started = time.perf_counter()
        try:
            yield self
        finally:
            self._to_reference -= 1
            if not self._to_reference:
                self.reference["seconds"] += time.perf_counter() - started
            if was_running:
                self.start()

    # --- the budget --------------------------------------------------------------------------

    def spent(self) -> float:
        """What has been spent, in the budget's unit."""
        return float(
            {
                "flops": self.flops,
                "seconds": self.seconds,
                "tokens": self.generated_tokens,
                "steps": self.optimizer_steps,
            }[self.unit]
        )

    def fraction(self) -> float:
        """``spent / amount``; may exceed 1 (the last step overshoots)."""
        if self.amount <= 0:
            raise ValueError("budget amount is not set (budget.amount must be > 0 to run)")
        return self.spent() / self.amount

    def exhausted(self) -> bool:
        return self.fraction() >= 1.0

    def fraction_crossed(self, before: float | None, fractions: Sequence[float]) -> list[float]:
        """Evaluation fractions reached by the last step.

        ``before`` is :meth:`fraction` before the step. The trainer evaluates at the first step
        where the spent fraction is ``>= f``; call with ``before=None`` before training to get
        the fractions already reached (``[0.0]`` when 0 is among them).
        """
        return crossed_marks(before, self.fraction(), fractions)

    def counters(self) -> dict[str, float]:
        """The counters as one flat dict, for a metrics record."""
        record: dict[str, float] = {
            "flops": self.flops,
            "generated_tokens": self.generated_tokens,
            "forward_tokens": self.forward_tokens,
            "trained_tokens": self.trained_tokens,
            "optimizer_steps": self.optimizer_steps,
            "seconds": self.seconds,
        }
        record.update({f"flops_{k}": v for k, v in self.flops_by_category.items()})
        if self.reference["flops"]:
            record.update({f"reference_{k}": v for k, v in self.reference.items()})
        return record

    # --- checkpointing -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state; the clock's running interval is folded into ``seconds``."""
        return {
            "non_embedding_params": self.non_embedding_params,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "unit": self.unit,
            "amount": self.amount,
            "flops": self.flops,
            "flops_by_category": dict(self.flops_by_category),
            "generated_tokens": self.generated_tokens,
            "forward_tokens": self.forward_tokens,
            "trained_tokens": self.trained_tokens,
            "optimizer_steps": self.optimizer_steps,
            "seconds": self.seconds,
            "reference": dict(self.reference),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters; the model shape must match (unit and amount stay as given)."""
        shape = (self.non_embedding_params, self.n_layers, self.d_model)
        saved = (state["non_embedding_params"], state["n_layers"], state["d_model"])
        if shape != saved:
            raise ValueError(f"budget state is for a model of shape {saved}, this one is {shape}")
        self.flops = int(state["flops"])
        self.flops_by_category = {k: int(v) for k, v in state["flops_by_category"].items()}
        self.generated_tokens = int(state["generated_tokens"])
        self.forward_tokens = int(state["forward_tokens"])
        self.trained_tokens = int(state["trained_tokens"])
        self.optimizer_steps = int(state["optimizer_steps"])
        self._seconds = float(state["seconds"])
        saved_reference = state.get("reference", {})  # absent in states saved before it existed
        self.reference = {k: type(v)(saved_reference.get(k, 0)) for k, v in self.reference.items()}
        if self._started_at is not None:
            self._started_at = time.perf_counter()
