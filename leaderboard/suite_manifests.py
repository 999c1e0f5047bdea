"""Suite manifests: which runs a suite (or a campaign's plan of it) promised, read beside the
runs that finished, so a board says how much of each suite it shows.

``creditbench bench`` writes ``suite-<name>.json`` into its results folder (a campaign's plan
writes one with the rule it runs part of the suite by); a committed ``runs.csv`` keeps a copy
beside it. The leaderboard and the claims page read them here, never the runs themselves (that
is :mod:`.collect`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple


class SuiteManifest(NamedTuple):
    """A suite manifest (``suite-<name>.json``): the suite's name, its runs as ``(run name,
    setting)`` and, where a campaign runs only part of the suite by a rule, the rule (``plan``,
    said with the coverage)."""

    name: str
    runs: list[tuple[str, str]]
    plan: str | None = None


def read_suite_manifest(path: str | Path) -> SuiteManifest | None:
    """A suite manifest (written by ``creditbench bench``, or by a campaign's plan); None when
    it cannot be read."""
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
        runs = [(str(r["name"]), str(r["setting"])) for r in manifest["runs"]]
        plan = manifest.get("plan")
        return SuiteManifest(str(manifest["suite"]), runs, str(plan) if plan else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _manifests(results_dir: str | Path) -> list[tuple[Path, SuiteManifest | None]]:
    paths = sorted(Path(results_dir).glob("suite-*.json"))
    return [(path, read_suite_manifest(path)) for path in paths]


def manifest_folders(sources: Iterable[str | Path]) -> list[Path]:
    """Where the suite manifests of ``sources`` lie: a results folder holds its own, and a
    committed ``runs.csv`` has a copy beside it."""
    paths = (Path(source) for source in sources)
    return list(dict.fromkeys(path if path.is_dir() else path.parent for path in paths))


def suite_names(folders: Iterable[str | Path]) -> list[str]:
    """The names of the suites whose readable manifests lie in the folders, each once."""
    found = (m for folder in folders for _, m in _manifests(folder))
    return list(dict.fromkeys(m[0] for m in found if m is not None))


PARTIAL_BOARD = "its intervals and ranks use only the seeds present."


def suite_coverage(
    folders: Iterable[str | Path], finished: set[str], partial: str = PARTIAL_BOARD
) -> list[str]:
    """One sentence per suite whose manifest (``suite-<name>.json``, written by ``creditbench
    bench``) lies in the folders: how many of the suite's runs are among ``finished`` (run
    folder names), by setting when the suite is incomplete, then what that means for the page
    (``partial``). An unreadable manifest gives a sentence saying so. The manifests of one suite
    (and plan) in several folders count as one, the union of their runs: a method's own runs of
    a suite, rendered beside the suite's committed records, bring a manifest of the suite as it
    now is (one run more, the method's), and two sentences of one suite ("all 28 runs
    finished", "all 29 runs finished") read as two boards."""
    sentences: list[str] = []
    suites: dict[tuple[str, str | None], dict[str, str]] = {}
    for path, found in (m for folder in folders for m in _manifests(folder)):
        if found is None:
            sentences.append(f"{path.name}: unreadable suite manifest, coverage unknown.")
            continue
        suites.setdefault((found.name, found.plan), {}).update(dict(found.runs))
    for (name, plan), setting_of in suites.items():
        runs = list(setting_of.items())
        if plan:
            name = f"{name} ({plan})"
        done = sum(run in finished for run, _ in runs)
        if done == len(runs):
            sentences.append(f"Suite {name}: all {len(runs)} runs finished.")
            continue
        by_setting: dict[str, list[int]] = {}
        for run, setting in runs:
            counts = by_setting.setdefault(setting, [0, 0])
            counts[0] += run in finished
            counts[1] += 1
        parts = ", ".join(f"{s} {d}/{n}" for s, (d, n) in by_setting.items())
        sentences.append(
            f"Suite {name}: {done} of {len(runs)} runs finished ({parts}); a partial snapshot: "
            + partial
        )
    return list(dict.fromkeys(sentences))
