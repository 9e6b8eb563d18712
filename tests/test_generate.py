"""Synthetic data sets on disk: files, manifest, reuse, independence of workers, interruption."""

from __future__ import annotations

import numpy as np
import pytest

from gan3d.config import resolve
from gan3d.data import files, showers
from gan3d.data.generate import generate_dataset
from gan3d.exceptions import OutputNotWritable


def _cfg(folder, **kw):
    over = {"data.path": str(folder), "data.n_showers": 60, "data.n_files": 3}
    over.update({f"data.{k}": v for k, v in kw.items()})
    return resolve("quick", over).data


def test_generate_dataset_files_manifest_and_round_trip(tmp_path):
    cfg = _cfg(tmp_path, energy_min=20.0, energy_max=300.0)
    m = generate_dataset(cfg, progress=False, workers=1)
    found = files.list_files(tmp_path)
    assert [f.name for f in found] == [f"EleEscan_1_00{j}.h5" for j in (1, 2, 3)]
    assert [e["n_showers"] for e in m["files"]] == [20, 20, 20] and not m["reused"]
    assert files.check_files(tmp_path) == []
    # The first file is exactly what the generator makes with that file's seed.
    ecal, energy = files.read_showers(found[0])
    rng = np.random.default_rng([cfg.seed, 0])
    expect_e = rng.uniform(20.0, 300.0, 20).astype(np.float32)
    np.testing.assert_array_equal(energy, expect_e)
    np.testing.assert_array_equal(ecal, showers.generate(expect_e, rng=rng))


def test_generate_dataset_reuses_and_does_not_depend_on_workers(tmp_path):
    cfg = _cfg(tmp_path / "a")
    one = generate_dataset(cfg, progress=False, workers=1)
    mtimes = [p.stat().st_mtime_ns for p in files.list_files(tmp_path / "a")]
    again = generate_dataset(cfg, progress=False)
    assert again["reused"]
    assert [p.stat().st_mtime_ns for p in files.list_files(tmp_path / "a")] == mtimes
    two = generate_dataset(_cfg(tmp_path / "b"), progress=False, workers=2)
    assert [f["sha256"] for f in one["files"]] == [f["sha256"] for f in two["files"]]
    # New parameters: the old set is replaced, not mixed.
    new = generate_dataset(_cfg(tmp_path / "a", n_files=2, seed=1), progress=False,
                                   workers=1)
    assert not new["reused"] and len(files.list_files(tmp_path / "a")) == 2


def test_interrupted_generation_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    calls = []

    def failing(energies, seed=None, *, rng=None):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C during the second file
        return np.zeros((len(energies), 25, 25, 25), np.float32)

    monkeypatch.setattr(showers, "generate", failing)
    with pytest.raises(KeyboardInterrupt):
        generate_dataset(_cfg(tmp_path), progress=False, workers=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".generate.lock", "EleEscan_1_001.h5"]
    assert not (tmp_path / files.MANIFEST).exists()  # so the next call regenerates


def test_generate_dataset_refuses_to_mix_with_foreign_files(tmp_path):
    made = generate_dataset(_cfg(tmp_path), progress=False, workers=1)
    (tmp_path / "EleEscan_1_1.h5").write_bytes(b"real data, not ours")
    with pytest.raises(OutputNotWritable, match="EleEscan_1_1.h5"):
        generate_dataset(_cfg(tmp_path, seed=3), progress=False, workers=1)
    assert (tmp_path / "EleEscan_1_1.h5").read_bytes() == b"real data, not ours"
    # Nothing of the previous set was touched, and it is not reused while the stranger is there.
    assert [p.name for p in files.list_files(tmp_path)] == sorted(
        ["EleEscan_1_1.h5"] + [f["name"] for f in made["files"]])
    with pytest.raises(OutputNotWritable):
        generate_dataset(_cfg(tmp_path), progress=False)
    (tmp_path / "EleEscan_1_1.h5").unlink()
    assert generate_dataset(_cfg(tmp_path), progress=False)["reused"]


@pytest.mark.slow
def test_a_script_without_main_guard_fails_fast_instead_of_hanging(tmp_path):
    """With TensorFlow loaded, workers are spawned and re-run the caller's script: without an
    ``if __name__ == '__main__':`` guard each worker fails while starting. The pool must not
    keep replacing them forever."""
    import subprocess
    import sys
    import time

    script = tmp_path / "no_guard.py"
    script.write_text(
        "import tensorflow\n"
        "from gan3d.config import resolve\n"
        "from gan3d.data.generate import generate_dataset\n"
        f"cfg = resolve('quick', {{'data.path': r'{tmp_path / 'data'}', 'data.n_showers': 40,"
        " 'data.n_files': 2}).data\n"
        "generate_dataset(cfg, progress=False, workers=2)\n")
    start = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode != 0 and time.monotonic() - start < 300
    assert "DataError" in out.stderr and "__main__" in out.stderr
    assert not (tmp_path / "data" / "manifest.json").exists()
