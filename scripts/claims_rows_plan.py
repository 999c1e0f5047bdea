"""Print the claims' own rows as a suite manifest (JSON): the card rows the board does not run
(a variant's own name, or options), at the standard suite's runs of their claims' settings.

``scripts/campaign.sh WORK sync`` writes it beside their records
(``docs/results/claims-rows/suite-claims-rows.json``), so the claims page says how many of those
runs its verdicts stand on while they run (docs/testbed.md, "The claims' own rows")::

    python scripts/claims_rows_plan.py > docs/results/claims-rows/suite-claims-rows.json
"""

from __future__ import annotations

import json

from creditbench.reference.cards import load_cards
from creditbench.tools.reproduce.claims import own_rows_manifest


def main() -> int:
    print(json.dumps(own_rows_manifest(load_cards().values()), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
