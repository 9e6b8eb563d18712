"""The figure pipeline: every notebook of the study, headless, with provenance.

``gan3d reproduce --profile quick`` (what ``make figures`` runs) executes the notebooks in order
with papermill — data exploration, distributed training, scaling analysis, physics validation —
and then:

* keeps each executed notebook under ``results/notebooks/`` (also when it failed, for inspection);
* moves the figures a notebook made into ``figures/`` only after the notebook succeeded: a notebook
  writes into its own staging folder, so earlier figures are never deleted or half-overwritten;
  what each figure draws (``data/<name>.json``, :mod:`gan3d.plots.description`) goes with it into
  ``figures/data/``;
* writes ``figures/README.md``, the index from each figure to the paper's figure it reproduces (or
  extends), the notebook and parameters that made it, the date and the commit;
* records provenance per run (parameters, versions, commit, machine, time per notebook).

A notebook is skipped when its inputs did not change: its key hashes the notebook, its parameters,
the package's code, for a notebook that reads the committed ``studies/`` (``Step.studies``: its
claims, the long runs' checkpoints) every file there, and, for a notebook that reads the one
before it (``Step.chained``), that one's key (so a change redoes that notebook and those after it
that depend on it, and only those).
``--force`` redoes everything.

Faults (``docs/reliability.md``): one run at a time per results folder (:func:`run_lock`; a second
refuses at once with :class:`~gan3d.exceptions.PipelineBusy`); a damaged ``state.json`` is a cache
that is rebuilt, with a warning; a notebook is forgotten as done before it starts (``RUNNING``
names it), so a run ended in it in any way leaves it to redo, and ``figures/`` as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from .. import console
from ..config import Config, resolve, to_dict
from ..exceptions import ConfigError, NotebookFailed, PipelineBusy
from ..io import ensure_dir, provenance, read_json, repo_root, write_json
from . import claims, figure_index
from .execute import run_notebook

log = console.get_logger(__name__)

__all__ = ["STEPS", "Step", "run_notebook", "reproduce", "run_lock", "read_state",
           "step_parameters", "PipelineSummary"]


@dataclasses.dataclass(frozen=True)
class Step:
    notebook: str  # file name under notebooks/
    name: str      # short name: results/<name>/, staging folder, index section
    reproduces: str
    sections: tuple[str, ...]  # configuration sections the notebook reads (its overrides)
    chained: bool = True  # reads what the notebook before it made: redone when that one is
    studies: bool = False  # reads the committed studies/ (its claims, long runs): redone on a change


STEPS = (
    Step("01_data_exploration.ipynb", "data",
         "extends the paper: the CLIC showers it trains on (synthetic calorimeter here)",
         ("data",)),
    Step("02_distributed_training.ipynb", "training",
         "the paper's claim that N workers converge like 1 (Sect. 4 and 6)", ("data", "train"),
         studies=True),
    Step("03_scaling_analysis.ipynb", "scaling",
         "the paper's Figures 1-3 and its overall-time result (Sect. 5-6), with models",
         ("data", "train", "scale"), studies=True),
    Step("04_physics_validation.ipynb", "validation",
         "goes beyond the paper: are the distributed GAN's showers physically right?",
         ("data", "train", "validation"), studies=True),
    Step("05_distributed_concepts.ipynb", "concepts",
         "teaches the paper's mechanisms hands-on on live MPI engines", (), chained=False),
)

# ---------------------------------------------------------------------------------------------
# The pipeline


def step_parameters(step: Step, cfg: Config, overrides: Mapping[str, Any], results: Path,
                    staging: Path) -> dict[str, Any]:
    """Papermill parameters of ``step``: the profile, its overrides and the step's folders.

    A notebook gets only the overrides of the sections it reads, so that changing, say, a
    validation setting does not redo the training; one that reads no configuration (the lesson)
    gets neither profile nor overrides.
    """
    params: dict[str, Any] = {"figures_dir": str(staging), "results_dir": str(results / step.name)}
    if step.sections:
        mine = {k: v for k, v in overrides.items() if k.split(".")[0] in step.sections}
        params = {"profile": cfg.profile, "overrides": mine, **params}
    if step.name == "training":
        params["workers"] = cfg.train.workers
    if step.name == "scaling":
        params.update(workers=list(cfg.scale.workers), steps=cfg.scale.steps,
                      warmup_steps=cfg.scale.warmup_steps, repeats=cfg.scale.repeats)
    if step.name == "validation":
        train_dir = results / "training"
        params["checkpoints"] = [str(train_dir / "train_1w"),
                                 str(train_dir / f"train_{cfg.train.workers}w")]
        params["labels"] = ["1 worker", f"{cfg.train.workers} workers"]
    return params


def _tree_hash(root: Path, keep: Callable[[Path], bool] = lambda p: True) -> str:
    """Hash of the names (relative to ``root``) and bytes of the files under ``root`` that
    ``keep`` accepts, in sorted order; a missing ``root`` hashes as empty."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")) if root.is_dir() else []:
        if p.is_file() and keep(p):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _code_hash() -> str:
    """Hash of the package's code and data files: a change of code redoes every step."""
    return _tree_hash(Path(__file__).resolve().parents[1], lambda p: p.suffix in {
        ".py", ".yaml", ".mplstyle", ".json"} and "__pycache__" not in p.parts)


def _studies_hash(studies: Path) -> str:
    """Hash of every file under ``studies``: a study or checkpoint committed there redoes the
    notebooks that read it (:attr:`Step.studies`)."""
    return _tree_hash(studies)


def _key(notebook: Path, params: Mapping[str, Any], code: str, studies: str, previous: str) -> str:
    """A step's key: its notebook, parameters, the code, the studies it reads ("" for a step
    that reads none) and the previous step's key ("" unless chained)."""
    h = hashlib.sha256()
    h.update(notebook.read_bytes() if notebook.is_file() else b"")  # missing: NotebookFailed
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    for part in (code, studies, previous):
        h.update(part.encode())
    return h.hexdigest()[:20]


@dataclasses.dataclass
class StepRecord:
    notebook: str
    status: str  # ran | skipped | failed | not run
    seconds: float = 0.0
    figures: list[str] = dataclasses.field(default_factory=list)
    key: str = ""
    error: str = ""


@dataclasses.dataclass
class PipelineSummary:
    records: list[StepRecord]
    figures_dir: Path
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.status in ("ran", "skipped") for r in self.records)

    def table(self) -> str:
        lines = [f"{'notebook':<34} {'status':<8} {'time':>8} {'figures':>7}"]
        for r in self.records:
            lines.append(f"{r.notebook:<34} {r.status:<8} {r.seconds:>7.1f}s {len(r.figures):>7}")
        lines.append(f"{'total':<34} {'':<8} {self.seconds:>7.1f}s "
                     f"{sum(len(r.figures) for r in self.records):>7}")
        return "\n".join(lines)


def _select(only: Sequence[str] | None) -> list[Step]:
    if not only:
        return list(STEPS)
    chosen = []
    for item in only:
        match = [s for s in STEPS if item in (s.name, s.notebook, s.notebook[:2], s.notebook.split(".")[0])]
        if not match:
            raise ConfigError(f"--only {item!r}: choose from " + ", ".join(s.name for s in STEPS))
        chosen.extend(m for m in match if m not in chosen)
    return [s for s in STEPS if s in chosen]


def _publish(staging: Path, figures: Path) -> list[str]:
    """Move a successful step's figures into ``figures`` (each an atomic rename), and what each
    draws (``data/<name>.json``, :mod:`gan3d.plots.description`) into ``figures/data``; returns
    the figures' names."""
    names = []
    for p in sorted(staging.glob("*")):
        if p.is_file() and not p.name.startswith("."):
            os.replace(p, figures / p.name)
            names.append(p.name)
    described = sorted((staging / "data").glob("*.json"))
    if described:
        ensure_dir(figures / "data")
    for p in described:
        os.replace(p, figures / "data" / p.name)
    return names


# ---------------------------------------------------------------------------------------------
# One run at a time


LOCK = "reproduce.lock"  # in <results>/pipeline/
RUNNING: dict = {}  # the notebook this process is running, if any; "interrupted" after Ctrl-C


@contextlib.contextmanager
def run_lock(results: str | Path) -> Iterator[Path]:
    """Hold the results folder ``results`` for one pipeline run; yield the lock file.

    Two runs on one results folder would overwrite each other's executed notebooks, state and
    figures, so a second one raises :class:`PipelineBusy` at once, naming the first (its pid,
    host and start, which the holder writes into the lock file). The lock is an ``flock`` on
    ``pipeline/reproduce.lock``: the kernel drops it when its holder ends, however it ends
    (SIGKILL included), so a lock file a dead run left never blocks. Its descriptor is not
    inherited (Python's default), so kernels and MPI engines of the run do not hold it.
    """
    path = ensure_dir(Path(results) / "pipeline") / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PipelineBusy(
                f"another `gan3d reproduce` is running on {path.parent.parent} ({_holder(path)}); "
                "wait for it to end: two at once would overwrite each other's notebooks and "
                "figures. Its lock is released when that process ends, however it ends; if no "
                f"such process runs (a lock held on a network file system), delete {path}"
            ) from None
        holder = {"pid": os.getpid(), "host": platform.node(), "started_utc": _now()}
        os.ftruncate(fd, 0) or os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)  # a later refusal must not name this run, which has ended
    finally:
        os.close(fd)  # releases the lock


def _holder(path: Path) -> str:
    try:  # who holds the lock file ``path``, from what the holder wrote into it
        h = json.loads(path.read_text())
        return f"pid {int(h['pid'])} on host {h['host']}, started {h['started_utc']} UTC"
    except (OSError, ValueError, KeyError, TypeError):  # the holder has not written it yet
        return "a run that is just starting"


def _one_run_at_a_time(reproduce):
    """``reproduce`` holding :func:`run_lock` of its results folder while it runs."""
    @functools.wraps(reproduce)
    def locked(profile: str = "quick", overrides: Mapping[str, Any] | None = None, **kwargs):
        cfg = resolve(profile, dict(overrides or {}))
        with run_lock(kwargs.get("results_dir") or repo_root() / cfg.pipeline.results):
            return reproduce(profile, overrides, **kwargs)
    return locked


@_one_run_at_a_time
def reproduce(profile: str = "quick", overrides: Mapping[str, Any] | None = None, *,
              force: bool = False, only: Sequence[str] | None = None,
              notebooks_dir: str | Path | None = None, results_dir: str | Path | None = None,
              figures_dir: str | Path | None = None, studies_dir: str | Path | None = None,
              verbose: bool = True) -> PipelineSummary:
    """Run the pipeline; return its summary (also printed). Does not raise on a failed notebook;
    raises :class:`PipelineBusy` at once while another run holds the results folder.
    ``studies_dir`` (default ``studies/``) is what the keys of the steps that read it hash."""
    overrides = dict(overrides or {})
    cfg = resolve(profile, overrides)
    root = repo_root()
    run = _Run(cfg, Path(notebooks_dir or root / "notebooks"),
               ensure_dir(Path(results_dir or root / cfg.pipeline.results)),
               ensure_dir(Path(figures_dir or root / cfg.pipeline.figures)), force, _code_hash())
    code, previous, t_start = run.code, "", time.monotonic()
    studies = _studies_hash(Path(studies_dir or root / "studies"))
    records: list[StepRecord] = []
    selected = _select(only)
    for i, step in enumerate(STEPS):
        staging = run.results / step.name / "figures_staging"
        params = step_parameters(step, cfg, overrides, run.results, staging)
        key = _key(run.notebooks / step.notebook, params, code, studies if step.studies else "",
                   previous if step.chained else "")
        previous = key
        if step in selected:
            records.append(run.step(f"[{i + 1}/{len(STEPS)}]", step, params, key, staging))
            if records[-1].status == "failed":
                break
    done = {r.notebook for r in records}
    records += [StepRecord(s.notebook, "not run") for s in selected if s.notebook not in done]
    summary = PipelineSummary(records, run.figures, time.monotonic() - t_start)
    _write_provenance(run.results, cfg, summary)
    figure_index.write_index(run.figures, run.state, STEPS)
    ledger = claims.write(root, run.figures, run.results)  # each claim's verdict: CLAIMS.md
    if verbose:
        print(summary.table())
        print(f"{claims.summary_line(ledger)}: {run.figures / 'CLAIMS.md'}")
    return summary


@dataclasses.dataclass
class _Run:
    """The folders and saved state of one :func:`reproduce` call; :meth:`step` runs one notebook."""

    cfg: Config
    notebooks: Path
    results: Path
    figures: Path
    force: bool
    code: str = ""

    def __post_init__(self):
        self.state_path = self.results / "pipeline" / "state.json"
        self.state = read_state(self.state_path)

    def up_to_date(self, step: Step, key: str) -> bool:
        old = self.state.get(step.notebook, {})
        return (not self.force and old.get("key") == key
                and (self.results / "notebooks" / step.notebook).is_file()
                and all((self.figures / f).is_file() for f in old.get("figures", [])))

    def step(self, where: str, step: Step, params: dict, key: str, staging: Path) -> StepRecord:
        """Skip ``step`` if up to date, else run it and publish its figures; its record."""
        if self.up_to_date(step, key):
            log.info("%s %s: up to date, skipped", where, step.notebook)
            return StepRecord(step.notebook, "skipped", 0.0,
                              self.state[step.notebook].get("figures", []), key)
        log.info("%s %s: running", where, step.notebook)
        RUNNING["notebook"] = step.notebook  # for an interrupt that must end the run by force
        # Not done until it has succeeded: a run that ends inside it in any way (Ctrl-C, a
        # SIGKILL, a power cut) leaves it to redo, its results half rewritten as they may be.
        if self.state.pop(step.notebook, None) is not None:
            write_json(self.state_path, self.state)
        shutil.rmtree(staging, ignore_errors=True)
        ensure_dir(staging)
        t0 = time.monotonic()
        try:
            run_notebook(self.notebooks / step.notebook, self.results / "notebooks" / step.notebook,
                         params, cwd=repo_root(), kernel=self.cfg.pipeline.kernel,
                         timeout=self.cfg.pipeline.cell_timeout,
                         progress=step.notebook.split(".")[0])
        except (NotebookFailed, KeyboardInterrupt) as exc:
            # Ctrl-C signals the kernel too: its death may come first, and is the interrupt then
            if isinstance(exc, NotebookFailed) and not RUNNING.get("interrupted"):
                log.error("%s; figures in %s were left as they were", exc, self.figures)
                return StepRecord(step.notebook, "failed", time.monotonic() - t0, [], key, str(exc))
            log.warning("%s interrupted: none of its figures was published, %s is as it was, "
                        "and the next run redoes it", step.notebook, self.figures)
            raise KeyboardInterrupt from None
        names = _publish(staging, self.figures)
        rec = StepRecord(step.notebook, "ran", time.monotonic() - t0, names, key)
        self.state[step.notebook] = {"key": key, "figures": names, "seconds": rec.seconds,
                                     "parameters": params, "finished_utc": _now(),
                                     "code": self.code,
                                     "budget": figure_index.training_budgets(step.name, self.results)}
        write_json(self.state_path, self.state)
        return rec


_ENTRY = {"key": str, "figures": list, "parameters": dict, "finished_utc": str}


def read_state(path: Path) -> dict[str, dict]:
    """``state.json``: the notebooks done, each with its key and figures. It is a cache, so a
    damaged one (not JSON, not UTF-8, not of this shape) is taken as absent, with a warning
    naming it: what it no longer says is done is redone, and the file is rewritten."""
    if not path.is_file():
        return {}
    try:
        state = read_json(path)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        log.warning("%s is damaged (%s): taken as absent, so each notebook is redone when it "
                    "next runs, and the file rewritten", path, exc)
        return {}
    if not isinstance(state, dict):
        log.warning("%s holds a JSON %s, not the pipeline's state: taken as absent, so each notebook "
                    "is redone when it next runs, and the file rewritten", path, type(state).__name__)
        return {}
    good = {nb: e for nb, e in state.items() if isinstance(e, dict) and all(
        isinstance(e.get(k), t) for k, t in _ENTRY.items())
        and isinstance(e.get("code", ""), str) and all(isinstance(f, str) for f in e["figures"])}
    if len(good) < len(state):
        log.warning("%s: the entries of %s are damaged; those notebooks are redone", path,
                    ", ".join(sorted(state.keys() - good.keys())))
    return good


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _write_provenance(results: Path, cfg: Config, summary: PipelineSummary) -> None:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    write_json(results / "pipeline" / f"run-{stamp}.json", provenance({
        "config": to_dict(cfg), "steps": [dataclasses.asdict(r) for r in summary.records],
        "seconds": summary.seconds}))


