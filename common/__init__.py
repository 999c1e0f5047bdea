"""Utilities every room but ``methods/`` may import, which know nothing of credit, runs or papers
and import nothing of ours: the YAML loader every file a user writes is read with
(``yaml_loading.py``: run configs, suites, campaign plans, paper cards)."""
