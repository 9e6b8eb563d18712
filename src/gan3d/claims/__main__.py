"""``python -m gan3d.claims``: decide every claim and write the ledger."""

from .ledger import main

raise SystemExit(main())
