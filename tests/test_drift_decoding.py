"""SCAPO's drift-filtered decoding: the masking rule, the rewrite KV cache, and `eval`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import creditbench.harness as harness_pkg
from creditbench.harness.models.policy_cache import read_manifest
from creditbench.harness.sampling.drift_decoding import (
    DriftFilter,
    DriftSampler,
    check_threshold,
    filtered_logprobs,
)
from creditbench.harness.sampling.rollout import sample_responses
from creditbench.harness.tasks.base import VARIANTS, TaskBase
from creditbench.methods.scapo import SCAPO, drift_mask, token_drift
from creditbench.tools.cli.main import main

RULE = SCAPO()  # the drift filter's masking rule and rewrites are SCAPO's

# --------------------------------------------------------------------------------------------
# The masking rule on hand-made distributions
# --------------------------------------------------------------------------------------------


def test_worked_example() -> None:
    """Five tokens, EOS = 0. Drifts order the non-EOS tokens 3, 1, 4, 2; masking 3 (0.3) and
    1 (0.4) reaches 0.7, and adding 4 (0.15) would pass 0.8, so M = {1, 3}. EOS, the most
    drifting token of all, stays."""
    p0 = torch.tensor([[0.05, 0.4, 0.1, 0.3, 0.15]])
    pk = torch.tensor([[0.5, 0.2, 0.1, 0.05, 0.1]])
    logp0, logpk = p0.log(), pk.log().unsqueeze(0)
    drift = token_drift(logp0, logpk[0])[0]
    assert drift.argsort(descending=True).tolist() == [0, 3, 1, 4, 2]
    mask = drift_mask(logp0, logpk, eos_id=0, threshold=0.8)
    assert mask.tolist() == [[False, True, False, True, False]]
    expected = torch.tensor([[0.05, 0.0, 0.1, 0.0, 0.15]]) / 0.3
    torch.testing.assert_close(filtered_logprobs(logp0, mask).exp(), expected)
    # A threshold below the top drifter's own mass masks nothing.
    assert not drift_mask(logp0, logpk, eos_id=0, threshold=0.29).any()


def test_tokens_no_prompt_changes_are_masked_last_and_eos_survives_everything() -> None:
    p0 = torch.tensor([[0.1, 0.1, 0.1, 0.7]])  # EOS = 3 holds most of the mass
    pk = torch.tensor([[[0.4, 0.1, 0.4, 0.1]]])
    mask = drift_mask(p0.log(), pk.log(), eos_id=3, threshold=0.8)
    assert mask.tolist() == [[True, True, True, False]]
    torch.testing.assert_close(
        filtered_logprobs(p0.log(), mask).exp(), torch.tensor([[0, 0, 0, 1.0]])
    )


@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 3),
    vocab=st.integers(2, 12),
    rewrites=st.integers(1, 4),
    threshold=st.sampled_from([0.0, 0.3, 0.8, 0.95]),
    spread=st.sampled_from([0.5, 3.0, 8.0]),
)
def test_mask_rule_properties(seed, rows, vocab, rewrites, threshold, spread) -> None:
    gen = torch.Generator().manual_seed(seed)
    logp0 = torch.log_softmax(spread * torch.randn(rows, vocab, generator=gen), -1)
    logpk = torch.log_softmax(spread * torch.randn(rewrites, rows, vocab, generator=gen), -1)
    eos = int(torch.randint(vocab, (1,), generator=gen))
    mask = drift_mask(logp0, logpk, eos, threshold)
    p0 = logp0.exp()
    drift = token_drift(logp0.unsqueeze(0), logpk).mean(0)
    filtered = filtered_logprobs(logp0, mask).exp()
    assert not mask[:, eos].any(), "EOS was masked"
    masked_mass = (p0 * mask).sum(-1)
    assert (masked_mass <= threshold + 1e-6).all()
    torch.testing.assert_close(filtered.sum(-1), torch.ones(rows))
    assert (filtered[mask] == 0).all()
    torch.testing.assert_close(filtered[~mask], (p0 / (1 - masked_mass).unsqueeze(-1))[~mask])
    for r in range(rows):
        kept = [v for v in range(vocab) if v != eos and not mask[r, v]]
        masked = [v for v in range(vocab) if mask[r, v]]
        if kept and masked:  # the masked set is a head of the drift order
            assert min(drift[r, masked]) >= max(drift[r, kept])
        if kept:  # and it is the longest head that fits under the threshold
            top = max(kept, key=lambda v: (float(drift[r, v]), -v))
            assert float(masked_mass[r] + p0[r, top]) > threshold - 1e-6


def test_threshold_must_be_a_fraction_below_one() -> None:
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(ValueError, match="drift_threshold"):
            check_threshold(bad)


# --------------------------------------------------------------------------------------------
# The processor on a tiny random model
# --------------------------------------------------------------------------------------------


def tiny_model():
    from small_models import small_decoder
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return small_decoder(
        Qwen3ForCausalLM,
        Qwen3Config,
        vocab_size=12,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
    )


def test_cached_rewrite_logits_equal_a_full_forward() -> None:
    model = tiny_model()
    rewrite_ids = torch.tensor([[0, 0, 3, 4], [5, 6, 7, 8], [0, 9, 3, 3], [0, 0, 0, 4]])
    rewrite_mask = (rewrite_ids != 0).float()
    drift = DriftFilter(model, rewrite_ids, rewrite_mask, prompt_width=3, eos_id=1, rule=RULE)
    generated = torch.randint(3, 12, (2, 5), generator=torch.Generator().manual_seed(1))
    for t in range(6):
        got = drift._rewrite_logits(generated[:, :t])
        ids = torch.cat([rewrite_ids, generated[:, :t].repeat(2, 1)], 1)
        mask = torch.cat([rewrite_mask, torch.ones(4, t)], 1)
        with torch.no_grad():
            full = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=(mask.long().cumsum(-1) - 1).clamp(min=0),
            ).logits[:, -1]
        torch.testing.assert_close(got, full, atol=1e-4, rtol=1e-4)


class CharTokenizer:
    """Letters a-i are tokens 3-11; 0 pads, 1 ends."""

    pad_token_id, eos_token_id = 0, 1

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [3 + "abcdefghi".index(c) for c in text]}

    def decode(self, tokens, skip_special_tokens: bool = True) -> str:
        return "".join("abcdefghi"[t - 3] for t in tokens if t >= 3)


class RewriteTask(TaskBase):
    name, capabilities = "rewrite", frozenset({VARIANTS})

    def variant(self, problem: str, kind: str) -> str:
        return {"rewrite_template": "ab", "rewrite_typo": "i", "rewrite_framing": "hh"}.get(
            kind, problem + "c"
        ) + problem


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_threshold_zero_decodes_like_plain_sampling(temperature: float) -> None:
    model, tok, prompts = tiny_model(), CharTokenizer(), ["abc", "defg", "e"]
    options = dict(n=2, max_new_tokens=6, temperature=temperature, seed=5)
    sampler = DriftSampler(RewriteTask(), prompts, RULE, threshold=0.0)
    filtered = sampler(model, tok, prompts, **options)
    plain = sample_responses(model, tok, prompts, **options)
    assert filtered.texts == plain.texts
    assert torch.equal(filtered.response_ids, plain.response_ids)
    assert sampler.summary()["drift_masked_mass"] == 0.0
    strict = DriftSampler(RewriteTask(), prompts, RULE, threshold=0.8)
    strict(model, tok, prompts, **options)
    assert 0.0 < strict.summary()["drift_masked_mass"] <= 0.8


def test_a_task_without_rewrites_is_refused() -> None:
    with pytest.raises(ValueError, match="has no variants .asked for by drift_filter"):
        DriftSampler(object(), ["abc"], RULE)


# --------------------------------------------------------------------------------------------
# creditbench eval --decode-with scapo on the shipped base policy
# --------------------------------------------------------------------------------------------


def shipped_base() -> Path:
    """The shipped base policy of the default task and SFT recipe (other chain lengths, and
    the hard regime's bases stopped earlier, ship beside it)."""
    from creditbench.harness.models.sft import BootstrapConfig

    shipped = sorted((Path(harness_pkg.__file__).parent / "assets" / "base").iterdir())
    default_steps = BootstrapConfig().steps
    (default,) = [
        p
        for p in shipped
        if read_manifest(p)["material"]["task_options"] == {}
        and read_manifest(p)["material"]["config"]["steps"] == default_steps
    ]
    return default


def test_eval_with_the_drift_filter_end_to_end(capsys) -> None:
    argv = ["eval", "--model", str(shipped_base()), "--n", "5", "--k", "1", "--threads", "1"]
    argv += ["--max-new-tokens", "64"]
    assert main([*argv, "--decode-with", "scapo"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_problems"] == 5 and out["drift_threshold"] == 0.8
    assert 0.0 < out["drift_masked_mass"] <= 0.8
    assert 0.0 <= out["drift_filtered_steps"] <= 1.0
    assert 0.0 <= out["sampled_accuracy"] <= 1.0 and 0.0 <= out["greedy_accuracy"] <= 1.0


def test_eval_prints_what_it_measured_and_shares_as_the_fractions_they_are(capsys) -> None:
    argv = ["eval", "--model", str(shipped_base()), "--n", "5", "--k", "1", "--threads", "1"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n"], out["k"], out["greedy"]) == (5, 1, True)
    # in float32, 4 of 5 would print 0.800000011920929
    for key in ("sampled_accuracy", "pass_at_k", "greedy_accuracy"):
        assert out[key] in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), (key, out[key])
    assert 0.0 < out["sampled_accuracy"] < 1.0  # a share the test can tell from float32's


def test_eval_refuses_a_bad_threshold(capsys) -> None:
    argv = ["eval", "--model", str(shipped_base()), "--decode-with", "scapo"]
    assert main([*argv, "--drift-threshold", "1.5"]) == 2
    assert "--drift-threshold: must be in [0, 1) (got 1.5)" in capsys.readouterr().err


def test_eval_refuses_a_method_without_a_decoding_rule(capsys) -> None:
    argv = ["eval", "--model", str(shipped_base()), "--decode-with", "grpo"]
    assert main(argv) == 2
    assert "--decode-with: 'grpo' has no decoding rule (have: scapo)" in capsys.readouterr().err
