"""The bad-input catalogue: every way a user can get a command wrong gets one line on stderr
naming the field, flag or file, exit code 2, no traceback, and nothing written.

Each case is a command line; ``{tmp}`` is a fresh folder (it holds ``afile``, a file, and
``notutf8.yaml``, a config that is not UTF-8) and ``{out}`` a results folder inside it that
must not appear. What the harness promises on bad input is listed in ``docs/harness.md``.
"""

from __future__ import annotations

import pytest

from creditbench.harness.cli.main import main

TRAIN = ["train", "--method", "grpo", "--output", "{out}"]

CASES = [
    # -- counts: integers >= 1, never "not given" ---------------------------------------------
    (["train", "--method", "grpo", "--threads", "0"], "--threads: must be an integer >= 1"),
    (["train", "--method", "grpo", "--threads", "two"], "--threads: must be an integer >= 1"),
    (["eval", "--task", "chain", "--max-new-tokens", "-5"], "--max-new-tokens: must be an integer"),
    (["eval", "--task", "chain", "--max-new-tokens", "0"], "--max-new-tokens: must be an integer"),
    (["eval", "--task", "chain", "--n", "0"], "--n: must be an integer >= 1"),
    (["eval", "--task", "chain", "--k", "0"], "--k: must be an integer >= 1"),
    (["perf", "--repeats", "0"], "--repeats: must be an integer >= 1"),
    (["bench", "--suite", "quick", "--workers", "0"], "--workers: must be an integer >= 1"),
    (["bench", "--suite", "quick", "--threads", "-1"], "--threads: must be an integer >= 1"),
    (["validate", "--reps", "-1"], "--reps: must be an integer >= 1"),
    (["validate", "--workers", "0"], "--workers: must be an integer >= 1"),
    (["leaderboard", "{tmp}", "--reps", "0"], "--reps: must be an integer >= 1"),
    (["reproduce", "dapo", "--seeds", "0"], "--seeds: must be an integer >= 1"),
    (["reproduce", "dapo", "--workers", "0"], "--workers: must be an integer >= 1"),
    (["data", "show", "chain", "--n", "0"], "--n: must be an integer >= 1"),
    (["bootstrap", "--steps", "0"], "--steps: must be an integer >= 1"),
    (["bootstrap", "--n-eval", "0"], "--n-eval: must be an integer >= 1"),
    (["conformance", "grpo", "--max-examples", "0"], "--max-examples: must be an integer >= 1"),
    (["explain", "{tmp}", "--responses", "0"], "--responses: must be an integer >= 1"),
    # -- empty strings are errors, not "not given" ---------------------------------------------
    (["train", "--method", "grpo", "--task", ""], "--task: must not be empty"),
    (["train", "--method", "grpo", "--name", ""], "--name: must not be empty"),
    (["train", "--method", "grpo", "--output", ""], "--output: must not be empty"),
    (["train", "--method", "grpo", "--output", "  "], "--output: must not be empty"),
    # -- names, values and files ---------------------------------------------------------------
    ([*TRAIN, "--name", "a/b"], "run_name: must be letters, digits"),
    (["train", "--method", "nosuch"], "method"),
    ([*TRAIN, "--task", "nosuch"], "task"),
    ([*TRAIN, "--set", "rollout.group_sise=4"], "group_sise"),
    ([*TRAIN, "--set", "rollout.group_size=0"], "rollout.group_size"),
    ([*TRAIN, "--set", "rollout.group_size=100000000"], "rollout.group_size: times prompts_per"),
    ([*TRAIN, "--set", "method_options.std_eps=-1"], "method_options.std_eps: must be >= 0"),
    ([*TRAIN, "--set", "method_options.eps_low=2"], "eps_low"),
    ([*TRAIN, "--set", "method_options.kl_coef=.inf"], "kl_coef: must be a finite number"),
    ([*TRAIN, "--set", "method_options.eps_high=.nan"], "eps_high: must be a finite number"),
    (["train", "--method", "rloo", "--set", "method_options.singleton=one"], "singleton"),
    (["train", "--method", "dapo", "--set", "method_options.nosuch=1"], "nosuch"),
    ([*TRAIN, "--set", "rollout.top_p=[1"], "not valid YAML"),
    ([*TRAIN, "--config", "{tmp}/notutf8.yaml"], "notutf8.yaml: not UTF-8 text"),
    ([*TRAIN, "--config", "{tmp}/nosuch.yaml"], "nosuch.yaml: cannot read config file"),
    ([*TRAIN, "--set", "model.path={tmp}/nosuch"], "model.path: {tmp}/nosuch does not exist"),
    ([*TRAIN, "--set", "model.path={tmp}/afile"], "model.path: {tmp}/afile is a file"),
    ([*TRAIN, "--set", "model.path={tmp}"], "model.path: {tmp} has no config.json"),
    (
        [*TRAIN, "--set", "model.path={tmp}/broken"],
        "model.path: {tmp}/broken/config.json: not JSON",
    ),
    ([*TRAIN, "--set", "model.path={tmp}/empty"], "model.path: {tmp}/empty/config.json: not JSON"),
    (["eval", "--model", "{tmp}/broken"], "--model: {tmp}/broken/config.json: not JSON (line 2"),
    (["eval", "--model", "{tmp}/empty"], "--model: {tmp}/empty/config.json: not JSON (line 1"),
    (["eval", "--model", "{tmp}/nomodeltype"], "config.json: no model_type"),
    (["eval", "--model", "{tmp}/nosuch"], "--model: {tmp}/nosuch is not a model directory"),
    (["train", "--method", "grpo", "--output", "{tmp}/afile"], "output_dir: {tmp}/afile is a file"),
    (["train", "--method", "grpo", "--output", "{tmp}/afile/x"], "output_dir: {tmp}/afile is a"),
    (["train", "--resume", "{tmp}/nosuch"], "--resume: {tmp}/nosuch holds no run"),
    (["train", "--resume", "{tmp}", "--method", "grpo"], "--resume: takes the run's own config"),
    (["bench", "--suite", "{tmp}/notutf8.yaml"], "notutf8.yaml: not UTF-8 text"),
    (["bench", "--suite", "nosuch"], "nosuch"),
    (["bench", "--suite", "quick", "--results", "{tmp}/afile"], "--results: {tmp}/afile is a file"),
    (["bench", "--suite", "quick", "--only", "nothing-matches"], "--only: nothing-matches"),
    (["data", "show", "chain", "-o", "steps=[1"], "--option/-o: the value of 'steps=[1'"),
    (["data", "show", "chain", "-o", "steps"], "--option/-o: expected KEY=VALUE"),
    (["data", "show", "chain", "-o", "steps=0"], "steps:"),
    (["data", "show", "nosuch"], "known tasks: chain"),
    (["perf", "--methods", "nosuch"], "--methods: unknown method 'nosuch'"),
    (["reproduce", "nosuch"], "nosuch"),
    (["reproduce", "dapo", "--scale", "cpu", "--engine", "verl"], "--engine verl: only with"),
    (["reproduce", "dapo", "--scale", "cpu", "--steps", "3"], "--steps: only with --scale paper"),
    (["reproduce", "dapo", "--scale", "paper", "--engine", "nosuch"], "--engine: must be one of"),
    (["reproduce", "dapo", "--scale", "cpu", "--set", "x"], "--set: expected KEY=VALUE"),
    (["leaderboard", "{tmp}/nosuch"], "no such results directory or runs.csv"),
    (["methods", "--nosuch"], "unrecognized arguments: --nosuch"),
]


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "afile").write_text("not a folder\n")
    (tmp_path / "notutf8.yaml").write_bytes(b"method: grpo\n\xff\xfe: 1\n")
    for name, text in (("broken", "{\n"), ("empty", ""), ("nomodeltype", '{"a": 1}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
    return tmp_path


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bad_input_is_one_line_exit_2_and_writes_nothing(folder, capsys, argv, message):
    fill = {"tmp": str(folder), "out": str(folder / "out")}
    before = sorted(p.name for p in folder.rglob("*"))
    assert main([a.format(**fill) for a in argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert message.format(**fill) in err
    assert len(err.splitlines()) == 1 and err.startswith("creditbench") and "Traceback" not in err
    assert sorted(p.name for p in folder.rglob("*")) == before  # nothing written, not even out/


def test_the_catalogue_has_a_case_for_every_kind_it_promises():
    assert len(CASES) >= 50 and len({tuple(argv) for argv, _ in CASES}) == len(CASES)


def _float_fields():
    import dataclasses

    from creditbench.methods.registry import list_methods

    seen = {}
    for cls in list_methods().values():
        for config in cls.config_classes():
            for field in dataclasses.fields(config):
                if isinstance(field.default, float) or field.default is None:
                    seen.setdefault((config.__name__, field.name), (config, field.name))
    return sorted(seen.values(), key=lambda item: (item[0].__name__, item[1]))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_no_number_of_any_method_config_may_be_nan_or_infinite(value):
    fields = _float_fields()
    assert len(fields) > 100  # every method's loss fields and its own
    accepted = []
    for config, name in fields:
        try:
            config(**{name: value})
            accepted.append(f"{config.__name__}.{name}")
        except (ValueError, TypeError):
            pass
    assert accepted == []
