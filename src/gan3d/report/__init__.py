"""The repository's report: its figures, their index and the claims ledger, made from what every
other room measured.

* :mod:`~gan3d.report.pipeline` - ``gan3d reproduce`` (``make figures``): the notebooks run
  headless by papermill, their figures moved into ``figures/`` with their index and provenance;
* :mod:`~gan3d.report.execute` - one notebook run headless, its failures named;
* :mod:`~gan3d.report.figure_index` - ``figures/README.md``: each figure, what of the paper it
  reproduces, the training budget of the generators it draws;
* :mod:`~gan3d.report.claims` - the claims ledger: each result of the paper and promise of the
  package decided from the results (``figures/CLAIMS.md``; ``python -m gan3d.report.claims``).

This room may import every other room; none of them imports it (``tests/test_structure.py``).
"""
