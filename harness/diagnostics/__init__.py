"""Measurements the trainer logs with every step (credit placement against the step ground truth,
token gradient cancellation); the leaderboard reads them from run directories."""
