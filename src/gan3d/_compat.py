"""Import paths of gan3d 0.1 (28 flat modules), kept working for one release.

gan3d 0.2 put the modules into sub-packages (see the README's table and CHANGELOG.md). Code that
still imports an old path, e.g. ``from gan3d.training import train`` or ``import gan3d.datasets``,
gets the new module (or, where a module was split, an object that finds each name in the new
modules) and a :class:`FutureWarning` naming the new path (shown by default, also when the
import happens inside a library). ``gan3d.scaling`` and
``gan3d.validation`` are now packages; their old functions are found through the package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__all__ = ["MOVED", "install", "package_getattr"]

# old module -> the module(s) its names now live in, first match wins
MOVED: dict[str, tuple[str, ...]] = {
    "gan3d.distributed": ("gan3d.parallel.distributed", "gan3d.parallel.launch"),
    "gan3d.engines": ("gan3d.parallel.cluster",),
    "gan3d.showers": ("gan3d.data.showers", "gan3d.data.generate", "gan3d.data.calorimeter"),
    "gan3d.datasets": ("gan3d.data.files", "gan3d.data.sharding", "gan3d.data.sample",
                       "gan3d.data.calorimeter"),
    "gan3d.model": ("gan3d.gan.model",),
    "gan3d.step": ("gan3d.gan.step",),
    "gan3d.training": ("gan3d.gan.training", "gan3d.scaling.probes"),
    "gan3d.checkpoints": ("gan3d.gan.checkpoints",),
    "gan3d.history": ("gan3d.gan.history",),
    "gan3d.probes": ("gan3d.scaling.probes", "gan3d.parallel.jobs"),
    "gan3d.timeline": ("gan3d.scaling.timeline",),
    "gan3d.perfmodel": ("gan3d.scaling.perfmodel",),
    "gan3d.speedup": ("gan3d.scaling.speedup",),
    "gan3d.topology": ("gan3d.scaling.topology",),
    "gan3d.physics": ("gan3d.validation.physics",),
    "gan3d.metrics": ("gan3d.validation.metrics",),
}

# Names that were renamed, not only moved: old name -> (module, new name).
RENAMED: dict[str, tuple[str, str]] = {
    "gan3d.showers.THRESHOLD_GEV": ("gan3d.data.calorimeter", "CELL_THRESHOLD_GEV"),
    "gan3d.datasets.THRESHOLD_GEV": ("gan3d.data.calorimeter", "CELL_THRESHOLD_GEV"),
    "gan3d.showers.calorimeter": ("gan3d.data.showers", "layer_table"),
    "gan3d.showers.summary": ("gan3d.validation.physics", "sample_summary"),
    "gan3d.showers.resolution_fit": ("gan3d.validation.physics", "resolution_fit"),
    "gan3d.step.ECAL_FIT": ("gan3d.data.calorimeter", "SAMPLING_FIT_PERCENT"),
    "gan3d.scaling.read_history": ("gan3d.scaling.experiments", "timed_epoch_means"),
    "gan3d.validation.load_checkpoint": ("gan3d.validation.study", "load_networks"),
    "gan3d.training._build_step": ("gan3d.gan.training", "build_step"),
}


def _find(old: str, targets: tuple[str, ...], name: str):
    renamed = RENAMED.get(f"{old}.{name}")
    if renamed:
        return getattr(importlib.import_module(renamed[0]), renamed[1])
    for target in targets:
        module = importlib.import_module(target)
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {old!r} has no attribute {name!r} (gan3d 0.2 moved it to "
                         f"{' or '.join(targets)})")


def package_getattr(package: str, targets: tuple[str, ...]):
    """A module ``__getattr__`` for ``package`` that finds its 0.1 names in ``targets``."""
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _find(package, targets, name)
    return __getattr__


class _Facade(types.ModuleType):
    """An old module that was split: every name is looked up in the new modules."""

    def __init__(self, old: str, targets: tuple[str, ...]):
        super().__init__(old, f"gan3d 0.1 module, now {', '.join(targets)}")
        self._targets = targets

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _find(self.__name__, self._targets, name)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        targets = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved in gan3d 0.2: import {' / '.join(targets)} instead",
                      FutureWarning, stacklevel=2)
        if len(targets) == 1:
            module = importlib.import_module(targets[0])  # the same module object: one state
            self._real_spec = module.__spec__
            return module
        return _Facade(spec.name, targets)

    def exec_module(self, module):
        # The import machinery has just set the module's __spec__ to the alias's; give the real
        # module its own back (its relative imports and pickling depend on it).
        if getattr(self, "_real_spec", None) is not None:
            module.__spec__ = self._real_spec


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, _Loader())
        return None


def install() -> None:
    """Make the old import paths work (idempotent; called by ``gan3d/__init__``)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
