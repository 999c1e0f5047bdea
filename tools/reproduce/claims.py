"""``creditbench reproduce CARD`` at CPU scale: the paper's claims on the standard suite.

A claim ("row A ahead of row B", the card's ``claims``) is tested on the frozen protocol, the
standard suite (``tools/suites/standard.yaml``): its budget and its ten seeds, so that its
verdict stands on the same runs the leaderboard shows. The claims' runs are planned in the
hard setting (:data:`RUN_SETTINGS`, as the claims' own rows were decided, docs/testbed.md);
each claim is read in every setting whose runs the records hold. Most of those runs already
exist: the committed records of the leaderboard's campaign (``docs/results/standard``, and the
claims' own rows, ``docs/results/claims-rows``; or any ``--records``) are read, and only the
runs missing from them are trained, into the results folder, with the bench's workers. A card
row with options (Teacher-OPPO is ``oppo`` with ``oracle: teacher``) is not on the leaderboard;
its runs get the row's own name and run here.

Another suite (``--suite``, protocol 2's tuned one) plans the claims in every setting it has,
each row at its method's entry there (a row with options of its own: its method's options and
settings, then its own), and, in a setting where the records hold runs of a row's method, at
that method's seeds there (:func:`at_methods_seeds`: the easy-seeds rule's choice, not the
suite's ten; the records are read as the whole board, so a board still running gives its rows
fewer seeds).

The report is the claims table of :mod:`creditbench.leaderboard.claims_page` (each claim read by
:mod:`creditbench.leaderboard.claims`) over the records and the new runs together: the paper's
number, the claim's axis, per setting the testbed's paired gain on that axis with its intervals
and k of n seeds and the verdict, and the caveats.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from creditbench.reference.cards import Card
from creditbench.tools.bench_plan import COMMITTED_RECORDS
from creditbench.tools.reproduce.recipe import ReproduceError

SUITE = "standard"
OWN_ROWS = "claims-rows"  # the suite name of the claims' own rows (own_rows_manifest)
# The settings the claims' runs are planned in: the hard one, where the claims' own rows were
# decided to run (docs/testbed.md, "The claims' own rows"); the board's rows run in both
RUN_SETTINGS = ("hard",)


def is_standard(suite: str) -> bool:
    """Whether ``suite`` (a shipped name or a YAML path) is the frozen protocol's suite, under
    whatever name it is given."""
    from creditbench.tools.suite import SuiteError, suite_path

    try:
        return suite_path(suite).resolve() == suite_path(SUITE).resolve()
    except SuiteError:
        return False


def claim_rows(card: Card) -> list[str]:
    """The card rows the claims compare, in claim order, each once."""
    rows: list[str] = []
    for claim in card.claims:
        for row in (claim.method, claim.baseline):
            if row not in rows:
                rows.append(row)
    return rows


def on_the_board(card: Card, name: str) -> bool:
    """Whether the card row ``name`` is a registered method at its defaults, as the board runs
    it; a variant (its own name, or options) is one of the claims' own rows."""
    row = card.method_row(name)
    return row.registry_name == name and not row.options


def cards_with_own_rows(cards: Iterable[Card]) -> list[Card]:
    """The cards whose claims compare a row the board does not run."""
    return [c for c in cards if any(not on_the_board(c, n) for n in claim_rows(c))]


def own_rows_manifest(
    cards: Iterable[Card], suite: str = SUITE, recorded_names: Iterable[str] = ()
) -> dict:
    """The claims' own rows as a suite manifest (``suite-claims-rows.json`` beside their records,
    docs/testbed.md "The claims' own rows"): every card's rows the board does not run, at
    ``suite``'s runs (:func:`claim_runs`; at their method's seeds in ``recorded_names``, the
    board's runs), so the claims page says how many of them its verdicts stand on while they
    run."""
    recorded_names = set(recorded_names)
    by_name = {  # a variant two cards compare is run once
        run.name: run
        for card in cards_with_own_rows(cards)
        for run in planned_runs(claim_runs(card, suite=suite), suite, recorded_names)
        if not on_the_board(card, run.entry)
    }
    runs = list(by_name.values())
    from creditbench.tools.suite import suite_manifest

    rows = ", ".join(dict.fromkeys(run.entry for run in runs))
    plan = f"the claims' own rows, card rows the board does not run: {rows}"
    return suite_manifest(OWN_ROWS, [(run.name, run.label) for run in runs], plan)


def claim_runs(card: Card, seeds: int | None = None, suite: str = SUITE):
    """``suite``'s runs of the claims' rows (module doc): on the standard suite in
    :data:`RUN_SETTINGS`, on another in each of its settings; ``seeds``: only the suite's first
    that many seeds."""
    from creditbench.tools.suite import SuiteError, expand_suite, load_suite, suite_path

    try:
        path = suite_path(suite)
        data = load_suite(path)
    except SuiteError as err:
        raise ReproduceError(str(err)) from None
    listed = [  # "all" (the standard suite's) lists no entry of its own
        e for key in ("methods", "references") if isinstance(data.get(key), list) for e in data[key]
    ]
    # the suite's entry of each method it runs: its name, or a variant under its name
    own_entries = {(e if isinstance(e, str) else e["name"]): e for e in listed}
    standard = is_standard(suite)
    entries: list[str | dict[str, Any]] = []
    for name in claim_rows(card):
        row = card.method_row(name)
        if on_the_board(card, name):
            entries.append(own_entries.get(name, name))
            continue
        if not standard and row.registry_name not in own_entries:
            raise ReproduceError(
                f"--suite: {Path(suite).stem} does not run {row.registry_name}, whose "
                f"configuration the row {name} takes"
            )
        host = own_entries.get(row.registry_name, row.registry_name)
        host = {} if isinstance(host, str) else host
        entry = {"name": name, "method": row.registry_name}
        entry["options"] = {**host.get("options", {}), **row.options}
        if host.get("settings"):  # the method's chosen lr, under protocol 2
            entry["settings"] = dict(host["settings"])
        entries.append(entry)
    data["methods"], data["references"] = entries, []
    if standard:
        data["tasks"] = [entry for entry in data["tasks"] if entry.get("label") in RUN_SETTINGS]
    if seeds is not None:
        if seeds > len(data["seeds"]):  # more would take confirmatory seeds into exploration
            first, last = data["seeds"][0], data["seeds"][-1]
            raise ReproduceError(
                f"--seeds: the claims run on the {Path(suite).stem} suite's "
                f"{len(data['seeds'])} seeds ({first}-{last}); give at most "
                f"{len(data['seeds'])} (got {seeds}). More seeds "
                f"are a confirmatory set: creditbench bench --suite {suite} --seeds 10-19"
            )
        data["seeds"] = data["seeds"][:seeds]
    try:
        return expand_suite(data, path)
    except SuiteError as err:
        raise ReproduceError(str(err)) from None


def planned_runs(runs: list, suite: str, recorded_names: set[str]) -> list:
    """The runs the claims stand on, of ``suite``'s :func:`claim_runs` (module doc): on the
    standard suite all of them (the frozen protocol's rows all run its ten seeds); on another,
    each at its method's seeds in the records (:func:`at_methods_seeds`, protocol 2's rule)."""
    return runs if is_standard(suite) else at_methods_seeds(runs, recorded_names)


def methods_run_name(run) -> str:
    """The name the board gives the run of ``run``'s method (its registry name) at the same
    setting and seed: ``LABEL-METHOD-sSEED``."""
    return f"{run.label}-{run.method}-s{run.seed}"


def at_methods_seeds(runs: list, recorded_names: set[str]) -> list:
    """``runs`` (of :func:`claim_runs`) at the seeds their method runs in each setting
    (docs/testbed.md, protocol 2's claims' own rows): where ``recorded_names`` hold runs of a
    run's method (:func:`methods_run_name`) in its setting, only those seeds; where they hold
    none, every seed of the suite."""
    held: dict[tuple[str, str], set[int]] = {}
    for run in runs:
        if methods_run_name(run) in recorded_names:
            held.setdefault((run.label, run.method), set()).add(run.seed)
    return [r for r in runs if r.seed in held.get((r.label, r.method), {r.seed})]


def committed_records() -> list[Path]:
    """The records read when none are given: the board's and the claims' own rows', each where
    the checkout this package runs from has it (an installed wheel has neither)."""
    return [p for p in (COMMITTED_RECORDS, COMMITTED_RECORDS.parent / OWN_ROWS) if p.exists()]


def recorded(sources: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """``{name: configs}`` of the finished runs the records hold: each config as the run
    resolved it, without its paths; two sources may hold a run of one name each."""
    import json

    from creditbench.harness.records.files import RunFormatError
    from creditbench.leaderboard.collect import collect_runs

    if not sources:
        return {}
    try:
        table, _ = collect_runs(sources)
    except (FileNotFoundError, RunFormatError) as err:
        raise ReproduceError(f"--records: {err}") from None
    if table.empty:
        return {}
    runs = table.loc[table["kind"] == "run"]
    configs = runs["config"] if "config" in runs else [None] * len(runs)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, config in zip(runs["run"], configs, strict=True):
        parsed = json.loads(config) if isinstance(config, str) else {}
        out.setdefault(Path(str(name)).name, []).append(parsed)
    return out


_MISSING = object()


def set_elsewhere(run, config: dict[str, Any]) -> list[str]:
    """The fields the suite sets for ``run`` (its overrides, ``key=JSON``) whose value in a
    recorded run's ``config`` is another or absent: a run of the same name made under another
    protocol (the tuned suite names each method's variant as the method)."""
    import json

    differ = []
    for override in run.overrides:
        key, _, text = override.partition("=")
        value: Any = config
        for part in key.split("."):
            value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
        if value != json.loads(text):
            differ.append(key)
    return differ


def check_recorded(
    runs: list, held: dict[str, list[dict[str, Any]]], suite: str, where: str = "--records"
) -> None:
    """ReproduceError naming the first of ``runs`` that ``held`` (the records', or the results
    folder's, configs by run name) holds with other values than ``suite`` sets for it
    (:func:`set_elsewhere`): read as this suite's run, it would pair another protocol's
    results with this one's (the tuned suite names each variant as its method)."""
    for run in runs:
        for config in held.get(run.name, []):
            differ = set_elsewhere(run, config)
            if differ:
                raise ReproduceError(
                    f"{where}: {run.name} was made with other settings than the "
                    f"{Path(suite).stem} suite's (it differs in {', '.join(differ[:3])}): "
                    "give that suite's own records with --records, and another --results"
                )


def reproduce_claims(
    card: Card,
    *,
    results: Path,
    records: list[str] | None = None,
    seeds: int | None = None,
    workers: int | None = None,
    dry_run: bool = False,
    reps: int = 2000,
    suite: str = SUITE,
) -> int:
    """Check ``card``'s claims on ``suite`` (module doc); the exit code."""
    from creditbench.harness.records.rundir import RunDir
    from creditbench.leaderboard.claims import judge_claim
    from creditbench.leaderboard.claims_page import claims_table, tally
    from creditbench.tools.bench import default_workers
    from creditbench.tools.bench_plan import (
        describe_plan,
        estimate_seconds,
        longest_first,
        measured_seconds,
        minutes_text,
    )
    from creditbench.tools.reproduce.workers import check_configs, publish, train

    if not card.claims:
        raise ReproduceError(
            f"{card.id}: the card lists no claims the testbed can test; "
            "--minutes N runs its cpu_scale recipe for a look at the ordering"
        )
    standard = is_standard(suite)
    runs = claim_runs(card, seeds, suite)  # the suite and --seeds checked before the records
    if records is None:  # the committed records are the frozen protocol's
        sources = committed_records() if standard else []
    else:
        sources = [Path(s) for s in records]
        for source in sources:
            if not source.exists():
                raise ReproduceError(f"--records: {source} does not exist")
    in_records = recorded(sources)
    runs = planned_runs(runs, suite, set(in_records))
    check_recorded(runs, in_records, suite)
    folders = {r.name: RunDir(results / r.name) for r in runs}
    finished = {name: folder for name, folder in folders.items() if folder.is_finished()}
    check_recorded(runs, {n: [r.config()] for n, r in finished.items()}, suite, "--results")
    pending = [r for r in runs if r.name not in finished and r.name not in in_records]
    estimates = estimate_seconds(runs, measured_seconds([results, *sources]))
    pending = longest_first(pending, estimates)
    workers = workers or default_workers()[0]  # one run a core, as a quick look plans
    where = ", ".join(str(s) for s in sources) or (
        f"none (none given, none at {COMMITTED_RECORDS})"
        if standard
        else "none given (the committed ones are the standard suite's)"
    )
    found = sum(r.name in in_records for r in runs)
    print(
        f"{card.id}: {len(card.claims)} claims on the {Path(suite).stem} suite: {len(runs)} runs, "
        f"{found} in the records ({where}), {len(finished)} finished in {results}, "
        f"{len(pending)} to run"
    )
    if dry_run:
        for run in pending:
            shown = minutes_text(estimates.get(run.name))
            print(f"  [   run] {shown}  {run.name}")
        print(describe_plan(pending, estimates, workers))
        return 0
    failed = train(pending, check_configs(pending, results), results, workers, 0)
    from creditbench.leaderboard.collect import collect_runs

    table, _ = collect_runs([*sources, results] if results.exists() else sources)
    verdicts = [v for claim in card.claims for v in judge_claim(card.id, claim, table, reps=reps)]
    report = "\n".join(
        [
            f"# {card.title}: the claims on the testbed",
            "",
            f"The {Path(suite).stem} suite's runs of {', '.join(claim_rows(card))}; "
            f"records: {where}; new runs: {results}.",
            "",
            f"**{tally(verdicts)}.**",
            "",
            claims_table(verdicts, with_card=False),
            "",
        ]
    )
    return publish(results, f"claims_{card.id}.md", report, failed)
