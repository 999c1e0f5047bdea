"""The contract between methods and harness (methods/contract.py) is the whole contract.

- every service a method file calls is declared in the ``Services`` Protocol;
- the harness implements every declared service with the declared parameters;
- no method file reads or writes ``extras`` with a bare string: every key is an ``ExtraKey``
  (the harness's, or declared by the method with ``method_extra``), so it is documented;
- a method keeps no state between its hooks: statistics go through ``services.report``.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from creditbench.harness.services import HarnessServices
from creditbench.harness.services.step_plan import StepPlan
from creditbench.methods.contract import (
    EXTRA_REGISTRY,
    PROBLEM_INDEX,
    STEP_TRUTH_KEYS,
    ExtraKey,
    Services,
    method_extra,
)
from creditbench.methods.registry import list_methods

METHODS_DIR = Path(__file__).resolve().parent.parent / "methods"
METHOD_FILES = sorted(p for p in METHODS_DIR.glob("*.py") if p.name != "contract.py")


def declared_services() -> set[str]:
    return {name for name in vars(Services) if not name.startswith("_")}


def calls_on_services(path: Path) -> set[str]:
    """Attributes read off a name ``services`` in a source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "services"
    }


def test_every_service_a_method_calls_is_in_the_contract():
    undeclared = {path.name: calls_on_services(path) - declared_services() for path in METHOD_FILES}
    assert {name: calls for name, calls in undeclared.items() if calls} == {}
    assert calls_on_services(METHODS_DIR / "resets.py") >= {"generate", "report", "generator"}


@pytest.mark.parametrize("name", sorted(declared_services()))
def test_the_harness_implements_each_service_as_declared(name):
    declared = getattr(Services, name)
    if isinstance(declared, property):  # ``step``: an attribute the harness's object sets
        assert f"self.{name} = " in inspect.getsource(HarnessServices.__init__)
        return
    implemented = getattr(HarnessServices, name, None)
    assert implemented is not None, f"HarnessServices lacks {name}"
    want = list(inspect.signature(declared).parameters)
    have = list(inspect.signature(implemented).parameters)
    assert have == want, f"{name}: harness takes {have}, the contract says {want}"


def string_subscripts_of_extras(path: Path) -> list[str]:
    """``extras["..."]`` / ``extras.get("...")`` with a string literal key, as ``file:line``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        target = key = None
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "setdefault", "pop") and node.args:
                target, key = node.func.value, node.args[0]
        named_extras = (isinstance(target, ast.Attribute) and target.attr == "extras") or (
            isinstance(target, ast.Name) and target.id == "extras"
        )
        if named_extras and isinstance(key, ast.Constant) and isinstance(key.value, str):
            out.append(f"{path.name}:{node.lineno}")
    return out


def test_method_files_use_declared_extras_keys_only():
    assert [hit for path in METHOD_FILES for hit in string_subscripts_of_extras(path)] == []


def test_the_extras_check_sees_a_bare_string(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('def f(batch):\n    return batch.extras["sdpo_mask"]\n')
    assert string_subscripts_of_extras(planted) == ["planted.py:2"]


def test_every_key_a_method_declares_is_registered_with_its_owner():
    list_methods()  # imports every method file, whose declarations run
    owners = {key.owner for key in EXTRA_REGISTRY.values()}
    assert {"harness", "sdpo", "ibpo", "ccpo"} <= owners
    assert all(
        isinstance(key, ExtraKey) and key.doc and key.shape for key in EXTRA_REGISTRY.values()
    )
    assert set(STEP_TRUTH_KEYS) <= set(EXTRA_REGISTRY) and PROBLEM_INDEX == "problem_index"


def test_two_owners_cannot_declare_one_key():
    with pytest.raises(ValueError, match="already declared by sdpo"):
        method_extra("someone-else", "sdpo_mask", "[B]", "a clash")


def test_no_method_keeps_state_between_its_hooks():
    """A method object holds its config and nothing set by a hook: run a step's hooks on the
    fake services and compare the object's attributes before and after."""
    import torch

    from fakes import FakeServices

    torch.manual_seed(0)
    for name, cls in list_methods().items():
        method = cls()
        before = set(vars(method))
        services = FakeServices()
        batch = services.sample_batch()
        try:
            advantages = method.advantages(batch, services)
        except (ValueError, KeyError):
            continue  # needs a rollout or ground truth the fake batch lacks (checked elsewhere)
        method.loss(batch.old_logprobs, batch, advantages, services=services)
        assert set(vars(method)) == before, f"{name} keeps {set(vars(method)) - before}"


def test_the_harness_reads_the_budget_fraction_once_per_step():
    """``budget_fraction`` is the share spent before the step began, fixed for the step; 0.0
    on a meter without a budget amount."""
    from creditbench.harness.budget import BudgetMeter
    from creditbench.harness.config import RolloutConfig
    from creditbench.harness.models.bootstrap import task_alphabet
    from creditbench.harness.models.modeling import build_char_tokenizer, build_model
    from creditbench.harness.tasks import get_task

    task = get_task("chain", steps=2)
    tokenizer = build_char_tokenizer(task_alphabet(task))
    policy = build_model("nano", tokenizer, seed=0).eval()

    def services(amount: float) -> HarnessServices:
        meter = BudgetMeter.for_model(policy, unit="steps", amount=amount)
        return HarnessServices(
            task=task, policy=policy, tokenizer=tokenizer, meter=meter, micro_batch_size=4,
            rollout=RolloutConfig(prompts_per_step=1, group_size=2, max_new_tokens=4), seed=0,
        )  # fmt: skip

    run = services(amount=10)
    assert run.budget_fraction == 0.0
    for _ in range(3):
        run.meter.charge_optimizer_step()
    run.begin_step(StepPlan(3))
    assert run.budget_fraction == pytest.approx(0.3)
    run.meter.charge_optimizer_step()  # spent within the step: seen by the next one
    assert run.budget_fraction == pytest.approx(0.3)
    run.begin_step(StepPlan(4))
    assert run.budget_fraction == pytest.approx(0.4)
    unset = services(amount=0)
    unset.meter.charge_optimizer_step()
    unset.begin_step(StepPlan(1))
    assert unset.budget_fraction == 0.0
