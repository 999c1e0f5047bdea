"""``creditbench perf``: where the time of a training step goes, on this machine.

For the default model and batch (or any config), in one process, it prints:

- time per step by phase (generation, scoring, advantages, update), median of interleaved
  steps, for the fast path (the defaults) and the reference path (``REFERENCE_PATH``: the
  defaults before the fast ones), with their ratio;
- generated and trained tokens per second, the FLOP meter's count per step, and the
  update's achieved FLOP/s against a measured fp32 matmul peak;
- a plain transformers loop doing the same work side by side (``generate`` with the same
  sampling settings and seed, then forward, backward and AdamW over the same batch);
- TRL's ``GRPOTrainer`` step on the same model and batch shape, when ``trl`` is installed
  (:mod:`.perf_compare`);
- one step of every registered method at the same batch: its wall time and FLOPs relative to
  GRPO's, and its own advantage math as a share of its step;
- the CPU load other processes put on the machine meanwhile, which says whether the seconds
  can be trusted (the ratios, measured side by side, mostly can).

Nothing is written to disk; the budget meter counts but never stops the measurement.
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Any

import torch

from creditbench.harness.config import RunConfig, load_config


def _best_product_seconds(left: torch.Tensor, right: torch.Tensor, repeats: int) -> float:
    """The fastest of ``repeats`` timings of ``left @ right``, after one warm-up."""
    left @ right
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        left @ right
        best = min(best, time.perf_counter() - started)
    return best


def matmul_peak(size: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of a square fp32 matmul on the training device (the best of a few)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    return 2 * size**3 / _best_product_seconds(a, b, repeats)


def shaped_matmul_peak(model, rows: int, repeats: int = 5) -> float:
    """FLOP/s of fp32 matmul at the update's own shapes: every linear layer of ``model`` at
    ``rows`` tokens, forward (x W^T), input gradient (g W) and weight gradient (g^T x), each
    the best of a few, FLOP-weighted (the work a training pass's matmuls do, nothing else)."""
    flops = seconds = 0.0
    shapes = {tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    for out_features, in_features in sorted(shapes):
        w = torch.randn(out_features, in_features)
        x, g = torch.randn(rows, in_features), torch.randn(rows, out_features)
        for left, right in ((x, w.t()), (g, w), (g.t(), x)):
            flops += 2 * rows * out_features * in_features
            seconds += _best_product_seconds(left, right, repeats)
    return flops / seconds


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
    scored_before = services.batches.with_reference
    for name, cls in list_methods().items():
        if methods and name not in methods and name != "grpo":
            continue
        if cls.needs.step_truth and not services.step_checked:
            continue
        method = cls(build_method_config(cls, {}))
        if method.needs_reference:
            # a frozen copy of the policy as it is now (what the step costs does not change),
            # and every batch scored under it, as a run of this method would be (its KL)
            if services.scorers.reference is None:
                services.scorers.reference = copy.deepcopy(trainer.policy).requires_grad_(False)
            services.batches.with_reference = True
        else:
            services.batches.with_reference = False
        flops_before = meter.counters()["flops"]
        record = trainer.train_step(method)
        timing = record["time"]
        rows.append(
            {
                "method": name,
                "step": timing["step"],
                "flops": meter.counters()["flops"] - flops_before,
                "advantages": timing["advantages"],
            }
        )
    services.batches.with_reference = scored_before
    return rows


# Today's path before the fast defaults: transformers generate, the whole batch per forward, a
# separate scoring pass. Kept reachable so every perf run measures the speed-up side by side.
REFERENCE_PATH = (
    "rollout.backend=hf",
    "train.micro_batch_size=1000000",
    "train.skip_onpolicy_scoring=false",
    "train.shared_prefix_forward=false",
)
PHASES = ("generation", "scoring", "advantages", "update", "step")


def interleaved_steps(trainers: dict[str, Any], repeats: int) -> dict[str, list[dict[str, Any]]]:
    """``repeats`` steps of each trainer (after one warm-up each), taking turns, the order
    reversed every round so that neither path always runs first."""
    for trainer in trainers.values():
        trainer.train_step()
    records: dict[str, list[dict[str, Any]]] = {name: [] for name in trainers}
    names = list(trainers)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            trainer = trainers[name]
            before = dict(trainer.meter.counters())
            record = trainer.train_step()
            after = trainer.meter.counters()
            record["counted"] = {key: after[key] - before[key] for key in after}
            records[name].append(record)
    return records


def run_perf(
    config_path: str | None,
    overrides: list[str],
    *,
    repeats: int = 3,
    methods: list[str] | None = None,
    compare_trl: bool = True,
) -> int:
    from creditbench.harness.training.trainer import Trainer
    from creditbench.tools.perf_compare import OutsideLoad, trl_step_seconds

    budget = ["budget.unit=steps", "budget.amount=1000000"]
    trainers = {}
    for name, extra in (("fast", ()), ("reference", REFERENCE_PATH)):
        config = load_config(config_path, [*overrides, *extra, *budget])
        trainers[name] = Trainer(config)
        trainers[name].build()
    trainer = trainers["fast"]
    cfg, meter = trainer.config, trainer.meter
    print(
        f"model: {sum(p.numel() for p in trainer.policy.parameters()) / 1e6:.2f}M parameters "
        f"({meter.non_embedding_params / 1e6:.2f}M non-embedding), batch "
        f"{cfg.rollout.prompts_per_step} prompts x {cfg.rollout.group_size}, "
        f"max {cfg.rollout.max_new_tokens} new tokens, {torch.get_num_threads()} threads"
    )
    print(
        f"fast path: rollout.backend={cfg.rollout.backend}, {trainer.micro_batch_size} rows per "
        "forward, on-policy scoring pass skipped where exact; reference path (today's before "
        f"it): {', '.join(REFERENCE_PATH)}"
    )
    with OutsideLoad() as load:
        records = interleaved_steps(trainers, repeats)
        median = {
            name: {p: statistics.median(r["time"][p] for r in rs) for p in PHASES}
            for name, rs in records.items()
        }
        print(f"\ntime per step, median of {repeats} interleaved steps:")
        print(f"  {'phase':<11} {'fast':>10} {'reference':>10} {'fast/reference':>15}")
        for phase in PHASES:
            fast, ref = median["fast"][phase], median["reference"][phase]
            ratio = f"{fast / ref:.2f}x" if ref > 0 else "-"
            print(f"  {phase:<11} {fast * 1000:8.1f}ms {ref * 1000:8.1f}ms {ratio:>15}")
        counted = {
            key: statistics.median(r["counted"][key] for r in records["fast"])
            for key in records["fast"][0]["counted"]
        }
        fast = median["fast"]
        print(f"generated tokens/s: {counted['generated_tokens'] / fast['generation']:,.0f}")
        print(f"trained tokens/s:   {counted['trained_tokens'] / fast['update']:,.0f}")
        print(f"meter FLOPs per step: {counted['flops']:.3e}")
        peak = matmul_peak()
        achieved = counted["flops_training"] / fast["update"]
        print(
            f"update: {achieved / 1e9:.2f} GFLOP/s achieved vs {peak / 1e9:.2f} GFLOP/s fp32 "
            f"matmul peak ({achieved / peak:.1%}), counting the FLOPs the meter charges"
        )
        share = 1.0
        batch = trainer.services.sample_batch()
        if cfg.train.shared_prefix_forward:
            from creditbench.harness.scoring.forward import shared_prefix_share

            share = shared_prefix_share(
                batch.prompt_ids, batch.prompt_mask, batch.response_mask, trainer.micro_batch_size
            )
        executed = achieved * share
        micro_batches = -(-batch.size // trainer.micro_batch_size)
        rows = int(share * float(counted["trained_tokens"]) / micro_batches)
        shaped = shaped_matmul_peak(trainer.policy, rows)
        print(
            f"        {executed / 1e9:.2f} GFLOP/s ({executed / peak:.1%}) counting what it "
            f"executes ({share:.0%} of the tokens the meter charges: each prompt once per "
            "micro-batch)"
        )
        print(
            f"        fp32 matmul at the update's own shapes (its linear layers at {rows} "
            f"tokens): {shaped / 1e9:.2f} GFLOP/s; executed / that: {executed / shaped:.1%}"
        )
        print(
            f"\nharness (fast path) vs a plain transformers loop, same work (median of {repeats}):"
        )
        for phase, (ours, plain) in side_by_side(trainer, repeats).items():
            print(
                f"  {phase:<11} harness {ours * 1000:8.1f} ms   plain {plain * 1000:8.1f} ms   "
                f"plain/harness {plain / ours:.2f}x"
            )
        if compare_trl:
            trl = trl_step_seconds(trainer, repeats)
            if isinstance(trl, str):
                print(f"\nTRL GRPOTrainer: not measured, {trl}")
            else:
                print(
                    f"\nTRL GRPOTrainer step, same model and batch shape (median of {repeats}): "
                    f"{trl * 1000:.1f} ms; harness fast step / TRL step "
                    f"{fast['step'] / trl:.2f}x"
                )
        if methods != []:
            print(
                "\nevery method, one step at this batch (fast path): wall time and FLOPs "
                "relative to GRPO's, and its own advantage math as a share of its step "
                "(target < 2%):"
            )
            _print_method_steps(method_steps(trainer, methods))
    print("\n" + load.describe())
    return 0


def _print_method_steps(rows: list[dict[str, float | str]]) -> None:
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
