"""The tests' short name for the fake services (``from fakes import FakeServices``).

They live in the installed conformance suite, `creditbench.harness.conformance.fakes`, which
hands them to every method it checks, so that ``creditbench conformance NAME`` runs on a method
outside this repository too. Extend them there.
"""

from __future__ import annotations

from creditbench.harness.conformance.fakes import FakeServices, StepServices

__all__ = ["FakeServices", "StepServices"]
