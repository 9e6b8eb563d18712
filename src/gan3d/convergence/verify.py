"""Keep a committed study current by behaviour: the same short runs, bit for bit, by two codes.

A study's runs carry the version of the training code that made them (``code_hash`` of the
study's module, :data:`CONVERGENCE` or the warm-start study's ``SUBJECT``: an identity of the
code, not the test of equality). When this checkout has another version, :func:`verify_code`
decides by experiment whether it still makes the study's numbers: for every kind of run the study
holds (the convergence study: one worker; two workers with the gradient all-reduce; local SGD
with k > 1; the lr warm-up - the warm-start study: the same forked from its checkpoint in the
global data order, and bfloat16) it trains a short run of that kind (the study's own
configuration, seed 0, shortened to ``showers``) twice
on this machine: once with this checkout and once with a *reference* copy of the package that
made the study, both on the same files of synthetic showers at the same path (this checkout
generates them; the reference's code must generate every file byte for byte alike: a 2-rank
run's last bits were seen to follow the data folder's path, which no code decides), launched by
each package's own job runner on the same number of MPI ranks and threads. Every number of every history row
(losses, learning rate, syncs, physics monitors; not the timings) and every weight of the final
generator must be equal to the last bit. Where they differ, this checkout's run is trained once
more: a machine's run-to-run noise (a reduction's threads adding in another order, seen as the
last bits of one loss) does not repeat, a change of code does; so a second run equal to the
reference passes (the check records the first difference as ``noise``). Where this checkout's two
runs are alike, the noise may have struck the reference's run: it is trained once more, and a
second reference run equal to this checkout's passes too. Where each code trains alike run
after run and the two still differ, the last bits follow incidental state of the process on
this machine (one code was seen to give other last bits with its showers at another path): the
codes then pass when no number or weight differs by more than :data:`NOISE` (1e-5) relative,
and the check records the largest difference. So do they where this checkout's two runs differ
from each other (a 2-rank run on a 2-core Xeon with AMX did, 4e-8 apart in a loss): both of
them must lie within :data:`NOISE` of the reference's. Otherwise :class:`StudyCodeDiffers` names the
difference and the study must be rerun. Where the CPU has
bfloat16 the ``bfloat16`` kind (1 worker, the discriminator's CPU layers) can be checked too,
against a reference that has those layers; a study of float32 runs does not need it.

When every kind passes, the results file records under ``checks`` (keyed by this checkout's
version) the study's version, the reference's commit, this checkout's commit (refused from a
tree with uncommitted changes unless asked, and then marked: :func:`gan3d.records.require_clean`,
the check a write into ``studies/`` makes), the kinds checked with what was
compared, and the machine. :func:`stale_runs` counts a run as current when its own version is
this checkout's, or when such a check of this version covers its version and its kind; then this
checkout may add runs to the study.

The reference is a commit of this repository (``gan3d study --verify-code 244eb25``: its
``src/gan3d`` is extracted with ``git archive``, and the commit is recorded) or a folder holding a
copy of the package (``git archive <commit> src/gan3d | tar -x -C ref`` -> ``--verify-code
ref/src``).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import importlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable, NotRequired, Sequence, TypedDict

import h5py
import numpy as np

from .. import console
from ..config import Config, flatten, to_dict
from ..exceptions import Gan3dError
from ..gan.history import read_history
from ..io import ensure_dir, write_json
from ..parallel import runtime
from ..parallel.launch import launch
from ..io import resolve_path
from ..records import require_clean
from .plan import KINDS, Run, run_config, run_kind

log = console.get_logger(__name__)

__all__ = ["StudyCodeDiffers", "StudyCheck", "Subject", "CONVERGENCE", "verify_code",
           "compare_runs", "largest_difference", "within_noise", "package_root", "reference_hash",
           "reference_config", "reference_runner", "reference_package", "kind_run", "needed_kinds", "stale_runs",
           "CHECK_SCHEMA"]

CHECK_SCHEMA = 1
_TIMING = ("time_", "showers_per_s", "timed", "threads")
_FORMAT = ("schema",)  # the row's format version: not a number of the run


class StudyCodeDiffers(Gan3dError, RuntimeError):
    """This checkout's training code does not make the study's numbers (or cannot be compared)."""


class KindCheck(TypedDict):
    run: str            # the study's run id the short run is a version of
    workers: int
    showers: int
    compared: str       # what was equal, e.g. "136 history numbers and 872948 generator weights"
    equality: str       # "bit for bit", or "within 1e-05 relative (...)" (see NOISE)
    # where the first run of this checkout differed and a second equalled the reference: what
    # differed (the same code gave two results: run-to-run noise of the machine, not the code)
    noise: NotRequired[str]
    data_files: NotRequired[int]  # shower files the reference's code generated byte for byte alike


class StudyCheck(TypedDict):
    """One behavioural check in a results file's ``checks`` (keyed by this checkout's version)."""

    schema: int
    same_as: str                  # the study's code version
    reference: dict               # {"commit": ..., "code_hash": ...} of the reference package
    checkout: dict                # {"commit": ..., "clean": bool}
    kinds: dict[str, KindCheck]   # kind -> what its short runs compared
    not_checked: dict[str, str]   # kind -> why not
    machine: dict
    checked: str                  # date (UTC)


@dataclasses.dataclass(frozen=True)
class Subject:
    """What a behavioural check needs of a study."""

    module: str                                   # whose code_hash() names a run's version
    kinds: tuple[str, ...]                        # every kind of run it can hold, in check order
    kind_of: Callable[[dict], str]                # a results entry -> its kind
    short: Callable[[Config, str, int], tuple[Config, str]]  # (cfg, kind, showers) -> run, id
    workdir: Callable[[Config], str]              # the study's scratch folder

    def version(self) -> str:
        return importlib.import_module(self.module).code_hash()


def _convergence_short(cfg: Config, kind: str, showers: int) -> tuple[Config, str]:
    run, extra = kind_run(cfg, kind)
    short = cfg.replace(**{"study.showers": showers, "study.points": 2})
    return run_config(short, run).replace(**extra), run.id  # named error if showers won't divide


CONVERGENCE = Subject("gan3d.convergence.plan", KINDS, run_kind, _convergence_short,
                      lambda cfg: cfg.study.workdir)


def package_root(reference: str | Path) -> Path:
    """The folder to put on ``PYTHONPATH`` for ``reference`` (the ``gan3d`` package or its parent)."""
    ref = Path(reference).resolve()
    if (ref / "gan3d" / "convergence" / "plan.py").is_file():
        return ref
    if (ref / "convergence" / "plan.py").is_file() and ref.name == "gan3d":
        return ref.parent
    raise StudyCodeDiffers(f"{reference} holds no gan3d package (looked for gan3d/convergence/"
                           f"plan.py); give the folder that contains the reference's gan3d/")


def _ask(root: Path, code: str) -> str:
    """What ``code`` prints when run with the package under ``root`` (named error if it fails)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        raise StudyCodeDiffers(f"the reference package in {root} does not import: "
                               f"{proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip()


def reference_package(reference: str | Path, work: Path) -> tuple[Path, str | None]:
    """(folder for ``PYTHONPATH``, commit) of ``reference``: a folder holding the package, or a
    commit of this repository, whose ``src/gan3d`` is extracted under ``work``."""
    if Path(reference).is_dir():
        return package_root(reference), None  # a copy: which commit it is, the folder does not say
    repo = Path(__file__).resolve().parents[3]
    try:
        sha = subprocess.run(["git", "rev-parse", "--verify", f"{reference}^{{commit}}"], cwd=repo,
                             capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        raise StudyCodeDiffers(f"{reference} is neither a folder holding a gan3d package nor a "
                               "commit of this repository") from None
    dest = ensure_dir(work / f"reference-{sha[:12]}")
    if not (dest / "src" / "gan3d" / "convergence" / "plan.py").is_file():
        archive = subprocess.run(["git", "archive", sha, "src/gan3d"], cwd=repo,
                                 capture_output=True, check=True, timeout=120).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=120)
    return package_root(dest / "src"), sha


def reference_hash(root: Path, module: str = "gan3d.convergence.plan") -> str:
    """The code version of the package under ``root``, computed by that package's own code."""
    return _ask(root, f"from {module} import code_hash; print(code_hash())")


def reference_runner(root: Path | None) -> str:
    """The module that runs job files in the package under ``root`` (None: this checkout's):
    ``gan3d.parallel.jobs``, or ``gan3d.scaling.probes`` in packages older than it."""
    if root is None:
        return "gan3d.parallel.jobs"
    return _ask(root, "import importlib.util as u; print('gan3d.parallel.jobs' if "
                      "u.find_spec('gan3d.parallel.jobs') else 'gan3d.scaling.probes')")


def reference_config(root: Path, config: dict) -> dict:
    """``config`` (:func:`~gan3d.config.to_dict` form) as the package under ``root`` reads it:
    without the settings added since, which must be at their defaults (a new setting's default
    keeps the old behaviour), else a named error."""
    known = set(json.loads(_ask(root, "import json; from gan3d.config import Config, flatten, "
                                      "to_dict; print(json.dumps(list(flatten(to_dict(Config())))))")))
    flat, defaults = flatten(config), flatten(to_dict(Config()))
    added = [k for k in flat if k not in known]
    moved = [f"{k} = {flat[k]!r}" for k in added if flat[k] != defaults.get(k)]
    if moved:
        raise StudyCodeDiffers(f"the reference package in {root} has no setting {', '.join(moved)}"
                               "; verify with these settings at their defaults")
    out = copy.deepcopy(config)
    for key in added:
        *sections, name = key.split(".")
        node = out
        for section in sections:
            node = node[section]
        del node[name]
    return out


def _weights(path: Path) -> dict[str, np.ndarray]:
    """Every array of a saved Keras model (``.keras``: a zip holding ``model.weights.h5``)."""
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as z, z.open("model.weights.h5") as f, h5py.File(f, "r") as h5:
        h5.visititems(lambda name, obj: out.__setitem__(name, obj[()])
                      if isinstance(obj, h5py.Dataset) else None)
    return out


def _same(x, y) -> bool:
    """Equal, counting NaN equal to NaN (a monitor of an empty output is NaN in both)."""
    return x == y or (x != x and y != y)


def compare_runs(a: Path, b: Path) -> tuple[int, int]:
    """Raise :class:`StudyCodeDiffers` at the first number in which the runs in folders ``a``
    and ``b`` differ (history rows without timings; generator weights, bit for bit). Returns
    (numbers, weights) compared."""
    rows_a, rows_b = read_history(a), read_history(b)
    if len(rows_a) != len(rows_b):
        raise StudyCodeDiffers(f"the runs have {len(rows_a)} and {len(rows_b)} history rows")
    numbers = 0
    for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
        keys = {k for k in ra.keys() | rb.keys() if not k.startswith(_TIMING + _FORMAT)}
        for k in sorted(keys):
            if not _same(ra.get(k), rb.get(k)):
                raise StudyCodeDiffers(f"epoch {i + 1}: {k} = {ra.get(k)!r} (this checkout) "
                                       f"against {rb.get(k)!r} (the study's code)")
            numbers += 1
    wa, wb = _weights(a / "generator.keras"), _weights(b / "generator.keras")
    if wa.keys() != wb.keys():
        raise StudyCodeDiffers("the generators have different weights: "
                               f"{sorted(wa.keys() ^ wb.keys())[:3]}")
    for name in sorted(wa):
        if wa[name].shape != wb[name].shape or not np.array_equal(wa[name], wb[name]):
            diff = np.abs(wa[name].astype(np.float64) - wb[name]).max() \
                if wa[name].shape == wb[name].shape else "shape"
            raise StudyCodeDiffers(f"generator weight {name} differs (largest difference {diff})")
    return numbers, sum(int(w.size) for w in wa.values())


# The largest relative difference between two codes' runs that is still the machine's noise:
# runs of one code differing only in where their showers lie were seen 2e-8 apart in a loss;
# a change of what is computed moves numbers by orders of magnitude more within a few steps.
NOISE = 1e-5


def largest_difference(a: Path, b: Path) -> tuple[float, int, int]:
    """The largest relative difference between the runs in ``a`` and ``b`` over every history
    number (as :func:`compare_runs` reads them) and generator weight (relative to the largest
    magnitude of its tensor); with the numbers and weights compared. Inf when they cannot be
    compared (other rows, weights or shapes)."""
    rows_a, rows_b = read_history(a), read_history(b)
    wa, wb = _weights(a / "generator.keras"), _weights(b / "generator.keras")
    if len(rows_a) != len(rows_b) or wa.keys() != wb.keys() or \
            any(wa[k].shape != wb[k].shape for k in wa):
        return float("inf"), 0, 0
    largest, numbers = 0.0, 0
    for ra, rb in zip(rows_a, rows_b):
        for k in {k for k in ra.keys() | rb.keys() if not k.startswith(_TIMING + _FORMAT)}:
            x, y = ra.get(k), rb.get(k)
            numbers += 1
            if _same(x, y):
                continue
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y)):
                return float("inf"), numbers, 0
            largest = max(largest, abs(x - y) / max(abs(x), abs(y)))
    for k in wa:
        x, y = wa[k].astype(np.float64), wb[k].astype(np.float64)
        scale = max(np.abs(x).max(initial=0.0), np.abs(y).max(initial=0.0))
        if scale:
            largest = max(largest, float(np.abs(x - y).max() / scale))
    return largest, numbers, sum(int(w.size) for w in wa.values())


def within_noise(pairs: Sequence[tuple[Path, Path]], what: str) -> tuple[str, int, int]:
    """Two codes compared by size, where no bits can agree: every pair of runs (this checkout's,
    the reference's) within :data:`NOISE` relative in every number and weight. Returns (the
    equality recorded, numbers, weights compared); else :class:`StudyCodeDiffers` saying ``what``
    differed and by how much."""
    largest, numbers, weights = max(largest_difference(a, b) for a, b in pairs)
    if not largest <= NOISE:
        raise StudyCodeDiffers(f"{what} by up to {largest:.3g} relative, more than the machine's "
                               f"noise of {NOISE:g}: its code trains otherwise)")
    return f"within {NOISE:g} relative (largest difference {largest:.2g})", numbers, weights


def needed_kinds(results: dict, subject: Subject = CONVERGENCE) -> list[str]:
    """The kinds of run the study in ``results`` holds, in the subject's order."""
    held = {subject.kind_of(r) for r in results.get("runs", {}).values()}
    return [k for k in subject.kinds if k in held]


def kind_run(cfg: Config, kind: str) -> tuple[Run, dict]:
    """The study run a check of ``kind`` shortens, and the settings it changes beyond the plan."""
    if kind == "1w":
        return Run("eq", 1, "linear", 1, 0), {}
    if kind == "allreduce":
        return Run("eq", 2, "linear", 1, 0), {}
    if kind == "local-sgd":
        ks = [k for k in cfg.study.sync_every if k > 1]
        if not ks:
            raise StudyCodeDiffers("study.sync_every has no k > 1: no local SGD to check")
        return Run("sync", 2, "linear", min(ks), 0), {}
    if kind == "warmup":
        return Run("lr", 2, "warmup", 1, 0), {}
    if kind == "bfloat16":
        return Run("eq", 1, "linear", 1, 0), {"train.precision": "bfloat16",
                                              "train.cpu_layers": "auto"}
    raise StudyCodeDiffers(f"no check of kind {kind!r}; kinds: {', '.join(KINDS)}")


def _train(root: Path | None, config: dict, workers: int, work: Path, name: str,
           timeout: float) -> None:
    """One short run with the package under ``root`` (None: this checkout), by its job runner,
    into a fresh ``train.output`` (an earlier check's run there is removed first)."""
    shutil.rmtree(resolve_path(config["train"]["output"]), ignore_errors=True)
    job = {"task": "trains", "threads": max(1, runtime.cpu_count() // workers),
           "out": str(work / f"{name}.out.json"), "configs": [config]}
    write_json(work / f"{name}.job.json", job)
    with runtime.pythonpath(None if root is None else str(root)):
        launch(workers, [sys.executable, "-m", reference_runner(root), str(work / f"{name}.job.json")],
               timeout=timeout, stream=False)


def _digest(data: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def _same_data(root: Path, data: dict, folder: Path, work: Path, timeout: float) -> int:
    """The reference's code generates the showers of ``data`` (its ``gan3d data generate``) into
    a folder of its own; every file must equal the one in ``folder`` byte for byte. Returns the
    number of files compared; raises :class:`StudyCodeDiffers` naming the first that differs."""
    theirs = work / "reference-data" / folder.name
    shutil.rmtree(theirs, ignore_errors=True)
    sets = [a for k, v in data.items() if k not in ("path", "source")
            for a in ("--set", f"data.{k}={json.dumps(v)}")]
    with runtime.pythonpath(str(root)):
        subprocess.run([sys.executable, "-m", "gan3d", "data", "generate", *sets,
                        "--output", str(theirs)], check=True, capture_output=True,
                       timeout=timeout, env=runtime.mpi_environment())
    mine = sorted(p.name for p in folder.glob("*.h5"))
    if mine != sorted(p.name for p in theirs.glob("*.h5")) or not mine:
        raise StudyCodeDiffers(f"the reference's data set holds other files than this checkout's "
                               f"({theirs} against {folder})")
    for name in mine:
        if (folder / name).read_bytes() != (theirs / name).read_bytes():
            raise StudyCodeDiffers(f"{name}: the reference's code generates other showers than "
                                   "this checkout's")
    return len(mine)


def verify_code(cfg: Config, reference: str | Path, results: dict, *, showers: int = 256,
                kinds: Sequence[str] | None = None, allow_dirty: bool = False,
                timeout: float = 3600, subject: Subject = CONVERGENCE) -> StudyCheck | None:
    """Check this checkout against ``reference`` on short runs of each kind the study holds
    (``kinds``: these instead; see the module). Returns the :class:`StudyCheck` added to
    ``results["checks"]`` (None when every run has this checkout's version); the caller saves.
    Raises :class:`StudyCodeDiffers` at the first difference."""
    now = subject.version()
    study_hashes = {r.get("code_hash") for r in results.get("runs", {}).values()} - {now}
    if not study_hashes:
        return None
    # the check must name code that exists: the same refusal as a write into studies/
    state = require_clean(allow_dirty, what="this checkout (whose code the check would name)",
                          marked="the check")
    commit, clean = state.commit, state.clean is True
    work = ensure_dir(resolve_path(subject.workdir(cfg)) / "verify-code")
    root, ref_commit = reference_package(reference, work)
    ref_hash = reference_hash(root, subject.module)
    if ref_hash not in study_hashes:
        raise StudyCodeDiffers(f"{reference} holds training code {ref_hash}; the study's runs were "
                               f"made by {', '.join(sorted(map(str, study_hashes)))}: give a copy "
                               "of the package that made them (the newest, if there are several)")
    study_hash = ref_hash  # older versions stay covered through the checks that tied them to it
    wanted = list(kinds) if kinds else needed_kinds(results, subject)
    not_checked = {}
    if "bfloat16" in wanted and not runtime.cpu_has_bf16():
        wanted.remove("bfloat16")
        not_checked["bfloat16"] = "this CPU has no bfloat16 arithmetic (AVX512_BF16 or AMX)"
    if "bfloat16" not in wanted and "bfloat16" not in not_checked and \
            all(r.get("precision", "float32") == "float32" for r in results["runs"].values()):
        not_checked["bfloat16"] = "the study holds float32 runs only"
    done: dict[str, KindCheck] = {}
    for kind in wanted:
        base, run_id = subject.short(cfg, kind, showers)
        workers = base.train.workers
        folders = {}
        # Both codes train on one folder of showers: the same files at the same path (a 2-rank
        # run's last bits were seen to follow the data folder's path, not the code); the
        # reference's own showers are checked equal to them, byte for byte (_same_data).
        data = work / "data" / _digest(to_dict(base)["data"])
        for name, pkg in (("this", None), ("reference", root)):
            c = base.replace(**{"data.path": str(data), "train.output": str(work / name / kind)})
            config = to_dict(c) if pkg is None else reference_config(root, to_dict(c))
            log.info("verify-code: %s (%d worker(s), %d showers) with %s code", kind, workers,
                     showers, name)
            _train(pkg, config, workers, work, f"{name}-{kind}", timeout)
            folders[name] = work / name / kind
        equality = "bit for bit"
        try:
            numbers, weights = compare_runs(folders["this"], folders["reference"])
            noise = None
        except StudyCodeDiffers as first:
            # A second run of this checkout tells the machine's run-to-run noise (a thread's
            # share of a reduction landing otherwise) from a change of code, which repeats.
            log.warning("verify-code: %s differs (%s); training this checkout's run again", kind,
                        first)
            again = work / "this-again" / kind
            c = base.replace(**{"data.path": str(data), "train.output": str(again)})
            _train(None, to_dict(c), workers, work, f"this-again-{kind}", timeout)
            try:
                numbers, weights = compare_runs(again, folders["reference"])
                noise = (f"the first run of this checkout differed ({first}); a second equalled "
                         "the reference")
            except StudyCodeDiffers as second:
                try:
                    compare_runs(again, folders["this"])
                    alike = None
                except StudyCodeDiffers as own:
                    alike = own
                if alike is not None:
                    # This checkout does not even train alike twice here: no bits can agree, so
                    # the codes are compared by size - each of its runs within NOISE of the
                    # reference's in every number and weight - as where the last bits follow
                    # the process's state (below).
                    equality, numbers, weights = within_noise(
                        [(folders["this"], folders["reference"]), (again, folders["reference"])],
                        f"{kind}: {second} (this checkout's two runs differ too, and from the "
                        "reference's")
                    noise = (f"this checkout's two runs differed from each other ({alike}): the "
                             "machine's noise, not the code")
                else:
                    # This checkout trains alike twice: the noise may have been the reference's
                    # run. Its second run decides: equal to this checkout's, the codes agree.
                    log.warning("verify-code: %s: this checkout's two runs are alike; training the "
                                "reference's run again", kind)
                    ref_again = work / "reference-again" / kind
                    r = base.replace(**{"data.path": str(data), "train.output": str(ref_again)})
                    _train(root, reference_config(root, to_dict(r)), workers, work,
                           f"reference-again-{kind}", timeout)
                    try:
                        numbers, weights = compare_runs(folders["this"], ref_again)
                        noise = (f"the reference's first run differed ({first}); this checkout's "
                                 "two runs and the reference's second were equal")
                    except StudyCodeDiffers:
                        # Each code trains alike every time, yet the two disagree in the last
                        # bits. On this machine those bits follow incidental state of the
                        # process (the same code gave other last bits with its showers at
                        # another path), so the codes are compared by size: within NOISE in
                        # every number, the same.
                        equality, numbers, weights = within_noise(
                            [(folders["this"], ref_again)],
                            f"{kind}: {second} (both codes train alike run after run, and differ")
                        noise = (f"each code trained alike twice, the two apart in the last bits "
                                 f"({second}): the machine's noise, not the code")
        files = _same_data(root, to_dict(base)["data"], data, work, timeout)
        done[kind] = {"run": run_id, "workers": workers, "showers": showers, "data_files": files,
                      "compared": f"{numbers} history numbers and {weights} generator weights",
                      "equality": equality, **({"noise": noise} if noise else {})}
        log.info("verify-code: %s equal (%s)", kind, done[kind]["compared"])
    from ..io import provenance

    entry: StudyCheck = {
        "schema": CHECK_SCHEMA, "same_as": study_hash,
        "reference": {"commit": ref_commit, "code_hash": ref_hash},
        "checkout": {"commit": commit, "clean": clean}, "kinds": done,
        "not_checked": not_checked, "machine": provenance()["machine"] | {
            "cpu": _cpu_model(), "bfloat16": runtime.cpu_has_bf16()} | _isa_cap(),
        "checked": datetime.datetime.now(datetime.timezone.utc).date().isoformat()}
    results.setdefault("checks", {})[now] = entry
    log.info("verify-code: %s makes the study's numbers in %s", now, ", ".join(done))
    return entry


def _isa_cap() -> dict:
    """The cap on oneDNN's instruction set the check ran under, where one was set (e.g.
    ``AVX512_CORE_BF16`` on a CPU with AMX: its bfloat16 kernels are those of a CPU without)."""
    import os

    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return {"onednn_max_cpu_isa": cap, "onednn_uses_amx": runtime.onednn_uses_amx()} if cap else {}


def _cpu_model() -> str:
    import platform

    from ..scaling.energy import cpu_model

    return cpu_model() or platform.processor() or platform.machine()


def stale_runs(results: dict, subject: Subject = CONVERGENCE) -> list[str]:
    """Ids of the runs this checkout's training code is not known to make (empty: all current):
    runs of another version, unless behavioural checks tie this checkout's version to theirs for
    their kind - one check of this version against theirs, or a chain of them (this version
    against v1, v1 against theirs, ...), each covering the kind."""
    now, checks = subject.version(), results.get("checks", {})

    def tied(version: str, kind: str) -> bool:
        v, seen = now, set()
        while v != version:
            entry = checks.get(v)
            if v in seen or not entry or kind not in entry.get("kinds", {}):
                return False
            seen.add(v)
            v = entry.get("same_as")
        return True

    return sorted(i for i, r in results.get("runs", {}).items()
                  if not tied(r.get("code_hash"), subject.kind_of(r)))
