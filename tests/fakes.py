"""The tests' short name for the fake services (``from fakes import FakeServices``).

They live in the installed conformance suite, `creditbench.harness.conformance.fakes`, which
hands them to every method it checks, so that ``creditbench conformance NAME`` runs on a method
outside this repository too. Extend them there.
"""

from __future__ import annotations

from creditbench.harness.conformance.fakes import FakeServices, StepServices

__all__ = ["FakeServices", "RecordingServices", "StepServices"]


class RecordingServices(FakeServices):
    """The fake services, recording the states a method buys continuations of: ``states``,
    ``(problem, prefix)`` of each, and ``samples``, the continuations a state, of the last
    ``generate``."""

    def generate(self, prompts, n=1, prefixes=None, *, problem_index=None, **options):  # type: ignore[override]
        self.states = [
            (int(problem), tuple(int(t) for t in prefix))
            for problem, prefix in zip(problem_index, prefixes, strict=True)
        ]
        self.samples = n
        return super().generate(prompts, n, prefixes, problem_index=problem_index, **options)
