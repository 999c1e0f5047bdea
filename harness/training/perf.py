"""``creditbench perf``: where the time of a training step goes, on this machine.

For the default model and batch (or any config) it prints:

- time per step by phase (generation, scoring, advantages, update), median of a few steps;
- generated and trained tokens per second;
- the FLOP meter's count per step, and the achieved FLOP/s of the update against a measured
  fp32 matmul peak;
- one step of every registered method at the same batch: its wall time and FLOPs relative to
  GRPO's, and its own advantage math as a share of its step (extra scoring or generation
  passes it asks for count in the step, not in the share);
- a plain transformers loop doing the same work side by side (``generate`` with the same
  sampling settings and seed, then forward, backward and AdamW over the same batch), with the
  ratio (above 1: the harness is faster).

Nothing is written to disk; the budget meter counts but never stops the measurement.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from creditbench.harness.config import RunConfig, load_config


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


def side_by_side(trainer, repeats: int) -> dict[str, tuple[float, float]]:
    """Median seconds of (harness, plain transformers) for the same generation and update.

    Generation: the harness's :func:`sample_responses` and a bare ``model.generate`` on the
    same prompts with the same seed produce the same tokens, so the work is identical. Update:
    :func:`ppo_update` and a bare forward/backward/AdamW on the same batch. Both optimizers
    have lr 0, so the model does not move between repeats; the two alternate, in turn first.
    """
    from creditbench.harness.sampling.rollout import derive_seed, sample_responses
    from creditbench.harness.training.ppo import ppo_update

    cfg: RunConfig = trainer.config
    model, tokenizer = trainer.policy, trainer.tokenizer
    prompts = [p.prompt for p in trainer.services.train_problems[: cfg.rollout.prompts_per_step]]
    tokenizer.padding_side = "left"
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    sampling = dict(
        max_new_tokens=cfg.rollout.max_new_tokens,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
    )
    batch = trainer.services.sample_batch()
    advantages = trainer.method.advantages(batch, trainer.services)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    input_ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    attention = torch.cat([batch.prompt_mask, torch.ones_like(batch.response_mask)], 1)
    labels = torch.cat([torch.zeros_like(batch.prompt_ids), batch.response_ids], 1)
    weights = torch.cat([torch.zeros_like(batch.prompt_mask), batch.response_mask], 1)
    lengths = attention.sum(-1).long()

    def harness_generation() -> None:
        sample_responses(model, tokenizer, prompts, n=cfg.rollout.group_size, seed=0, **sampling)

    def plain_generation() -> None:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(0, 0))  # the seed sample_responses gives its one call
            model.generate(
                **encoded,
                do_sample=True,
                top_k=0,
                num_return_sequences=cfg.rollout.group_size,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                **sampling,
            )

    def harness_update() -> None:
        ppo_update(
            model,
            optimizer,
            trainer.method,
            batch,
            advantages,
            train=cfg.train,
            micro_batch_size=trainer.micro_batch_size,
            temperature=cfg.rollout.temperature,
            meter=trainer.meter,
            lengths=lengths,
            seed=0,
            step=0,
        )

    def plain_update() -> None:
        logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
        logprobs = torch.log_softmax(logits, -1).gather(-1, labels[:, 1:, None]).squeeze(-1)
        loss = -(logprobs * weights[:, 1:]).sum() / weights.sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    pairs = {
        "generation": (harness_generation, plain_generation),
        "update": (harness_update, plain_update),
    }
    out = {}
    for phase, functions in pairs.items():
        seconds: tuple[list[float], list[float]] = ([], [])
        for repeat in range(repeats):
            order = (0, 1) if repeat % 2 == 0 else (1, 0)
            for which in order:
                started = time.perf_counter()
                functions[which]()
                seconds[which].append(time.perf_counter() - started)
        out[phase] = (statistics.median(seconds[0]), statistics.median(seconds[1]))
    return out


def method_steps(trainer, methods: list[str] | None) -> list[dict[str, float | str]]:
    """One full step (rollout, advantages, update) of every registered method on the same
    trainer: wall seconds, meter FLOPs, and the method's own advantage math in seconds (its
    extra scoring or generation passes excluded: they are counted in the step)."""
    from creditbench.harness.config import build_method_config
    from creditbench.methods.registry import list_methods

    rows: list[dict[str, float | str]] = []
    services, meter = trainer.services, trainer.meter
    for name, cls in list_methods().items():
        if methods and name not in methods and name != "grpo":
            continue
        if cls.requires_extras and not services.step_checked:
            continue
        flops_before = meter.counters()["flops"]
        record = trainer.train_step(cls(build_method_config(cls, {})))
        timing = record["time"]
        rows.append(
            {
                "method": name,
                "step": timing["step"],
                "flops": meter.counters()["flops"] - flops_before,
                "advantages": timing["advantages"],
            }
        )
    return rows


def run_perf(
    config_path: str | None,
    overrides: list[str],
    *,
    repeats: int = 3,
    methods: list[str] | None = None,
) -> int:
    from creditbench.harness.training.trainer import Trainer

    config = load_config(config_path, [*overrides, "budget.unit=steps", "budget.amount=1000000"])
    trainer = Trainer(config)
    trainer.build()
    cfg = trainer.config
    meter = trainer.meter
    print(
        f"model: {sum(p.numel() for p in trainer.policy.parameters()) / 1e6:.2f}M parameters "
        f"({meter.non_embedding_params / 1e6:.2f}M non-embedding), batch "
        f"{cfg.rollout.prompts_per_step} prompts x {cfg.rollout.group_size}, "
        f"max {cfg.rollout.max_new_tokens} new tokens, {torch.get_num_threads()} threads"
    )
    trainer.train_step()  # warm-up
    records: list[dict[str, Any]] = []
    flops, gen_tokens, train_tokens, train_flops = [], [], [], []
    for _ in range(repeats):
        before = dict(meter.counters())
        records.append(trainer.train_step())
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
    print(
        "\nevery method, one step at this batch: wall time and FLOPs relative to GRPO's, and "
        "its own advantage math as a share of its step (target < 2%):"
    )
    rows = method_steps(trainer, methods)
    grpo = next(r for r in rows if r["method"] == "grpo")
    print(f"  {'method':<24} {'step':>9} {'x GRPO':>7} {'FLOPs x GRPO':>13} {'advantages':>11}")
    for r in rows:
        step, flops = float(r["step"]), float(r["flops"])
        share = float(r["advantages"]) / step
        flag = "" if share < 0.02 else "  <- over 2%"
        print(
            f"  {r['method']:<24} {step:8.2f}s {step / float(grpo['step']):6.2f}x "
            f"{flops / float(grpo['flops']):12.2f}x {share:10.2%}{flag}"
        )
    print(f"\nharness vs a plain transformers loop, same work (median of {repeats}):")
    for phase, (ours, plain) in side_by_side(trainer, repeats).items():
        print(
            f"  {phase:<11} harness {ours * 1000:8.1f} ms   plain {plain * 1000:8.1f} ms   "
            f"plain/harness {plain / ours:.2f}x"
        )
    return 0
