"""Pack a results folder's finished run folders into one archive each, where each folder was.

    python -m creditbench.tools.pack_records docs/results/standard docs/results/claims-rows

Each run folder directly in a given folder (one holding ``config.yaml``) becomes
``<run name>.tar.xz`` beside it (:func:`~creditbench.harness.records.files.pack_run`): the
archive is written, read back and compared with the folder's files byte for byte, and only
then is the folder removed. The board, the claims and the reproduce verbs read the archive as
they read the folder.

Only committed records are packed: a folder holding anything besides the four record files
(checkpoints, ``responses.jsonl``: a run's working folder) or missing one of them (an unfinished
run) is refused before anything is written, with one line naming it (exit 2). A conversion
killed part-way leaves a run as a folder and its archive; running the command again finishes it
(packing is deterministic, so the archive is rewritten with the same bytes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from creditbench.harness.records.files import (
    RECORD_FILES,
    RunFormatError,
    pack_run,
    read_record_bytes,
)


def run_folders(folder: Path) -> list[Path]:
    """The run folders directly in ``folder``, sorted; an error names any that is not a
    finished run's committed records."""
    runs = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "config.yaml").is_file())
    for run in runs:
        names = sorted(p.name for p in run.iterdir())
        if names != sorted(RECORD_FILES):
            extra = sorted(set(names) - set(RECORD_FILES))
            missing = sorted(set(RECORD_FILES) - set(names))
            what = f"holds {', '.join(extra)}" if extra else f"has no {', '.join(missing)}"
            raise RunFormatError(
                f"{run}: not a finished run's committed records ({what}); "
                f"only folders of exactly {', '.join(RECORD_FILES)} are packed in place"
            )
    return runs


def pack_in_place(run: Path) -> Path:
    """Pack ``run`` beside itself, check the archive against it, remove the folder."""
    archive = pack_run(run, run.parent)
    for name in RECORD_FILES:
        if read_record_bytes(archive / name) != (run / name).read_bytes():
            raise RunFormatError(f"{archive}: {name} does not read back as packed; folder kept")
    for name in RECORD_FILES:
        (run / name).unlink()
    run.rmdir()
    return archive


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m creditbench.tools.pack_records", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("folders", nargs="+", type=Path, help="results folders to pack")
    args = parser.parse_args(argv)
    try:
        plans = []
        for folder in args.folders:
            if not folder.is_dir():
                raise RunFormatError(f"{folder}: no such results folder")
            plans.append((folder, run_folders(folder)))
        for folder, runs in plans:
            before = folder_bytes(folder)
            for run in runs:
                pack_in_place(run)
            after = folder_bytes(folder)
            print(f"{folder}: {len(runs)} runs packed; {before:,} -> {after:,} bytes of files")
    except (RunFormatError, OSError) as err:
        print(f"pack_records: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
