"""The task "ledger" (:mod:`.task`): a running balance over credits and debits mod 100, where a
slip can be corrected by a later ``fix`` line and problems vary widely in length
(``docs/worlds/ledger.md``).

The package owns its knobs (:class:`LedgerConfig`), its step checker (:mod:`.grammar`: the step
truth is the first wrong step that no later fix corrects), its SFT traces with slips and fixes
(:mod:`.traces`) and the values of its states (:mod:`.values`). Its text format, prompts and
alphabet are the chain's (:mod:`creditbench.harness.tasks.chain`), which it reuses.
"""

from .task import CLEAN_TRACE_OPTIONS, SFT_MIX, LedgerConfig, LedgerTask

__all__ = ["CLEAN_TRACE_OPTIONS", "SFT_MIX", "LedgerConfig", "LedgerTask"]
