"""verl's tests run against the transformers verl 0.9.1 declares (``>=5.5.3,<5.11``), not this
project's: the engines step of ``.ci/run`` puts that transformers, with the huggingface-hub and
tokenizers it needs, in a folder of its own before verl's (``PYTHONPATH``), for the verl test
files (``tests/test_engine_verl*.py``). The rest of the step (TRL, which does not import with
them) runs against this environment's transformers."""

from __future__ import annotations

from importlib import metadata

import pytest
import transformers
from packaging.requirements import Requirement

pytestmark = pytest.mark.engines


def test_verls_tests_run_against_the_transformers_it_declares():
    declared = [
        Requirement(text)
        for text in metadata.requires("verl") or []
        if text.startswith("transformers") and "extra" not in text
    ]
    assert len(declared) == 1, "verl 0.9.1 declares one transformers requirement"
    version = transformers.__version__  # the module imported, not only the metadata found
    assert metadata.version("transformers") == version
    assert declared[0].specifier.contains(version, prereleases=True), (
        f"transformers {version} is outside verl's {declared[0].specifier}: put verl's in a "
        "folder before verl's on PYTHONPATH (the engines step of .ci/run)"
    )
