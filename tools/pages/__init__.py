"""The repository's own pages, checked and rendered: not part of the installed package.

* :mod:`pages.quotes` - every measured number that the README and ``docs/`` quote, rendered
  from its committed JSON file (with :mod:`pages.prose`: numbers that look measured and are not
  quotes);
* :mod:`pages.longruns` - the long runs' progress in ``studies/README.md``, rendered from their
  committed checkpoints;
* :mod:`pages.claims` - the README's claims summary, rendered from the committed ledger
  (``figures/claims.json``);
* :mod:`pages.blocks` - the marked blocks those are rendered into.

Run from the repository's root with the environment that has gan3d (``make env``)::

    .venv/bin/python tools/pages             # check every page; exit 1 if anything is stale
    .venv/bin/python tools/pages --write     # rewrite every rendered number
    .venv/bin/python tools/pages quotes --list
    .venv/bin/python tools/pages longruns --write
    .venv/bin/python tools/pages claims --write

The tests (``tests/test_quotes.py``, ``tests/test_longruns.py``, ``tests/test_blocks.py``,
``tests/test_claims.py``) import these modules with
``tools/`` on their path.
"""
