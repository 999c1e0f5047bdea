"""Run directories: everything a run writes, each write atomic.

Layout of ``runs/<name>/``::

    config.yaml            the resolved config (written once; a different config is refused)
    environment.json       package versions, git commit, device, CPU model and kernel level
    metrics.jsonl          one JSON record per line, each carrying an integer "step"
    responses.jsonl        per evaluation, the responses of the batch trained on just before
                           it with their token advantages (``creditbench explain``)
    checkpoints/step-000120/
        model.safetensors, config.json, tokenizer files   (save_pretrained)
        optimizer.pt       torch.save of the optimizer state dict
        trainer_state.json the trainer's JSON-safe state (step, budget meter, ...)
        rng.pt             python, numpy, torch CPU and CUDA RNG states
        COMPLETE           written last
    summary.json           the last file a run writes: its presence means "finished"
    tensorboard/           scalar events, when tensorboard is installed

A crash at any moment leaves either the previous valid state or the new one: files are written
to a temporary name, fsynced and renamed; a checkpoint is assembled in a hidden temporary folder
and renamed into place once complete; metrics lines are appended with one ``write`` call, and a
torn last line (a crash mid-write) is ignored when reading and dropped before the next append.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pickle
import re
import shutil
import socket
import stat
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import yaml

from creditbench.harness.records.files import (
    RunFormatError,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    fsync_dir,
    process_umask,
    read_metric_lines,
    read_record_text,
    read_run_config,
)
from creditbench.harness.records.provenance import (
    capture_environment,
    capture_rng_state,
    restore_rng_state,
)
from creditbench.harness.typed import ConfigError

__all__ = [
    "MetricsLogger",
    "RunDir",
    "RunDirError",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "capture_environment",
    "capture_rng_state",
    "restore_rng_state",
]


class RunDirError(ConfigError):
    """A run directory cannot be used as asked (another config, a corrupt file)."""


class RunLockedError(RunDirError):
    """Another process is writing the run directory; the message names it."""


class CheckpointWriteError(OSError):
    """A checkpoint file that could not be written, reported by torch or safetensors in their own
    words (torch's ``RuntimeError: ... unexpected pos`` on a full disk) rather than as an
    OSError: an OSError here, so whoever handles a failed write handles this one too."""


def check_creatable(path: str | Path, field: str) -> None:
    """`RunDirError` naming ``field`` unless ``path`` is a folder, or one can be made there: the
    nearest part of it that exists must be a writable folder, not a file."""
    probe = Path(path).absolute()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise RunDirError(f"{field}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunDirError(f"{field}: {probe} is not writable")


def check_not_inside_a_run(path: str | Path, field: str) -> None:
    """`RunDirError` naming ``field`` when a folder above ``path`` (``path`` itself excluded)
    is a run directory (its ``config.yaml`` and ``environment.json``): a run or a results
    folder nested there is invisible to the leaderboard and mixes with the run's files."""
    probe = Path(path).absolute().parent
    while True:
        if (probe / "config.yaml").is_file() and (probe / "environment.json").is_file():
            raise RunDirError(
                f"{field}: {path} is inside the run {probe}; choose a folder outside any run"
            )
        if probe.parent == probe:
            return
        probe = probe.parent


def _torch_save_synced(obj: Any, path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    with os.fdopen(fd, "wb") as f:
        try:
            torch.save(obj, f)
            f.flush()
        except RuntimeError as err:  # torch's writer on a short write: "unexpected pos ..."
            detail = str(err).strip().splitlines()[-1] if str(err).strip() else "failed"
            failed = f"the write failed ({detail})"
            raise CheckpointWriteError(errno.EIO, failed, str(path)) from None
        os.fsync(f.fileno())


def _save_model(model: Any, folder: Path) -> None:
    """``save_pretrained`` into ``folder``; a failed write that safetensors or torch report in
    their own words is a :class:`CheckpointWriteError`."""
    from safetensors import SafetensorError

    try:
        model.save_pretrained(folder)
    except (RuntimeError, SafetensorError) as err:
        detail = str(err).strip().splitlines()[-1] if str(err).strip() else "failed"
        raise CheckpointWriteError(errno.EIO, f"the write failed ({detail})", str(folder)) from None


# ---------------------------------------------------------------------------------------------
# The run directory

_CHECKPOINT_NAME = re.compile(r"step-(\d+)")
COMPLETE_MARKER = "COMPLETE"
LOCK_FILE = ".lock"  # the writer's lock (RunDir.lock)
AUXILIARY_FILE = "auxiliary.pt"  # a method's second trained model, when it has one


def config_differences(old: Any, new: Any, path: str = "") -> list[str]:
    """The dotted paths at which two configs (nested mappings) differ."""
    return _differences(old, new, path)


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))
        return out
    return [] if old == new else [path or "<config>"]


class RunDir:
    """One run's directory. ``keep_checkpoints``: how many complete checkpoints are kept."""

    def __init__(self, path: str | Path, keep_checkpoints: int = 2) -> None:
        if keep_checkpoints < 1:
            raise ValueError("keep_checkpoints must be >= 1")
        self.path = Path(path)
        self.keep_checkpoints = keep_checkpoints
        self.config_path = self.path / "config.yaml"
        self.environment_path = self.path / "environment.json"
        self.metrics_path = self.path / "metrics.jsonl"
        self.responses_path = self.path / "responses.jsonl"
        self.summary_path = self.path / "summary.json"
        self.checkpoints_path = self.path / "checkpoints"
        self.tensorboard_path = self.path / "tensorboard"

    # --- config and status -------------------------------------------------------------------

    # every path of a run the harness writes: none may be a link, or a write would land in its
    # target (in a shared results folder, any file the run's user may write)
    def _written_paths(self) -> tuple[Path, ...]:
        return (
            self.config_path,
            self.environment_path,
            self.metrics_path,
            self.responses_path,
            self.summary_path,
            self.checkpoints_path,
            self.tensorboard_path,
            self.path / LOCK_FILE,
        )

    def check_no_links(self) -> None:
        """``RunDirError`` naming the first file or folder of the run that is a symbolic link,
        checked before anything is written: a run writes only plain files in its own folder."""
        for path in self._written_paths():
            if path.is_symlink():
                raise RunDirError(
                    f"{path}: is a symbolic link; a run writes only plain files in its own "
                    "folder (remove the link)"
                )

    def check_config(self, config_dict: dict[str, Any]) -> None:
        """``RunDirError`` when the run saved here (finished or not) has another config."""
        if not self.config_path.exists():
            return
        differ = _differences(self.config(), json.loads(json.dumps(config_dict)))
        if differ:
            state = "finished run" if self.is_finished() else "run"
            raise RunDirError(
                f"{self.path}: holds a {state} with a different config "
                f"(differs in {', '.join(differ[:5])}); use another run name or resume it"
            )

    @contextlib.contextmanager
    def lock(self, writing: str = "this run") -> Iterator[None]:
        """Hold the run's writer lock: ``.lock`` in the run directory, locked with ``flock``
        (which the kernel releases when its holder dies, however it dies) and holding the
        holder's pid, host and start time for the message a second writer gets
        (`RunLockedError`). A lock file left by a dead process is stale and simply taken."""
        self.path.mkdir(parents=True, exist_ok=True)
        path = self.path / LOCK_FILE
        try:  # never through a link: one planted in a shared results folder would be emptied
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            raise RunDirError(
                f"{path}: is a symbolic link; remove it (a lock is a plain file)"
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
                raise RunLockedError(
                    f"{self.path}: another process is writing {writing} ({holder or 'unknown'}); "
                    "wait for it to finish or stop it"
                ) from None
            me = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}"
            os.ftruncate(fd, 0)
            os.pwrite(fd, me.encode(), 0)
            try:
                yield
            finally:
                os.ftruncate(fd, 0)  # released: nobody named any more
        finally:
            os.close(fd)  # closing drops the flock

    def create(self, config_dict: dict[str, Any], environment: dict[str, Any]) -> None:
        """Write config.yaml and environment.json; an existing run must have the same config."""
        normalized = json.loads(json.dumps(config_dict))
        self.check_no_links()
        if self.config_path.exists():
            self.check_config(normalized)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.config_path, yaml.safe_dump(normalized, sort_keys=False))
        if not self.environment_path.exists():
            atomic_write_json(self.environment_path, environment)

    def exists(self) -> bool:
        return self.config_path.exists()

    def config(self) -> dict[str, Any]:
        try:
            return read_run_config(self.config_path)
        except RunFormatError as err:
            raise RunDirError(str(err)) from None

    def environment(self) -> dict[str, Any]:
        return json.loads(self.environment_path.read_text(encoding="utf-8"))

    def is_finished(self) -> bool:
        return self.read_summary() is not None

    def read_summary(self) -> dict[str, Any] | None:
        try:  # a FIFO planted as summary.json is no summary, not a read that waits forever
            data = json.loads(read_record_text(self.summary_path))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_summary(self, summary: dict[str, Any]) -> None:
        """The last thing a run writes."""
        atomic_write_json(self.summary_path, summary)

    # --- metrics -----------------------------------------------------------------------------

    @staticmethod
    def _drop_torn_tail(path: Path) -> None:
        """Cut a last line left without its newline by a crash mid-append (never through a
        link: :meth:`check_no_links` refused one before the run wrote anything)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            return
        with os.fdopen(fd, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())

    def _append_line(self, path: Path, record: dict[str, Any]) -> None:
        if not isinstance(record.get("step"), int):
            raise ValueError(f"a {path.name} record needs an integer 'step'")
        line = (json.dumps(record) + "\n").encode("utf-8")
        self.path.mkdir(parents=True, exist_ok=True)
        self._drop_torn_tail(path)
        # the umask decides the mode; a link is refused (ELOOP), never appended through
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        try:
            written = os.write(fd, line)
            if written != len(line):  # a short write is a torn line: cut it now
                os.ftruncate(fd, os.fstat(fd).st_size - written)
                raise OSError(f"short write to {path}")
            os.fsync(fd)
        finally:
            os.close(fd)

    def append_metrics(self, record: dict[str, Any]) -> None:
        """Append one record (it must carry an integer ``"step"``) as one whole line, fsynced."""
        self._append_line(self.metrics_path, record)

    def append_responses(self, record: dict[str, Any]) -> None:
        """Append one ``{"step": N, "responses": [...]}`` record to responses.jsonl, as
        :meth:`append_metrics` appends (see :mod:`harness.diagnostics.explain`)."""
        self._append_line(self.responses_path, record)

    def read_responses(self) -> list[dict[str, Any]]:
        """Every complete responses.jsonl record, in order (none when the run logged none).
        A response that is not what the trainer logs (``prompt``, ``tokens``, ``advantages`` as
        long as ``tokens``, ``reward``, ``first_wrong``) is an error naming the file and line."""
        try:
            lines = read_metric_lines(self.responses_path, ("responses",))
        except RunFormatError as err:
            raise RunDirError(str(err)) from None
        for number, (_, record) in enumerate(lines, start=1):
            for response in record["responses"]:
                if not _is_logged_response(response):
                    raise RunDirError(
                        f"{self.responses_path}: record {number} (step {record['step']}): a "
                        "response is not an object with prompt, tokens, advantages (one per "
                        "token), reward and first_wrong"
                    )
        return [record for _, record in lines]

    def _metric_lines(self) -> list[tuple[str, dict[str, Any]]]:
        try:
            return read_metric_lines(self.metrics_path)
        except RunFormatError as err:
            raise RunDirError(str(err)) from None

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every complete record, in order (a torn last line is ignored)."""
        return [record for _, record in self._metric_lines()]

    def truncate_metrics(self, after_step: int) -> None:
        """Keep only the records with ``step <= after_step`` (on resume), atomically, in
        metrics.jsonl and responses.jsonl. Both are read (and a broken line refused) before
        either is rewritten."""
        metrics = self._metric_lines()
        responses = []
        if self.responses_path.exists():
            try:
                responses = read_metric_lines(self.responses_path, ("responses",))
            except RunFormatError as err:
                raise RunDirError(str(err)) from None
        kept = [line for line, record in metrics if record["step"] <= after_step]
        atomic_write_text(self.metrics_path, "".join(line + "\n" for line in kept))
        if self.responses_path.exists():
            kept = [line for line, record in responses if record["step"] <= after_step]
            atomic_write_text(self.responses_path, "".join(line + "\n" for line in kept))

    # --- checkpoints -------------------------------------------------------------------------

    def _checkpoints(self, complete_only: bool = True) -> list[tuple[int, Path]]:
        if not self.checkpoints_path.is_dir():
            return []
        found = []
        for child in self.checkpoints_path.iterdir():
            match = _CHECKPOINT_NAME.fullmatch(child.name)
            if match and child.is_dir():
                if not complete_only or (child / COMPLETE_MARKER).is_file():
                    found.append((int(match.group(1)), child))
        return sorted(found)

    def checkpoint_path(self, step: int) -> Path:
        return self.checkpoints_path / f"step-{step:06d}"

    def latest_checkpoint(self) -> Path | None:
        """The complete checkpoint of the highest step, or None."""
        found = self._checkpoints()
        return found[-1][1] if found else None

    def _discard(self, path: Path) -> None:
        """Remove a folder by renaming it out of sight first, so no half-deleted one is seen."""
        trash = path.with_name(f".trash-{path.name}-{os.getpid()}")
        os.replace(path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def save_checkpoint(
        self,
        step: int,
        *,
        model: Any,
        tokenizer: Any,
        optimizer_state: dict[str, Any],
        trainer_state: dict[str, Any],
        generators: Mapping[str, torch.Generator] | None = None,
        auxiliary_state: dict[str, Any] | None = None,
    ) -> Path:
        """Write ``checkpoints/step-<step>/`` completely, then keep only the last K checkpoints.

        ``auxiliary_state``: a method's second trained model (weights and optimizer state),
        written as ``auxiliary.pt`` when given.

        Checkpoints of later steps (an abandoned future after a resume) are removed too.
        """
        self.check_no_links()
        self.checkpoints_path.mkdir(parents=True, exist_ok=True)
        for child in self.checkpoints_path.iterdir():  # leftovers of an earlier crash
            if child.name.startswith((".tmp-", ".trash-")):
                shutil.rmtree(child, ignore_errors=True)
        rng_state = capture_rng_state(generators)  # before anything else can draw
        final = self.checkpoint_path(step)
        tmp = self.checkpoints_path / f".tmp-{final.name}-{os.getpid()}"
        tmp.mkdir()
        try:
            _save_model(model, tmp)
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)
            _torch_save_synced(optimizer_state, tmp / "optimizer.pt")
            _torch_save_synced(rng_state, tmp / "rng.pt")
            if auxiliary_state is not None:
                _torch_save_synced(auxiliary_state, tmp / AUXILIARY_FILE)
            (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2) + "\n")
            mode = 0o666 & ~process_umask()  # safetensors writes 0600: a shared folder's mode
            for file in tmp.rglob("*"):
                if file.is_file():
                    with open(file, "rb+") as f:
                        os.fchmod(f.fileno(), mode)
                        os.fsync(f.fileno())
            atomic_write_text(tmp / COMPLETE_MARKER, f"{step}\n")
            if final.exists():
                self._discard(final)
            os.replace(tmp, final)
            fsync_dir(self.checkpoints_path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for other_step, path in self._checkpoints(complete_only=False):
            incomplete = not (path / COMPLETE_MARKER).is_file()
            if other_step > step or (incomplete and path != final):
                self._discard(path)
        complete = self._checkpoints()
        for _, path in complete[: max(0, len(complete) - self.keep_checkpoints)]:
            self._discard(path)
        return final

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        """``{"step", "path", "trainer_state", "optimizer_state", "rng_state",
        "auxiliary_state"}`` of a checkpoint (``auxiliary_state`` None when it has none).

        The caller loads the model with ``from_pretrained(path)`` and restores the RNG with
        :func:`restore_rng_state` (last, just before training continues).
        """
        path = Path(path)
        match = _CHECKPOINT_NAME.fullmatch(path.name)
        if not match or not (path / COMPLETE_MARKER).is_file():
            raise RunDirError(f"{path}: not a complete checkpoint")
        try:
            for file in path.rglob("*"):  # a FIFO planted in a shared folder: a read waits forever
                mode = file.lstat().st_mode
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise RunDirError(f"{file}: not a regular file, which no checkpoint holds")
        except OSError as err:
            raise RunDirError(f"{path}: cannot read checkpoint ({err.strerror or err})") from None
        trainer_file = path / "trainer_state.json"
        try:
            trainer_state = json.loads(trainer_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise RunDirError(f"{trainer_file}: cannot read checkpoint ({err})") from None
        optimizer_state = _load_tensors(path / "optimizer.pt")
        rng_state = _load_tensors(path / "rng.pt")
        auxiliary = path / AUXILIARY_FILE
        auxiliary_state = _load_tensors(auxiliary) if auxiliary.is_file() else None
        return {
            "step": int(match.group(1)),
            "path": path,
            "trainer_state": trainer_state,
            "optimizer_state": optimizer_state,
            "rng_state": rng_state,
            "auxiliary_state": auxiliary_state,
        }


class MetricsLogger:
    """Writes records to metrics.jsonl and, when tensorboard is installed, as scalar events.

    ``purge_step``: on resume, TensorBoard events at or after this step are discarded, so a
    resumed run does not show the replayed steps twice.
    """

    def __init__(
        self, run_dir: RunDir, *, tensorboard: bool = True, purge_step: int | None = None
    ) -> None:
        self.run_dir = run_dir
        self._writer: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(run_dir.tensorboard_path), purge_step=purge_step)
            except ImportError:  # tensorboard is optional
                self._writer = None

    @property
    def tensorboard_enabled(self) -> bool:
        return self._writer is not None

    def log(self, record: dict[str, Any]) -> None:
        self.run_dir.append_metrics(record)
        if self._writer is not None:
            for key, value in record.items():
                if (
                    isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and key != "step"
                ):
                    self._writer.add_scalar(key, value, record["step"])
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _is_logged_response(response: Any) -> bool:
    """Whether ``response`` has the shape the trainer logs to responses.jsonl."""
    if not isinstance(response, dict):
        return False
    tokens, advantages = response.get("tokens"), response.get("advantages")
    return (
        isinstance(response.get("prompt"), str)
        and isinstance(tokens, list)
        and isinstance(advantages, list)
        and len(advantages) == len(tokens)
        and isinstance(response.get("reward"), int | float)
        and isinstance(response.get("first_wrong"), list)
    )


def _load_tensors(path: Path) -> Any:
    """``torch.load`` of a checkpoint file (tensors only); a file that is missing, cut short or
    not a torch save is a :class:`RunDirError` naming it, in one line."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RunDirError(f"{path}: cannot read checkpoint ({reason})") from None
