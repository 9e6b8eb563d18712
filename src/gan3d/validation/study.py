"""Physics validation of trained generators against reference showers (notebook 04's study).

:func:`validate` makes, for every energy bin (and inclusively), two independent reference samples,
generates GAN showers *with the same primary energies* from each trained generator, and compares
them with :mod:`gan3d.validation.metrics`. The second reference sample measures what "ideal" looks
like at this sample size: a generator can only be judged against the score of the reference
against itself. Showers are summarised as soon as they are compared (features, mean profiles,
spectra), so memory stays at a few samples whatever the number of bins.

Launch: ``gan3d validate`` (CLI), notebook 04, or ``validate([...], [...], cfg=resolve("quick"))``.
The speed of GAN inference is :mod:`gan3d.validation.speed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .. import console
from ..config import Config, to_dict
from ..data import files, showers
from ..exceptions import CheckpointError, ConfigError
from ..io import check_output, provenance, resolve_path, write_json
from . import metrics, physics

__all__ = [
    "Showers", "Summary", "Validation", "bin_keys", "energy_sets", "reference_pair", "summarise",
    "compare", "load_networks", "newest_checkpoint", "checkpoint_record", "generator_record",
    "validate", "distortion_check", "headline", "metric_value", "metrics_table",
    "feature_aucs", "feature_label", "separating_table",
    "targets_table", "resolution_table", "settings_line", "CHECK_METRICS", "check_cases",
    "check_reading", "resolution_lines", "train_showers", "paper_train_showers", "headline_lines",
    "closing_note",
]


@dataclass
class Showers:
    """Showers ``ecal`` (N, 25, 25, 25) GeV with primary energies ``energy`` (N,) GeV."""

    ecal: np.ndarray
    energy: np.ndarray


@dataclass
class Summary:
    """What the figures need from one sample: per-shower features (N,), mean profiles (25,)
    along x, y, z in GeV, the cell-energy spectrum, and optionally the discriminator's output."""

    energy: np.ndarray
    features: dict[str, np.ndarray]
    profiles: dict[str, np.ndarray]
    spectrum: tuple[np.ndarray, np.ndarray]
    discriminator: dict[str, np.ndarray] | None = None


@dataclass
class Validation:
    """Result of :func:`validate`: summaries by bin key and source, and the metrics JSON."""

    bins: list[str]
    reference: dict[str, Summary] = field(default_factory=dict)
    generators: dict[str, dict[str, Summary]] = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    path: Path | None = None

    def samples(self, key: str = "inclusive") -> dict[str, Summary]:
        """The summaries of one bin by label, the reference first (what the plots take)."""
        return {"reference": self.reference[key],
                **{lab: per_bin[key] for lab, per_bin in self.generators.items()}}


def bin_keys(energy_bins: Sequence[float]) -> list[str]:
    """``["inclusive", "50", "100", ...]``: the keys of the results, in order."""
    return ["inclusive"] + [f"{e:g}" for e in energy_bins]


def energy_sets(n: int, energy_bins: Sequence[float], halfwidth: float,
                energy_range: tuple[float, float], seed: int) -> dict[str, np.ndarray]:
    """Primary energies (n,) GeV per bin key: uniform in ``range`` (inclusive) and in
    ``[E - halfwidth, E + halfwidth]`` for each bin centre E."""
    rng = np.random.default_rng(seed)
    out = {"inclusive": rng.uniform(*energy_range, n)}
    for key, e in zip(bin_keys(energy_bins)[1:], energy_bins):
        out[key] = rng.uniform(e - halfwidth, e + halfwidth, n)
    return out


def _clic_showers(folder: str, lo: float, hi: float, n: int, seed: int) -> Showers:
    """Up to ``n`` held-out CLIC showers with ``lo <= E <= hi`` GeV, read file by file."""
    test_files = files.split_files(files.list_files(folder))[1]
    ecal, energy, have = [], [], 0
    for path in np.random.default_rng(seed).permutation(np.array(test_files, dtype=object)):
        x_all, e_all = files.read_showers(path)
        keep = np.flatnonzero((e_all >= lo) & (e_all <= hi))[: n - have]
        ecal.append(x_all[keep])
        energy.append(e_all[keep])
        have += keep.size
        if have >= n:
            break
    if have < 2:
        raise ConfigError(f"only {have} held-out showers of {folder} lie in {lo:g}-{hi:g} GeV; "
                          "use wider validation.energy_bins or more data")
    return Showers(np.concatenate(ecal), np.concatenate(energy).astype(np.float64))


def reference_pair(cfg: Config, key: str, energies: np.ndarray, seed: int) -> tuple[Showers, Showers]:
    """Two independent reference samples for one bin. Synthetic: generated at exactly
    ``energies`` with two seeds. CLIC: held-out showers of the same energy range, split in two."""
    if cfg.data.source == "synthetic":
        return (Showers(showers.generate(energies, seed), energies),
                Showers(showers.generate(energies, seed + 7919), energies))
    lo, hi = ((cfg.data.energy_min, cfg.data.energy_max) if key == "inclusive" else
              (float(key) - cfg.validation.bin_halfwidth, float(key) + cfg.validation.bin_halfwidth))
    both = _clic_showers(cfg.data.path, lo, hi, 2 * len(energies), seed)
    half = len(both.energy) // 2
    return (Showers(both.ecal[:half], both.energy[:half]),
            Showers(both.ecal[half:2 * half], both.energy[half:2 * half]))


def summarise(s: Showers) -> Summary:
    """The :class:`Summary` of a sample (features of
    :func:`gan3d.validation.physics.shower_features`)."""
    return Summary(energy=np.asarray(s.energy, np.float64),
                   features=physics.shower_features(s.ecal, s.energy),
                   profiles={k: v.mean(axis=0) for k, v in physics.profiles(s.ecal).items()},
                   spectrum=physics.cell_spectrum(s.ecal))


def compare(ref: Showers, gen: Showers, *, low_level: bool = True, seed: int = 0,
            ref_summary: Summary | None = None, gen_summary: Summary | None = None) -> dict:
    """Every metric of ``gen`` against ``ref`` (JSON-ready). Per feature: separation power
    (with the value expected for identical distributions) and normalised 1-D Wasserstein; the
    3DGAN scalar metric; classifier tests on high-level (and low-level) inputs; FPD and KPD."""
    rs, gs = ref_summary or summarise(ref), gen_summary or summarise(gen)
    sep, null, wd = {}, {}, {}
    for name in rs.features:
        a, b = rs.features[name], gs.features[name]
        edges = metrics.histogram_edges(a, b)
        sep[name] = metrics.separation_power(a, b, edges)
        null[name] = metrics.separation_power_null(len(edges) - 1, a.size, b.size)
        wd[name] = metrics.wasserstein(a, b)
    hr, names = physics.high_level_features(ref.ecal, ref.energy)
    hg, _ = physics.high_level_features(gen.ecal, gen.energy)
    out = {"n_reference": len(ref.energy), "n_generated": len(gen.energy),
           "feature_auc": feature_aucs(hr, hg, names),
           "separation_power": sep, "separation_power_null": null, "wasserstein": wd,
           "three_dgan": metrics.three_dgan_metric(ref.ecal, gen.ecal),
           "classifier_high": metrics.classifier_test(hr, hg, "hgb", seed),
           "fpd": _fpd(hr, hg, seed), "kpd": metrics.kpd(hr, hg, seed=seed)}
    if low_level:
        out["classifier_low"] = metrics.classifier_test(
            physics.low_level_features(ref.ecal, ref.energy),
            physics.low_level_features(gen.ecal, gen.energy), "mlp", seed)
    return out


def feature_aucs(hr: np.ndarray, hg: np.ndarray, names: Sequence[str], top: int = 10) -> dict:
    """The ``top`` high-level features that tell ``hg`` (generated) from ``hr`` (reference) best
    on their own, most separating first: per feature the AUC of the feature itself as the
    classifier (the Mann-Whitney rank statistic, ties averaged; folded to >= 0.5, so 0.5 is alike
    and 1 no overlap) and ``spread``, the generated showers' standard deviation over the
    reference's (1 where the reference's is 0)."""
    from scipy.stats import rankdata

    n_r, n_g = len(hr), len(hg)
    ranks = rankdata(np.vstack([hr, hg]), axis=0)
    auc = (ranks[n_r:].sum(axis=0) - n_g * (n_g + 1) / 2) / (n_r * n_g)
    auc = np.maximum(auc, 1.0 - auc)
    sd_r, sd_g = hr.std(axis=0), hg.std(axis=0)
    spread = np.divide(sd_g, sd_r, out=np.ones_like(sd_g), where=sd_r > 0)
    order = np.argsort(-auc, kind="stable")[:top]
    return {names[j]: {"auc": float(auc[j]), "spread": float(spread[j])} for j in order}


_FEATURE_NAMES = {"e_layer": "energy fraction", "centre_x": "x centre", "centre_y": "y centre",
                  "width_x": "x width", "width_y": "y width", "sparsity": "share of cells hit"}


def feature_label(name: str) -> str:
    """A reader's name of a high-level feature: ``e_layer_12`` -> 'energy fraction, layer 12'."""
    if name == "e_total":
        return "total energy / primary energy"
    kind, _, layer = name.rpartition("_")
    return f"{_FEATURE_NAMES.get(kind, kind)}, layer {layer}"


def separating_table(result: dict, key: str = "inclusive", top: int = 5) -> str:
    """Markdown: what each generator still misses - the ``top`` features that separate its
    showers from the reference's best on their own (bin ``key``), with their AUC and spread,
    beside the floor: the best such AUC between two samples of the reference."""
    floor = max((f["auc"] for f in result["reference"][key].get("feature_auc", {}).values()),
                default=float("nan"))
    rows = [[lab, feature_label(name), f"{f['auc']:.3f}", f"{f['spread']:.2f}"]
            for lab, g in result["generators"].items()
            for name, f in list(g["bins"][key].get("feature_auc", {}).items())[:top]]
    return (console.table(rows, ["generator", "feature", "AUC of the feature alone",
                                 "spread (GAN sd / reference sd)"])
            + f"\n\nFloor: between two samples of the reference the best single feature reaches "
            f"AUC {floor:.3f} ({key}); 0.5 is alike, 1 no overlap.")


def _fpd(hr: np.ndarray, hg: np.ndarray, seed: int) -> dict:
    """FPD, or NaN with a note where the samples are smaller than twice the feature count:
    covariances of fewer showers than features are singular and FD(n) is not yet ~ 1/n."""
    n, d = min(len(hr), len(hg)), hr.shape[1]
    if n < 2 * d:
        return {"value": float("nan"), "error": float("nan"),
                "note": f"needs at least {2 * d} showers per sample, got {n}"}
    return metrics.fpd(hr, hg, seed=seed)


def load_networks(folder) -> tuple[object, object | None]:
    """The generator (required) and discriminator (if present) of a training output folder or
    checkpoint, of a folder :func:`gan3d.gan.reference.export` wrote, or of a generator shipped
    with the package by its name (:data:`gan3d.gan.reference.SHIPPED`)."""
    from ..gan import model, reference  # imports TensorFlow

    shipped = reference.folder_of(folder)
    if shipped is not None:  # a shipped generator's name, or a folder `gan3d export` wrote
        return reference.load(shipped, discriminator=True)
    folder = Path(folder)
    gen_path = folder / "generator.keras"
    found = newest_checkpoint(folder)
    if found is not None and not gen_path.is_file():
        return reference.networks_from_checkpoint(found)
    if not gen_path.is_file():
        raise CheckpointError(f"checkpoint folder {folder} has no generator.keras; train into it "
                              "first (`gan3d train`) or remove it from the list of checkpoints")
    disc_path = folder / "discriminator.keras"
    disc = model.load_discriminator(disc_path) if disc_path.is_file() else None
    return model.load_generator(gen_path), disc


def newest_checkpoint(path) -> Path | None:
    """A checkpoint file itself, or the newest ``epoch-NNNN.npz`` of a folder (or of its
    ``checkpoints/``); None if there is none."""
    from ..gan.checkpoints import all_checkpoints

    path = Path(path)
    if path.is_file() and path.suffix == ".npz":
        return path
    found = all_checkpoints(path) or all_checkpoints(path / "checkpoints")
    return found[-1] if found else None


def checkpoint_record(path) -> dict:
    """What a checkpoint says of its run: epoch, workers, showers seen, precision, the history,
    its configuration, provenance, its fork record and ``forks``
    (:func:`~gan3d.gan.checkpoints.lineage`: the forks it descends through, oldest first); no
    weights loaded."""
    from ..gan.checkpoints import lineage, load_checkpoint

    meta, _ = load_checkpoint(path)
    hist = meta["history"]
    return {"path": str(path), "epoch": meta["epoch"], "workers": meta.get("workers", 1),
            "showers_seen": hist[-1]["showers_seen"] if hist else 0,
            "precision": hist[-1].get("precision") if hist else None, "history": hist,
            "config": meta.get("config"), "provenance": meta.get("provenance"),
            "fork": meta.get("fork"),
            "forks": lineage(meta.get("fork"))}


def generator_record(where) -> dict | None:
    """What a generator says of its run, without loading its weights: a shipped one's name or a
    folder :func:`gan3d.gan.reference.export` wrote (:func:`gan3d.gan.reference.record`, with
    ``exported_from``: the checkpoint and its sha256), else the newest checkpoint of a training
    folder or a checkpoint file (:func:`checkpoint_record`); None if ``where`` is neither."""
    from ..gan import reference

    shipped = reference.folder_of(where)
    if shipped is not None:
        return reference.record(shipped)
    found = newest_checkpoint(resolve_path(where))
    return checkpoint_record(found) if found is not None else None


def _discriminate(disc, s: Showers, limit: int = 200) -> dict[str, np.ndarray]:
    """D's outputs on the first ``limit`` showers (its forward pass costs 3x the generator's)."""
    from ..gan import model  # imports TensorFlow

    out = model.discriminate(disc, s.ecal[:limit])
    out["true_energy_gev"] = np.asarray(s.energy[:limit], np.float64)
    return out


def _validate_bin(cfg: Config, key: str, energies, seed: int, nets: dict, result: Validation,
                  table: dict, low_level: bool) -> None:
    """One bin: reference pair, baseline metrics, then every generator on the same energies."""
    from ..gan import model  # imports TensorFlow

    ref, ref2 = reference_pair(cfg, key, energies, seed)
    rs = result.reference[key] = summarise(ref)
    table["reference"][key] = compare(ref, ref2, low_level=low_level, seed=seed, ref_summary=rs)
    del ref2
    for lab, (gen_net, disc) in nets.items():
        gen = Showers(model.generate_showers(gen_net, ref.energy, seed=seed + 1), ref.energy)
        gs = result.generators[lab][key] = summarise(gen)
        table["generators"][lab]["bins"][key] = compare(
            ref, gen, low_level=low_level, seed=seed, ref_summary=rs, gen_summary=gs)
        if disc is not None and key == "inclusive":  # D's energy regression: one sample will do
            gs.discriminator = _discriminate(disc, gen)
            rs.discriminator = rs.discriminator or {}
            rs.discriminator[lab] = _discriminate(disc, ref)


def validate(checkpoints: Sequence, labels: Sequence[str], cfg: Config, *,
             results_dir=None, low_level: bool = True, progress: bool = True,
             force: bool = False) -> Validation:
    """Validate the generators in ``checkpoints`` (folders with ``generator.keras``, or
    ``"reference"`` for the shipped reference generator) against
    reference showers, per bin of ``cfg.validation.energy_bins`` and inclusively, with
    ``cfg.validation.n_showers`` showers per sample; write ``results_dir/metrics.json``
    (default ``cfg.validation.output``) and return the summaries and metrics.

    Raises :class:`~gan3d.exceptions.CheckpointError` naming a folder without a generator, and
    :class:`~gan3d.exceptions.OutputExists` for a folder that holds another validation's
    ``metrics.json`` (unless ``force``), before any work is done.
    """
    if len(checkpoints) != len(labels):
        raise ConfigError(f"{len(checkpoints)} checkpoints but {len(labels)} labels; give one "
                          "label per checkpoint folder")
    out = check_output(results_dir or cfg.validation.output, folder=True, holds="metrics.json",
                       force=force)
    nets = {lab: load_networks(c if str(c) == "reference" else resolve_path(c))
            for lab, c in zip(labels, checkpoints)}
    v = cfg.validation
    keys = bin_keys(v.energy_bins)
    sets = energy_sets(v.n_showers, v.energy_bins, v.bin_halfwidth,
                       (cfg.data.energy_min, cfg.data.energy_max), v.seed)
    result = Validation(bins=keys, generators={lab: {} for lab in labels})
    table = {"reference": {}, "generators": {lab: {"checkpoint": str(c), "bins": {}}
                                             for lab, c in zip(labels, checkpoints)}}
    for i, key in enumerate(console.progress(keys, desc="validation bins", unit="bin",
                                             disable=not progress)):
        _validate_bin(cfg, key, sets[key], v.seed * 1000 + i, nets, result, table, low_level)
    result.metrics = {"provenance": provenance(), "config": to_dict(cfg), "bins": keys,
                      "parameters": {"checkpoints": [str(c) for c in checkpoints],
                                     "labels": list(labels), "low_level": low_level},
                      **table}
    result.path = write_json(out / "metrics.json", result.metrics)
    return result


def distortion_check(n_showers: int = 1000, seed: int = 0,
                     energy_range: tuple[float, float] = (10.0, 500.0)) -> dict[str, dict]:
    """The validator validated: :func:`compare` of a reference sample against an independent
    one (same energies, other seed) and against three known distortions of it: sampling
    fraction x 1.05, showers 20 % wider, longitudinal profile one layer deeper. Returns the
    compare() dicts by case name (high-level classifier only)."""
    e = np.random.default_rng(seed).uniform(*energy_range, n_showers)
    ref = Showers(showers.generate(e, seed + 1), e)
    other = showers.generate(e, seed + 2)
    cases = {"reference": other, "sampling x1.05": physics.scale_energy(other, 1.05),
             "20% wider": physics.widen_transverse(other, 1.2),
             "1 layer deeper": physics.shift_layers(other, 1)}
    rs = summarise(ref)
    return {name: compare(ref, Showers(x, e), low_level=False, seed=seed, ref_summary=rs)
            for name, x in cases.items()}


def headline(result: dict) -> dict:
    """The few numbers a reader wants, inclusive sample: per generator and for the second
    reference sample, classifier AUC, FPD with error, 3DGAN metric, separation power of the
    sampling fraction."""
    names = ("auc_high", "fpd", "three_dgan", "sep:sampling_fraction")
    rows = {"reference (2nd sample)": result["reference"]["inclusive"]}
    rows.update({lab: g["bins"]["inclusive"] for lab, g in result["generators"].items()})
    return {lab: {**{n: metric_value(m, n) for n in names}, "fpd_error": m["fpd"]["error"]}
            for lab, m in rows.items()}


def metric_value(m: dict, name: str) -> float:
    """One number out of a :func:`compare` dict: ``auc_high``, ``auc_low``, ``jsd_high``,
    ``fpd``, ``kpd``, ``three_dgan`` or ``sep:<feature>`` / ``wd:<feature>``."""
    simple = {"auc_high": ("classifier_high", "auc"), "auc_low": ("classifier_low", "auc"),
              "jsd_high": ("classifier_high", "jsd"), "fpd": ("fpd", "value"),
              "kpd": ("kpd", "value"), "three_dgan": ("three_dgan", "total")}
    if name in simple:
        a, b = simple[name]
        return float(m[a][b]) if a in m else float("nan")
    kind, _, feature = name.partition(":")
    table = {"sep": "separation_power", "wd": "wasserstein"}.get(kind)
    if table is None or feature not in m.get(table, {}):
        raise KeyError(f"unknown metric {name!r}")
    return float(m[table][feature])


def metrics_table(result: dict, names=("auc_high", "auc_low", "fpd", "three_dgan",
                                        "sep:sampling_fraction", "sep:z_mean", "sep:x_var")) -> str:
    """A Markdown table of ``names`` (see :func:`metric_value`) for every generator and for the
    independent reference sample ("ideal" at this sample size), one column per bin key. The
    low-level classifier's row only where it ran (``low_level``)."""
    keys = result["bins"]
    if not any("classifier_low" in m for m in result["reference"].values()):
        names = [n for n in names if n != "auc_low"]
    samples = [("reference (2nd sample)", result["reference"])]
    samples += [(lab, g["bins"]) for lab, g in result["generators"].items()]
    rows = [[lab, name, *(f"{metric_value(per_bin[k], name):.3g}" for k in keys)]
            for name in names for lab, per_bin in samples]
    return console.table(rows, ["source", "metric", *keys])


def targets_table(result: dict) -> str:
    """Markdown: per energy, each physics monitor's GAN value against the reference's and whether
    its target is met, then how many (energy, target) pairs are met (``result``: a
    :func:`gan3d.validation.monitors.compare` result, e.g. a shipped generator's final monitors)."""
    from .monitors import TARGETS

    rows = [[f"{e} GeV", *(f"{row[n]['value']:.4g} vs {row[n]['reference']:.4g} "
                           + ("**met**" if row[n]["met"] else "missed") for n in TARGETS),
             f"{row['profile_distance']:.3f}"] for e, row in result["per_energy"].items()]
    return (console.table(rows, ["energy", *TARGETS, "longitudinal profile distance"])
            + f"\n\n{result['targets_met']} of {result['targets']} (energy, target) pairs met.")


def resolution_table(per_bin: Mapping[str, Mapping]) -> dict[str, dict]:
    """Per sample label: energy bins (GeV), relative resolution sigma/mean of the sampling
    fraction per bin and its standard error, showers per bin, and the fit a/sqrt(E) (+) b over
    the bins (when there are two or more)."""
    keys = [k for k in per_bin if k != "inclusive"]
    out: dict[str, dict] = {}
    for key in keys:
        for lab, s in per_bin[key].items():
            rel, err = physics.relative_resolution(s.features["sampling_fraction"])
            row = out.setdefault(lab, {"energy": [], "resolution": [], "error": [], "n": []})
            row["energy"].append(float(key))
            row["resolution"].append(rel)
            row["error"].append(err)
            row["n"].append(int(np.isfinite(s.features["sampling_fraction"]).sum()))
    for row in out.values():
        ok = np.isfinite(row["resolution"]) & (np.asarray(row["resolution"]) > 0)
        if ok.sum() >= 2:
            row["fit"] = physics.resolution_fit(np.asarray(row["energy"])[ok],
                                        np.asarray(row["resolution"])[ok], np.asarray(row["n"])[ok])
    return out


# ---------------------------------------------------------------------------------------------
# What notebook 04 says of its numbers


def settings_line(cfg: Config) -> str:
    """One line on the validation settings of ``cfg``: sample size, energy bins, reference."""
    v = cfg.validation
    return (f"profile {cfg.profile}: {v.n_showers} showers per sample, bins "
            f"{list(v.energy_bins)} GeV +- {v.bin_halfwidth} GeV, reference: {cfg.data.source}")


# The validator check's metrics, by the name its figure gives them.
CHECK_METRICS = {"S(sampling fraction)": "sep:sampling_fraction", "S(x variance)": "sep:x_var",
                 "S(z barycentre)": "sep:z_mean", "AUC": "auc_high", "FPD": "fpd"}
# The distortion of the validator check that each separation power should flag.
_MEANT = {"sampling x1.05": "S(sampling fraction)", "20% wider": "S(x variance)",
          "1 layer deeper": "S(z barycentre)"}


def check_cases(check: Mapping[str, dict]) -> dict[str, dict[str, float]]:
    """Per case of a :func:`distortion_check`, the values of :data:`CHECK_METRICS`."""
    return {name: {k: metric_value(m, v) for k, v in CHECK_METRICS.items()}
            for name, m in check.items()}


def check_reading(check: Mapping[str, dict], n_showers: int) -> str:
    """Markdown: which metric flags which distortion of a :func:`distortion_check` of
    ``n_showers`` showers, against the second reference sample, and the noise floor."""
    cases = check_cases(check)
    ref = cases["reference"]
    lines = []
    for case, metric in _MEANT.items():
        ratio = cases[case][metric] / max(ref[metric], 1e-12)
        lines.append(f"*{case}*: {metric} {cases[case][metric]:.3g} against {ref[metric]:.3g} for "
                     f"the second reference sample (x{ratio:.0f}); AUC {cases[case]['AUC']:.2f}")
    fpd = check["reference"]["fpd"]
    fpd = (f"FPD {fpd['value']:.3g} ± {fpd['error']:.2g}" if "note" not in fpd else
           f"no FPD ({fpd['note']})")
    return ("Reading: " + "; ".join(lines) + f". The two reference samples score AUC "
            f"{ref['AUC']:.2f} and {fpd}, the noise floor at "
            f"{n_showers} showers: `metrics.json` carries every error next to its value.")


def resolution_lines(table: Mapping[str, dict]) -> str:
    """One line per sample of a :func:`resolution_table`: the resolution per energy bin with its
    error, and the fit a/sqrt(E) (+) b where there is one."""
    out = []
    for lab, row in table.items():
        cells = ", ".join(f"{e:g} GeV {100 * r:.2f} ± {100 * s:.2f} %" for e, r, s in
                          zip(row["energy"], row["resolution"], row["error"]))
        fit = row.get("fit")
        out.append(f"{lab:>45}: {cells}"
                   + (f"; fit {fit['a']:.3f}/sqrt(E) (+) {fit['b']:.4f}" if fit else ""))
    return "\n".join(out)


def train_showers(cfg: Config) -> int | None:
    """The showers a worker trains on in ``cfg``'s training (None where an epoch is the whole
    training set, ``train.steps_per_epoch`` 0)."""
    t = cfg.train
    return t.epochs * t.steps_per_epoch * t.batch_size if t.steps_per_epoch else None


def paper_train_showers() -> int:
    """The showers the paper's training saw: its epochs over its training set."""
    from ..config import resolve

    paper = resolve("paper")
    return paper.train.epochs * int(paper.data.n_showers * (1 - paper.data.test_fraction))


def headline_lines(head: Mapping[str, dict], cfg: Config) -> str:
    """Per sample of a :func:`headline`: AUC, FPD, 3DGAN's metric and the sampling fraction's
    separation power; then the training showers against the paper's."""
    lines = [f"{lab:>24}: AUC {v['auc_high']:.3f}, FPD {v['fpd']:.3g} +- {v['fpd_error']:.2g}, "
             f"3DGAN metric {v['three_dgan']:.3g}, S(sampling fraction) "
             f"{v['sep:sampling_fraction']:.3f}" for lab, v in head.items()]
    seen = train_showers(cfg)
    if seen:
        from ..config import resolve

        epochs, paper_seen = resolve("paper").train.epochs, paper_train_showers()
        lines.append(f"training in profile {cfg.profile!r}: {seen} showers per worker; the paper "
                     f"profile: {paper_seen:,} ({epochs} epochs of {paper_seen // epochs:,})")
    return "\n".join(lines)


def closing_note(head: Mapping[str, dict], cfg: Config) -> str:
    """Markdown: per generator of a :func:`headline`, whether it is told apart from the
    reference (AUC > 0.6, or FPD beyond 3 errors of the reference's), its training budget
    against the paper's, and what a meaningful comparison of 1 and N workers needs."""
    ref = head["reference (2nd sample)"]
    gens = {lab: v for lab, v in head.items() if lab != "reference (2nd sample)"}
    far = {lab: v["auc_high"] > 0.6 or v["fpd"] - v["fpd_error"] > ref["fpd"] + 3 * ref["fpd_error"]
           for lab, v in gens.items()}
    verdict = "; ".join(
        f"**{lab}**: AUC {v['auc_high']:.2f} (reference {ref['auc_high']:.2f}), FPD {v['fpd']:.3g} "
        f"± {v['fpd_error']:.2g} (reference {ref['fpd']:.3g} ± {ref['fpd_error']:.2g}) - "
        + ("told apart from the reference" if far[lab] else "close to the reference's noise floor")
        for lab, v in gens.items())
    seen = train_showers(cfg)
    budget = f"{seen:,} showers per worker" if seen else "its whole training set each epoch"
    return (f"**Closing note.** {verdict}. These generators trained on {budget} (profile "
            f"`{cfg.profile}`); the paper's trained on {paper_train_showers():,}. "
            + ("A generator told apart from the reference at this budget says nothing against "
               "distributed training: the 1-worker and N-worker generators can only be compared "
               "with each other here. " if any(far.values()) else "")
            + "A meaningful comparison of 1 and N workers needs the `paper` profile (40 epochs "
            "over 180,000 showers, per-worker batch 512: 20 h 16 min on one P100 GPU, 2 h 14 min "
            "on 12 in the paper) and several thousand showers per bin, as the reference's noise "
            "floor falls like 1/N.")
