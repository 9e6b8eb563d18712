"""Where files live, atomic and durable writes, and provenance: no half-written file ever looks
complete.

Relative paths in a configuration (``data/synthetic``, ``results/train``) are taken relative to
the repository root (:func:`repo_root`, :func:`resolve_path`), so that notebooks opened from
``notebooks/`` and commands run from anywhere inside the checkout agree. Outside a checkout (an
installed package) the current folder is the root.

Every file gan3d writes (data, checkpoints, results, figures) goes through :func:`atomic_path`:
the content is written to a temporary name in the same folder, flushed to the disk, and renamed
into place only after it was closed without error (a rename within one file system is atomic on
POSIX); then the folder is flushed too, so that the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import numpy as np

from . import __version__
from .exceptions import OutputBusy, OutputExists, OutputNotWritable
from .parallel.runtime import cpu_count

__all__ = ["repo_root", "resolve_path", "atomic_path", "fsync_path", "remove_temporaries",
           "TMP_MARK", "write_json", "read_json", "ensure_dir", "provenance", "git_commit",
           "git_state", "GitState", "repository_of", "check_output", "folder_lock", "lock_run",
           "unlock_run", "check_not_busy", "RUN_LOCK"]


def repo_root() -> Path:
    """The checkout's root: ``$GAN3D_ROOT``, else the nearest parent with pyproject.toml."""
    env = os.environ.get("GAN3D_ROOT")
    if env:
        return Path(env).resolve()
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for p in (start, *start.parents):
            if (p / "pyproject.toml").is_file() and (p / "src" / "gan3d").is_dir():
                return p
    return Path.cwd()


def resolve_path(path: str | os.PathLike) -> Path:
    """``path`` if absolute, else relative to :func:`repo_root`."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else repo_root() / p


def ensure_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents); raise :class:`OutputNotWritable` if that is impossible."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputNotWritable(f"cannot create output folder {p}: {exc.strerror}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise OutputNotWritable(f"output folder {p} is not writable; choose another or fix its permissions")
    return p


TMP_MARK = ".tmp-"  # in the name of every temporary file: `.<stem>.tmp-<random><suffix>`


def check_output(path: str | os.PathLike, *, force: bool = False, needs: int = 0,
                 folder: bool = False, holds: str | None = None) -> Path:
    """A path a user named for output, checked before any work starts.

    A file (``folder=False``): not a folder, and not an existing file unless ``force``. A folder:
    not a file, and not one holding ``holds`` (another result's marker file) unless ``force``.
    Its folder must be writable with at least ``needs`` bytes free. What a writer of this output
    killed mid-write left beside it (its temporaries) is removed. Raises :class:`OutputExists`
    or :class:`OutputNotWritable`, saying what to do; returns the resolved path.
    """
    p = resolve_path(path)
    if folder and p.is_file():
        raise OutputNotWritable(f"{p} is a file; name a folder to write into")
    if not folder and p.is_dir():
        raise OutputNotWritable(f"{p} is a folder; name the file to write "
                                f"(e.g. {p / 'showers.h5'})")
    other = (p / holds if holds else None) if folder else p
    if other is not None and other.exists() and not force:
        raise OutputExists(f"{p} already holds another result ({other.name}); pass --force to "
                           "replace it, or name another path")
    parent = ensure_dir(p.parent)  # the output itself is made by the writer, once work is done
    if folder and p.is_dir() and not os.access(p, os.W_OK | os.X_OK):
        raise OutputNotWritable(f"output folder {p} is not writable; choose another or fix its "
                                "permissions")
    free = shutil.disk_usage(parent).free
    if needs > free:
        raise OutputNotWritable(f"{p} needs at least {needs / 1e9:.1f} GB and {parent} has "
                                f"{free / 1e9:.1f} GB free; write less, or choose another disk")
    where, pattern = (p, f".*{TMP_MARK}*") if folder else (parent, f".{p.stem}{TMP_MARK}*")
    for left in where.glob(pattern) if where.is_dir() else []:
        if left.is_file():
            left.unlink(missing_ok=True)  # a writer killed mid-write (SIGKILL) left it
    return p
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success make it durable and rename it to
    ``path``, else delete it.

    The content is flushed to disk (fsync) *before* the rename and the folder after it, so that
    after a crash or a power cut ``path`` holds either the old content or the complete new one.
    The temporary name keeps the final suffix (h5py, matplotlib and Keras pick formats by it) and
    carries :data:`TMP_MARK`, so that :func:`remove_temporaries` finds what a killed writer left.
    A full disk or a file-size limit is :class:`OutputNotWritable`, and ``path`` stays as it was.
    """
    final = Path(path)
    ensure_dir(final.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.stem}{TMP_MARK}",
                               suffix=(suffix if suffix is not None else final.suffix) + ".part",
                               dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # Keep the real suffix last so libraries choosing a format by extension are not confused.
    real_tmp = tmp_path.with_name(tmp_path.name[: -len(".part")])
    try:
        tmp_path.rename(real_tmp)
        os.chmod(real_tmp, 0o644)  # mkstemp makes 0600; results and data are meant to be shared
        yield real_tmp
        fsync_path(real_tmp)
        os.replace(real_tmp, final)
        fsync_path(final.parent)
    except BaseException as exc:
        for p in (tmp_path, real_tmp):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        if _disk_full(exc):
            raise OutputNotWritable(f"cannot write {final}: {exc} - the disk is full or a "
                                    f"file-size limit was reached; {final.name} was left as it "
                                    "was") from None
        raise


def _disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and (exc.errno in _FULL or "No space left" in str(exc)
                                         or "File too large" in str(exc))


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, name: str = ".lock") -> Iterator[None]:
    """An exclusive lock on ``folder`` while the block runs (``fcntl.flock`` on ``folder/name``):
    concurrent callers wait their turn; a holder that is killed frees it."""
    import fcntl

    with open(Path(folder) / name, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


RUN_LOCK = ".run.lock"
_HELD: dict[Path, Any] = {}  # the run folders this process holds, with their lock files


def lock_run(folder: str | os.PathLike) -> Path:
    """Take ``folder``'s exclusive lock for a run that writes into it, or raise
    :class:`OutputBusy` at once naming the holder (process, host, since when); return the
    folder, resolved (:func:`resolve_path`). The lock (``fcntl.flock`` on
    ``folder/.run.lock``) lives until :func:`unlock_run` or the end of the process: a holder that
    is killed, even by SIGKILL, frees it."""
    import fcntl
    import socket

    folder = resolve_path(folder).resolve()
    if folder in _HELD:
        raise OutputBusy(f"{folder} is already written by a run of this process; wait for it "
                         "to end, or choose another folder")
    fh = open(ensure_dir(folder) / RUN_LOCK, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise OutputBusy(f"{folder} is being written by {holder}; wait for it to end, or "
                         "choose another folder") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"process {os.getpid()} on {socket.gethostname()} since "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    fh.flush()
    _HELD[folder] = fh
    return folder


def unlock_run(folder: str | os.PathLike) -> None:
    """Free ``folder``'s lock if this process holds it."""
    fh = _HELD.pop(resolve_path(folder).resolve(), None)
    if fh is not None:
        fh.close()  # closing the file frees the flock


def check_not_busy(folder: str | os.PathLike) -> None:
    """Raise :class:`OutputBusy` if a run writes ``folder`` now (for readers such as export)."""
    if (Path(folder) / RUN_LOCK).is_file():
        lock_run(folder)
        unlock_run(folder)


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's (or a folder's entries') data to the disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if Path(path).is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete what writers killed mid-write left in ``folder`` (files with :data:`TMP_MARK`);
    return them. Call it where no other writer is at work (a run's own output folder)."""
    folder = Path(folder)
    found = [p for p in folder.glob(f".*{TMP_MARK}*") if p.is_file()] if folder.is_dir() else []
    for p in found:
        p.unlink(missing_ok=True)
    return found


def _default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, atomically. NumPy scalars and arrays are converted."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=_default, allow_nan=True) + "\n")
    return Path(path)


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


class GitState(NamedTuple):
    """What git says about a checkout: which commit, and whether the tree is as committed."""

    commit: str | None   # the full hash of HEAD; None outside a git checkout
    clean: bool | None   # no uncommitted changes to tracked files (untracked ones and the
    #                      gallery make figures writes, GENERATED, don't count)
    source: str          # "git checkout", or why there is no commit (e.g. "not a git checkout")


# Tracked folders that gan3d itself writes: the figure gallery ``gan3d reproduce`` publishes. A
# change there is a run's output, not a change to the code that made it, so it does not make a
# tree unclean (else every result of ``make figures`` after the first notebook would say so).
GENERATED = ("figures",)


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)


def git_state(repo: str | os.PathLike | None = None, *,
              exclude: tuple[str | os.PathLike, ...] = ()) -> GitState:
    """The commit and cleanliness of ``repo`` (default: the checkout gan3d runs from).

    Outside a checkout (an installed wheel, a copy made with ``git archive``, no git at all)
    commit and clean are None and ``source`` says why. gan3d's own checkout counts only when it
    tracks this very file: a wheel installed in a virtual environment that happens to lie inside
    some repository is not a checkout of that repository. Changes under :data:`GENERATED`
    (the published figures) do not count against ``clean``, nor do changes to the files of
    ``exclude``: the output a resumable study rewrites into its own tracked file is that study's
    result, not a change to the code that makes it (else its second write would be refused).
    """
    cwd = Path(repo) if repo is not None else Path(__file__).resolve().parent
    try:
        head = _git(["rev-parse", "--verify", "HEAD"], cwd)
        if head.returncode != 0:
            inside = _git(["rev-parse", "--is-inside-work-tree"], cwd).returncode == 0
            return GitState(None, None, "a git repository without commits" if inside
                            else "not a git checkout")
        if repo is None and _git(["ls-files", "--error-unmatch", "--", Path(__file__).name],
                                 cwd).returncode != 0:
            return GitState(None, None, "not a git checkout (gan3d is installed inside a "
                                        "repository that does not track it)")
        status = _git(["status", "--porcelain", "--untracked-files=no", "--", ":/",
                       *(f":(top,exclude){g}/" for g in GENERATED),
                       *_excluded(exclude, cwd)], cwd)
    except FileNotFoundError:
        return GitState(None, None, "not a git checkout (git is not installed)")
    except (OSError, subprocess.SubprocessError) as exc:
        return GitState(None, None, f"git could not be asked ({type(exc).__name__})")
    clean = None if status.returncode != 0 else not status.stdout.strip()
    return GitState(head.stdout.strip(), clean, "git checkout")


def _excluded(paths: tuple, cwd: Path) -> list[str]:
    """Pathspecs excluding ``paths`` that lie inside the repository of ``cwd`` (git refuses a
    pathspec outside it)."""
    if not paths:
        return []
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    if top.returncode != 0:
        return []
    root = Path(top.stdout.strip()).resolve()
    return [f":(top,exclude){p.relative_to(root).as_posix()}" for p in
            (Path(x).absolute().resolve() for x in paths) if p.is_relative_to(root)]


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """The current commit's full hash, or None outside git (whether the tree is clean:
    :func:`git_state`; no ``-dirty`` suffix any more, the ``clean`` field says it)."""
    return git_state(cwd).commit


def repository_of(path: str | os.PathLike) -> Path | None:
    """The root of the git work tree that holds ``path`` (which need not exist yet), or None."""
    folder = Path(path).absolute()
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        top = _git(["rev-parse", "--show-toplevel"], folder)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(top.stdout.strip()).resolve() if top.returncode == 0 else None


def _version(module: str) -> str | None:
    """Version of ``module`` without importing it (importing TensorFlow takes ~15 s)."""
    if module in sys.modules:
        return getattr(sys.modules[module], "__version__", "?")
    for dist in (module, f"{module}-cpu"):  # tensorflow ships as tensorflow-cpu here
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def provenance(extra: dict[str, Any] | None = None, *,
               repo: str | os.PathLike | None = None,
               exclude: tuple[str | os.PathLike, ...] = ()) -> dict[str, Any]:
    """Who made a result: package version, commit, whether the tree was clean, machine, time
    (UTC), key library versions. ``repo``: the checkout to describe (default: gan3d's own);
    ``exclude``: files whose changes do not count against ``clean`` (:func:`git_state`).

    ``commit`` is the full hash (None outside a checkout, ``source`` saying why) and ``clean``
    is True only when no tracked file differed from it (None when unknown)."""
    versions = {}
    for name in ("numpy", "h5py", "tensorflow", "keras", "horovod", "mpi4py", "matplotlib"):
        version = _version(name)
        if version:  # an absent optional library is simply not listed
            versions[name] = version
    git = git_state(repo, exclude=exclude)
    info = {
        "gan3d": __version__,
        "commit": git.commit,
        "clean": git.clean,
        "source": git.source,
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "hostname": platform.node(),
            "processor": platform.processor() or platform.machine(),
            "cores": cpu_count(),
            "python": platform.python_version(),
        },
        "versions": versions,
    }
    info.update(extra or {})
    return info
