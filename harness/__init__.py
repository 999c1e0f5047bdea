"""The core: what a run is made of and how its steps run, one folder per part.

``tasks/`` (the ``Task`` contract, the testbed, real math data and the grader), ``models/``
(tokenizers, presets, the testbed's base policies), ``sampling/`` (rollouts), ``scoring/``
(teacher-forced passes), ``services/`` (what a method may ask the harness for, each pass
charged), ``training/`` (the loop, the update, evaluation), ``records/`` (the run-directory
format), ``diagnostics/`` (what every step logs beyond the loss), ``conformance/`` (the contract
checked on any method); at the top the run config (``config.py``, read through ``typed.py``),
the budget meter (``budget.py``) and the allocator setting (``allocator.py``). The
``creditbench`` command is a tool (:mod:`creditbench.tools.cli`), not part of the core.
"""
