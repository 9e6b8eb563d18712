"""Simulate showers with a trained generator, the reason 3DGAN exists: a fast stand-in for Geant4.

    gan3d simulate --generator results/training/train_1w --n 10000 --energies 10:500 \
        --output results/simulated.h5

The showers are written in the CLIC HDF5 schema (:func:`gan3d.data.files.shower_file`), so the
package's readers, ``gan3d data check`` and the validation take them; the file's attributes say
that a GAN made them (``origin = "gan"``: they are read whatever they look like) and which
generator, with its training configuration, seed and precision. Inference runs in compiled
batches of a fixed size (the last one padded, so nothing is traced twice), in bfloat16 where the
CPU has bfloat16 arithmetic (``precision="auto"``), else float32, through the generator with its
upsampling folded into the convolutions (:mod:`gan3d.gan.inference`: the same showers to float
rounding, ~2.5x fewer FLOPs).

Energies outside those the generator was trained on (:func:`trained_energies`) are an
extrapolation that no training checked: ``simulate`` warns, naming the range, and refuses them
with ``strict=True`` (``gan3d simulate --strict``).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from .. import console
from ..data.calorimeter import NETWORK_SCALE
from ..data.files import GAN_ORIGIN, ORIGIN_ATTR, shower_file
from ..config import DataConfig
from ..exceptions import ConfigError, OutsideTrainedRange
from ..io import check_output, provenance
from ..parallel import runtime
from . import reference
from .inference import inference_network
from .step import E_RANGE
from .model import load_generator

__all__ = ["parse_energies", "primary_energies", "trained_energies", "simulate"]

log = console.get_logger(__name__)


def parse_energies(spec: str) -> tuple[float, float] | list[float]:
    """``"10:500"`` -> (10, 500), uniform in that range; ``"50,100,200"`` -> those energies,
    in turn. GeV. Raises :class:`ConfigError` for anything else."""
    text = str(spec).strip()
    try:
        if ":" in text:
            lo, hi = (float(x) for x in text.split(":"))
            if not 0 < lo < hi:
                raise ValueError
            return lo, hi
        values = [float(x) for x in text.split(",") if x.strip()]
        if not values or min(values) <= 0:
            raise ValueError
        return values
    except ValueError:
        raise ConfigError(f"--energies {spec!r}: give a range LO:HI (GeV, uniform) or a list "
                          "like 50,100,200 of positive energies") from None


def primary_energies(spec: str, n: int, seed: int = 0) -> np.ndarray:
    """``n`` primary energies (GeV, float32) as :func:`parse_energies` describes them."""
    parsed = parse_energies(spec)
    if isinstance(parsed, tuple):
        return np.random.default_rng([seed, 1]).uniform(*parsed, n).astype(np.float32)
    return np.resize(np.asarray(parsed, np.float32), n)


def _generator_file(path) -> Path:
    shipped = reference.folder_of(path)  # a shipped generator's name, or a folder it exported
    if shipped is not None:
        return shipped / "generator.weights.h5"
    path = Path(path)
    return path / "generator.keras" if path.is_dir() else path


def _network(path: Path, precision: str, fold: bool = True) -> keras.Model:
    """The generator at ``path`` for inference in ``precision``: its upsampling folded into the
    convolutions (:mod:`gan3d.gan.inference`, same showers, ~2.5x fewer FLOPs) unless ``fold``
    is False."""
    net = reference.load(path.parent) if _exported(path) else load_generator(path)
    return inference_network(net, precision, fold=fold)


def _record(path: Path) -> Path:
    """The file that says how the generator at ``path`` was trained (its run's configuration)."""
    return path.parent / ("reference.json" if _exported(path) else "config.json")


def _exported(path: Path) -> bool:
    """Whether ``path`` is the generator of a folder :func:`gan3d.gan.reference.export` wrote."""
    return path.name == "generator.weights.h5" and reference.available(path.parent)


def trained_energies(path: Path) -> tuple[float, float, str]:
    """The primary energies (GeV) the generator at ``path`` was trained on, and where that is
    read: the range of its training data (``data.energy_min``, ``data.energy_max`` in its run's
    ``config.json``, or ``reference.json``) within the range its training drew fakes in
    (:data:`gan3d.gan.step.E_RANGE`, the same for every run). A generator without a readable
    record is taken to have had the configuration's default data range, and the source says so."""
    record, default = _record(path), DataConfig()
    lo, hi, where = default.energy_min, default.energy_max, "no record of its training beside it"
    if record.is_file():  # damaged or incomplete, it is named: the showers do not depend on it
        try:
            data = json.loads(record.read_text())["config"]["data"]
            lo, hi, where = float(data["energy_min"]), float(data["energy_max"]), str(record)
        except (KeyError, TypeError):
            where = f"{record} names no data range"
        except ValueError as exc:
            where = f"{record} is damaged ({exc})"
    if where != str(record):
        where += f": the default data.energy_min-energy_max, {lo:g}-{hi:g} GeV"
    fakes = [round(x * NETWORK_SCALE, 6) for x in E_RANGE]  # E_RANGE is in units of 100 GeV
    return max(lo, fakes[0]), min(hi, fakes[1]), where


def _check_range(path: Path, spec: str, strict: bool) -> None:
    """Warn about (``strict``: refuse) energies ``spec`` outside the generator's trained ones."""
    asked = parse_energies(spec)
    if not path.is_file():  # the loader names what is missing
        return
    a_lo, a_hi = asked if isinstance(asked, tuple) else (min(asked), max(asked))
    lo, hi, where = trained_energies(path)
    if lo <= a_lo and a_hi <= hi:
        return
    text = (f"--energies {spec}: {a_lo:g}-{a_hi:g} GeV reaches outside the {lo:g}-{hi:g} GeV the "
            f"generator {path} was trained on ({where}); showers there are an extrapolation "
            "that no training checked")
    if strict:
        raise OutsideTrainedRange(f"{text}. Ask for energies within {lo:g}-{hi:g} GeV, or leave "
                                  "out --strict to simulate them with this warning")
    log.warning("%s", text)


def _attributes(path: Path, spec: str, seed: int, precision: str) -> dict:
    """What the file says about where its showers come from."""
    config = _record(path)
    return {ORIGIN_ATTR: GAN_ORIGIN, "generator": str(path),
            "generator_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "generator_config": config.read_text() if config.is_file() else "",
            "energies": str(spec), "seed": seed, "precision": precision,
            "provenance": json.dumps(provenance(), default=str)}


# The least a GAN shower takes in the file (gzip level 1): below what every shipped generator's
# showers take at 10-500 GeV (tests/test_simulate.py checks it), so a write refused for space
# would surely not have fitted.
MIN_BYTES_PER_SHOWER = 2_000


def simulate(generator, n: int, output, *, energies: str = "10:500", batch: int = 64,
             seed: int = 0, precision: str = "auto", progress: bool = True,
             fold: bool = True, strict: bool = False, force: bool = False) -> dict:
    """Write ``n`` GAN showers for primary energies ``energies`` into ``output`` (atomically).

    ``generator``: a training output folder (its ``generator.keras``), a ``.keras`` file, a
    folder ``gan3d export`` wrote, or a shipped generator's name (``"reference"``,
    ``"long-1w"``, ``"long-2w"``: :mod:`gan3d.gan.reference`).
    Returns the path, the precision used, and the speed: ``showers_per_s`` over the batches after
    the first (which traces and compiles) and ``seconds`` in all. ``fold=False`` runs the
    generator's own layers instead of the folded network (the same showers, slower).
    Energies outside those the generator was trained on (:func:`trained_energies`) are logged as
    a warning naming the range; with ``strict`` they raise :class:`OutsideTrainedRange`.
    ``output`` is checked before any work (:func:`gan3d.io.check_output`): not a folder, not an
    existing file unless ``force``, room for at least :data:`MIN_BYTES_PER_SHOWER` a shower.
    """
    if n < 1 or batch < 1:
        raise ConfigError(f"--n {n} and --batch {batch} must be at least 1")
    output = check_output(output, force=force, needs=n * MIN_BYTES_PER_SHOWER)
    path, precision = _generator_file(generator), runtime.resolve_precision(precision)
    _check_range(path, energies, strict)  # before the network is loaded: a refusal is quick
    with console.signals_at_checkpoints():  # a SIGTERM ends it between batches, not in TF
        net = _network(path, precision, fold)
        latent_size = int(net.input_shape[-1])
        infer = tf.function(lambda z: net(z, training=False), reduce_retracing=True)
        e = primary_energies(energies, n, seed)
        rng = np.random.default_rng([seed, 2])
        t0, after_first = time.perf_counter(), None
        attrs = _attributes(path, energies, seed, precision)
        with shower_file(output, n, attrs) as f, console.progress(
                total=n, unit="shower", desc="simulate", disable=not progress) as bar:
            f["target"][:, 1] = e
            for lo in range(0, n, batch):
                part = e[lo:lo + batch]
                z = np.zeros((batch, latent_size), np.float32)  # the last batch padded: one trace
                z[:len(part)] = (part[:, None] / NETWORK_SCALE) * rng.standard_normal(
                    (len(part), latent_size), dtype=np.float32)
                showers = np.asarray(infer(z), np.float32)[:len(part), ..., 0] / NETWORK_SCALE
                f["ECAL"][lo:lo + len(part)] = showers
                bar.update(len(part))
                console.checkpoint()
                if after_first is None:
                    after_first = (time.perf_counter(), lo + len(part))
    seconds = time.perf_counter() - t0
    rest = n - after_first[1]
    rate = rest / (time.perf_counter() - after_first[0]) if rest else n / seconds
    log.info("%d showers from %s in %.1f s (%.0f showers/s after the first batch, %s, batch %d) "
             "-> %s", n, path, seconds, rate, precision, batch, output)
    return {"output": str(output), "n": n, "precision": precision, "batch": batch,
            "seconds": seconds, "showers_per_s": rate}
