"""The conformance suite: the contract every registered method keeps, checked on random
batches. It is installed with the package, so that ``creditbench conformance NAME`` checks a
method that lives outside this repository with the very checks the built-in ones pass.

    checks.py      the checks, a pytest module parametrised by method name
    strategies.py  random valid rollout batches and the transformations the checks apply
    fakes.py       deterministic services that run no model
    runner.py      runs checks.py with pytest on the methods asked for

``tests/test_conformance.py`` runs the same checks over every registered method. These modules
import pytest and Hypothesis, which come with ``pip install -e ".[test]"`` in a clone of
creditbench; this file imports nothing, since pytest imports it a second time under a name of
its own.
"""
