"""Keep the committed study current across changes that do not change its numbers.

The study's runs carry the code hash of the modules that determine them
(:func:`gan3d.convergence.plan.code_hash`); any byte changed in those modules makes the results
*stale*, also when the change cannot touch a float32 run (a bfloat16-only option, a comment).
:func:`verify_code` settles it by experiment instead of by judgement: it trains the study's first
run (1 worker, seed 0, float32, shortened to ``showers``) twice on this machine - once with this
checkout and once with a *reference* copy of the package whose code hash the results carry - each
from the synthetic data its own code generates. If every number of every history row (losses,
learning rate, physics monitors; not the timings) and every weight of the final generator is the
same to the last bit, the results file records that this checkout's hash makes the same runs
(``equivalent_code``: hash -> the study's hash, with what was compared), and
:func:`gan3d.convergence.study.stale` treats the runs as current. Otherwise it raises
:class:`StudyCodeDiffers` naming the first difference, and the study must be rerun.

A reference copy of the package at the commit that made the study, e.g.
``git archive <commit> src/gan3d | tar -x -C ref`` -> ``gan3d study --verify-code ref/src``.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np

from .. import console, runtime
from ..config import Config, flatten, to_dict
from ..exceptions import Gan3dError
from ..gan.history import read_history
from ..io import ensure_dir, write_json
from ..parallel.launch import launch
from ..paths import resolve_path
from .plan import Run, code_hash, run_config

log = console.get_logger(__name__)

__all__ = ["StudyCodeDiffers", "verify_code", "compare_runs", "package_root", "reference_hash",
           "reference_config"]

_TIMING = ("time_", "showers_per_s", "timed", "threads")


class StudyCodeDiffers(Gan3dError, RuntimeError):
    """This checkout's training code does not make the study's numbers (or cannot be compared)."""


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


def reference_hash(root: Path) -> str:
    """The code hash of the package under ``root``, computed by that package's own code."""
    return _ask(root, "from gan3d.convergence.plan import code_hash; print(code_hash())")


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
        keys = {k for k in ra.keys() | rb.keys() if not k.startswith(_TIMING)}
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


def verify_code(cfg: Config, reference: str | Path, results: dict, *, showers: int = 256,
                timeout: float = 3600) -> dict | None:
    """Train the study's first run shortened to ``showers`` with this checkout and with
    ``reference`` and compare them (see the module). Returns the ``equivalent_code`` entry added
    to ``results`` (None when this checkout already has the study's hash); the caller saves."""
    study_hashes = {r.get("code_hash") for r in results.get("runs", {}).values()}
    if len(study_hashes) != 1:
        raise StudyCodeDiffers(f"the results hold runs of {len(study_hashes)} code versions "
                               f"({sorted(map(str, study_hashes))}); verify needs exactly one")
    (study_hash,) = study_hashes
    now = code_hash()
    if now == study_hash:
        return None
    root = package_root(reference)
    ref_hash = reference_hash(root)
    if ref_hash != study_hash:
        raise StudyCodeDiffers(f"{reference} holds training code {ref_hash}; the study was made "
                               f"by {study_hash}: give a copy of the package that made it")
    s = cfg.study
    short = cfg.replace(**{"study.showers": showers, "study.points": 2})
    first = run_config(short, Run("eq", 1, "linear", 1, 0))  # named error if showers won't divide
    work = ensure_dir(resolve_path(s.workdir) / "verify-code")
    folders = {}
    for name, pythonpath in (("this", None), ("reference", str(root))):
        c = first.replace(**{
            "data.path": str(work / name / "data"), "train.output": str(work / name / "run")})
        config = to_dict(c) if pythonpath is None else reference_config(root, to_dict(c))
        job = {"task": "trains", "threads": runtime.cpu_count(), "out": str(work / f"{name}.out.json"),
               "configs": [config]}
        write_json(work / f"{name}.job.json", job)
        log.info("verify-code: training %d showers with %s code", showers, name)
        with runtime.pythonpath(pythonpath):
            launch(1, [sys.executable, "-m", "gan3d.scaling.probes", str(work / f"{name}.job.json")],
                   timeout=timeout, stream=False)
        folders[name] = work / name / "run"
    numbers, weights = compare_runs(folders["this"], folders["reference"])
    entry = {"same_as": study_hash, "run": "1w-s0", "showers": showers,
             "compared": f"{numbers} history numbers and {weights} generator weights, bit for bit",
             "checked": datetime.date.today().isoformat()}
    results.setdefault("equivalent_code", {})[now] = entry
    log.info("verify-code: %s makes the study's numbers (%s)", now, entry["compared"])
    return entry
