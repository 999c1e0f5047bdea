"""Run directories (config, metrics, checkpoints, summary; every write atomic) and provenance."""
