"""Committed run records packed one archive per run (``<run name>.tar.xz``, issue 60): packing
is deterministic and round-trips byte for byte, the board reads an archive as the folder it
came from, and a damaged archive or a run present in both forms is one clear line, exit 2."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest
from fake_runs import make_run

from creditbench.harness.records.files import (
    RECORD_FILES,
    RunFormatError,
    find_runs,
    pack_run,
    read_record_bytes,
)
from creditbench.leaderboard import render
from creditbench.tools.cli.main import main
from creditbench.tools.pack_records import main as pack_records

HARD = "chain-hard-steps=10"


def results(root: Path) -> Path:
    """A results folder of three methods at five seeds, as the trainer lays them out."""
    for seed in range(5):
        for method in ("grpo", "oracle", "dapo"):
            make_run(root, f"{HARD}-{method}-s{seed}", method, seed)
    return root


def test_packing_a_run_twice_gives_the_same_bytes_and_unpacks_to_its_files(tmp_path):
    run = make_run(tmp_path / "runs", "grpo-s0", "grpo", 0).path
    first = pack_run(run, tmp_path / "a")
    (run / "summary.json").touch()  # a later time on disk: not part of the archive
    second = pack_run(run, tmp_path / "b")
    assert first.name == "grpo-s0.tar.xz" and first.read_bytes() == second.read_bytes()
    with tarfile.open(first, "r:xz") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == list(RECORD_FILES)  # at the top level, in order
        assert {(m.mode, m.mtime, m.uid, m.gid, m.uname) for m in members} == {(0o644, 0, 0, 0, "")}
        for member in members:
            assert tar.extractfile(member).read() == (run / member.name).read_bytes()
    for name in RECORD_FILES:  # and as the readers see it
        assert read_record_bytes(first / name) == (run / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["grpo-s0.tar.xz"]  # no temp


def test_a_run_without_its_summary_is_not_packed_and_nothing_is_written(tmp_path):
    run = make_run(tmp_path / "runs", "grpo-s0", "grpo", 0, summary=False).path
    with pytest.raises(RunFormatError, match=r"summary.json: cannot pack the run"):
        pack_run(run, tmp_path / "out")
    assert list((tmp_path / "out").glob("*")) == []


def test_the_board_renders_the_same_from_the_folders_and_from_their_archives(tmp_path, capsys):
    folders = results(tmp_path / "folders" / "standard")
    packed = tmp_path / "packed" / "standard"  # the same name: the page says it
    shutil.copytree(folders, packed)
    assert pack_records([str(packed)]) == 0
    assert "15 runs packed" in capsys.readouterr().out
    assert sorted(p.name for p in packed.iterdir()) == sorted(
        f"{p.name}.tar.xz" for p in folders.iterdir()
    )
    render(folders, reps=200)
    render(packed, reps=200)
    for name in ("runs.csv", "leaderboard.md", "leaderboard.csv"):
        assert (packed / name).read_bytes() == (folders / name).read_bytes(), name


def test_a_damaged_archive_is_one_line_naming_it_exit_2(tmp_path, capsys):
    runs = results(tmp_path / "runs")
    archive = pack_run(runs / f"{HARD}-dapo-s3", runs)
    shutil.rmtree(runs / f"{HARD}-dapo-s3")
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: xz's check catches it
    archive.write_bytes(bytes(data))
    assert main(["leaderboard", str(runs), "--out", str(tmp_path / "board")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{archive}: damaged run archive" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "board").exists()
    archive.write_bytes(bytes(data[: len(data) // 2]))  # cut short: a copy that stopped
    assert main(["leaderboard", str(runs), "--out", str(tmp_path / "board")]) == 2
    assert f"{archive}: damaged run archive" in capsys.readouterr().err


def test_a_run_both_as_a_folder_and_as_an_archive_is_refused_naming_both(tmp_path, capsys):
    runs = results(tmp_path / "runs")
    folder = runs / f"{HARD}-grpo-s2"
    archive = pack_run(folder, runs)  # a conversion that stopped before removing the folder
    assert main(["leaderboard", str(runs), "--out", str(tmp_path / "board")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{folder} and {archive}: one run both as a folder and as an archive" in err
    assert len(err.splitlines()) == 1
    with pytest.raises(RunFormatError, match="both as a folder and as an archive"):
        find_runs(runs)


def test_packing_in_place_refuses_a_working_folder_and_finishes_a_stopped_conversion(
    tmp_path, capsys
):
    runs = results(tmp_path / "runs")
    working = runs / f"{HARD}-oracle-s4"  # a trainer's folder: its checkpoints beside the records
    (working / "checkpoints").mkdir()
    before = sorted(p.name for p in runs.rglob("*"))
    assert pack_records([str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{working}: not a finished run's committed records (holds checkpoints)" in err
    assert len(err.splitlines()) == 1
    assert sorted(p.name for p in runs.rglob("*")) == before  # nothing packed, nothing removed
    (working / "checkpoints").rmdir()
    pack_run(runs / f"{HARD}-grpo-s2", runs)  # stopped after one archive, its folder kept
    assert pack_records([str(runs)]) == 0
    assert all(p.name.endswith(".tar.xz") for p in runs.iterdir())
    assert len(find_runs(runs)[0]) == 15
