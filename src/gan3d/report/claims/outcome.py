"""What a claim is, what deciding it gives, and the files it is decided from."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from ...io import repo_root

__all__ = ["VERDICTS", "KINDS", "MissingEvidence", "Outcome", "Claim", "Evidence", "percent"]

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not testable here")
KINDS = ("measured", "modelled", "estimated", "study")


def percent(x: float, digits: int = 1) -> str:
    """A fraction as an outcome's text says it: ``0.123`` -> ``"12.3 %"``."""
    return f"{100 * x:.{digits}f} %"


class MissingEvidence(LookupError):
    """A results or studies file that a claim reads is absent or unreadable; ``how``: what makes
    it, where that is not a run of the figures."""

    def __init__(self, message: str, how: str | None = None):
        super().__init__(message)
        self.how = how


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A claim's verdict and the value that decided it, said in words and numbers."""

    verdict: str
    kind: str          # measured | modelled | estimated | study
    value: str         # this run's (or the study's) value, as a reader should see it
    detail: str = ""   # how the verdict follows from the value and the tolerance
    needs: str = ""    # inconclusive: what a decision would need; not testable: why
    study: str = ""    # the committed study's value, when the claim has one
    numbers: dict = dataclasses.field(default_factory=dict)  # the numbers, for JSON readers

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {KINDS}")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim: what is said, by whom, the quantity, the tolerance and how it is decided."""

    id: str
    statement: str
    source: str        # "paper, Sect. 6" ... or "this package"
    quantity: str
    paper: str         # the paper's value ("-" when the paper gives none)
    tolerance: str     # fixed before any run: the decision rule in words (the code is decide)
    where: str         # notebook / figure / study file that measures it
    notebook: str      # the pipeline step whose notebook ends with this claim's row
    decide: Callable[["Evidence"], Outcome]


class Evidence:
    """The files claims read: ``results/...`` of this run and the committed ``studies/...``.
    Every file read is remembered with its provenance (commit, clean tree, machine, time)."""

    def __init__(self, root: str | Path | None = None, results: str | Path | None = None,
                 folders: dict[str, Path] | None = None):
        self.root = Path(root) if root else repo_root()
        # ``results/<step>/...`` resolve under ``folders[step]`` when given (a notebook run with
        # its own results_dir), else under ``results`` (default ``root/results``).
        self.results = Path(results) if results else self.root / "results"
        self.folders = dict(folders or {})
        self.used: dict[str, dict] = {}  # every file read: its provenance
        self.touched: list[str] = []  # the files read since the last reset (one claim's)

    def json(self, relpath: str) -> dict:
        """The file's contents, recorded as evidence of the claim being decided."""
        data = self._read(relpath)
        self.record(relpath, data)
        return data

    def peek(self, relpath: str) -> dict | None:
        """The file's contents without recording them (None if missing or unreadable): for a
        claim that counts a file as evidence only if it holds enough (then :meth:`record`)."""
        try:
            return self._read(relpath)
        except MissingEvidence:
            return None

    def record(self, relpath: str, data) -> None:
        """Count ``data``, read from ``relpath``, as evidence of the claim being decided."""
        prov = data.get("provenance") if isinstance(data, dict) else None
        self.used[relpath] = _provenance_summary(prov)
        if relpath not in self.touched:
            self.touched.append(relpath)

    def _read(self, relpath: str) -> dict:
        path = self.root / relpath
        if relpath.startswith("results/"):
            step, _, rest = relpath[len("results/"):].partition("/")
            path = (self.folders[step] / rest if step in self.folders
                    else self.results / relpath[len("results/"):])
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            how = ("a committed study: studies/README.md names the command that makes it"
                   if relpath.startswith("studies/") else None)
            raise MissingEvidence(f"{relpath} is missing", how) from None
        except (OSError, ValueError) as exc:
            raise MissingEvidence(f"{relpath} is unreadable ({type(exc).__name__}: {exc}); "
                                  "delete it and rerun the notebook that writes it") from None
        return data


def _provenance_summary(prov: dict | None) -> dict:
    if not isinstance(prov, dict):
        return {"commit": None, "clean": None, "machine": None, "time_utc": None}
    commit = prov.get("commit")
    clean = prov.get("clean")
    if isinstance(commit, str) and commit.endswith("-dirty"):
        commit, clean = commit[:-len("-dirty")], False
    machine = prov.get("machine") or {}
    return {"commit": commit[:12] if isinstance(commit, str) else None, "clean": clean,
            "machine": machine.get("cpu") or machine.get("processor"),
            "time_utc": prov.get("time_utc"), "note": prov.get("provenance_note")}
