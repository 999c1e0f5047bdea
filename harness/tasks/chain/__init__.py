"""The testbed task "chain" (:mod:`.task`): a running value transformed by a chain of
operations mod 100, with the step ground truth every response carries.

The package owns everything about the testbed: its knobs (:class:`ChainConfig`), its text
format and step checker (:mod:`.grammar`, with the alphabet the base policy reads), its prompt
variants (:mod:`.prompts`), the SFT traces the base policy learns from (:mod:`.traces`;
:data:`CLEAN_TRACE_OPTIONS` turns their slips off), and the values of its states
(:mod:`.values`).
"""

from .task import ALPHABET, CLEAN_TRACE_OPTIONS, ERROR_KINDS, SFT_MIX, ChainConfig, ChainTask

__all__ = ["ALPHABET", "CLEAN_TRACE_OPTIONS", "ERROR_KINDS", "SFT_MIX", "ChainConfig", "ChainTask"]
