"""``creditbench gradients``: each method's gradient at a fixed policy, and its statistics."""

from __future__ import annotations

import pytest
import torch

from creditbench.tools.cli.main import main
from creditbench.tools.gradients import gradient_statistics


def test_statistics_rank_a_less_noisy_gradient_above_a_noisier_one():
    g = torch.Generator().manual_seed(0)
    truth = torch.randn(400, generator=g)
    batches = 16
    gradients = {
        "exact": [truth + 0.5 * torch.randn(400, generator=g) for _ in range(batches)],
        "noisy": [3.0 * (truth + 4.0 * torch.randn(400, generator=g)) for _ in range(batches)],
    }
    rows = gradient_statistics(gradients, reference="exact", grad_clip=40.0)
    exact, noisy = rows["exact"], rows["noisy"]
    # agreement with the reference's mean over the other batches; consistency between batches
    assert exact["agreement"][1] > noisy["agreement"][2]
    assert exact["consistency"][0] > 0.7 > 0.2 > noisy["consistency"][0]
    assert exact["adam_agreement"][0] > noisy["adam_agreement"][0]
    # a scale does not change a cosine, it changes the norm and what the clip does
    assert noisy["grad_norm"] > 40.0 > exact["grad_norm"]
    assert noisy["clipped"] == 1.0 and exact["clipped"] == 0.0
    for row in rows.values():
        mean, lo, hi = row["agreement"]
        assert lo <= mean <= hi


def test_identical_gradients_agree_perfectly():
    base = torch.tensor([1.0, -2.0, 0.5])
    gradients = {"a": [base * s for s in (1.0, 2.0, 3.0)]}
    row = gradient_statistics(gradients, reference="a", grad_clip=0.0)["a"]
    assert row["consistency"][0] == pytest.approx(1.0)
    assert row["agreement"][0] == pytest.approx(1.0)
    assert row["adam_agreement"][0] == pytest.approx(
        float(torch.nn.functional.cosine_similarity(torch.sign(base), base, dim=0))
    )
    assert row["clipped"] == 0.0  # no clip configured


def test_the_command_runs_every_method_on_the_same_batches(tmp_path, capsys):
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model, save_policy
    from creditbench.harness.tasks import get_task

    tokenizer = build_char_tokenizer(task_alphabet(get_task("chain", steps=2)))
    policy = save_policy(build_model("nano", tokenizer, seed=0), tokenizer, tmp_path / "nano")
    settings = [
        "task=chain",
        "task_options.steps=2",
        f"model.path={policy}",
        "rollout.prompts_per_step=2",
        "rollout.group_size=3",
        "rollout.max_new_tokens=10",
    ]
    argv = ["gradients", "--methods", "grpo", "rloo", "--reference", "grpo", "--batches", "2"]
    code = main([*argv, *[f"--set={s}" for s in settings]])
    out = capsys.readouterr().out
    assert code == 0
    assert "2 batches of 2 x 3" in out
    assert [line.split()[0] for line in out.splitlines()[2:]] == ["grpo", "rloo"]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["gradients", "--batches", "1"], "--batches"),
        (["gradients", "--methods", "no-such-method"], "--methods"),
        (["gradients", "--reference", "no-such-method"], "--reference"),
    ],
)
def test_bad_arguments_exit_2(argv, field, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_adam_direction_is_the_sign_after_one_gradient_and_averages_noise_after_many():
    from creditbench.tools.gradients import adam_direction

    g = torch.tensor([3.0, -0.5, 1e-3])
    assert torch.allclose(adam_direction([g], (0.9, 0.999), 1e-8), torch.sign(g), atol=1e-4)
    gen = torch.Generator().manual_seed(1)
    signal = torch.zeros(2000)
    signal[:1000] = 1.0  # half the coordinates carry a signal, the others only noise
    noisy = [signal + 2.0 * torch.randn(2000, generator=gen) for _ in range(30)]
    one = torch.nn.functional.cosine_similarity(
        adam_direction(noisy[:1], (0.9, 0.999), 1e-8), signal, dim=0
    )
    many = torch.nn.functional.cosine_similarity(
        adam_direction(noisy, (0.9, 0.999), 1e-8), signal, dim=0
    )
    assert many > one + 0.1
