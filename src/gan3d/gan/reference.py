"""The reference generator shipped with the package: a 3DGAN trained longer than a quick run can.

``gan3d/gan/reference/`` holds the weights of the generator and discriminator of one training run
(``generator.weights.h5``, ``discriminator.weights.h5``: the exact 3DGAN of
:mod:`gan3d.gan.model`, float32) and ``reference.json``: how it was trained (configuration,
provenance, showers seen), its learning curve (the physics monitors of every epoch,
:mod:`gan3d.validation.monitors`) and its final monitors against the targets. It is installed
with the package, so notebooks 02 and 04, ``gan3d validate reference`` and
``gan3d simulate --generator reference`` can use it without training anything.

:func:`export` makes it from a training output folder.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from ..exceptions import CheckpointError
from ..io import atomic_path, write_json
from ..validation import monitors
from .history import read_history

__all__ = ["NAME", "FOLDER", "available", "info", "label", "load", "export", "portable"]

NAME = "reference"  # what users pass where a training folder is expected
FOLDER = Path(str(resources.files("gan3d.gan").joinpath("reference")))
_G, _D, _INFO = "generator.weights.h5", "discriminator.weights.h5", "reference.json"


def available(folder: Path = FOLDER) -> bool:
    return all((folder / f).is_file() for f in (_G, _D, _INFO))


def _check(folder: Path) -> None:
    if not available(folder):
        raise CheckpointError(f"no reference generator in {folder} (this installation lacks the "
                              "package data); train one with `gan3d train` and pass its folder")


def info(folder: Path = FOLDER) -> dict:
    """``reference.json``: training settings, showers seen, learning curve, final monitors."""
    _check(folder)
    return json.loads((folder / _INFO).read_text())


def label(folder: Path = FOLDER) -> str:
    """``"reference generator (24,000 showers of training)"``."""
    return f"reference generator ({info(folder)['showers_seen']:,} showers of training)"


def load(folder: Path = FOLDER, *, discriminator: bool = False):
    """The shipped generator (and, with ``discriminator=True``, ``(generator, discriminator)``)."""
    from .model import build_discriminator, build_generator

    _check(folder)
    gen = build_generator()
    gen.load_weights(folder / _G)
    if not discriminator:
        return gen
    disc = build_discriminator()
    disc.load_weights(folder / _D)
    return gen, disc


def _networks(run: Path, checkpoint: Path | None = None):
    """(generator, discriminator, history rows, config, provenance) of a finished run, or of the
    newest checkpoint of a run still training (or stopped), or of the given ``checkpoint``."""
    from ..config import from_dict
    from . import checkpoints
    from .model import load_discriminator, load_generator
    from .training import build_step

    if checkpoint is not None:
        meta, arrays = checkpoints.load_checkpoint(checkpoint)
        step = build_step(from_dict(meta["config"]))
        checkpoints.restore_variables(step.state_variables(), meta, arrays, checkpoint)
        return step.g, step.d, meta["history"], meta["config"], meta["provenance"]
    if (run / "generator.keras").is_file() and (run / "discriminator.keras").is_file():
        written = json.loads((run / "config.json").read_text())
        return (load_generator(run / "generator.keras"),
                load_discriminator(run / "discriminator.keras"), read_history(run),
                written.get("config"), written.get("provenance"))
    found = checkpoints.load_latest(run / "checkpoints")
    if found is None:
        raise CheckpointError(f"{run} has no generator.keras and no checkpoint: export a "
                              "training run (finished, or with at least one epoch done)")
    path, meta, arrays = found
    step = build_step(from_dict(meta["config"]))
    checkpoints.restore_variables(step.state_variables(), meta, arrays, path)
    return step.g, step.d, meta["history"], meta["config"], meta["provenance"]


def export(run: str | Path, folder: Path = FOLDER, *, note: str = "",
           monitor_showers: int = 256, checkpoint: str | Path | None = None) -> dict:
    """Ship the networks of the training output folder ``run`` as the reference generator: its
    ``generator.keras`` and ``discriminator.keras`` when it finished, else its newest
    checkpoint, or the epoch ``checkpoint`` (e.g. the one whose monitors were best: GAN
    training wanders). The final monitors are measured again on ``monitor_showers`` showers per
    energy; the learning curve is the run's whole history (``history.jsonl`` when it is there:
    the monitors it recorded every epoch), ``epoch`` says which epoch was shipped."""
    from .model import generate_showers

    run = Path(run)
    gen, disc, rows, run_config, run_provenance = _networks(
        run, Path(checkpoint) if checkpoint else None)
    if not rows or "showers_seen" not in rows[-1]:
        raise CheckpointError(f"{run}: its history has no showers_seen (made by gan3d < 0.3)")
    shipped = rows[-1]
    if (run / "history.jsonl").is_file():
        rows = read_history(run) if len(read_history(run)) >= len(rows) else rows
    n, energies = monitor_showers, monitors.MONITOR_ENERGIES
    showers = generate_showers(gen, np.repeat(energies, n), seed=4242)
    final = monitors.compare({e: showers[i * n:(i + 1) * n] for i, e in enumerate(energies)},
                             n_reference=n)
    curve = [{k: v for k, v in r.items() if k.startswith("mon_") or k in _CURVE_KEYS} for r in rows]
    meta = {"showers_seen": int(shipped["showers_seen"]), "epoch": int(shipped["epoch"]),
            "epochs": len(rows),
            "note": note, "config": portable(run_config), "provenance": run_provenance,
            "final_monitors": final,
            "targets": {name: {"kind": k, "tolerance": t} for name, (k, t) in monitors.TARGETS.items()},
            "showers_needed": monitors.showers_needed(curve, energies), "learning_curve": curve}
    folder.mkdir(parents=True, exist_ok=True)
    for net, name in ((gen, _G), (disc, _D)):
        with atomic_path(folder / name, suffix=".weights.h5") as tmp:
            net.save_weights(tmp)
    write_json(folder / _INFO, meta)
    return meta


def portable(config: dict | None) -> dict | None:
    """A run's configuration without the folders of the machine it ran on: ``data.path`` and
    ``train.output`` keep their last name only (under ``data/`` and ``results/``)."""
    if not config:
        return config
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for section, key, under in (("data", "path", "data"), ("train", "output", "results")):
        if isinstance(out.get(section), dict) and out[section].get(key):
            out[section][key] = f"{under}/{Path(out[section][key]).name}"
    return out


_CURVE_KEYS: Sequence[str] = ("epoch", "showers_seen", "d_loss", "g_loss", "test_d_loss",
                              "test_g_loss", "time_train_s", "showers_per_s")
