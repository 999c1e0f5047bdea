"""The engine: tasks, models, rollouts, the budget meter, the trainer, the CLI."""
