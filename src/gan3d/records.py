"""The envelope of every study file: which record it is, in which schema, made by whom.

A study file (``studies/*.json`` and the results of ``bench/*.py``, written by the benchmarks and
by ``gan3d study``) is one JSON object. Whatever else it holds, its top level carries::

    {"schema": 1, "kind": "interconnect", ..., "provenance": {...}}

* ``schema`` - the version of this envelope and of the kind's layout (:data:`SCHEMA`); a file
  written before the field existed has none and reads as schema 0, unchanged;
* ``kind`` - what the file holds, one of :data:`KINDS`, so that a reader can refuse a wrong file;
* ``provenance`` - :func:`gan3d.io.provenance` of the run that made it (version, commit, clean,
  machine).

Writers build the object with :func:`record` (or stamp one they keep updating with
:func:`stamp`) and save it with :func:`write`; readers load it with :func:`read`, which accepts
schema 0 and refuses a file of a newer schema or of another kind with
:class:`~gan3d.exceptions.StudyFileError`.

A file in a repository's ``studies/`` folder is committed evidence, so its provenance must name
code that exists: :func:`check_writable` (called by :func:`write`, and by every writer before its
work starts) refuses to write there from a tree with uncommitted changes to tracked files, or
from a gan3d that is no git checkout, with :class:`~gan3d.exceptions.UncommittedChanges` -
unless ``allow_dirty`` (``--allow-dirty``) is given, and then the file's provenance says
``clean: false``. Anywhere else (``results/``, a temporary folder) writes are free.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, TypedDict

from .exceptions import StudyFileError, UncommittedChanges
from .io import GitState, git_state, repository_of, write_json
from .io import provenance as _provenance
from .io import read_json, resolve_path

__all__ = ["SCHEMA", "KINDS", "STUDIES", "Envelope", "record", "stamp", "schema_of", "read",
           "number", "shown",
           "require_clean", "check_writable", "write"]

STUDIES = "studies"  # the folder of a repository whose files are guarded (committed evidence)

SCHEMA = 1  # raise it when a kind's layout changes in a way its readers must know about

KINDS = {
    "interconnect": "Horovod all-reduce over emulated networks (bench/bench_interconnect.py)",
    "algorithms": "MPI all-reduce algorithms over emulated networks (bench/bench_algorithms.py)",
    "convergence": "N workers against one over seeds (gan3d study)",
    "warm_start": "N workers against one from a warm start, paired by seed (gan3d warm-start)",
    "inference": "the generator's inference speed (bench/bench_inference.py)",
    "training": "the training step's rate and scaling efficiency (bench/bench_training.py)",
    "precision": "bfloat16 against float32 training over seeds (bench/bench_precision.py)",
    "roofline": "the step's layers against the machine's ceilings (bench/bench_roofline.py)",
    "backends": "showers/s of the TensorFlow and JAX backends (bench/bench_backends.py)",
    "data": "the input pipeline's rates (bench/bench_data.py)",
    "allreduce": "all-reduce time over message sizes on this machine (bench/bench_allreduce.py)",
    "device_check": "the JAX step on an accelerator (bench/device_check.py)",
    "bfloat16_accuracy": "bfloat16 against float32 per convolution and in the showers "
                         "(bench/bfloat16_accuracy.py)",
}


class Envelope(TypedDict):
    """The fields every study file of schema >= 1 has (the rest is the kind's own)."""

    schema: int
    kind: str
    provenance: dict[str, Any]


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise StudyFileError(f"unknown study kind {kind!r}; one of {', '.join(KINDS)}")
    return kind


def record(kind: str, body: Mapping[str, Any], *,
           provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    """``body`` in the envelope: ``schema`` and ``kind`` first, then the body, and its
    ``provenance`` (``provenance``, else the body's own, else made now)."""
    out: dict[str, Any] = {"schema": SCHEMA, "kind": _kind(kind)}
    out.update((k, v) for k, v in body.items() if k not in ("schema", "kind"))
    out["provenance"] = provenance or body.get("provenance") or _provenance()
    return out


def stamp(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """Put the envelope's ``schema`` and ``kind`` into ``data`` (kept and updated by its writer,
    who also sets its ``provenance``); returns ``data``."""
    data["schema"] = SCHEMA
    data["kind"] = _kind(kind)
    return data


def schema_of(data: Mapping[str, Any]) -> int:
    """The schema of a loaded study file: 0 for a file written before the envelope."""
    return int(data.get("schema", 0))


def read(path: str | os.PathLike, kind: str | None = None) -> dict[str, Any]:
    """Load the study file at ``path``, checking its envelope.

    A file without ``schema`` (written before it existed) is schema 0 and is returned as it is.
    A newer schema than :data:`SCHEMA`, or (when ``kind`` is given and the file names one)
    another kind, raises :class:`~gan3d.exceptions.StudyFileError` saying what to do.
    """
    data = read_json(path)
    if not isinstance(data, dict):
        raise StudyFileError(f"{path} is not a study file (a JSON object): give the file a "
                             "benchmark or `gan3d study` wrote")
    schema = schema_of(data)
    if schema > SCHEMA:
        raise StudyFileError(f"{path} has study schema {schema}; this gan3d reads up to {SCHEMA}: "
                             "update gan3d, or use a file made by this version")
    if kind is not None and data.get("kind", kind) != _kind(kind):
        raise StudyFileError(f"{path} holds a study of kind {data['kind']!r}, not {kind!r}: "
                             "check the file name")
    return data


def read_if_present(path: str | os.PathLike, kind: str, made_by: str) -> dict[str, Any] | None:
    """:func:`read` the committed study at ``path``; where it is missing, say which benchmark
    (``made_by``, a script run as root) makes it and return None."""
    found = resolve_path(path)
    if found.is_file():
        return read(found, kind)
    print(f"{path} is missing: run `python {made_by} --output {path}` as root")
    return None


def require_clean(allow_dirty: bool = False, *, repo: str | os.PathLike | None = None,
                  what: str = "this checkout", marked: str = "the file",
                  exclude: tuple[str | os.PathLike, ...] = ()) -> GitState:
    """The git state of ``repo`` (default: gan3d's own checkout); raises
    :class:`~gan3d.exceptions.UncommittedChanges` when it has uncommitted changes to tracked
    files or is no git checkout, unless ``allow_dirty``. ``what`` and ``marked`` name, in the
    message, the checkout and what is marked ``clean: false`` when allowed; changes to the files
    of ``exclude`` do not count (:func:`gan3d.io.git_state`)."""
    state = git_state(repo, exclude=exclude)
    if state.clean or allow_dirty:
        return state
    why = ("has uncommitted changes to tracked files" if state.commit is not None
           and state.clean is False else f"names no clean commit ({state.source})")
    raise UncommittedChanges(f"{what} {why}: commit first, or pass --allow-dirty "
                             f"({marked} is then marked clean: false)")


def check_writable(path: str | os.PathLike, allow_dirty: bool = False) -> bool:
    """May a study file be written at ``path``? Only a path inside the ``studies/`` folder of a
    git repository is guarded: refused (:class:`~gan3d.exceptions.UncommittedChanges`) when that
    repository has uncommitted changes to tracked files, or when the gan3d writing it is no git
    checkout (its provenance would name no commit), unless ``allow_dirty``. Returns True when
    it is written to such a folder from a tree with uncommitted changes (allowed): the writer
    marks the file ``clean: false``. Call it before the work that makes the file, too. The file
    itself does not count against a clean tree: a study that rewrites its committed file after
    each run (resumable) changes only its own output."""
    target = Path(path).absolute()
    repo = repository_of(target)
    if repo is None or not target.resolve().is_relative_to(repo / STUDIES):
        return False
    where = f"{target.name} goes into {STUDIES}/ (committed evidence), but"
    state = require_clean(allow_dirty, repo=repo, what=f"{where} its repository",
                          exclude=(target,))
    if git_state().commit is None:  # a wheel writing into a checkout: nothing to name
        require_clean(allow_dirty, what=f"{where} the gan3d writing it", exclude=(target,))
    return state.clean is not True


def write(path: str | os.PathLike, data: dict[str, Any], *, allow_dirty: bool = False,
          mark: bool = True) -> Path:
    """Write the study file ``data`` to ``path`` atomically after :func:`check_writable`; where
    it was allowed from a dirty tree, its ``provenance`` gets ``clean: false`` (``mark=False``:
    not, for a write whose provenance describes earlier work, e.g. a check added to a study,
    which records its own checkout)."""
    if check_writable(path, allow_dirty) and mark and isinstance(data.get("provenance"), dict):
        data["provenance"]["clean"] = False
    return write_json(path, data)


def number(x: Any) -> float:
    """A number of a study file as a float: NaN where the file holds null (the JSON of a value
    that was not finite when written, e.g. the interval of one seed)."""
    return math.nan if x is None else float(x)


def shown(x: Any, spec: str = ".3g", missing: str = "n/a") -> str:
    """A number of a study file as text in ``spec``; ``missing`` where the file holds null (or
    a value computed afresh is not finite)."""
    return missing if x is None or not math.isfinite(x) else format(x, spec)
