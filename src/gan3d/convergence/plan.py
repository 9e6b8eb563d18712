"""What the convergence study trains: its runs, the configuration of each, and the numbers it
keeps of each (see :mod:`gan3d.convergence.study` for the blocks).

:func:`code_hash` names the version of the modules that determine those numbers (this one
included): their code without docstrings, comments, imports or formatting, so that moving a module
or rewording its documentation leaves it unchanged. It is an identity, not the test of equality:
runs made by another version are current when a behavioural check
(:mod:`gan3d.convergence.verify`) has shown, for every kind of run the study holds
(:func:`run_kind`), that this version trains them to the same bits.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
from pathlib import Path

import numpy as np

from ..config import Config
from ..exceptions import ConfigError
from ..io import resolve_path

__all__ = ["Run", "plan", "run_config", "run_kind", "code_hash", "code_of", "summarise_history",
           "COMPONENTS", "SUMMARY", "KINDS"]

# The modules whose code determines a run's numbers (not the plots, notebooks or CLI).
COMPONENTS = ("gan/step.py", "gan/horovod.py", "gan/model.py",
              "gan/cpu_layers.py", "gan/training.py", "gan/local_sgd.py", "gan/history.py",
              "gan/checkpoints.py", "data/showers.py", "data/calorimeter.py", "data/generate.py",
              "data/sharding.py", "data/files.py", "parallel/distributed.py", "parallel/jobs.py",
              "validation/monitors.py", "validation/physics.py", "validation/metrics.py",
              "convergence/plan.py")
# The kinds of run a behavioural check trains, each exercising code the others do not: one
# worker; the gradient all-reduce (2 workers, lr x N); local SGD (k > 1); the lr warm-up;
# bfloat16 with the discriminator's CPU layers (only where the CPU has bfloat16).
KINDS = ("1w", "allreduce", "local-sgd", "warmup", "bfloat16")
# Monitors kept per evaluation: the mean over the monitor energies of |deviation| (relative, or
# layers for max_layer), the profile distance and the separation power of the depth barycentre.
SUMMARY = ("sampling_fraction", "ecal_sum_spread", "max_layer", "transverse_width",
           "longitudinal_width", "profile_distance", "sep_depth")
_ROW_KEYS = ("epoch", "showers_seen", "lr", "d_loss", "g_loss", "time_train_s", "syncs",
             "time_sync_s", "mon_targets_met", "mon_targets")


@dataclasses.dataclass(frozen=True)
class Run:
    """One training of the study."""

    block: str        # eq | sync | lr (the first block that needs it)
    workers: int
    rule: str         # linear | sqrt | warmup | none
    sync_every: int
    seed: int

    @property
    def config_id(self) -> str:
        k = f"-k{self.sync_every}" if self.sync_every > 1 else ""
        return f"{self.workers}w" + (f"-{self.rule}" if self.workers > 1 else "") + k

    @property
    def id(self) -> str:
        return f"{self.config_id}-s{self.seed}"


def plan(cfg: Config) -> list[Run]:
    """Every run of the study, in the order they are run: the equivalence block for all seeds
    first (the paper's claim), then the others seed by seed; no configuration twice."""
    s = cfg.study
    seen: dict[str, Run] = {}

    def add(run: Run) -> None:
        seen.setdefault(run.id, run)

    for seed in range(s.seeds):
        add(Run("eq", 1, "linear", 1, seed))
        add(Run("eq", 2, "linear", 1, seed))
        add(Run("eq", 2, "none", 1, seed))
    for seed in range(s.seeds):
        for k in s.sync_every:
            add(Run("sync", 2, "linear", k, seed))
        for n in s.lr_workers:
            for rule in ("linear", "sqrt", "warmup", "none"):
                add(Run("lr", n, rule, 1, seed))
    return list(seen.values())


def run_config(cfg: Config, run: Run) -> Config:
    """The training configuration of ``run``."""
    s = cfg.study
    per_step = run.workers * s.batch_size
    steps = s.showers // (per_step * s.points)
    if steps < 1 or s.showers % (per_step * s.points):
        raise ConfigError(f"study.showers = {s.showers} must be a multiple of workers x "
                          f"study.batch_size x study.points = {per_step * s.points} "
                          f"({run.workers} workers)")
    workdir = resolve_path(s.workdir)
    return cfg.replace(**{
        "data.source": "synthetic", "data.path": str(workdir / "data"),
        "data.n_showers": s.data_showers, "data.n_files": 8,
        "train.batch_size": s.batch_size, "train.epochs": s.points,
        "train.steps_per_epoch": steps, "train.eval_mode": "none",
        "train.monitor_showers": s.monitor_showers, "train.precision": "float32",
        "train.timing_warmup_epochs": 0, "train.seed": 1000 + run.seed,
        "train.workers": run.workers, "train.scale_lr": run.rule != "none",
        "train.lr_rule": "sqrt" if run.rule == "sqrt" else "linear",
        "train.lr_warmup_epochs": 1 if run.rule == "warmup" else 0,
        "train.sync_every": run.sync_every, "train.output": str(workdir / run.id),
    })


def run_kind(run: dict | Run) -> str:
    """The :data:`KINDS` entry whose check covers ``run`` (a :class:`Run` or a results entry)."""
    get = (lambda k: getattr(run, k)) if isinstance(run, Run) else run.get
    if get("workers") == 1:
        return "1w"
    if (get("sync_every") or 1) > 1:
        return "local-sgd"
    return "warmup" if get("rule") == "warmup" else "allreduce"


def code_hash() -> str:
    """SHA-256 (16 hex digits) of :data:`COMPONENTS`' code (:func:`code_of`): equal hashes,
    equal training code."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for name in COMPONENTS:
        path = root / name
        h.update(code_of(path.read_text()).encode() if path.is_file() else b"")
    return h.hexdigest()[:16]


def code_of(source: str) -> str:
    """What of a module's ``source`` can change a number: its syntax tree without docstrings
    and imports (where a function comes from is not what it computes)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        kept = [n for n in body if not isinstance(n, (ast.Import, ast.ImportFrom)) and not (
            isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str))]
        node.body = kept or [ast.Pass()]
    return ast.dump(tree)


def summarise_history(rows: list[dict], energies: tuple[str, ...] | None = None) -> list[dict]:
    """A run's history rows reduced to the study's numbers (:data:`SUMMARY` and the losses)."""
    out = []
    for r in rows:
        item = {k: r.get(k) for k in _ROW_KEYS}
        es = energies or tuple(k[len("mon_profile_distance_"):] for k in r
                               if k.startswith("mon_profile_distance_"))
        for name in SUMMARY:
            values = [r.get(f"mon_{name}_{e}") for e in es]
            values = [abs(v) if name not in ("profile_distance", "sep_depth") else v
                      for v in values if v is not None]
            item[name] = float(np.mean(values)) if values else None
        out.append(item)
    return out
