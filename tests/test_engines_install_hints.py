"""Installs that work as written: creditbench is not published on a package index, so no doc
and no message may tell a user to ``pip install creditbench`` (or an extra of it) from one; the
hints install from the clone (``pip install -e ".[vllm]"``). Greps every tracked text file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# pip install [options] creditbench / 'creditbench[...]' / "creditbench[...]"; a path into a
# clone ("./creditbench[verl]") is not matched
FROM_AN_INDEX = re.compile(r"pip3? install (?:-{1,2}[\w-]+ )*['\"]?creditbench\b")
TEXT = (".py", ".md", ".sh", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".ini", ".html", ".j2")


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    here = Path(__file__).resolve().relative_to(ROOT).as_posix()  # its own examples, quoted
    return [ROOT / name for name in listed.split("\0") if name.endswith(TEXT) and name != here]


def test_no_doc_or_message_installs_creditbench_from_an_index():
    files = _tracked_text_files()
    assert len(files) > 100  # the grep reads the repository, not an empty listing
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path.is_file()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if FROM_AN_INDEX.search(line)
    ]
    assert not found, "install from the clone (pip install -e '.[extra]'):\n" + "\n".join(found)


def test_the_pattern_finds_an_install_from_an_index_and_not_one_from_a_clone():
    assert FROM_AN_INDEX.search("pip install 'creditbench[vllm]'")
    assert FROM_AN_INDEX.search('pip install -U "creditbench[test]"')
    assert FROM_AN_INDEX.search("pip install creditbench")
    assert not FROM_AN_INDEX.search('pip install -e ".[vllm]"')
    assert not FROM_AN_INDEX.search('pip install "./creditbench[verl]"')
