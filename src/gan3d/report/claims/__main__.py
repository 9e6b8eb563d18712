"""``python -m gan3d.report.claims``: decide every claim and write the ledger."""

from .ledger import main

raise SystemExit(main())
