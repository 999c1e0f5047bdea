"""``creditbench perf``: where the time of a training step goes, on this machine.

For the default model and batch (or any config) it prints:

- time per step by phase (generation, scoring, advantages, update), median of a few steps;
- generated and trained tokens per second;
- the FLOP meter's count per step, and the achieved FLOP/s of the update against a measured
  fp32 matmul peak;
- every registered method's advantage computation as a share of its step time (the method's
  own math only; extra scoring passes it asks for are counted as scoring);
- a plain transformers loop doing the same work side by side (``generate`` with the same
  sampling settings, then forward, backward and AdamW over the same sequences), with the ratio.

Nothing is written to disk; the budget meter counts but never stops the measurement.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from .config import RunConfig, load_config


def matmul_peak(size: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of a square fp32 matmul on the training device (the best of a few)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def plain_loop(trainer, batch, repeats: int) -> dict[str, float]:
    """The same generation and update with plain transformers calls, median seconds each."""
    cfg: RunConfig = trainer.config
    model, tokenizer = trainer.policy, trainer.tokenizer
    problems = trainer.services.problems(batch)[:: cfg.rollout.group_size]
    prompts = [p.prompt for p in problems]
    tokenizer.padding_side = "left"
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)  # lr 0: leave the model as it is
    input_ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    attention = torch.cat([batch.prompt_mask, torch.ones_like(batch.response_mask)], 1)
    labels = torch.cat([torch.zeros_like(batch.prompt_ids), batch.response_ids], 1)
    weights = torch.cat([torch.zeros_like(batch.prompt_mask), batch.response_mask], 1)
    generation, update = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(
                **encoded,
                do_sample=True,
                temperature=cfg.rollout.temperature,
                top_p=cfg.rollout.top_p,
                top_k=0,
                max_new_tokens=cfg.rollout.max_new_tokens,
                num_return_sequences=cfg.rollout.group_size,
                pad_token_id=tokenizer.pad_token_id,
            )
        generation.append(time.perf_counter() - started)
        started = time.perf_counter()
        logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
        logprobs = torch.log_softmax(logits, -1).gather(-1, labels[:, 1:, None]).squeeze(-1)
        loss = -(logprobs * weights[:, 1:]).sum() / weights.sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        update.append(time.perf_counter() - started)
    return {"generation": statistics.median(generation), "update": statistics.median(update)}


def advantage_shares(trainer, step_seconds: float, methods: list[str] | None) -> list[tuple]:
    """(method, advantage seconds, share of a step) for every registered method."""
    from creditbench.methods.registry import list_methods

    from .config import build_method_config

    rows = []
    services = trainer.services
    for name, cls in list_methods().items():
        if methods and name not in methods:
            continue
        if cls.requires_extras and not services.step_checked:
            continue
        method = cls(build_method_config(cls, {}))
        batch = method.rollout(services)
        before = sum(services.seconds.values())
        started = time.perf_counter()
        method.advantages(batch, services)
        total = time.perf_counter() - started
        passes = sum(services.seconds.values()) - before
        own = total - passes
        rows.append((name, own, own / (step_seconds + passes)))
    return rows


def run_perf(
    config_path: str | None,
    overrides: list[str],
    *,
    repeats: int = 3,
    methods: list[str] | None = None,
) -> int:
    from .trainer import Trainer

    config = load_config(config_path, [*overrides, "budget.unit=steps", "budget.amount=1000000"])
    trainer = Trainer(config)
    trainer._build()
    cfg = trainer.config
    meter = trainer.meter
    print(
        f"model: {sum(p.numel() for p in trainer.policy.parameters()) / 1e6:.2f}M parameters "
        f"({meter.non_embedding_params / 1e6:.2f}M non-embedding), batch "
        f"{cfg.rollout.prompts_per_step} prompts x {cfg.rollout.group_size}, "
        f"max {cfg.rollout.max_new_tokens} new tokens, {torch.get_num_threads()} threads"
    )
    trainer._train_step()  # warm-up
    records: list[dict[str, Any]] = []
    flops, gen_tokens, train_tokens, train_flops = [], [], [], []
    for _ in range(repeats):
        before = dict(meter.counters())
        records.append(trainer._train_step())
        after = meter.counters()
        flops.append(after["flops"] - before["flops"])
        gen_tokens.append(after["generated_tokens"] - before["generated_tokens"])
        train_tokens.append(after["trained_tokens"] - before["trained_tokens"])
        train_flops.append(after["flops_training"] - before["flops_training"])
    phases = ("generation", "scoring", "advantages", "update", "step")
    median = {p: statistics.median(r["time"][p] for r in records) for p in phases}
    print(f"\ntime per step (median of {repeats}):")
    for phase in phases:
        share = median[phase] / median["step"]
        print(f"  {phase:<11} {median[phase] * 1000:9.1f} ms  {share:6.1%}")
    print(f"generated tokens/s: {statistics.median(gen_tokens) / median['generation']:,.0f}")
    print(f"trained tokens/s:   {statistics.median(train_tokens) / median['update']:,.0f}")
    peak = matmul_peak()
    achieved = statistics.median(train_flops) / median["update"]
    print(f"meter FLOPs per step: {statistics.median(flops):.3e}")
    print(
        f"update: {achieved / 1e9:.2f} GFLOP/s achieved vs {peak / 1e9:.2f} GFLOP/s matmul "
        f"peak ({achieved / peak:.1%})"
    )
    print("\nadvantage computation, share of the step (target < 2%):")
    for name, seconds, share in advantage_shares(trainer, median["step"], methods):
        flag = "" if share < 0.02 else "  <- over 2%"
        print(f"  {name:<24} {seconds * 1000:8.2f} ms  {share:6.2%}{flag}")
    batch = trainer.services.sample_batch()
    plain = plain_loop(trainer, batch, repeats)
    print(f"\nplain transformers loop, same work (median of {repeats}):")
    for phase in ("generation", "update"):
        print(
            f"  {phase:<11} harness {median[phase] * 1000:8.1f} ms   plain "
            f"{plain[phase] * 1000:8.1f} ms   ratio {plain[phase] / median[phase]:.2f}x"
        )
    return 0
