"""The envelope of every study file: which record it is, in which schema, made by whom.

A study file (``studies/*.json`` and the results of ``bench/*.py``, written by the benchmarks and
by ``gan3d study``) is one JSON object. Whatever else it holds, its top level carries::

    {"schema": 1, "kind": "interconnect", ..., "provenance": {...}}

* ``schema`` - the version of this envelope and of the kind's layout (:data:`SCHEMA`); a file
  written before the field existed has none and reads as schema 0, unchanged;
* ``kind`` - what the file holds, one of :data:`KINDS`, so that a reader can refuse a wrong file;
* ``provenance`` - :func:`gan3d.io.provenance` of the run that made it (version, commit, machine).

Writers build the object with :func:`record` (or stamp one they keep updating with
:func:`stamp`); readers load it with :func:`read`, which accepts schema 0 and refuses a file of a
newer schema or of another kind with :class:`~gan3d.exceptions.StudyFileError`.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, TypedDict

from .exceptions import StudyFileError
from .io import provenance as _provenance
from .io import read_json

__all__ = ["SCHEMA", "KINDS", "Envelope", "record", "stamp", "schema_of", "read"]

SCHEMA = 1  # raise it when a kind's layout changes in a way its readers must know about

KINDS = {
    "interconnect": "Horovod all-reduce over emulated networks (bench/bench_interconnect.py)",
    "algorithms": "MPI all-reduce algorithms over emulated networks (bench/bench_algorithms.py)",
    "convergence": "N workers against one over seeds (gan3d study)",
    "inference": "the generator's inference speed (bench/bench_inference.py)",
    "training": "the training step's rate and scaling efficiency (bench/bench_training.py)",
    "precision": "bfloat16 against float32 training over seeds (bench/bench_precision.py)",
    "roofline": "the step's layers against the machine's ceilings (bench/bench_roofline.py)",
    "backends": "showers/s of the TensorFlow and JAX backends (bench/bench_backends.py)",
    "data": "the input pipeline's rates (bench/bench_data.py)",
    "allreduce": "all-reduce time over message sizes on this machine (bench/bench_allreduce.py)",
    "device_check": "the JAX step on an accelerator (bench/device_check.py)",
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
