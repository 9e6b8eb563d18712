"""gan3d simulate: GAN showers in the CLIC schema that the readers and the checks take."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from gan3d.data import files
from gan3d.exceptions import CheckpointError, ConfigError, OutputExists, OutputNotWritable
from gan3d.io import TMP_MARK
from gan3d.gan import model, simulate


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    folder = tmp_path_factory.mktemp("train_1w")
    model.save_generator(model.build_generator(), folder / "generator.keras")
    (folder / "config.json").write_text('{"config": {"train": {"epochs": 1}}}')
    return folder


def test_energies_are_a_range_or_a_list():
    assert simulate.parse_energies("10:500") == (10.0, 500.0)
    assert simulate.parse_energies("50, 100,200") == [50.0, 100.0, 200.0]
    e = simulate.primary_energies("10:500", 1000, seed=1)
    assert e.dtype == np.float32 and 10 <= e.min() and e.max() <= 500 and np.ptp(e) > 400
    assert list(simulate.primary_energies("50,100", 5)) == [50, 100, 50, 100, 50]
    for bad in ("500:10", "x", "-5,10", ""):
        with pytest.raises(ConfigError, match="--energies"):
            simulate.parse_energies(bad)


def test_a_file_the_readers_take_marked_as_made_by_a_gan(tmp_path, generator):
    t0 = time.perf_counter()
    out = simulate.simulate(generator, 20, tmp_path / "sim.h5", energies="50,100", batch=8,
                            seed=3, precision="float32", progress=False)
    wall = time.perf_counter() - t0
    assert out["n"] == 20 and out["precision"] == "float32" and out["seconds"] <= wall
    # The speed leaves out the first batch of 8, which traces the network: the 12 showers after
    # it took part of the run's seconds (a speed of all 20 over less time would not).
    assert 12 / out["showers_per_s"] < out["seconds"]
    ecal, energy = files.read_showers(tmp_path / "sim.h5")  # an untrained GAN's: still read
    assert ecal.shape == (20, 25, 25, 25) and ecal.min() >= 0
    assert list(energy[:4]) == [50, 100, 50, 100]
    with h5py.File(tmp_path / "sim.h5") as f:
        assert f.attrs["origin"] == "gan" and f.attrs["seed"] == 3
        assert len(f.attrs["generator_sha256"]) == 64 and '"epochs": 1' in f.attrs["generator_config"]
    report = files.check_folder(tmp_path)
    assert report.problems == [] and any("written by a GAN" in n for n in report.notes)
    # the same seed gives the same showers, the last (padded) batch included
    simulate.simulate(generator / "generator.keras", 20, tmp_path / "again.h5", energies="50,100",
                      batch=8, seed=3, precision="float32", progress=False)
    np.testing.assert_array_equal(files.read_showers(tmp_path / "again.h5")[0], ecal)
    # the generator's own layers (not folded) make the same showers, to float rounding
    simulate.simulate(generator, 20, tmp_path / "own.h5", energies="50,100", batch=8, seed=3,
                      precision="float32", progress=False, fold=False)
    own = files.read_showers(tmp_path / "own.h5")[0]
    np.testing.assert_allclose(own, ecal, rtol=0, atol=1e-5 * ecal.max())


def test_a_missing_generator_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="generator.keras does not exist"):
        simulate.simulate(tmp_path, 4, tmp_path / "x.h5", progress=False)
    out = subprocess.run([sys.executable, "-m", "gan3d", "simulate", "--generator", str(tmp_path),
                          "--n", "4", "--energies", "lots", "--output", str(tmp_path / "x.h5")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "error:" in out.stderr and not (tmp_path / "x.h5").exists()


@pytest.mark.slow
def test_the_shipped_reference_generator_simulates_by_name(tmp_path):
    from gan3d.gan import reference

    out = simulate.simulate("reference", 16, tmp_path / "ref.h5", energies="50,400", batch=8,
                            precision="float32", progress=False)
    assert out["n"] == 16
    with h5py.File(tmp_path / "ref.h5") as f:
        assert f.attrs["origin"] == "gan" and '"showers_seen"' in f.attrs["generator_config"]
    ecal, energy = files.read_showers(tmp_path / "ref.h5")
    assert ecal.shape == (16, 25, 25, 25) and list(energy[:2]) == [50, 400]
    run = subprocess.run([sys.executable, "-m", "gan3d", "data", "check", str(tmp_path / "ref.h5")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "0 problem(s) in 1 file(s)" in run.stdout, run.stdout + run.stderr
    # a trained generator: the mean visible fraction at 400 GeV within a factor 2 of the data's
    frac = ecal[energy == 400].sum(axis=(1, 2, 3)).mean() / 400
    assert 0.5 < frac / reference.info()["final_monitors"]["per_energy"]["400"][
        "sampling_fraction"]["reference"] < 2


def test_the_shipped_pair_simulates_by_name_and_says_what_it_was_trained_on(tmp_path):
    from gan3d.gan import reference

    path = simulate._generator_file("long-2w")
    assert path == reference.SHIPPED["long-2w"] / "generator.weights.h5"
    lo, hi, where = simulate.trained_energies(path)  # its reference.json, not a default
    data = reference.info(path.parent)["config"]["data"]
    assert where == str(path.parent / "reference.json")
    assert (lo, hi) == (max(data["energy_min"], 10.0), min(data["energy_max"], 500.0))
    out = simulate.simulate("long-1w", 4, tmp_path / "pair.h5", energies="100", batch=4,
                            precision="float32", progress=False)
    with h5py.File(out["output"]) as f:
        assert f.attrs["generator"].endswith("long-1w/generator.weights.h5")
        assert '"forks"' in f.attrs["generator_config"]
        ecal = f["ECAL"][:]
    assert ecal.shape == (4, 25, 25, 25) and 0.01 < ecal.sum(axis=(1, 2, 3)).mean() / 100 < 0.2


def test_without_generator_simulate_takes_the_best_shipped_one_and_says_so(tmp_path):
    from gan3d.gan import reference

    run = subprocess.run([sys.executable, "-m", "gan3d", "simulate", "--n", "2", "--energies",
                          "100", "--batch", "2", "--precision", "float32", "--output",
                          str(tmp_path / "x.h5")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    best = reference.best()
    assert f"generator: {best}, the shipped one that met the most physics targets" in run.stdout
    with h5py.File(tmp_path / "x.h5") as f:
        assert f.attrs["generator"].endswith(f"{best}/generator.weights.h5")


def test_an_output_that_is_a_folder_another_result_or_too_large_is_refused_first(tmp_path,
                                                                                 generator):
    with pytest.raises(OutputNotWritable, match="is a folder; name the file"):
        simulate.simulate(generator, 4, tmp_path, progress=False)
    done = tmp_path / "done.h5"
    done.write_bytes(b"another run's showers")
    with pytest.raises(OutputExists, match="another result.*--force"):
        simulate.simulate(generator, 4, done, progress=False)
    assert done.read_bytes() == b"another run's showers"
    simulate.simulate(generator, 4, done, progress=False, precision="float32", force=True)
    assert files.read_showers(done)[0].shape == (4, 25, 25, 25)
    n = shutil.disk_usage(tmp_path).free // simulate.MIN_BYTES_PER_SHOWER + 1
    with pytest.raises(OutputNotWritable, match="GB free; write less"):
        simulate.simulate(generator, n, tmp_path / "huge.h5", progress=False)
    # what a writer killed with SIGKILL left of this output is removed by the next run
    stale = tmp_path / f".x{TMP_MARK}abc123.h5"
    stale.write_bytes(b"half a file")
    simulate.simulate(generator, 2, tmp_path / "x.h5", progress=False, precision="float32")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done.h5", "x.h5"]


def _default_signals() -> None:
    """In the child: every signal at its default, whatever the test runner's shell ignores (a
    background job's SIGINT), as in a terminal."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_during_a_large_simulate_leaves_nothing_behind(tmp_path, sig):
    """The signal comes once showers are being written (the writer's temporary file has grown
    past its targets' 1.6 MB: the first batches are in; the run would take minutes); afterwards
    the folder is empty, the exit code says which signal, and no traceback shows."""
    out = tmp_path / "big.h5"
    with subprocess.Popen([sys.executable, "-m", "gan3d", "simulate", "--generator", "reference",
                           "--n", "200000", "--output", str(out)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals) as proc:
        try:
            deadline = time.monotonic() + 300
            def written() -> int:
                return sum(p.stat().st_size for p in tmp_path.glob(".big*"))

            while written() < 1_800_000 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert written() >= 1_800_000, "the simulation never started writing showers"
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 128 + sig, stderr
    assert list(tmp_path.iterdir()) == []
    assert "Traceback" not in stdout + stderr
    assert stderr.strip().splitlines()[-1].startswith("gan3d simulate: interrupted")


def test_inside_a_loop_a_signal_waits_for_its_checkpoint():
    """A SIGTERM that comes while library code runs is held back (raised inside TensorFlow's
    code it was sometimes lost, and the simulation ran on); the loop's next checkpoint raises it,
    and outside the loop it raises at once."""
    import threading

    from gan3d import console

    assert threading.current_thread() is threading.main_thread()  # else the signal kills pytest
    # to this thread: a kill() of the process may land in another thread (pytest-xdist's), and
    # its Python handler then runs here later, after the block it was meant for
    send = lambda sig: signal.pthread_kill(threading.get_ident(), sig)  # noqa: E731
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for sig in saved:  # as in a terminal: under nohup (CI) SIGHUP is ignored, and stays so
            signal.signal(sig, signal.SIG_DFL)
        console.stop_on_signals()
        with pytest.raises(console.Stopped) as stopped:
            with console.signals_at_checkpoints():
                console.checkpoint()  # nothing came yet
                send(signal.SIGTERM)
                ran_on = sum(range(100_000))  # bytecodes after the signal: no raise here
                console.checkpoint()
                ran_on = None  # not reached
        assert stopped.value.signum == signal.SIGTERM and ran_on == 4_999_950_000
        with pytest.raises(console.Stopped) as stopped:
            with console.signals_at_checkpoints():
                send(signal.SIGHUP)  # no checkpoint: the block's end raises it
        assert stopped.value.signum == signal.SIGHUP
        with pytest.raises(console.Stopped):
            send(signal.SIGTERM)
            sum(range(100_000))
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_signal_the_process_was_started_to_ignore_stays_ignored(monkeypatch):
    from gan3d import console

    installed = {}
    monkeypatch.setattr(signal, "getsignal",
                        lambda sig: signal.SIG_IGN if sig == signal.SIGHUP else signal.SIG_DFL)
    monkeypatch.setattr(signal, "signal", lambda sig, handler: installed.__setitem__(sig, handler))
    console.stop_on_signals()
    assert list(installed) == [signal.SIGTERM]  # nohup's SIGHUP is left as it was


@pytest.mark.slow
@pytest.mark.parametrize("name", ["reference", "long-1w", "long-2w", "long-2w-none"])
def test_the_space_bound_is_below_what_a_shipped_generators_showers_take(tmp_path, name):
    """The free-space check refuses only what would surely not fit: every shipped generator's
    showers take more than simulate.MIN_BYTES_PER_SHOWER in the file."""
    out = tmp_path / "s.h5"
    simulate.simulate(name, 512, out, progress=False)
    assert out.stat().st_size / 512 > simulate.MIN_BYTES_PER_SHOWER
