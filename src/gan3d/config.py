"""Typed, frozen configuration with named profiles and one validated override path.

A configuration is a tree of frozen dataclasses. A *profile* (``quick`` or ``paper``, YAML files
in ``gan3d/profiles``) sets values on top of the dataclass defaults; *overrides* set single keys
by dotted name (``train.epochs=3``) and come from the command line (``--set``) or from notebook
parameters. Everything goes through :func:`resolve`, which rejects unknown keys and wrong types
with a :class:`~gan3d.exceptions.ConfigError` naming the key and what is allowed.

>>> cfg = resolve("quick", {"train.epochs": 2})
>>> cfg.train.epochs
2
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, Mapping

import yaml

from .exceptions import ConfigError

__all__ = ["DataConfig", "TrainConfig", "ScaleConfig", "ValidationConfig", "StudyConfig",
           "WarmConfig", "PipelineConfig", "Config", "PROFILES", "resolve", "parse_overrides",
           "to_dict", "from_dict", "flatten", "resolved_precision",
           "TRAINING_AUTO_CPU_BF16"]

PROFILES = ("quick", "paper", "study")


@dataclass(frozen=True)
class DataConfig:
    """Where showers come from and how they are split (sizes in showers, energies in GeV)."""

    source: Literal["synthetic", "clic"] = "synthetic"
    path: str = "data/synthetic"  # folder of .h5 files (made here for "synthetic")
    n_showers: int = 4000
    n_files: int = 8
    energy_min: float = 10.0
    energy_max: float = 500.0
    seed: int = 20190620
    test_fraction: float = 0.1
    # Variable-angle files: keep the showers with theta in [lo, hi] (the file's unit). Empty: files
    # with showers at several angles are refused rather than mixed into an energy-only GAN.
    theta_window: tuple[float, ...] = ()


@dataclass(frozen=True)
class TrainConfig:
    """The 3DGAN training step and loop. ``batch_size`` is per worker, as in the paper."""

    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 1e-3
    rho: float = 0.9
    scale_lr: bool = True  # learning rate x number of workers (Horovod practice)
    # With scale_lr: lr x N (linear, the paper's), lr x sqrt(N) (sqrt) or lr (none: the same as
    # scale_lr false); studies/warm_start.json compares the rules (the ledger's lr-rule).
    lr_rule: Literal["linear", "sqrt", "none"] = "linear"
    lr_warmup_epochs: int = 0  # ramp from lr to the scaled lr over these epochs (of a fork: from it)
    # Local SGD: each worker takes this many steps alone, then weights and RMSprop state are
    # averaged over workers; 1 is the paper's gradient all-reduce before every update.
    sync_every: int = 1
    loss_weights: tuple[float, float, float] = (2.0, 0.1, 0.1)
    label_flip: float = 0.05
    eval_mode: Literal["serial", "distributed", "none"] = "distributed"
    eval_fraction: float = 1.0  # share of the test set evaluated each epoch
    # auto: runtime.training_auto (bfloat16 on a CPU with bfloat16 arithmetic, else float32);
    # bfloat16 and float16 on request. A run records the precision it resolved to.
    precision: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # The discriminator's CPU layers (gan/cpu_layers.py: same function and weights, fewer passes
    # over memory, other rounding; the TensorFlow backend). auto: under mixed precision on a CPU;
    # fast: always, float32 too (faster there, but not the committed convergence study's
    # numbers); keras: never.
    cpu_layers: Literal["auto", "fast", "keras"] = "auto"
    steps_per_epoch: int = 0  # 0: one pass over the training shard
    monitor_showers: int = 32  # physics monitors each epoch: showers per monitor energy (0: off)
    timing_warmup_epochs: int = 1  # excluded from timing, as the paper excluded its first epochs
    seed: int = 7
    output: str = "results/train"
    workers: int = 1
    # horovod: TensorFlow + Horovod, the paper's stack; jax: Keras 3 on JAX, jax.distributed
    backend: Literal["horovod", "jax"] = "horovod"
    # A checkpoint (an epoch-NNNN.npz, or a run's folder: its newest) to start a NEW run from:
    # its weights, optimiser states and BatchNorm statistics, with this run's workers, learning
    # rate rule, precision, seed and data (gan.checkpoints.fork). Epochs count on from its epoch.
    fork_from: str = ""
    # shards: each rank shuffles its own shard (the paper's). global: one order of the whole set
    # from the seed alone, step t of rank r of W takes global batch t W + r with draws keyed by it:
    # W workers see what 1 worker sees, in order (the warm-start study's pairing; GlobalOrder).
    data_order: Literal["shards", "global"] = "shards"


@dataclass(frozen=True)
class ScaleConfig:
    """Scaling experiments: worker counts, weak (fixed per-worker batch) or strong scaling."""

    workers: tuple[int, ...] = (1, 2)
    mode: Literal["weak", "strong"] = "weak"
    steps: int = 12  # timed steps per worker count
    warmup_steps: int = 3
    repeats: int = 3
    output: str = "results/scaling"


@dataclass(frozen=True)
class ValidationConfig:
    """Physics validation of a trained generator against reference showers."""

    n_showers: int = 1000
    energy_bins: tuple[float, ...] = (50.0, 100.0, 200.0, 300.0, 400.0)
    bin_halfwidth: float = 5.0
    seed: int = 11
    output: str = "results/validation"


@dataclass(frozen=True)
class StudyConfig:
    """The convergence study (:mod:`gan3d.convergence`): N workers against one, local SGD, and
    learning-rate rules, each configuration trained from ``seeds`` seeds on the same number of
    showers. The ``study`` profile runs the full one; the quick profile a tiny one."""

    seeds: int = 3
    showers: int = 1024  # training showers per run, all workers together
    batch_size: int = 8  # per worker
    sync_every: tuple[int, ...] = (1, 4, 16, 64)  # local SGD: steps between model averages
    lr_workers: tuple[int, ...] = (2, 4)  # worker counts of the learning-rate rules
    points: int = 4  # monitor evaluations per run (one per epoch)
    monitor_showers: int = 64
    data_showers: int = 2000
    output: str = "studies/convergence.json"  # the results (committed for the study profile)
    workdir: str = "results/convergence"  # the runs' folders


@dataclass(frozen=True)
class WarmConfig:
    """The warm-start equivalence study (:mod:`gan3d.convergence.warmstart`): configurations
    forked from one checkpoint, paired by seed, against its first configuration (1 worker)."""

    checkpoint: str = "studies/warm-start/epoch-0026.npz"
    data_path: str = "data/learning-curve"  # the checkpoint's set, made from its own settings
    seeds: int = 5
    showers: int = 8192  # further training showers per run, all workers together
    points: int = 4  # monitor evaluations per run
    monitor_showers: int = 256  # per monitor energy
    batch_size: int = 32  # per worker
    learning_rate: float = 1e-3
    configs: tuple[str, ...] = ("1w", "2w-linear", "1w-bf16", "2w-linear-k16", "2w-none")
    output: str = "studies/warm_start.json"
    workdir: str = "results/warm-start"


@dataclass(frozen=True)
class PipelineConfig:
    """The figure pipeline: where executed notebooks, results and figures go."""

    results: str = "results"
    figures: str = "figures"
    kernel: str = "gan3d"
    cell_timeout: int = 3600


@dataclass(frozen=True)
class Config:
    """The whole resolved configuration, recorded in every output."""

    profile: str = "quick"
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    study: StudyConfig = field(default_factory=StudyConfig)
    warm: WarmConfig = field(default_factory=WarmConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)

    def replace(self, **overrides: Any) -> "Config":
        """Return a copy with dotted-key overrides applied (validated like any override)."""
        return _apply(self, overrides)


# ---------------------------------------------------------------------------------------------
# Validation and coercion


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {args[0].__name__}"
        return f"a list of {len(args)} numbers"
    return f"a {getattr(tp, '__name__', str(tp))}"


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; convert only where lossless."""
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{key}: got {value!r} ({type(value).__name__}), expected {_describe(tp)}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise bad
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise bad
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value))
        if len(value) != len(args):
            raise bad
        return tuple(_coerce(f"{key}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value
    raise bad  # pragma: no cover - every field type is listed above


_SECTIONS = {f.name: f.type for f in dataclasses.fields(Config) if f.name != "profile"}


def _section_types() -> dict[str, dict[str, Any]]:
    hints = typing.get_type_hints(Config)
    return {name: (hints[name], typing.get_type_hints(hints[name])) for name in _SECTIONS}


def _apply(cfg: Config, overrides: Mapping[str, Any]) -> Config:
    sections = _section_types()
    changes: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if section not in sections or not name:
            raise ConfigError(
                f"unknown configuration key {key!r}; keys are <section>.<name> with section one of "
                + ", ".join(sorted(sections))
            )
        cls, hints = sections[section]
        if name not in hints:
            raise ConfigError(
                f"unknown configuration key {key!r}; {section} has " + ", ".join(sorted(hints))
            )
        changes.setdefault(section, {})[name] = _coerce(key, value, hints[name])
    new = {s: dataclasses.replace(getattr(cfg, s), **c) for s, c in changes.items()}
    out = dataclasses.replace(cfg, **new)
    _check(out)
    return out


def _check(cfg: Config) -> None:
    """Cross-field rules: impossible values are errors that say what would be possible. First,
    every number of every section must be finite (a NaN passes every comparison below)."""
    for section in dataclasses.fields(cfg):
        part = getattr(cfg, section.name)
        if not dataclasses.is_dataclass(part):
            continue
        for f in dataclasses.fields(part):
            value = getattr(part, f.name)
            numbers = value if isinstance(value, tuple) else (value,)
            if any(isinstance(x, float) and not math.isfinite(x) for x in numbers):
                raise ConfigError(f"{section.name}.{f.name} = {value!r}: every number must be "
                                  "finite (no nan or inf)")
    d, t, s, v, w = cfg.data, cfg.train, cfg.scale, cfg.validation, cfg.warm
    rules = [
        (d.n_showers >= 2, "data.n_showers must be at least 2"),
        (d.n_files >= 2, "data.n_files must be at least 2 (files are split 90/10 into train/test)"),
        (d.n_files <= d.n_showers, "data.n_files cannot exceed data.n_showers"),
        (0 < d.energy_min < d.energy_max, "need 0 < data.energy_min < data.energy_max (GeV)"),
        (0.0 < d.test_fraction < 1.0, "data.test_fraction must be between 0 and 1"),
        (not d.theta_window or (len(d.theta_window) == 2 and d.theta_window[0] < d.theta_window[1]),
         "data.theta_window must be empty or [lo, hi] with lo < hi"),
        (t.epochs >= 1, "train.epochs must be at least 1"),
        (t.batch_size >= 1, "train.batch_size must be at least 1"),
        (t.learning_rate > 0, "train.learning_rate must be positive"),
        (min(t.loss_weights) >= 0 and max(t.loss_weights) > 0,
         "train.loss_weights must be >= 0, and not all 0 (the paper's: [2, 0.1, 0.1])"),
        (0 < t.rho < 1, "train.rho must be between 0 and 1"),
        (0 <= t.label_flip < 0.5, "train.label_flip must be in [0, 0.5)"),
        (0 < t.eval_fraction <= 1, "train.eval_fraction must be in (0, 1]"),
        (t.steps_per_epoch >= 0, "train.steps_per_epoch must be >= 0 (0 = full pass)"),
        (t.monitor_showers >= 0, "train.monitor_showers must be >= 0 (0 = no physics monitors)"),
        (t.timing_warmup_epochs >= 0, "train.timing_warmup_epochs must be >= 0"),
        (t.lr_warmup_epochs >= 0, "train.lr_warmup_epochs must be >= 0"),
        (t.sync_every >= 1, "train.sync_every must be at least 1 (1 = all-reduce every step)"),
        (t.workers >= 1, "train.workers must be at least 1"),
        (all(w >= 1 for w in s.workers) and s.workers, "scale.workers must be positive counts"),
        (s.steps >= 1 and s.warmup_steps >= 0 and s.repeats >= 1, "scale.steps/repeats >= 1"),
        (v.n_showers >= 10, "validation.n_showers must be at least 10"),
        (v.bin_halfwidth > 0, "validation.bin_halfwidth must be positive"),
        (bool(v.energy_bins) and min(v.energy_bins) > 0,
         "validation.energy_bins must be positive energies (GeV)"),
        (cfg.study.showers >= 1 and cfg.study.batch_size >= 1 and cfg.study.monitor_showers >= 2,
         "study.showers and study.batch_size must be >= 1, study.monitor_showers >= 2"),
        (w.learning_rate > 0 and w.batch_size >= 1 and w.monitor_showers >= 2,
         "warm.learning_rate must be positive, warm.batch_size >= 1, warm.monitor_showers >= 2"),
        (cfg.study.seeds >= 1 and cfg.study.points >= 1, "study.seeds and study.points >= 1"),
        (all(k >= 1 for k in cfg.study.sync_every) and all(n >= 2 for n in cfg.study.lr_workers),
         "study.sync_every needs counts >= 1 and study.lr_workers counts >= 2"),
        (1 <= cfg.warm.seeds <= 10 and cfg.warm.points >= 2 and cfg.warm.showers >= 1,
         "warm.seeds must be 1 to 10, warm.points at least 2 and warm.showers positive"),
        (bool(cfg.warm.configs), "warm.configs needs at least the reference configuration"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(message)


# ---------------------------------------------------------------------------------------------
# Profiles, overrides, serialisation


def _load_profile(name: str) -> dict[str, Any]:
    if name not in PROFILES:
        raise ConfigError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    text = resources.files("gan3d").joinpath("profiles", f"{name}.yaml").read_text()
    data = load_yaml(text, f"profile {name!r}") or {}
    base = data.pop("base", None)  # a profile may start from another one
    return {**(_load_profile(base) if base else {}), **flatten(data)}


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (YAML keeps the last one
    silently, so the first would look set and do nothing)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool, type(None))):
                continue  # an unhashable key: the base class names that error
            if key in seen:
                raise ConfigError(f"{self._where}: key {key!r} is given twice (lines "
                                  f"{seen[key] + 1} and {key_node.start_mark.line + 1}); "
                                  f"keep one")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads 1e-4 (an exponent, no dot) as a string; read it as the float every user means.
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
    r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+0123456789."))


def load_yaml(text: str, where: str = "YAML") -> Any:
    """Parse YAML text, refusing duplicate keys with a :class:`ConfigError` naming ``where``."""
    loader = _StrictLoader(text)
    loader._where = where
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"epochs": 3}}`` -> ``{"train.epochs": 3}`` (the dotted keys of overrides)."""
    flat: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            flat.update(flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """Turn ``["train.epochs=3", "scale.workers=[1,2]"]`` into a dict; values parsed as YAML."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        out[key.strip()] = load_yaml(raw, f"override {item!r}: its value") if raw.strip() else ""
    return out


def lr_factor(train: TrainConfig, workers: int) -> float:
    """How much the learning rate grows with ``workers``: N (linear), sqrt(N), or 1 without
    ``train.scale_lr`` or with ``lr_rule`` none."""
    if not train.scale_lr or train.lr_rule == "none":
        return 1.0
    return float(workers) if train.lr_rule == "linear" else math.sqrt(workers)


# Whether ``auto`` trains in bfloat16 on a CPU that has it (runtime.training_auto), decided by the
# ledger's ``bfloat16-like-float32`` (tests/test_claims.py ties the two).
TRAINING_AUTO_CPU_BF16 = True


def resolved_precision(cfg: Config, gpu: tuple[int, int] | None = None) -> Config:
    """``cfg`` with ``train.precision`` "auto" replaced by what it trains in on the device
    (``gpu``: its compute capability, None on a CPU); float16 refused without a GPU. Outputs record
    the result, so a run resumed elsewhere cannot switch precision silently."""
    if cfg.train.precision == "float16" and gpu is None:
        raise ConfigError("train.precision float16 needs a GPU: TensorFlow's CPU kernels have no "
                          "float16 3-D pooling (the discriminator's); on a CPU choose auto, float32 "
                          "or bfloat16")
    if cfg.train.precision != "auto":
        return cfg
    from .parallel.runtime import training_auto
    return cfg.replace(**{"train.precision": training_auto(gpu, cfg.train.backend,
                                                           TRAINING_AUTO_CPU_BF16)})


def resolve(profile: str = "quick", overrides: Mapping[str, Any] | None = None) -> Config:
    """The configuration of ``profile`` with ``overrides`` (dotted keys) applied and validated."""
    base = Config(profile=profile if profile in PROFILES else "quick")
    cfg = _apply(base, _load_profile(profile))
    return _apply(cfg, dict(overrides or {}))


def to_dict(cfg: Config) -> dict[str, Any]:
    """A JSON-ready dict of the configuration (tuples become lists)."""
    return dataclasses.asdict(cfg)


def from_dict(data: Mapping[str, Any]) -> Config:
    """Rebuild a configuration recorded by :func:`to_dict` (e.g. from a checkpoint)."""
    profile = data.get("profile", "quick")
    flat = flatten({k: v for k, v in data.items() if k != "profile"})
    return _apply(Config(profile=profile), flat)
