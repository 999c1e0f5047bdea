"""``creditbench new-method NAME``: the files it plans pass the checks the suite applies to
every built-in method (the page's sourced Config table, the card, the twin's advantage), and a
refused name writes nothing. The planned files go to a copy of the checkout's shared files, so
the real tree never gains a method."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_mechanism_lines import lines as mechanism_lines
from test_method_docs import config_problems, registered_names

from creditbench.methods import registry
from creditbench.methods.grpo import GRPO
from creditbench.reference.cards import load_card
from creditbench.tools.cli.main import main
from creditbench.tools.new_method import (
    CAMPAIGN,
    ENGINES_PAGE,
    GRPO_PAGE,
    NAV,
    REPRODUCING_PAGE,
    TUNING_CAMPAIGN,
    NewMethodError,
    plan,
    write,
)

from strategies import build_batch

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "a" * 40


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """The checkout's files the command reads or edits, copied, with the folders it writes to."""
    for relative in (GRPO_PAGE, NAV, ENGINES_PAGE, REPRODUCING_PAGE, CAMPAIGN, TUNING_CAMPAIGN):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, tmp_path / relative)
    for folder in ("methods", "reference/cards", "tests"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    return tmp_path


@pytest.fixture()
def twin(checkout: Path):
    """The planned files of ``mymethod`` written into the copy, and its method module imported
    as a module of the package (so its relative imports resolve); unregistered afterwards."""
    write(plan(checkout, "mymethod", "My Method", COMMIT))
    name = "creditbench.methods.mymethod"
    spec = importlib.util.spec_from_file_location(name, checkout / "methods" / "mymethod.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield checkout, module
    finally:
        sys.modules.pop(name, None)
        registry._REGISTRY.pop("mymethod", None)
        registry._ORIGINS.pop("mymethod", None)


def test_the_twin_registers_and_credits_as_grpo(twin):
    _, module = twin
    assert registry.get_method("mymethod") is module.Mymethod
    batch = build_batch([3, 3], [3, 5, 2, 4, 6, 1], [1.0, 0.0, 0.0, 1.0, 0.5, 0.5])
    assert torch.equal(module.Mymethod().advantages(batch), GRPO().advantages(batch))


def test_the_page_cites_every_default_of_the_twins_config(twin):
    checkout, module = twin
    text = (checkout / "docs" / "methods" / "mymethod.md").read_text()
    assert registered_names(text) == ["mymethod"]
    assert config_problems(text, "mymethod", module.MymethodConfig, ["mymethod"]) == []
    assert text.count("## On the leaderboard") == 1


def test_the_page_says_where_the_mechanism_acts_as_the_board_checks_it(twin):
    checkout, _ = twin
    text = (checkout / "docs" / "methods" / "mymethod.md").read_text()
    runs = mechanism_lines.read_runs(mechanism_lines.RECORDS)
    assert mechanism_lines.page_problems(text, runs)[0] == []


def test_the_card_nav_engines_row_card_list_and_pin(twin):
    checkout, _ = twin
    card = load_card(checkout / "reference" / "cards" / "mymethod.yaml")
    assert [m.name for m in card.methods if m.registered] == ["mymethod", "grpo"]
    nav = yaml.safe_load((checkout / NAV).read_text())["nav"]
    methods = next(item["Methods"] for item in nav if isinstance(item, dict) and "Methods" in item)
    assert {"My Method": "methods/mymethod.md"} in methods
    assert "| `mymethod` | yes | yes | |" in (checkout / ENGINES_PAGE).read_text()
    assert "`mymethod`" in " ".join((checkout / REPRODUCING_PAGE).read_text().split())
    for campaign in (CAMPAIGN, TUNING_CAMPAIGN):
        assert yaml.safe_load((checkout / campaign).read_text())["pins"][COMMIT] == ["mymethod"]


def test_the_verl_check_lists_the_twin_and_counts_it(twin):
    """GRPO's twin runs in verl as GRPO does, so the page's `import verl` check prints it too,
    in order, and counts one more (tests/test_engines_docs.py holds the page to it)."""
    checkout, _ = twin
    before, after = (ROOT / ENGINES_PAGE).read_text(), (checkout / ENGINES_PAGE).read_text()
    listed = [re.findall(r"'(creditbench_[a-z0-9_]+)'", t.split("\n# ['", 1)[1].split("\n")[0])
              for t in (before, after)]  # fmt: skip
    assert listed[1] == sorted([*listed[0], "creditbench_mymethod"])
    counted = [int(re.search(r"# creditbench: (\d+) verl", t).group(1)) for t in (before, after)]
    assert counted[1] == counted[0] + 1


@pytest.mark.parametrize(
    ("name", "title", "message"),
    [
        ("grpo", "GRPO again", "NAME: 'grpo' is taken"),
        ("My-Method", "x", "NAME: 'My-Method' must be a lower-case Python identifier"),
        ("class", "x", "NAME: 'class' must be a lower-case Python identifier"),
        ("mymethod", 'a "quoted" title', "--title: "),
    ],
)
def test_a_refused_name_or_title_writes_nothing(checkout, name, title, message):
    before = {p: p.read_bytes() for p in checkout.rglob("*") if p.is_file()}
    with pytest.raises(NewMethodError, match=message):
        plan(checkout, name, title, COMMIT)
    assert {p: p.read_bytes() for p in checkout.rglob("*") if p.is_file()} == before


def test_the_command_refuses_with_one_line_and_exit_2(checkout, capsys):
    code = main(["new-method", "grpo", "--root", str(checkout), "--no-fixture"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("creditbench new-method: error: NAME: 'grpo' is taken")
    assert len(err.splitlines()) == 1
