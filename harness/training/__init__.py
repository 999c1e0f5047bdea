"""The training loop, the PPO-style update, evaluation, and the step profiler."""
