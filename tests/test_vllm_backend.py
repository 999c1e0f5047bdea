"""The vLLM rollout backend (``rollout.backend: vllm``) driven on the CPU through a fake ``vllm``
module: what it asks vLLM for (memory, sleep mode, the in-process engine), how the policy's
weights reach the engine after a training step, and how vLLM's outputs become samples. The real
engine runs in ``scripts/gpu_check.sh``."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

from creditbench.harness.config import RunConfig, VLLMConfig
from creditbench.harness.models.modeling import load_policy
from creditbench.harness.sampling.rollout import VLLMBackend, single_process_group
from creditbench.harness.training.setup import base_policy_path


class FakeEngineModel:
    """The model inside the engine: keeps what ``load_weights`` gave it."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}

    def load_weights(self, pairs) -> None:
        for name, tensor in pairs:
            self.weights[name] = tensor.clone()


class FakeLLM:
    """vLLM's ``LLM``: records its arguments and every call; ``generate`` answers each request
    with ``n`` completions: ``script`` token ids, or its last prompt token then EOS."""

    eos = 0
    script: list[int] | None = None

    def __init__(self, **kwargs) -> None:
        self.kwargs, self.calls = kwargs, []
        self.model = FakeEngineModel()
        driver = SimpleNamespace(model_runner=SimpleNamespace(model=self.model))
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=driver))

    def apply_model(self, fn):  # vLLM V1 will not serialize a function without a flag
        raise RuntimeError("apply_model needs VLLM_ALLOW_INSECURE_SERIALIZATION=1")

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset_prefix_cache")

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep:{level}")

    def wake_up(self, tags) -> None:
        self.calls.append(f"wake_up:{','.join(tags)}")

    def generate(self, requests, params, use_tqdm=True):
        self.calls.append("generate")
        self.requests, self.params = requests, params
        outputs = []
        for request in requests:
            ids = self.script or [request["prompt_token_ids"][-1], self.eos]
            completions = [SimpleNamespace(token_ids=list(ids)) for _ in range(params.kwargs["n"])]
            outputs.append(SimpleNamespace(outputs=completions))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kwargs: SimpleNamespace(kwargs=kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    return module


@pytest.fixture(scope="module")
def policy_and_tokenizer():
    return load_policy(base_policy_path(RunConfig()))


def backend(tokenizer, **memory) -> VLLMBackend:
    FakeLLM.eos = tokenizer.eos_token_id
    return VLLMBackend("model-dir", tokenizer, memory=VLLMConfig(**memory), seed=3)


def test_the_engine_shares_the_gpu_in_process_with_the_memory_it_is_given(
    fake_vllm, policy_and_tokenizer
):
    _, tokenizer = policy_and_tokenizer
    llm = backend(tokenizer).llm
    assert llm.kwargs["gpu_memory_utilization"] == 0.3  # TRL's colocate default, not vLLM's 0.9
    assert llm.kwargs["enable_sleep_mode"] is False
    assert llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert llm.kwargs["seed"] == 3 and llm.calls == []
    assert (
        backend(tokenizer, gpu_memory_utilization=0.55).llm.kwargs["gpu_memory_utilization"] == 0.55
    )


def test_a_push_puts_the_policys_current_parameters_in_the_engine(fake_vllm, policy_and_tokenizer):
    policy, tokenizer = policy_and_tokenizer
    engine = backend(tokenizer)
    engine.load_weights(policy)
    pushed = engine.llm.model.weights
    named = dict(policy.named_parameters())
    assert pushed.keys() == named.keys()
    assert all(torch.equal(pushed[n], p.detach()) for n, p in named.items())
    assert engine.llm.calls == ["reset_prefix_cache"]  # no cached prefix of the old weights
    first = next(iter(named))
    with torch.no_grad():  # a training step moves the policy; the next push carries it
        named[first].add_(1.0)
    try:
        engine.load_weights(policy)
        assert torch.equal(engine.llm.model.weights[first], named[first].detach())
    finally:
        with torch.no_grad():
            named[first].sub_(1.0)


def test_samples_carry_the_prefix_and_stop_at_eos(fake_vllm, policy_and_tokenizer):
    _, tokenizer = policy_and_tokenizer
    engine = backend(tokenizer)
    prompts = ["start at 3. add 4. work mod 100.\n", "start at 5. work mod 100.\n"]
    samples = engine.sample(prompts, n=2, max_new_tokens=7, temperature=0.5, top_p=0.9, seed=11,
                            prefixes=[[], [5, 6]])  # fmt: skip
    params = engine.llm.params.kwargs
    assert (params["n"], params["temperature"], params["top_p"]) == (2, 0.5, 0.9)
    assert (params["max_tokens"], params["seed"]) == (7, 11)
    asked = [r["prompt_token_ids"] for r in engine.llm.requests]
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert asked == [encoded[0], encoded[1] + [5, 6]]
    assert samples.prompt_index.tolist() == [0, 0, 1, 1]
    assert samples.response_mask.shape[0] == 4
    # the given prefix is part of the response; one token was generated, then EOS
    fourth = samples.response_ids[3][samples.response_mask[3] > 0].tolist()
    assert fourth[:3] == [5, 6, 6] and fourth[3] == tokenizer.eos_token_id
    FakeLLM.script = [7] * 7  # no EOS within the limit: truncated
    try:
        cut = engine.sample(prompts[:1], n=1, max_new_tokens=7, temperature=1.0, seed=0)
        assert cut.truncated.tolist() == [True]
    finally:
        FakeLLM.script = None


def test_sleep_mode_frees_the_engine_while_the_policy_trains(fake_vllm, policy_and_tokenizer):
    policy, tokenizer = policy_and_tokenizer
    prompt = ["start at 3. work mod 100.\n"]
    engine = backend(tokenizer, sleep=True)
    llm = engine.llm
    assert llm.kwargs["enable_sleep_mode"] is True and llm.calls == []
    # before any push (the first evaluation): the weights vLLM loaded are only offloaded
    engine.sample(prompt, n=1, max_new_tokens=4, temperature=1.0, seed=0)
    engine.sample(prompt, n=1, max_new_tokens=4, temperature=1.0, seed=0)
    assert llm.calls == [
        "generate", "sleep:1", "wake_up:weights", "wake_up:kv_cache", "generate", "sleep:1",
    ]  # fmt: skip
    del llm.calls[:]
    engine.load_weights(policy)  # after a training step: from now on the weights may be freed
    engine.sample(prompt, n=1, max_new_tokens=4, temperature=1.0, seed=0)
    assert llm.calls == [
        "wake_up:weights", "reset_prefix_cache", "wake_up:kv_cache", "generate", "sleep:2",
    ]  # fmt: skip
    # sampling again without a training step (an evaluation): the freed weights are pushed again
    del llm.calls[:]
    engine.sample(prompt, n=1, max_new_tokens=4, temperature=1.0, seed=0)
    assert llm.calls == [
        "wake_up:weights", "reset_prefix_cache", "wake_up:kv_cache", "generate", "sleep:2",
    ]  # fmt: skip
    assert torch.equal(llm.model.weights[next(iter(llm.model.weights))],
                       next(iter(policy.parameters())).detach())  # fmt: skip


def test_a_single_process_gets_a_group_of_one_and_a_launchers_group_is_kept(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    single_process_group()
    import os

    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == (
        "0",
        "1",
        "0",
    )
    assert int(os.environ["MASTER_PORT"]) > 0
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("MASTER_PORT", "29500")
    single_process_group()
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == ("3", "8")
    assert os.environ["MASTER_PORT"] == "29500"


@pytest.mark.parametrize("share", [0.0, 1.5])
def test_a_memory_share_outside_the_gpu_is_refused(share):
    with pytest.raises(ValueError, match=r"^gpu_memory_utilization: must be in \(0, 1\]"):
        VLLMConfig(gpu_memory_utilization=share)
