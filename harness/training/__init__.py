"""Training: the loop (``trainer.py``), what a run is built from (``setup.py``), the PPO-style
update (``ppo.py``) and evaluation at budget fractions (``evaluation.py``). The step profiler is
a tool (``creditbench perf``, :mod:`creditbench.tools.perf`)."""
