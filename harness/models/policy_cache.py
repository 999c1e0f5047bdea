"""A content-addressed cache of checkpoint directories, safe against partial writes.

An entry is ``<cache>/<kind>/<key>/`` where ``key`` hashes the *material*: a JSON-able dict of
everything that determines the checkpoint (the caller decides what goes in; it includes
:func:`numerics_versions`). Building happens in a temporary directory beside the entry; then
``manifest.json`` is written, last, with the sha256 of every file, and the directory is renamed
into place. An entry whose manifest is missing, unreadable or does not match its files is
treated as absent, so a crash mid-write or a damaged file can never be loaded.

The package may carry entries under ``harness/assets/<kind>/<key>/``: they are used when their
material matches, apart from the torch/transformers versions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from creditbench.harness.models.modeling import replace_dir

MANIFEST = "manifest.json"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
ASSETS_DIR = Path(__file__).parent.parent / "assets"


def numerics_versions() -> dict[str, str]:
    """Versions whose kernels decide the trained bits (major.minor; patch releases keep them)."""
    import transformers

    def major_minor(version: str) -> str:
        return ".".join(version.split("+")[0].split(".")[:2])

    return {
        "torch": major_minor(torch.__version__),
        "transformers": major_minor(transformers.__version__),
    }


def cache_key(material: dict[str, Any]) -> str:
    """The first 20 hex digits of the sha256 of ``material`` as canonical JSON."""
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def default_cache_dir() -> Path:
    """``$CREDITBENCH_CACHE``, else ``~/.cache/creditbench``."""
    return Path(os.environ.get("CREDITBENCH_CACHE") or Path.home() / ".cache" / "creditbench")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(entry: Path, material: dict[str, Any]) -> None:
    """List the sha256 of every file of ``entry``; written last, it marks the entry complete."""
    files = {
        p.name: _sha256(p) for p in sorted(entry.iterdir()) if p.is_file() and p.name != MANIFEST
    }
    manifest = {"key": cache_key(material), "material": material, "files": files}
    tmp = entry / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    os.replace(tmp, entry / MANIFEST)


def read_manifest(entry: Path) -> dict[str, Any] | None:
    """The manifest of a complete, intact entry, or None (missing, partial or corrupt)."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        files = manifest["files"]
        if not set(REQUIRED_FILES) <= set(files):
            return None
        for name, digest in files.items():
            if _sha256(entry / name) != digest:
                return None
        from safetensors import safe_open

        with safe_open(entry / "model.safetensors", framework="pt") as fh:
            fh.keys()
        return manifest
    except Exception:  # unreadable, truncated, malformed: all mean 'not there'
        return None


def shipped_policy(material: dict[str, Any], kind: str = "base") -> Path | None:
    """A checkpoint the package carries for exactly this material (``assets/<kind>/``), or None.

    The torch/transformers versions are not compared: a shipped checkpoint loads with any of
    them; rebuilding with other versions may differ in the last bits.
    """
    wanted = {k: v for k, v in material.items() if k != "numerics"}
    root = ASSETS_DIR / kind
    if not root.is_dir():
        return None
    for entry in sorted(root.iterdir()):
        manifest = read_manifest(entry)
        if manifest is None:
            continue
        have = {k: v for k, v in manifest["material"].items() if k != "numerics"}
        if have == json.loads(json.dumps(wanted, default=str)):
            return entry
    return None


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """An exclusive lock file, so parallel processes make a missing cache entry once (a base
    policy, a checkout of a commit) (POSIX only)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock, at worst both train
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached_build(
    kind: str,
    material: dict[str, Any],
    build: Callable[[Path, Path], Any],
    cache_dir: str | Path | None = None,
    *,
    force: bool = False,
    use_shipped: bool = True,
) -> Path:
    """The entry for ``material``: an intact cached one, else a shipped one, else
    ``build(tmp, progress)``.

    ``build`` writes the checkpoint into ``tmp``, and may keep the state of an unfinished build
    in ``progress`` (``<cache>/<kind>/.<key>.progress``, the same for every attempt, removed once
    the entry is complete), so that an attempt after a kill continues where the last one
    stopped. ``force`` skips both lookups and the saved progress, and rebuilds. A lock file
    makes parallel callers build a missing entry once.
    """
    key = cache_key(material)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entry = root / kind / key
    if not force:
        if read_manifest(entry) is not None:
            return entry
        shipped = shipped_policy(material, kind) if use_shipped else None
        if shipped is not None:
            return shipped
    with exclusive_lock(root / kind / f".{key}.lock"):
        if not force and read_manifest(entry) is not None:  # built meanwhile by another process
            return entry
        tmp = root / kind / f".{key}.tmp-{uuid.uuid4().hex[:8]}"
        progress = root / kind / f".{key}.progress"
        if force:
            shutil.rmtree(progress, ignore_errors=True)
        try:
            build(tmp, progress)
            write_manifest(tmp, material)
            replace_dir(tmp, entry)
            shutil.rmtree(progress, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry
