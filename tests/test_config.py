"""The typed config: YAML + overrides -> RunConfig, and one clear error per mistake."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from creditbench.harness.config import (
    BudgetConfig,
    ConfigError,
    RunConfig,
    build_method_config,
    from_dict,
    load_config,
    to_dict,
)
from creditbench.methods.registry import get_method

YAML_TEXT = """
method: grpo
method_options:
  eps_high: 0.28
task: chain
task_options:
  length: 4
rollout:
  group_size: 4
  temperature: 0.7
train:
  lr: 3.0e-4
  adam_betas: [0.9, 0.95]
budget:
  unit: steps
  amount: 50
  eval_fractions: [0, 0.5, 1]
seed: 3
"""


def write(tmp_path, text: str, name: str = "run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_round_trip(tmp_path):
    cfg = load_config(write(tmp_path, YAML_TEXT))
    assert cfg.rollout.group_size == 4
    assert cfg.rollout.temperature == 0.7
    assert cfg.train.adam_betas == (0.9, 0.95)
    assert cfg.budget.amount == 50.0 and isinstance(cfg.budget.amount, float)
    assert cfg.budget.eval_fractions == (0.0, 0.5, 1.0)
    assert cfg.task_options == {"length": 4}
    assert cfg.seed == 3
    # Resolution fills every hyper-parameter of the method, keeping the given ones.
    assert cfg.method_options["eps_high"] == 0.28
    assert set(cfg.method_options) == {
        f.name for f in dataclasses.fields(get_method("grpo").Config)
    }

    saved = tmp_path / "saved.yaml"
    saved.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))  # as a run directory holds it
    assert load_config(saved) == cfg
    assert from_dict(RunConfig, to_dict(cfg)) == cfg
    assert yaml.safe_load(saved.read_text()) == to_dict(cfg)


def test_defaults_without_a_file():
    cfg = load_config(None, resolve=False)
    assert cfg == RunConfig()


def test_overrides_parse_yaml_scalars(tmp_path):
    cfg = load_config(
        write(tmp_path, YAML_TEXT),
        [
            "rollout.group_size=8",
            "method_options.eps_high=0.3",
            "budget.eval_fractions=[0,0.25,1]",
            "train.lr=1e-5",  # YAML 1.1 reads this as a string; float fields accept it
            "run_name=probe",
            "model.path=",
        ],
    )
    assert cfg.rollout.group_size == 8
    assert cfg.method_options["eps_high"] == 0.3
    assert cfg.budget.eval_fractions == (0.0, 0.25, 1.0)
    assert cfg.train.lr == 1e-5
    assert cfg.run_name == "probe"
    assert cfg.model.path is None


def test_unknown_key_suggests_the_nearest(tmp_path):
    with pytest.raises(
        ConfigError, match=r"unknown key 'rollout.group_sise'; did you mean 'rollout.group_size'\?"
    ):
        load_config(None, ["rollout.group_sise=4"])
    with pytest.raises(
        ConfigError, match=r"unknown key 'method_options.eps_hgih'.*'method_options.eps_high'"
    ):
        load_config(None, ["method_options.eps_hgih=0.3"])
    with pytest.raises(ConfigError, match=r"unknown key 'sed'; did you mean 'seed'"):
        load_config(write(tmp_path, "sed: 1\n"))


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("rollout.group_size=four", r"^rollout\.group_size: expected an integer"),
        ("rollout.group_size=2.5", r"^rollout\.group_size: expected an integer"),
        ("seed=true", r"^seed: expected an integer"),
        ("train.lr=fast", r"^train\.lr: expected a number"),
        ("train.reference_model=1", r"^train\.reference_model: expected true or false"),
        ("train.adam_betas=[0.9]", r"^train\.adam_betas: expected 2 items"),
        ("train.adam_betas=[0.9, x]", r"^train\.adam_betas\[1\]: expected a number"),
        ("model.path=3", r"^model\.path: expected a string"),
        ("rollout=3", r"^rollout: expected a mapping"),
        ("task_options=[1]", r"^task_options: expected a mapping"),
    ],
)
def test_wrong_type_names_the_field(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(None, [override])


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("rollout.group_size=0", r"^rollout\.group_size: must be >= 1"),
        ("rollout.temperature=0", r"^rollout\.temperature: must be > 0"),
        ("rollout.top_p=1.5", r"^rollout\.top_p: must be in \(0, 1\]"),
        ("rollout.backend=tgi", r"^rollout\.backend: must be one of auto, lean, hf, vllm"),
        ("train.lr=-1", r"^train\.lr: must be > 0"),
        ("train.lr=.nan", r"^train\.lr: must be a finite number"),
        ("budget.unit=joules", r"^budget\.unit: must be one of flops"),
        (
            "budget.eval_fractions=[0.5,0.2]",
            r"^budget\.eval_fractions: must be strictly increasing",
        ),
        ("budget.eval_fractions=[0,1.5]", r"^budget\.eval_fractions: must lie in \[0, 1\]"),
        ("model.dtype=float8", r"^model\.dtype: must be one of"),
        ("device=tpu", r"^device: must be auto, cpu"),
        ("run_name=../x", r"^run_name: must be letters"),
    ],
)
def test_out_of_range_names_the_field(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(None, [override])


def test_bad_override_syntax_names_the_override():
    with pytest.raises(ConfigError, match=r"override 'rollout\.group_size'"):
        load_config(None, ["rollout.group_size"])
    with pytest.raises(ConfigError, match=r"override 'seed=\[1'"):
        load_config(None, ["seed=[1"])


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, "method: grpo\nrollout:\n  group_size: [4\nseed: 1\n", "broken.yaml")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "broken.yaml:" in message
    line = int(message.split("broken.yaml:")[1].split(":")[0])
    assert line in (3, 4)  # the parser stops at the unclosed list or the line after it


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"list\.yaml: the top level must be a mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n", "list.yaml"))


def test_unknown_method_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^method: unknown method 'grop'.*did you mean 'grpo'"):
        load_config(None, ["method=grop"])


def test_method_config_validation_names_method_options():
    grpo = get_method("grpo")
    with pytest.raises(ConfigError, match=r"^method_options\.eps_high: must be >= 0"):
        build_method_config(grpo, {"eps_high": -1})
    with pytest.raises(ConfigError, match=r"^method_options\.std_kind: must be unbiased"):
        build_method_config(grpo, {"std_kind": "sample"})
    with pytest.raises(ConfigError, match=r"^method_options\.eps_low: expected a number"):
        build_method_config(grpo, {"eps_low": "wide"})
    with pytest.raises(ConfigError, match=r"^method_options\.dual_clip: expected a number"):
        build_method_config(grpo, {"dual_clip": [3]})
    built = build_method_config(grpo, {"eps_high": 1, "dual_clip": 3})
    assert isinstance(built, grpo.Config)
    assert built.eps_high == 1.0 and isinstance(built.eps_high, float)
    assert built.dual_clip == 3.0


def test_direct_construction_runs_the_same_checks():
    with pytest.raises(ValueError, match=r"^amount: must be >= 0"):
        BudgetConfig(amount=-1)
