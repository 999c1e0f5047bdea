"""The engines page's table of which methods run inside verl and TRL is the adapters' own rule
(`creditbench.harness.services.engines`), method by method, and lists every built-in method."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from creditbench.harness.services.engines import (
    LOSS,
    ROLLOUT,
    TASK_TEXT,
    TRL,
    VERL,
    VERL_LEGACY,
    EngineServices,
    engine_batch,
    method_for_engine,
    supported_methods,
    unsupported_reason,
)
from creditbench.methods.registry import list_methods, method_origin

PAGE = Path(__file__).resolve().parents[1] / "docs" / "engines.md"
LIMIT = 1024


def _table() -> dict[str, tuple[bool, bool]]:
    rows = {}
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] in ("yes", "no"):
            for name in re.findall(r"`([a-z_]+)`", cells[0]):
                rows[name] = (cells[1] == "yes", cells[2] == "yes")
    return rows


def test_the_table_lists_every_builtin_method_as_the_adapters_decide():
    table = _table()
    builtin = {n for n in list_methods() if method_origin(n).kind == "builtin"}
    assert set(table) == builtin
    for name, (verl, trl) in table.items():
        cls = list_methods()[name]
        # an engine run knows its generation limit (the launches register it)
        # verl runs it on its v1 trainer, or (a credit that reads token ids) on its legacy one
        in_verl = any(unsupported_reason(cls, e, LIMIT) is None for e in (VERL, VERL_LEGACY))
        assert in_verl == verl, name
        assert (unsupported_reason(cls, TRL, LIMIT) is None) == trl, name


def test_reasons_come_from_the_contract_and_the_probe():
    methods = list_methods()
    assert "reference" in unsupported_reason(methods["oracle"], TRL)
    assert "samples its own batch" in unsupported_reason(methods["vineppo"], VERL)
    # TRL hosts an own rollout with a task (the harness's services on TRL's model)
    assert unsupported_reason(methods["vineppo"], TRL) is None
    no_task = TRL.without(TASK_TEXT, ROLLOUT)
    assert "needs a creditbench task" in unsupported_reason(methods["vineppo"], no_task)
    assert "behaviour log-probs" in unsupported_reason(methods["otb"], VERL)
    assert "loss of its own" in unsupported_reason(methods["dfpo"], VERL)
    assert unsupported_reason(methods["dfpo"], TRL) is None  # the adapter's compute_loss
    assert "loss of its own" in unsupported_reason(methods["dfpo"], TRL.without(LOSS))
    # a rule hosted on GRPO samples as its host does: OPPO runs on TRL's own sampling
    assert methods["oppo"]().group_filter() == methods["grpo"]().group_filter()
    assert "token mask of its own" in unsupported_reason(methods["forking"], VERL)
    assert unsupported_reason(methods["forking"], TRL, LIMIT) is None  # TRL's completion_mask
    # SCAPO scores under the task's prompt variants: TRL gives them only with a task
    assert unsupported_reason(methods["scapo"], TRL, LIMIT) is None
    assert "creditbench task" in unsupported_reason(methods["scapo"], TRL.without(TASK_TEXT), LIMIT)
    assert "reference model" in unsupported_reason(methods["prime"], VERL, LIMIT)
    # the probe: TEMPO's tree credit changes with the token ids, which verl does not give
    assert "token ids" in unsupported_reason(methods["tempo"], VERL)
    assert unsupported_reason(methods["tempo"], VERL_LEGACY, LIMIT) is None  # the plugin's shim
    assert set(supported_methods(VERL)) < set(supported_methods(TRL))


def test_dapo_runs_where_the_engine_filters_groups_and_gives_its_generation_limit():
    dapo = list_methods()["dapo"]
    assert "max_response_length" in unsupported_reason(dapo, VERL)  # no limit known
    assert unsupported_reason(dapo, VERL, LIMIT) is None  # verl's algorithm.filter_groups
    assert unsupported_reason(dapo, TRL, LIMIT) is None  # the adapter's refills, one process
    assert "a filter verl lacks" in unsupported_reason(dapo, replace(VERL, filters=frozenset()))
    # without dynamic sampling its rollout is the plain batch; overlong filtering edits masks
    assert unsupported_reason(dapo(dynamic_sampling=False), TRL, LIMIT) is None
    assert "edited masks" in unsupported_reason(dapo(overlong_filtering=True), VERL, LIMIT)
    assert set(supported_methods(VERL, LIMIT)) == set(supported_methods(VERL)) | {"dapo"}


def test_engine_services_offer_the_generation_limit_and_nothing_else():
    services = EngineServices(64)
    assert services.max_new_tokens == 64
    with pytest.raises(NotImplementedError, match="generate: an engine offers"):
        services.generate(["x"])
    with pytest.raises(ValueError, match="max_new_tokens"):
        EngineServices(0)
    assert copy.copy(services).max_new_tokens == 64  # Python's protocols still work


def test_method_for_engine_takes_a_name_with_options_or_an_instance():
    grpo = method_for_engine("grpo", VERL, singleton="raw")
    assert grpo.config.singleton == "raw"
    assert method_for_engine(grpo, VERL) is grpo
    with pytest.raises(ValueError, match="options"):
        method_for_engine(grpo, VERL, singleton="zero")
    with pytest.raises(ValueError, match="std_kind"):
        method_for_engine("grpo", VERL, std_kind="nosuch")
    with pytest.raises(ValueError, match="'vineppo' cannot run inside verl: it samples"):
        method_for_engine("vineppo", VERL, 256)


def test_engine_batch_fills_what_an_engine_lacks_so_that_reading_it_fails_loudly():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    batch = engine_batch(torch.tensor([1.0, 0.0]), mask, torch.tensor([0, 0]))
    assert batch.response_mask.dtype == torch.float32 and batch.prompt_ids.shape == (2, 0)
    assert torch.isnan(batch.old_logprobs).all()
    assert torch.equal(batch.response_ids, torch.zeros(2, 3, dtype=torch.long))


def test_the_verl_install_check_lists_what_import_verl_registers():
    """The page's `import verl` check prints what the plugin registers with its defaults: every
    method that runs in verl without a generation limit (DAPO needs one), with ray the
    token-level ones too; and its stderr line says how many. A method added to verl's column
    joins this list too."""
    text = PAGE.read_text()
    printed = re.search(r"^# (\['creditbench_.*\])$", text, re.M)
    assert printed, "the install check's printed list"
    names = re.findall(r"'(creditbench_[a-z_]+)'", printed.group(1))
    defaults = set(supported_methods(VERL)) | set(supported_methods(VERL_LEGACY))
    in_verl = sorted(f"creditbench_{name}" for name in defaults)
    assert names == in_verl
    assert f"# creditbench: {len(in_verl)} verl estimators and losses registered" in text
