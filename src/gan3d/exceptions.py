"""Errors a user can cause, each named after what went wrong.

Every class subclasses both :class:`Gan3dError` (so callers can catch everything of ours) and the
builtin that describes it best (so generic ``except ValueError`` code keeps working). Messages say
what was wrong and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "Gan3dError",
    "ConfigError",
    "EnvironmentProblem",
    "DataError",
    "DataFileMissing",
    "CorruptDataFile",
    "DataSchemaError",
    "DataValueError",
    "CheckpointError",
    "OutputNotWritable",
    "NonFiniteLoss",
    "RankFailed",
    "NotebookFailed",
    "PipelineBusy",
    "OutsideTrainedRange",
    "StudyFileError",
    "PageBlockError",
    "UncommittedChanges",
]


class Gan3dError(Exception):
    """Base class of every error raised on purpose by gan3d."""


class ConfigError(Gan3dError, ValueError):
    """An unknown configuration key, a value of the wrong type, or an impossible combination."""


class EnvironmentProblem(Gan3dError, RuntimeError):
    """The software environment is incomplete (e.g. Horovod without MPI, two MPIs mixed)."""


class DataError(Gan3dError):
    """Base class of problems with shower data files."""


class DataFileMissing(DataError, FileNotFoundError):
    """A data file or folder that was asked for does not exist."""


class CorruptDataFile(DataError, OSError):
    """A file exists but cannot be read as HDF5 (truncated, not HDF5, damaged)."""


class DataSchemaError(DataError, ValueError):
    """A readable file lacks a dataset, or a dataset has the wrong shape or dtype."""


class DataValueError(DataError, ValueError):
    """Values in a file are impossible: NaN/inf, negative energies, energies out of range."""


class CheckpointError(Gan3dError, OSError):
    """A checkpoint is missing, unreadable, or belongs to an incompatible configuration."""


class OutputNotWritable(Gan3dError, PermissionError):
    """An output folder cannot be created or written to."""


class OutputExists(Gan3dError, FileExistsError):
    """An output path a user named already holds another result (``--force`` replaces it)."""


class OutputBusy(OutputExists):
    """Another process is writing the folder now (it holds the folder's lock)."""


class NonFiniteLoss(Gan3dError, FloatingPointError):
    """A training loss became NaN or infinite; the last good checkpoint is kept."""


class RankFailed(Gan3dError, RuntimeError):
    """One rank of a distributed run raised; carries the rank and its error text."""

    def __init__(self, rank: int, message: str):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank = rank
        self.message = message


class NotebookFailed(Gan3dError, RuntimeError):
    """A notebook of the figure pipeline failed; names the notebook and the cell."""


class PipelineBusy(Gan3dError, RuntimeError):
    """Another ``gan3d reproduce`` runs on the same results folder; names it (pid, host, start)."""


class ParameterError(ConfigError):
    """A notebook parameter of the wrong type or out of range (:func:`gan3d.lab.parameters`).
    In a notebook it shows as its one line, without a traceback: the line says what to fix."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook for how an error is shown
        return [f"{type(self).__name__}: {self}"]


class OutsideTrainedRange(ConfigError):
    """Primary energies asked of a generator outside those it was trained on (``--strict``)."""


class StudyFileError(Gan3dError, ValueError):
    """A study file of another kind than asked for, or of a newer schema than this gan3d reads."""


class PageBlockError(Gan3dError, ValueError):
    """A page (README.md, studies/README.md) lacks a block that ``tools/pages`` renders into,
    or holds its markers twice or in the wrong order."""


class UncommittedChanges(StudyFileError):
    """A study file would be written into the repository's ``studies/`` (or a study checked) from
    a tree with uncommitted changes, or by a gan3d that is no git checkout: its provenance could
    not name the code that made it. Commit first, or allow it explicitly (then marked so)."""
