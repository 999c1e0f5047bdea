"""Clean checkouts of pinned commits, kept in the cache, and the command that runs one.

A campaign runs each method from the commit its plan pins, and ``creditbench verify`` re-runs a
published run from the commit it records. Both need the repository as it was at that commit,
untouched by anyone's work in progress:

- :func:`checkout` gives a git worktree of the commit at ``<cache>/worktrees/<commit id>/``
  (the cache is ``$CREDITBENCH_CACHE`` or ``~/.cache/creditbench``), made once with
  ``git worktree add --detach`` from the repository this package runs from, then reused; it is
  checked clean (no change to a tracked file, no untracked file git does not ignore) at every
  use, so a run made from it records a clean commit.
- :func:`pinned_cli` gives the argv that runs that checkout's ``creditbench`` command:
  ``env PYTHONPATH=<folder> python -m <its cli>``, where ``<folder>/creditbench`` links to the
  checkout, so the checkout's code is imported, not this package's, by the command and by every
  process it starts (a bench's workers). Commits from before ``tools/`` existed have their CLI
  in ``harness/cli``.

Two processes may ask for the same commit at once (two campaigns, a verify beside a campaign):
a lock file (``<cache>/worktrees/.<commit>.lock``) makes one of them create the worktree while
the other waits, and a worktree only counts once its ``<commit>.ready`` marker is written after
``git worktree add`` succeeded, so a creation killed half-way is removed and made again.

    from creditbench.tools.campaign.worktrees import checkout, pinned_cli
    subprocess.run([*pinned_cli(checkout("75b6117")), "bench", "--suite", "standard", ...])
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from creditbench.harness.models.policy_cache import default_cache_dir, exclusive_lock

# The checkout this package runs from: the repository whose commits are checked out.
REPOSITORY = Path(__file__).resolve().parents[2]


class CheckoutError(ValueError):
    """A commit that cannot be checked out clean; the message names the commit or the folder."""


def _git(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(cwd), *map(str, args)], capture_output=True, text=True, check=False
    )


def resolve_commit(commit: str, repo: Path | None = None) -> str:
    """The full id of ``commit`` (any name git accepts: a short id, a branch) in ``repo`` (default:
    :data:`REPOSITORY`); `CheckoutError` when the repository has no such commit."""
    repo = Path(repo) if repo is not None else REPOSITORY
    found = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", cwd=repo)
    if found.returncode != 0:
        if _git("rev-parse", "--git-dir", cwd=repo).returncode != 0:
            raise CheckoutError(f"{repo} is not a git repository: no commit can be checked out")
        raise CheckoutError(f"commit {commit!r}: no such commit in {repo}")
    return found.stdout.strip()


def worktrees_dir(cache: Path | None = None) -> Path:
    """Where the checkouts live: ``<cache>/worktrees``."""
    return (Path(cache) if cache is not None else default_cache_dir()) / "worktrees"


def checkout(commit: str, *, repo: Path | None = None, cache: Path | None = None) -> Path:
    """A clean worktree of ``commit`` in the cache (module doc), made if missing; `CheckoutError`
    when the commit does not exist, git refuses the worktree, or the worktree is not clean."""
    repo = Path(repo) if repo is not None else REPOSITORY
    full = resolve_commit(commit, repo)
    root = worktrees_dir(cache)
    path, ready = root / full, root / f"{full}.ready"
    with exclusive_lock(root / f".{full}.lock"):
        if not (ready.is_file() and path.is_dir()):
            ready.unlink(missing_ok=True)
            _remove_unfinished(path, repo)
            made = _git("worktree", "add", "--detach", path, full, cwd=repo)
            if made.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                why = (made.stderr.strip().splitlines() or ["no message"])[-1]
                raise CheckoutError(f"commit {full[:7]}: git worktree add {path} failed: {why}")
            ready.write_text(f"{repo}\n", encoding="utf-8")  # an empty marker would do as well
        _check_clean(path, full)
    return path


def _remove_unfinished(path: Path, repo: Path) -> None:
    """What a creation killed before its marker left: the folder, and git's record of it."""
    if path.exists():
        if _git("worktree", "remove", "--force", path, cwd=repo).returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
    _git("worktree", "prune", cwd=repo)  # forgets worktrees whose folder is gone (this one too)


def _check_clean(path: Path, full: str) -> None:
    head = _git("rev-parse", "HEAD", cwd=path)
    if head.returncode != 0 or head.stdout.strip() != full:
        raise CheckoutError(
            f"{path}: not a checkout of {full[:7]} (remove the folder and its .ready marker "
            "beside it; the next use makes it again)"
        )
    status = _git("status", "--porcelain", cwd=path)
    if status.returncode != 0 or status.stdout.strip():
        first = (status.stdout.strip() or status.stderr.strip()).splitlines()[0]
        raise CheckoutError(
            f"{path}: the checkout of {full[:7]} is not clean ({first.strip()}); runs from it "
            "would not be that commit's: undo the change (git -C PATH checkout -- . and "
            "git -C PATH clean -fd)"
        )


def pinned_cli(checkout_path: Path) -> list[str]:
    """The argv that runs the ``creditbench`` command of ``checkout_path`` (a :func:`checkout`),
    to which a verb and its arguments are appended (module doc)."""
    checkout_path = Path(checkout_path)
    folder = checkout_path.parent / f"{checkout_path.name}.python"
    link = folder / "creditbench"
    if not link.is_symlink() or link.resolve() != checkout_path.resolve():
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".creditbench.{os.getpid()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(checkout_path.resolve(), target_is_directory=True)
        os.replace(temporary, link)  # a reader sees no link or the whole one
    module = "creditbench.tools.cli.main"
    if not (checkout_path / "tools" / "cli" / "main.py").is_file():
        module = "creditbench.harness.cli.main"  # the CLI's home before tools/ existed
    return ["env", f"PYTHONPATH={folder}", sys.executable, "-m", module]
