"""The world of branching decisions, "countdown" (:mod:`.task`): make a target from four
numbers, one pair a line; a line can make the target unreachable, and the step truth is
reachability, computed exactly (:mod:`.grammar`). Its values are exact (:mod:`.values`) and
its SFT traces are an imperfect searcher's (:mod:`.traces`).
"""

from .task import ALPHABET, CLEAN_TRACE_OPTIONS, ERROR_KINDS, CountdownConfig, CountdownTask

__all__ = ["ALPHABET", "CLEAN_TRACE_OPTIONS", "ERROR_KINDS", "CountdownConfig", "CountdownTask"]
