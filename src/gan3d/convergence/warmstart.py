"""The warm-start equivalence study: is a generator trained on N workers as good as one trained on
one, from a checkpoint where the generator already makes showers?

Every run forks the same checkpoint of the learning curve (``warm.checkpoint``, 41,600 showers
of 1-worker training; :func:`gan3d.gan.checkpoints.fork`) and trains ``warm.showers`` more
(all workers together) on the checkpoint's own data set, per-worker batch ``warm.batch_size``,
base lr ``warm.learning_rate``, evaluating the physics monitors ``warm.points`` times on
``warm.monitor_showers`` showers per monitor energy. A configuration is named
``<N>w[-<rule>][-wu<E>][-k<K>][-bf16]``: N workers; the lr rule (``linear`` lr x N, ``sqrt`` lr x
sqrt(N), ``none``); a warm-up from lr to the rule's lr over the run's first E of its
``warm.points`` evaluation intervals (``-wu1``: the first 2,048 of 8,192 showers); local SGD
averaging every K steps; bfloat16 instead of float32. The first of ``warm.configs`` is
the reference (``1w``), every other one a candidate against it; bfloat16 configurations are
skipped, and said so, where the CPU has no bfloat16 (:func:`gan3d.parallel.runtime.cpu_has_bf16`).

**The paired design.** Every run trains with ``train.data_order = "global"``
(:class:`gan3d.data.sharding.GlobalOrder`): seed s fixes one sequence of showers, and the latent
and dropout draws of each batch of it, whatever the worker count - so the 1-worker run of seed s
takes in two steps exactly the showers and draws the 2-worker run of seed s takes in one. The
monitors use the same latents and the same reference showers in every run. What remains between
the two runs of a seed is the difference the study asks about (one update of 64 at lr x 2 against
two of 32 at lr, the precision, the averaging); the seed-to-seed spread of the trajectories
cancels in the difference. The analysis is therefore per seed: d_s = candidate_s - reference_s of
each quantity's final value (the mean of the last two evaluations), and the 90 % t interval of the
mean of d over the seeds, with n - 1 degrees of freedom, against the margins of
:data:`gan3d.convergence.analysis.MARGINS` (fixed before any run): inside +-margin
*equivalent*, entirely outside *different*, otherwise *inconclusive*, with the seeds a decision
would need at the mean and spread seen (:func:`gan3d.convergence.analysis.paired_tost`).

Runs are launched one at a time (a launch of N ranks each), in :func:`plan`'s order; after each,
the results are written atomically into ``warm.output`` with the verdicts so far, so a stopped
study loses at most the run it was in. Like the convergence study, into a repository's
``studies/`` only from a clean tree unless ``allow_dirty``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
import shutil
import time
from pathlib import Path

import numpy as np

from .. import console
from ..config import Config, to_dict
from ..exceptions import ConfigError, Gan3dError
from ..io import ensure_dir, provenance
from ..parallel import runtime
from ..io import resolve_path
from ..records import check_writable, stamp, write
from . import analysis
from .plan import code_hash as _training_hash
from .plan import code_of, summarise_history
from .study import finite_json
from .verify import Subject, stale_runs

log = console.get_logger(__name__)

__all__ = ["WarmRun", "parse", "plan", "run_config", "code_hash", "run_warm", "load", "status",
           "verdicts", "also_verdicts", "ALSO", "decided", "describe", "QUANTITIES", "SUBJECT",
           "verify", "run_kind"]

_NAME = re.compile(r"^(\d+)w(?:-(linear|sqrt|none))?(?:-wu(\d+))?(?:-k(\d+))?(-bf16)?$")
QUANTITIES = tuple(analysis.MARGINS)  # the 8 quantities compared
DECIDED = ("equivalent", "different")


@dataclasses.dataclass(frozen=True)
class WarmRun:
    """One training of the study: a configuration and a seed."""

    config_id: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.config_id}-s{self.seed}"


def parse(config_id: str) -> dict:
    """Workers, lr rule, warm-up, local SGD k and precision of a configuration's name."""
    m = _NAME.match(config_id)
    if not m:
        raise ConfigError(f"warm.configs: {config_id!r} is no configuration name; write "
                          "<N>w[-linear|-sqrt|-none][-wu<E>][-k<K>][-bf16], e.g. 1w, "
                          "2w-sqrt, 2w-linear-wu1, 2w-linear-k16")
    workers, rule, k, bf16 = int(m[1]), m[2] or "linear", int(m[4] or 1), bool(m[5])
    warmup = int(m[3] or 0)
    if workers < 1 or k < 1 or (workers == 1 and (m[2] or m[3] or m[4])):
        raise ConfigError(f"warm.configs: {config_id!r}: one worker has no lr rule, warm-up or "
                          "k; more workers need N >= 2, and k >= 1")
    if m[3] is not None and (rule == "none" or warmup < 1):
        raise ConfigError(f"warm.configs: {config_id!r}: a warm-up ramps to a scaled lr over "
                          ">= 1 evaluation interval (-wu1 or more), under -linear or -sqrt")
    out = {"workers": workers, "rule": rule, "sync_every": k,
           "precision": "bfloat16" if bf16 else "float32"}
    return {**out, "warmup": warmup} if warmup else out


def available(config_id: str) -> bool:
    """Can this machine train the configuration (bfloat16 needs a CPU that has it)?"""
    return parse(config_id)["precision"] == "float32" or runtime.cpu_has_bf16()


def plan(cfg: Config, seeds: int | None = None) -> list[WarmRun]:
    """The runs, in order: block by block in ``warm.configs``' order (each candidate with the
    reference), seed by seed - the reference's run of a seed beside the candidate's, so that a
    stopped study leaves complete pairs. No run twice; unavailable configurations left out."""
    w = cfg.warm
    n = w.seeds if seeds is None else seeds
    ref, out = w.configs[0], {}
    for cand in w.configs[1:] or w.configs:
        if not available(cand):
            continue
        for s in range(n):
            for cid in (ref, cand):
                out.setdefault(f"{cid}-s{s}", WarmRun(cid, s))
    return list(out.values())


def parent(cfg: Config) -> dict:
    """What the checkpoint says of itself: its epoch, showers seen, data and training settings,
    and its SHA-256 (``path``: as ``warm.checkpoint`` names it)."""
    from ..gan.checkpoints import fork_source, load_checkpoint

    source = fork_source(resolve_path(cfg.warm.checkpoint))
    meta, _ = load_checkpoint(source)
    return {"path": cfg.warm.checkpoint, "file": str(source), "epoch": int(meta["epoch"]),
            "sha256": hashlib.sha256(source.read_bytes()).hexdigest(), "config": meta["config"],
            "showers_seen": int(meta["history"][-1]["showers_seen"])}


def run_config(cfg: Config, run: WarmRun, start: dict | None = None) -> Config:
    """The training configuration of ``run``, forked from the checkpoint (``start``: its
    :func:`parent`, read if not given)."""
    w, p = cfg.warm, parse(run.config_id)
    start = start or parent(cfg)
    per_step = p["workers"] * w.batch_size
    if w.showers % (per_step * w.points):
        raise ConfigError(f"warm.showers = {w.showers} must be a multiple of workers x "
                          f"warm.batch_size x warm.points = {per_step * w.points} ({run.config_id})")
    data = {f"data.{k}": v for k, v in start["config"]["data"].items()}
    return cfg.replace(**{
        **data, "data.path": w.data_path,
        "train.batch_size": w.batch_size, "train.learning_rate": w.learning_rate,
        "train.epochs": start["epoch"] + w.points,
        "train.steps_per_epoch": w.showers // (per_step * w.points),
        "train.eval_mode": "none", "train.monitor_showers": w.monitor_showers,
        "train.precision": p["precision"], "train.timing_warmup_epochs": 0,
        "train.seed": 3000 + run.seed, "train.workers": p["workers"],
        "train.scale_lr": p["rule"] != "none", "train.lr_rule": "sqrt" if p["rule"] == "sqrt"
        else "linear", "train.lr_warmup_epochs": p.get("warmup", 0),
        "train.sync_every": p["sync_every"],
        "train.fork_from": start["file"], "train.data_order": "global",
        "train.output": str(resolve_path(w.workdir) / run.id),
    })


def code_hash() -> str:
    """The version of what determines a run's numbers: the training code
    (:func:`gan3d.convergence.plan.code_hash`) and this study's settings of a run
    (:func:`parse`, :func:`run_config`) - not the analysis or the reports, which are
    recomputed from the runs at every save."""
    h = hashlib.sha256(_training_hash().encode())
    for fn in (parse, run_config):
        h.update(code_of(inspect.getsource(fn)).encode())
    h.update(_NAME.pattern.encode())
    return h.hexdigest()[:16]


def run_kind(entry: dict) -> str:
    """The kind of run a behavioural check of this study covers ``entry`` (a results entry) by:
    ``1w``, ``allreduce`` (N workers, gradients all-reduced), ``local-sgd`` (k > 1) or
    ``bfloat16``, ``warmup`` (the lr ramped over the first evaluation intervals); every one
    forked from the checkpoint in the global data order."""
    if entry.get("precision", "float32") == "bfloat16":
        return "bfloat16"
    if entry["workers"] == 1:
        return "1w"
    if entry.get("warmup", 0) > 0:
        return "warmup"
    return "local-sgd" if entry.get("sync_every", 1) > 1 else "allreduce"


_CHECKED = {"1w": "1w", "allreduce": "2w-linear", "local-sgd": "2w-linear-k16",
            "warmup": "2w-linear-wu1", "bfloat16": "1w-bf16"}  # what a check of each kind shortens


def _short(cfg: Config, kind: str, showers: int) -> tuple[Config, str]:
    """A check's short run of ``kind``: the study's configuration of seed 0 forked from the
    checkpoint, ``showers`` showers over 2 evaluations of 64 showers per monitor energy, on a
    data set of 2,000 showers of the checkpoint's kind (local SGD averages every 2 steps, so a
    short run synchronises)."""
    run = WarmRun(_CHECKED[kind], 0)
    short = cfg.replace(**{"warm.showers": showers, "warm.points": 2, "warm.monitor_showers": 64})
    extra = {"train.sync_every": 2} if kind == "local-sgd" else {}
    return run_config(short, run).replace(**{"data.n_showers": 2000, "data.n_files": 8},
                                          **extra), run.id


SUBJECT = Subject("gan3d.convergence.warmstart", tuple(_CHECKED), run_kind, _short,
                  lambda cfg: cfg.warm.workdir)


def verify(cfg: Config, reference: str | Path, *, showers: int = 256,
           kinds: list[str] | None = None, allow_dirty: bool = False) -> dict | None:
    """:func:`gan3d.convergence.verify.verify_code` on ``warm.output``, saved when it passes:
    then this checkout may add runs to the study."""
    from .verify import verify_code

    out = resolve_path(cfg.warm.output)
    results = load(out)
    check_writable(out, allow_dirty)
    entry = verify_code(cfg, reference, results, showers=showers, kinds=kinds,
                        allow_dirty=allow_dirty, subject=SUBJECT)
    if entry is not None:  # the runs' provenance is theirs; the check records its checkout
        _save(out, results, cfg, allow_dirty, mark=False)
    return entry


def load(path: str | Path) -> dict:
    from ..records import read

    path = resolve_path(path)
    return read(path, "warm_start") if path.is_file() else {"runs": {}}


def _harvest(cfg: Config, run: WarmRun, start: dict, seconds: float) -> dict | None:
    from ..gan.history import read_history
    from ..scaling.energy import cpu_model

    folder = resolve_path(cfg.warm.workdir) / run.id
    hist = folder / "history.jsonl"
    if not hist.is_file() or not (folder / "generator.keras").is_file():
        return None
    rows = [r for r in read_history(hist) if r["epoch"] > start["epoch"]]
    if len(rows) < cfg.warm.points:
        return None
    c = run_config(cfg, run, start)
    return {**dataclasses.asdict(run), **parse(run.config_id), "code_hash": code_hash(),
            "batch_size": c.train.batch_size, "lr": rows[-1]["lr"], "launch_s": seconds,
            "showers": rows[-1]["showers_seen"] - start["showers_seen"],
            "showers_per_s": float(np.median([r["showers_per_s"] for r in rows
                                              if r.get("showers_per_s")] or [np.nan])),
            "machine": cpu_model(), "rows": summarise_history(rows)}


def _launch(cfg: Config, run: WarmRun, start: dict, timeout: float) -> None:
    from ..parallel.jobs import launch_job

    workdir = ensure_dir(resolve_path(cfg.warm.workdir))
    shutil.rmtree(workdir / run.id, ignore_errors=True)  # a run stopped midway starts again
    c = run_config(cfg, run, start)
    p = c.train.workers
    log.info("warm start: %s (%d worker(s) x %d thread(s))", run.id, p,
             max(1, runtime.cpu_count() // p))
    launch_job(p, {"task": "train", "threads": max(1, runtime.cpu_count() // p),
                   "config": to_dict(c)}, workdir, f"launch-{run.id}", timeout=timeout)


def decided(results: dict, candidate: str) -> int:
    """How many of the 8 quantities the candidate's comparison has decided."""
    return sum(v["verdict"] in DECIDED for v in results.get("verdicts", [])
               if v["candidate"] == candidate)


def run_warm(cfg: Config, *, max_runs: int | None = None, until_decided: int = 0,
             timeout: float = 4 * 3600, allow_dirty: bool = False) -> dict:
    """Run the missing runs, block by block in :func:`plan`'s order (``max_runs`` at most),
    writing ``warm.output`` after each. ``until_decided``: before the next block, add seeds to
    a block (up to 10) until that many of its 8 quantities are decided."""
    from ..data.generate import generate_dataset
    from ..scaling.energy import cpu_model

    out = resolve_path(cfg.warm.output)
    check_writable(out, allow_dirty)  # before hours of training, not after them
    results = load(out)
    old = stale_runs(results, SUBJECT)
    if old:
        raise Gan3dError(f"{out} holds {len(old)} run(s) made by other training code "
                         f"({', '.join(old[:3])}...), which no behavioural check covers: run "
                         "`gan3d warm-start --verify-code COMMIT` with the commit that made "
                         "them, or move the file away to start again")
    start = parent(cfg)
    results.update(warm=to_dict(cfg)["warm"], code_hash=code_hash(),
                   parent={k: v for k, v in start.items() if k not in ("config", "file")},
                   provenance=provenance({"profile": cfg.profile}, exclude=(out,)),
                   machine={"cpu_model": cpu_model(), "cores": runtime.cpu_count(),
                            "bfloat16": runtime.cpu_has_bf16(), "avx512": _has_avx512()},
                   skipped={c: "this CPU has no bfloat16 (AVX512_BF16 or AMX)"
                            for c in cfg.warm.configs if not available(c)})
    generate_dataset(run_config(cfg, WarmRun(cfg.warm.configs[0], 0), start).data)
    ref, launched = cfg.warm.configs[0], 0
    for cand in [c for c in cfg.warm.configs[1:] if available(c)]:
        seeds = max([cfg.warm.seeds] + [r["seed"] + 1 for r in results["runs"].values()
                                        if r["config_id"] == cand])
        while True:
            for run in [WarmRun(c, s) for s in range(seeds) for c in (ref, cand)]:
                if run.id in results["runs"]:
                    continue
                if max_runs is not None and launched >= max_runs:
                    return results
                t0 = time.monotonic()
                try:
                    _launch(cfg, run, start, timeout)
                finally:  # a finished run is kept, even if the launch failed afterwards
                    entry = _harvest(cfg, run, start, time.monotonic() - t0)
                    if entry:
                        results["runs"][run.id] = entry
                    _save(out, results, cfg, allow_dirty)
                launched += 1
                log.info("warm start: %s done (%d runs in %s)", run.id, len(results["runs"]), out)
            if not (until_decided and decided(results, cand) < until_decided and seeds < 10):
                break
            log.info("warm start: %s decides %d of %d quantities at %d seeds; adding one", cand,
                     decided(results, cand), len(QUANTITIES), seeds)
            seeds += 1
    return results


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def verdicts(results: dict, reference: str | None = None) -> list[dict]:
    """Every candidate against the reference, per quantity: the paired comparison over the
    seeds both have (:func:`gan3d.convergence.analysis.paired_tost`)."""
    runs = results.get("runs", {})
    configs = list(dict.fromkeys(r["config_id"] for r in runs.values()))
    ref = reference or (results.get("warm") or {}).get("configs", ["1w"])[0]
    rows = []
    for cand in configs:
        if cand == ref:
            continue
        seeds = sorted({r["seed"] for r in runs.values() if r["config_id"] == cand}
                       & {r["seed"] for r in runs.values() if r["config_id"] == ref})
        for name, (margin, kind) in analysis.MARGINS.items():
            a = [analysis.final_values(runs[f"{cand}-s{s}"], name) for s in seeds]
            b = [analysis.final_values(runs[f"{ref}-s{s}"], name) for s in seeds]
            m = margin * abs(float(np.mean(b))) if kind == "rel" and b else margin
            rows.append({"candidate": cand, "reference": ref, "monitor": name, "seeds": seeds,
                         **analysis.paired_tost(a, b, m)})
    return rows


# Comparisons beside every candidate against 1 worker: local SGD against k = 1, the 2-worker runs
# of the same seeds (what the ledger's ``local-sgd`` decides from).
ALSO = (("2w-linear-k16", "2w-linear"),)


def also_verdicts(results: dict) -> list[dict]:
    """The paired rows of :data:`ALSO`, for each candidate that has runs."""
    runs = results.get("runs", {}).values()
    return [r for cand, ref in ALSO if any(x["config_id"] == cand for x in runs)
            for r in verdicts(results, ref) if r["candidate"] == cand]


def describe(v: dict) -> str:
    """One verdict row in a line: numbers to 3 digits, "n/a" for what the JSON holds as null."""
    from ..records import shown as num

    need = num(v.get("seeds_needed"), ".0f", "") if v["verdict"] == "inconclusive" else ""
    return (f"{v['candidate']} vs {v['reference']} {v['monitor']}: {v['verdict']} ({v['n']} "
            f"seeds, diff {num(v['diff'], '+.3g')}, 90 % [{num(v['low'], '+.3g')}, "
            f"{num(v['high'], '+.3g')}], margin "
            f"+-{num(v['margin'], '.3g')}" + (f"; ~{need} seeds to decide" if need else "") + ")")


def _save(out: Path, results: dict, cfg: Config, allow_dirty: bool, mark: bool = True) -> None:
    try:
        results["verdicts"] = finite_json(verdicts(results, cfg.warm.configs[0]))
    except Exception as exc:  # noqa: BLE001 - the runs are hours of work: write them regardless
        log.warning("warm start: no verdicts (%s: %s); the runs are saved", type(exc).__name__, exc)
    write(ensure_dir(out.parent) / out.name, stamp(results, "warm_start"),
          allow_dirty=allow_dirty, mark=mark)


def status(cfg: Config, results: dict | None = None) -> dict:
    """Runs done and missing of the planned seeds; decided quantities per candidate."""
    results = results if results is not None else load(cfg.warm.output)
    ids = [r.id for r in plan(cfg, max([cfg.warm.seeds] + [r["seed"] + 1 for r in
                                                            results["runs"].values()]))]
    done = [i for i in ids if i in results["runs"]]
    return {"planned": len(ids), "done": len(done), "missing": [i for i in ids if i not in done],
            "decided": {c: decided(results, c) for c in cfg.warm.configs[1:]},
            "skipped": [c for c in cfg.warm.configs if not available(c)]}
