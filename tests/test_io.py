"""Atomic writes: a failed write leaves neither a partial file nor a temporary one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gan3d.exceptions import OutputNotWritable
from gan3d.io import atomic_path, ensure_dir, provenance, read_json, write_json


def test_atomic_write_replaces_only_on_success(tmp_path):
    target = tmp_path / "result.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text('{"a": 2, "half')
            raise RuntimeError("crash while writing")
    assert read_json(target) == {"a": 1}          # the old content survives
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]  # no leftovers


def test_temporary_name_keeps_the_suffix(tmp_path):
    with atomic_path(tmp_path / "fig.png") as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path
        tmp.write_bytes(b"x")
    assert (tmp_path / "fig.png").read_bytes() == b"x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere; permissions cannot fail")
def test_unwritable_folder_is_a_named_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(OutputNotWritable, match="locked"):
        ensure_dir(locked)


def test_output_under_a_file_is_a_named_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputNotWritable, match="cannot create output folder"):
        ensure_dir(tmp_path / "file" / "sub")


def test_provenance_names_versions_and_machine():
    info = provenance({"step": "test"})
    assert info["gan3d"] and info["machine"]["cores"] >= 1
    assert "numpy" in info["versions"] and info["step"] == "test"
    # the commit alone (a full hash, or None outside a checkout), its tree's state beside it
    assert info["clean"] in (True, False, None) and info["source"]
    assert info["commit"] is None or (len(info["commit"]) == 40 and info["clean"] is not None)


def test_written_files_are_readable_by_others(tmp_path):
    path = write_json(tmp_path / "r.json", {"a": 1})
    assert path.stat().st_mode & 0o777 == 0o644


def test_content_reaches_the_disk_before_the_rename(tmp_path, monkeypatch):
    from gan3d import io

    calls = []
    real_fsync, real_replace = io.fsync_path, io.os.replace
    monkeypatch.setattr(io, "fsync_path", lambda p: (calls.append(("fsync", Path(p).name)),
                                                     real_fsync(p)))
    monkeypatch.setattr(io.os, "replace", lambda a, b: (calls.append(("rename", Path(b).name)),
                                                        real_replace(a, b)))
    write_json(tmp_path / "r.json", {"a": 1})
    tmp_name = calls[0][1]
    assert tmp_name.startswith(".r.tmp-") and tmp_name.endswith(".json")
    # the file's data, then the rename, then the folder's entry (so the rename survives a crash)
    assert calls == [("fsync", tmp_name), ("rename", "r.json"), ("fsync", tmp_path.name)]


def test_temporaries_of_a_killed_writer_are_found_and_removed(tmp_path):
    from gan3d.io import remove_temporaries

    (tmp_path / ".epoch-0003.tmp-a1b2c3.npz").write_bytes(b"half")
    (tmp_path / ".history.tmp-zz.jsonl.part").write_bytes(b"")
    (tmp_path / "epoch-0002.npz").write_bytes(b"whole")
    (tmp_path / ".hidden").write_bytes(b"not ours")
    removed = remove_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == [".epoch-0003.tmp-a1b2c3.npz",
                                               ".history.tmp-zz.jsonl.part"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "epoch-0002.npz"]


def test_a_file_size_limit_is_a_named_error_and_keeps_the_old_file(tmp_path):
    """RLIMIT_FSIZE with SIGXFSZ ignored makes write() fail with EFBIG, as a full disk does."""
    import subprocess
    import sys
    import textwrap

    (tmp_path / "big.bin").write_bytes(b"old")
    code = textwrap.dedent(f"""
        import resource, signal, sys
        from gan3d.exceptions import OutputNotWritable
        from gan3d.io import atomic_path
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        try:
            with atomic_path(r"{tmp_path / 'big.bin'}") as tmp:
                tmp.write_bytes(b"x" * 1_000_000)
        except OutputNotWritable as exc:
            print("named:", exc)
            sys.exit(3)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "file-size limit" in out.stdout, out.stdout + out.stderr
    assert (tmp_path / "big.bin").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.bin"]
