"""MkDocs hook: MathJax is served from the built site itself, never from a CDN.

The docs' equations (``pymdownx.arithmatex``, generic mode) are typeset by MathJax 3. A page
that fetched MathJax from a CDN would show raw TeX offline, behind a firewall, or when the CDN
is gone, so the build ships it: MathJax's npm tarball is fetched once from the npm registry
(pinned version and sha512 integrity, as ``npm`` itself checks it), unpacked into the user's
cache, and its ``es5/`` folder (the combined components and the fonts they load) is copied
into the site as ``assets/mathjax/``, which ``extra_javascript`` in ``mkdocs.yml`` names.

``MATHJAX_ES5`` may name an ``es5/`` folder already on disk (an offline machine).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import tarfile
import urllib.request
from pathlib import Path

from mkdocs.exceptions import PluginError

VERSION = "3.2.2"
URL = f"https://registry.npmjs.org/mathjax/-/mathjax-{VERSION}.tgz"
INTEGRITY = (  # `npm view mathjax@3.2.2 dist.integrity`
    "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
)
ENTRY = "tex-mml-chtml.js"


def _cache() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "creditbench" / f"mathjax-{VERSION}" / "es5"


def _download(target: Path) -> None:
    try:
        with urllib.request.urlopen(URL, timeout=60) as response:
            data = response.read()
    except OSError as err:
        raise PluginError(
            f"MathJax {VERSION}: cannot fetch {URL} ({err}); set MATHJAX_ES5 to an es5/ folder "
            "of the mathjax npm package"
        ) from None
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")
    if digest != INTEGRITY:
        raise PluginError(f"MathJax {VERSION}: {URL} does not match its pinned integrity")
    staging = target.parent / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        members = [m for m in archive.getmembers() if m.name.startswith("package/es5/")]
        archive.extractall(staging, members=members, filter="data")
    (staging / "package" / "es5").rename(target)  # whole or not at all
    shutil.rmtree(staging, ignore_errors=True)


def es5_folder() -> Path:
    """MathJax's ``es5/`` folder: ``MATHJAX_ES5``, else the cache, filled on first use."""
    given = os.environ.get("MATHJAX_ES5")
    folder = Path(given) if given else _cache()
    if not (folder / ENTRY).is_file():
        if given:
            raise PluginError(f"MATHJAX_ES5={given}: no {ENTRY} there")
        folder.parent.mkdir(parents=True, exist_ok=True)
        _download(folder)
    return folder


def on_config(config, **kwargs):
    es5_folder()  # fail before building the pages, not after
    return config


def on_post_build(config, **kwargs) -> None:
    shutil.copytree(
        es5_folder(), Path(config["site_dir"]) / "assets" / "mathjax", dirs_exist_ok=True
    )
