"""What the harness offers a method (:class:`methods.contract.Services`), all charged to the
budget: :class:`HarnessServices` composes the prompt schedule (``prompts``), the graded batches
(``batches``), the task's text helpers (``text``) and the scoring passes
(:mod:`creditbench.harness.scoring.passes`)."""

from creditbench.harness.services.harness_services import HarnessServices

__all__ = ["HarnessServices"]
