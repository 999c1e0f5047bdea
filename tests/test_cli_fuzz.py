"""A fuzzer over the command line: Hypothesis draws argument lists and config mutations, and every
one must end with exit code 0 or 2, never a traceback, and nothing written when it exits 2.

The catalogue (``tests/test_bad_inputs.py``) lists the mistakes someone thought of; this draws
the ones nobody did: a field set to a huge integer, NaN, a list or an emoji, a flag given text,
a config file with one key changed. Each example stays cheap: a command that could start real
work is given a guard it is refused by after everything drawn is checked (a model folder that
does not exist, checked after the config and the method's options; an ``--out`` under a file,
checked after the flags; for bench the same model folder, checked after its seeds, its sizes
and each run's config), so no example trains, samples or renders. Run in CI's slow step
(``python -m pytest -m slow``); about 15 s for its 300 examples on two shared cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creditbench.harness.config import RunConfig, to_dict
from creditbench.tools.cli.main import main

pytestmark = pytest.mark.slow

EXAMPLES = 300


def _dotted_fields(cls: type = RunConfig, prefix: str = "") -> list[str]:
    """Every field of the run config as a dotted key (``rollout.group_size``)."""
    keys = []
    for f in dataclasses.fields(cls):
        kind = f.type if isinstance(f.type, type) else None
        nested = next((c for c in (kind,) if c and dataclasses.is_dataclass(c)), None)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if nested is None and dataclasses.is_dataclass(default):
            nested = type(default)
        if nested is not None:
            keys += _dotted_fields(nested, f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


FIELDS = _dotted_fields()
# keys of no field, and options of methods and tasks, known and not
KEYS = st.sampled_from(
    [
        *FIELDS,
        "nosuch",
        "rollout.group_sise",
        "method_options.eps_high",
        "method_options.kl_coef",
        "method_options.nosuch",
        "task_options.steps",
        "task_options.nosuch",
        "budget",
        "rollout",
    ]
)
VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**32, 2**63, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(["ü 🙂", "../x", "a/b", "=1+1", "", " ", "cuda:99", "mps", "nano"]),
    st.lists(st.one_of(st.integers(-3, 5), st.floats(-2, 2)), max_size=3),
)
# text a user might type as a flag's value
WORDS = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "1e9", "100000", str(2**40), "nan", "inf", "", "x"]),
    st.integers(min_value=-(2**64), max_value=2**64).map(str),
    st.text(max_size=8),
)
# what a user might give bench's --seeds: lists and ranges, huge, reversed or malformed
SEED_LISTS = st.one_of(
    WORDS,
    st.lists(st.integers(-5, 2**40), min_size=1, max_size=3).map(lambda s: ",".join(map(str, s))),
    st.tuples(st.integers(-5, 2**33), st.integers(-5, 2**33)).map(lambda r: f"{r[0]}-{r[1]}"),
)


def _yaml(value) -> str:
    """``value`` as a ``--set`` writes it: YAML in one line."""
    return (
        yaml.safe_dump(value, default_flow_style=True, allow_unicode=True)
        .strip()
        .removesuffix("\n...")
    )


@st.composite
def command_lines(draw, tmp: Path) -> list[str]:
    """One command line with a guard that refuses it before any real work."""
    guard_model = f"model.path={tmp}/nosuch"
    verbs = ["train", "train-config", "eval", "explain", "data", "claims", "leaderboard", "bench"]
    verb = draw(st.sampled_from(verbs))
    if verb == "train":
        sets = draw(st.lists(st.tuples(KEYS, VALUES), max_size=3))
        argv = ["train", "--method", draw(st.sampled_from(["grpo", "dapo", "oppo", "nosuch"]))]
        argv += ["--output", f"{tmp}/out"]
        for flag in draw(st.lists(st.sampled_from(["--seed", "--threads", "--name"]), max_size=2)):
            argv += [flag, draw(WORDS)]
        for key, value in sets:
            argv += ["--set", f"{key}={_yaml(value)}"]
        return [*argv, "--set", guard_model]
    if verb == "train-config":
        config = to_dict(RunConfig())
        for key, value in draw(st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=3)):
            node = config
            *path, last = key.split(".")
            for part in path:
                node = node.setdefault(part, {}) if isinstance(node.get(part), dict) else {}
            node[last] = value
        (tmp / "config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
        return ["train", "--config", f"{tmp}/config.yaml", "--output", f"{tmp}/out", "--set",
                guard_model]  # fmt: skip
    if verb == "eval":
        argv = ["eval", "--model", f"{tmp}/nosuch"]
        flags = ["--n", "--k", "--seed", "--threads", "--max-new-tokens", "--temperature", "--task"]
        for flag in draw(st.lists(st.sampled_from(flags), max_size=3)):
            argv += [flag, draw(WORDS)]
        return argv
    if verb == "explain":
        names = draw(st.lists(st.sampled_from(["grpo", "rloo", "", " ", "nosuch"]), max_size=3))
        argv = ["explain", "--methods", ",".join(names), "--out", f"{tmp}/afile/x"]
        if draw(st.booleans()):
            argv += ["--responses", draw(WORDS)]
        return argv
    if verb == "data":
        argv = ["data", "show", draw(st.sampled_from(["chain", "nosuch"]))]
        argv += ["--n", str(draw(st.integers(-2, 4)))]
        for flag in draw(st.lists(st.sampled_from(["--seed", "--split", "-o"]), max_size=2)):
            value = draw(WORDS)
            if flag == "-o":
                value = f"{draw(st.sampled_from(['steps', 'nosuch', 'slip_rate']))}={value}"
            argv += [flag, value]
        return argv
    if verb == "leaderboard":
        return ["leaderboard", f"{tmp}/hollow", "--reps", draw(WORDS), "--out", f"{tmp}/afile/x"]
    if verb == "bench":
        argv = ["bench", "--suite", f"{tmp}/suite.yaml", "--results", f"{tmp}/results"]
        flags = draw(st.lists(st.sampled_from(["--seeds", "--workers", "--threads"]), max_size=3))
        for flag in flags:
            argv += [flag, draw(SEED_LISTS if flag == "--seeds" else WORDS)]
        for key, value in draw(st.lists(st.tuples(KEYS, VALUES), max_size=2)):
            argv += ["--set", f"{key}={_yaml(value)}"]
        return [*argv, "--set", guard_model]  # the last --set wins over the drawn ones
    argv = ["claims", f"{tmp}/hollow", "--reps", draw(WORDS)]
    return argv + (
        ["--card", draw(st.sampled_from(["dapo", "nosuch"]))] if draw(st.booleans()) else []
    )


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_any_command_line_exits_0_or_2_in_one_line_and_writes_nothing_when_refused(data):
    tmp = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        (tmp / "afile").write_text("a file, not a folder\n")
        (tmp / "hollow").mkdir()
        (tmp / "suite.yaml").write_text("methods: [grpo]\nseeds: [0]\ntasks: [{name: chain}]\n")
        argv = data.draw(command_lines(tmp), label="argv")
        before = _listing(tmp)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)  # an exception escaping main is the traceback the user would see
        message = err.getvalue().strip()
        assert code in (0, 2), (argv, code, message)
        assert "Traceback" not in message, (argv, message)
        if code == 2:
            assert message.splitlines()[-1].startswith("creditbench"), (argv, message)
            assert _listing(tmp) == before, argv  # refused: nothing written
    finally:
        torch.set_num_threads(1)  # a drawn --threads must not slow the tests after it
        shutil.rmtree(tmp, ignore_errors=True)
