"""``creditbench campaign PLAN``: a board's runs, each method from the commit its plan pins.

``plan.py`` reads a plan file (``tools/campaigns/``), ``worktrees.py`` checks the pinned commits
out in the cache, ``run.py`` runs the plan's phases with each commit's own ``creditbench bench``
(and prints the dry run), ``easy_seeds.py`` is the rule that picks the easy setting's seeds
5-9, and ``sync.py`` brings finished runs into the repository and renders the pages that read
them. ``docs/campaign.md`` is the user's page.
"""
