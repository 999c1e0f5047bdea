"""A mistyped name gets the nearest right one: ``conformance grop`` suggests ``grpo``, as
``train --method grop`` does."""

from __future__ import annotations

from creditbench.tools.cli.main import main


def test_conformance_suggests_the_nearest_method_name(capsys):
    assert main(["conformance", "grop"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.endswith("did you mean 'grpo'?")
    assert main(["conformance", "zzzzzzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err  # nothing near: no guess
