"""Atomic writes: a failed write leaves neither a partial file nor a temporary one."""

from __future__ import annotations

import os

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


def test_written_files_are_readable_by_others(tmp_path):
    path = write_json(tmp_path / "r.json", {"a": 1})
    assert path.stat().st_mode & 0o777 == 0o644
