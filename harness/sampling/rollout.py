"""Rollouts: sample G responses per prompt and compute their token log-probabilities.

Two passes make a rollout:

1. **Sampling** with transformers ``generate`` (or vLLM, :class:`VLLMBackend`), left-padded prompts,
   a seeded generator, no top-k, the run's temperature and top-p.
2. **Scoring** by a teacher-forced forward pass,
   :func:`creditbench.harness.scoring.forward.score_responses`. The behaviour log-probabilities
   stored in the batch come from this pass, not from the sampler's scores: the trainer's
   training pass runs exactly the same code on the same padded layout, so at the first PPO
   epoch the importance ratio is 1 to the last bit (KV-cached decoding differs from a full
   forward pass in rounding).

The log-probabilities are those of the tempered policy ``softmax(logits / temperature)`` that did
the sampling (verl's convention); top-p truncation is not reflected in them.

Layout: prompts are left-padded ``[B, P]``, responses right-padded ``[B, T]``; the model sees
``cat(prompt, response)`` with position ids counted from each prompt's first real token, which is
what ``generate`` does. A response's mask covers its tokens up to and including the first EOS.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from creditbench.harness.sampling import lean

VLLM_MISSING = (
    'the vllm rollout backend needs the vllm package: pip install -e ".[vllm]" in the clone '
    "(a CUDA machine is required)"
)


def derive_seed(*parts: object) -> int:
    """A 63-bit seed that depends only on ``parts`` (for example ``(run_seed, "rollout", step)``).

    Seeding every random phase from its own coordinates, rather than from one global stream,
    is what lets a resumed run sample exactly what an uninterrupted run samples.
    """
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block under ``torch.manual_seed(seed)`` and restore the global RNG afterwards."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def autocast_for(device: torch.device | str) -> contextlib.AbstractContextManager:
    """bf16 autocast on a GPU, nothing (fp32) on a CPU."""
    if torch.device(device).type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# --------------------------------------------------------------------------------------------
# Padded layout
# --------------------------------------------------------------------------------------------


@dataclass
class Samples:
    """Sampled responses in the padded layout of :class:`methods.core.RolloutBatch`.

    Attributes:
        prompt_ids, prompt_mask: ``[B, P]`` left-padded.
        response_ids, response_mask: ``[B, T]`` right-padded; the mask runs through the EOS.
        truncated: ``[B]`` bool, no EOS within the token limit.
        prompt_index: ``[B]`` long, which input prompt each row answers (rows are grouped:
            ``n`` consecutive rows per prompt).
        new_tokens: ``[B]`` long, tokens the sampler generated (a prefix is not counted).
        texts: the decoded responses, special tokens and prefix included, EOS excluded.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    truncated: Tensor
    prompt_index: Tensor
    new_tokens: Tensor
    texts: list[str]


def pad_layout(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Left-pad the prompts and right-pad the responses (lists of token ids) into tensors."""
    width_p = max((len(p) for p in prompts), default=0)
    width_r = max((len(r) for r in responses), default=0)
    count = len(prompts)
    prompt_ids = torch.full((count, width_p), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((count, width_p))
    response_ids = torch.full((count, max(width_r, 1)), pad_id, dtype=torch.long)
    response_mask = torch.zeros((count, max(width_r, 1)))
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        if prompt:
            prompt_ids[row, width_p - len(prompt) :] = torch.tensor(list(prompt))
            prompt_mask[row, width_p - len(prompt) :] = 1.0
        if response:
            response_ids[row, : len(response)] = torch.tensor(list(response))
            response_mask[row, : len(response)] = 1.0
    return prompt_ids, prompt_mask, response_ids, response_mask


def encode(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens (the task's prompts carry their own)."""
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def chat_turn(prompt: str) -> list[dict[str, str]]:
    """A prompt as the one user turn of a conversation: how the verl and TRL launches hand a
    task's prompt to an engine that renders it with the model's chat template."""
    return [{"role": "user", "content": prompt}]


def has_chat_template(tokenizer: Any) -> bool:
    """Whether prompts for this tokenizer's model are rendered with a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def encode_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids of each prompt in the one format every engine uses: with a tokenizer that has
    a chat template, the prompt as one user turn (:func:`chat_turn`) rendered with the
    template's generation prompt, as verl's agent loop and TRL's conversational prompts render
    it; otherwise the text itself without special tokens (:func:`encode`; the testbed)."""
    if not has_chat_template(tokenizer):
        return encode(tokenizer, prompts)
    return [
        list(
            tokenizer.apply_chat_template(
                chat_turn(prompt), add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        )
        for prompt in prompts
    ]


def sequence_lengths(response_ids: Tensor, eos_id: int, pad_id: int) -> Tensor:
    """``[B]`` real tokens of each response: through the first EOS, else every non-pad token."""
    is_eos = response_ids == eos_id
    has_eos = is_eos.any(-1)
    first_eos = torch.where(has_eos, is_eos.float().argmax(-1) + 1, response_ids.shape[1])
    if pad_id == eos_id:
        return first_eos
    return torch.where(has_eos, first_eos, (response_ids != pad_id).sum(-1))


def cut_at_eos(tokens: Sequence[int], eos_id: int, pad_id: int) -> tuple[list[int], bool]:
    """The tokens up to and including the first EOS, and whether the response was truncated."""
    out: list[int] = []
    for token in tokens:
        out.append(int(token))
        if token == eos_id:
            return out, False
    return out, True


def decode_responses(tokenizer, response_ids: Tensor, response_lengths: Tensor) -> list[str]:
    """The text of each response, without its EOS or padding."""
    eos = tokenizer.eos_token_id
    texts = []
    for row, length in zip(response_ids.tolist(), response_lengths.tolist(), strict=True):
        tokens = row[: int(length)]
        if tokens and tokens[-1] == eos:
            tokens = tokens[:-1]
        texts.append(tokenizer.decode(tokens, skip_special_tokens=True))
    return texts


def assemble_samples(
    tokenizer,
    prompt_rows: Sequence[Sequence[int]],
    response_rows: Sequence[Sequence[int]],
    truncated: Sequence[bool],
    new_tokens: Sequence[int],
    prompt_index: Tensor,
) -> Samples:
    """Pad one row per response (its prompt's token ids and its own) into a :class:`Samples`.

    ``new_tokens`` counts the tokens each row generated (a given prefix is part of the response
    but not generated); ``prompt_index`` ``[B]`` names each row's prompt.
    """
    prompt_ids, prompt_mask, response_ids, response_mask = pad_layout(
        prompt_rows, response_rows, tokenizer.pad_token_id
    )
    return Samples(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        truncated=torch.tensor(list(truncated), dtype=torch.bool),
        prompt_index=prompt_index,
        new_tokens=torch.tensor(list(new_tokens), dtype=torch.long),
        texts=decode_responses(tokenizer, response_ids, response_mask.sum(-1).long()),
    )


# --------------------------------------------------------------------------------------------
# Sampling with transformers
# --------------------------------------------------------------------------------------------

ENGINES = ("auto", "lean", "hf")


def use_lean(model, engine: str) -> bool:
    """Whether ``engine`` samples ``model`` with the lean sampler; ``lean`` on a model it does
    not run is an error naming why."""
    if engine not in ENGINES:
        raise ValueError(f"engine: must be one of {', '.join(ENGINES)} (got {engine!r})")
    if engine == "hf":
        return False
    why = lean.supports(model)
    if why is not None and engine == "lean":
        raise ValueError(f"engine: the lean sampler cannot run this model ({why}); use hf")
    return why is None


@torch.no_grad()
def sample_responses(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    n: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    seed: int,
    prefixes: Sequence[Sequence[int]] | None = None,
    batch_size: int | None = None,
    engine: str = "auto",
) -> Samples:
    """Sample ``n`` responses to each prompt with ``model.generate`` or the lean sampler.

    Args:
        prompts: prompt texts.
        n: responses per prompt (rows ``i*n .. i*n+n-1`` answer prompt ``i``).
        temperature: 0 means greedy decoding.
        seed: the sampler's seed; the same seed gives the same responses.
        prefixes: optional token ids per prompt that every response starts with (a reset
            state inside an earlier response); they belong to the response, not the prompt.
        batch_size: prompts per ``generate`` call (all of them when None).
        engine: ``lean`` (:mod:`.lean`, the same draws with fewer ops), ``hf``
            (transformers ``generate``), or ``auto``: lean where it runs the model.

    Returns:
        :class:`Samples`; its ``new_tokens`` are what the budget meter charges.
    """
    pad_id = tokenizer.pad_token_id
    eos_id = tokenizer.eos_token_id
    lean_engine = use_lean(model, engine)
    prompt_tokens = encode_prompts(tokenizer, prompts)
    prefix_tokens = [list(p) for p in prefixes] if prefixes is not None else [[] for _ in prompts]
    device = next(model.parameters()).device
    per_call = batch_size or max(len(prompts), 1)
    rows_prompt: list[list[int]] = []
    rows_response: list[list[int]] = []
    rows_truncated: list[bool] = []
    rows_new: list[int] = []
    for start in range(0, len(prompts), per_call):
        chunk = range(start, min(start + per_call, len(prompts)))
        contexts = [prompt_tokens[i] + prefix_tokens[i] for i in chunk for _ in range(n)]
        ids, mask, _, _ = pad_layout(contexts, [[] for _ in contexts], pad_id)
        position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
        options = dict(
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_id,
            eos_token_id=eos_id,
            num_beams=1,
        )
        if temperature > 0:
            options.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            options.update(do_sample=False, temperature=None, top_p=None)
        with seeded(derive_seed(seed, start)), autocast_for(device):
            if lean_engine:
                out = lean.generate(
                    model,
                    ids.to(device),
                    mask.to(device),
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    top_p=top_p,
                    eos_token_id=eos_id,
                    pad_token_id=pad_id,
                )
            else:
                out = model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    position_ids=position_ids.to(device),
                    **options,
                )
        generated = out[:, ids.shape[1] :].cpu().tolist()
        for j, tokens in enumerate(generated):
            i = start + j // n
            kept, truncated = cut_at_eos(tokens, eos_id, pad_id)
            rows_prompt.append(prompt_tokens[i])
            rows_response.append(prefix_tokens[i] + kept)
            rows_truncated.append(truncated)
            rows_new.append(len(kept))
    prompt_index = torch.arange(len(prompts)).repeat_interleave(n)
    return assemble_samples(
        tokenizer, rows_prompt, rows_response, rows_truncated, rows_new, prompt_index
    )


# --------------------------------------------------------------------------------------------
# vLLM backend (optional; GPU only)
# --------------------------------------------------------------------------------------------


def single_process_group() -> None:
    """The environment of a torch.distributed group of one process, unless a launcher (torchrun,
    accelerate) set it: vLLM's external launcher joins that group (TRL sets the same for a
    single-process colocated engine)."""
    import os
    import socket

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as probe:  # a free port for the group's rendezvous
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "localhost",
                "MASTER_PORT": str(port)}  # fmt: skip
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


class VLLMBackend:
    """Sampling with vLLM on the training GPU; scoring stays with the teacher-forced passes on
    the training model.

    The engine is TRL's colocated one (``trl/generation/vllm_generation.py``, TRL 1.16): it
    runs in this process (``distributed_executor_backend="external_launcher"``), takes
    ``memory.gpu_memory_utilization`` of the GPU, and receives the policy's weights after every
    training step through the model vLLM loaded (:meth:`load_weights`: each parameter through
    the model's own ``load_weights``, then the prefix cache reset), not through
    ``LLM.apply_model``, whose function vLLM V1 refuses to serialize. With ``memory.sleep``
    the engine sleeps after each generation while the policy trains (level 2, weights and KV
    cache freed, once a policy has been pushed to refill them; level 1, weights offloaded,
    before), wakes its weights to receive new ones and its KV cache to sample. ``model_path`` is
    a Hugging Face directory. vLLM's own sampler log-probs are returned as ``sampler_logprobs`` for
    diagnostics only: the batch's behaviour log-probs are recomputed teacher-forced, so the
    first-epoch ratio is still exactly 1.
    """

    def __init__(
        self,
        model_path: str,
        tokenizer,
        *,
        memory: Any = None,
        dtype: str = "bfloat16",
        seed: int = 0,
    ):
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(VLLM_MISSING) from exc
        from creditbench.harness.config import VLLMConfig

        self._vllm = vllm
        self.tokenizer = tokenizer
        self.memory = memory if memory is not None else VLLMConfig()
        single_process_group()  # the external launcher joins torch.distributed's group
        self.llm = vllm.LLM(
            model=str(model_path),
            dtype=dtype,
            seed=seed,
            enable_prefix_caching=True,
            gpu_memory_utilization=self.memory.gpu_memory_utilization,
            enable_sleep_mode=self.memory.sleep,
            distributed_executor_backend="external_launcher",
        )
        self._policy = None  # the model whose weights the engine holds, to push after a sleep
        self._asleep = 0  # 0 awake; else the sleep level (2 frees the weights, 1 offloads them)
        self._weights_awake = True

    @property
    def sleep_level(self) -> int:
        """0 while the engine is awake; else the level it sleeps at (2: its weights freed, 1:
        offloaded), which the GPU check's cycle reads."""
        return self._asleep

    def engine_model(self):
        """The model inside the in-process engine (as TRL reaches it in colocate mode)."""
        return self.llm.llm_engine.model_executor.driver_worker.model_runner.model

    def load_weights(self, model) -> None:
        """Copy the training model's current parameters into the vLLM engine."""
        if not self._weights_awake:
            self.llm.wake_up(tags=["weights"])
            self._weights_awake = True
        target = self.engine_model()
        for name, parameter in model.named_parameters():
            target.load_weights([(name, parameter.detach())])
        self.llm.reset_prefix_cache()
        self._policy = model

    def sample(
        self,
        prompts: Sequence[str],
        *,
        n: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        seed: int,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> Samples:
        """Same contract as :func:`sample_responses`."""
        tokenizer = self.tokenizer
        prompt_tokens = encode_prompts(tokenizer, prompts)
        prefix_tokens = (
            [list(p) for p in prefixes] if prefixes is not None else [[] for _ in prompts]
        )
        params = self._vllm.SamplingParams(
            n=n,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_new_tokens,
            logprobs=0,
            seed=seed,
        )
        requests = [
            {"prompt_token_ids": p + q} for p, q in zip(prompt_tokens, prefix_tokens, strict=True)
        ]
        if self._asleep:
            if self._asleep == 2 and not self._weights_awake:
                self.load_weights(self._policy)  # freed while it slept: pushed again
            elif not self._weights_awake:
                self.llm.wake_up(tags=["weights"])  # offloaded: restored as they were
                self._weights_awake = True
            self.llm.wake_up(tags=["kv_cache"])
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        if self.memory.sleep:
            # level 2 frees the weights: only once there is a policy to push them again from
            self._asleep = 2 if self._policy is not None else 1
            self.llm.sleep(level=self._asleep)
            self._weights_awake = False
        rows_prompt, rows_response, rows_truncated, rows_new = [], [], [], []
        for i, request_output in enumerate(outputs):
            for completion in request_output.outputs:
                kept, truncated = cut_at_eos(
                    completion.token_ids, tokenizer.eos_token_id, tokenizer.pad_token_id
                )
                rows_prompt.append(prompt_tokens[i])
                rows_response.append(prefix_tokens[i] + kept)
                rows_truncated.append(truncated)
                rows_new.append(len(kept))
        prompt_index = torch.arange(len(prompts)).repeat_interleave(n)
        return assemble_samples(
            tokenizer, rows_prompt, rows_response, rows_truncated, rows_new, prompt_index
        )
