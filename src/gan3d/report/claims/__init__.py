"""The claims ledger: every result of the paper, and every promise of this package, with a verdict.

A reproducibility package is judged by one answer: which of the study's results did this run
reproduce? Each :class:`Claim` is data - an id, the statement, where it is made (a section or
figure of the paper, or "this package"), the quantity, the paper's value, the **tolerance, fixed
here in code before any run**, where it is measured, and how it is decided - and its
:func:`decide` function turns the run's results (``results/``) and the committed studies
(``studies/``) into an :class:`Outcome` with one of four verdicts:

* **reproduced** - the quantity is inside the tolerance;
* **not reproduced** - it is outside, by more than its uncertainty;
* **inconclusive** - the evidence cannot decide (the outcome says what a decision would need:
  seeds, showers);
* **not testable here** - this machine cannot measure it (no GPU, no energy counters, no Geant4),
  and the outcome says why.

Every outcome also says what kind of number decided it: **measured** on this machine, **modelled**
(the performance model on the paper's hardware), **estimated** (from published figures) or taken
from a committed **study** (with its provenance). Nothing here is typed by hand: a verdict is as
good as the files it names.

``make figures`` (:func:`gan3d.report.pipeline.reproduce`) ends with :func:`write`:
``figures/CLAIMS.md`` and ``results/claims.json``. Each notebook ends with its own claims' rows
(:func:`notebook_rows`). ``python -m gan3d.report.claims`` rewrites both from the results
present.
"""

from __future__ import annotations

from .ledger import evaluate, ledger, main, markdown, notebook_rows, summary_line, write
from .outcome import KINDS, VERDICTS, Claim, Evidence, MissingEvidence, Outcome
from .registry import CLAIMS
from .equivalence import decide_equivalence, seeds_to_decide

__all__ = ["VERDICTS", "KINDS", "Claim", "Outcome", "Evidence", "MissingEvidence", "CLAIMS",
           "evaluate", "ledger", "markdown", "write", "notebook_rows", "summary_line",
           "decide_equivalence", "seeds_to_decide", "main"]
