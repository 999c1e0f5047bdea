"""Training: the loop (``trainer.py``), what a run is built from (``setup.py``), the PPO-style
update (``ppo.py``), what watches a step (``observers.py``: its clock and its metrics record),
evaluation at budget fractions (``evaluation.py``) and the checkpoints a resumed run continues
from (``checkpoints.py``). The step profiler is a tool (``creditbench perf``,
:mod:`creditbench.tools.perf`)."""
