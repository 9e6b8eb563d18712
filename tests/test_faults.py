"""Faults injected into real runs: a rank or an engine killed mid-epoch, a kernel interrupted, a
writer killed while writing a checkpoint, a full disk, a non-finite test loss. Each must end with
a named error, quickly, leave no process of the job behind and keep the last good checkpoint.

The measured times to fail are printed (``pytest -s``) for the reliability table of the README.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from gan3d import config
from gan3d.parallel import runtime

pytestmark = [pytest.mark.slow, pytest.mark.mpi]


def _overrides(tmp: Path, **extra) -> dict:
    """A tiny run whose epoch lasts long enough to be killed in the middle of it."""
    base = {"data.path": str(tmp / "data"), "data.n_showers": 200, "data.n_files": 4,
            "data.test_fraction": 0.25, "train.batch_size": 2, "train.steps_per_epoch": 60,
            "train.eval_fraction": 0.1, "train.epochs": 1, "train.output": str(tmp / "out")}
    return {**base, **extra}


def _sets(overrides: dict) -> list[str]:
    return [a for k, v in overrides.items() for a in ("--set", f"{k}={json.dumps(v)}")]


class _Job:
    """A launched command in its own session, its output collected, its process tree known."""

    def __init__(self, cmd: list[str]):
        self.proc = subprocess.Popen(cmd, env=runtime.mpi_environment(), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def rank_process(self, rank: int, timeout: float = 120) -> psutil.Process:
        """The process of ``rank`` once it is training (its first steps are done)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.tree():
                try:
                    env = p.environ()
                except psutil.Error:
                    continue
                if str(rank) in (env.get("OMPI_COMM_WORLD_RANK"), env.get("HOROVOD_RANK")) \
                        and "python" in p.name() and _training(p):
                    return p
            time.sleep(0.5)
        raise AssertionError("no training rank found:\n" + "".join(self.lines[-30:]))

    def output(self) -> str:
        return "".join(self.lines)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        time.sleep(0.2)  # the reader thread drains what is left
        self.proc.stdout.close()


def _training(p: psutil.Process) -> bool:
    """A rank is in its training loop once it has used a few seconds of CPU (TensorFlow loaded,
    the data made, the first steps run)."""
    try:
        return sum(p.cpu_times()[:2]) > 15
    except psutil.Error:
        return False


def _engine(p: psutil.Process) -> bool:
    """An ipyparallel engine's process (not its nanny, not the mpiexec that started it)."""
    try:
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        return False
    return "python" in p.name() and "ipyparallel.engine" in cmd and "nanny" not in cmd


def _gone(procs: list[psutil.Process], timeout: float = 10) -> list[psutil.Process]:
    """The processes of ``procs`` still alive after ``timeout`` s (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    alive = procs
    while time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            break
        time.sleep(0.2)
    return alive


def _mpirun() -> str:
    return str(runtime.env_bin() / "mpirun")


LAUNCHERS = {
    "gan3d train --workers 2": lambda o: [sys.executable, "-m", "gan3d", "train", "--workers", "2",
                                          *_sets(o)],
    "plain mpirun": lambda o: [_mpirun(), "-np", "2", sys.executable, "-m", "gan3d", "train",
                               *_sets(o)],
    "horovodrun (Gloo)": lambda o: [str(runtime.env_bin() / "horovodrun"), "-np", "2", "--gloo",
                                    sys.executable, "-m", "gan3d", "train", *_sets(o)],
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_killed_mid_epoch_ends_the_job_within_a_minute(tmp_path, launcher):
    job = _Job(LAUNCHERS[launcher](_overrides(tmp_path)))
    try:
        victim = job.rank_process(1)
        procs = job.tree()
        victim.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        code = job.proc.wait(timeout=90)
        elapsed = time.monotonic() - t0
    finally:
        job.close()
    print(f"\n{launcher}: rank 1 killed -> job ended in {elapsed:.1f} s, exit {code}")
    assert code != 0 and elapsed < 60, job.output()[-3000:]
    out = job.output()
    assert "rank 1" in out or "Process 1" in out or "rank=1" in out, out[-3000:]
    assert _gone(procs) == [], "processes of the job survived"
    assert not (tmp_path / "out" / "generator.keras").exists()


def test_sigterm_to_gan3d_train_alone_stops_its_ranks(tmp_path):
    """A batch system's stop (SIGTERM to the launching process only, not to its group): mpirun
    runs in a session of its own, so without the launcher's handler the ranks trained on as
    orphans. The job ends with 128 + 15, says why, and no rank or mpirun survives."""
    job = _Job(LAUNCHERS["gan3d train --workers 2"](_overrides(tmp_path)))
    try:
        job.rank_process(1)
        procs = job.tree()
        assert len(procs) >= 3, [p.name() for p in procs]  # mpirun and two ranks at least
        job.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        code = job.proc.wait(timeout=60)
        elapsed = time.monotonic() - t0
        left = _gone(procs, timeout=30)
    finally:
        job.close()
    print(f"\nSIGTERM to gan3d train -> ended in {elapsed:.1f} s, exit {code}")
    assert code == 128 + signal.SIGTERM, job.output()[-3000:]
    assert "SIGTERM received: stopping the 2 MPI ranks" in job.output()
    assert left == [], [" ".join(p.cmdline())[:80] for p in left]


def test_two_trainings_into_one_folder_the_second_refuses_at_once_naming_the_first(tmp_path):
    """The second `gan3d train` into a folder that a running one writes ends with one named
    line naming the first (process and host) and no traceback; the first trains on. One worker
    each, the cheapest run: the lock is rank 0's whatever the number of workers."""
    over = _overrides(tmp_path, **{"train.epochs": 50, "train.workers": 1})
    first = _Job([sys.executable, "-m", "gan3d", "train", *_sets(over)])
    lock = tmp_path / "out" / ".run.lock"
    try:
        deadline = time.monotonic() + 300
        while not (lock.is_file() and f"process {first.proc.pid} " in lock.read_text()):
            assert first.proc.poll() is None and time.monotonic() < deadline, first.output()
            time.sleep(0.2)
        second = subprocess.run([sys.executable, "-m", "gan3d", "train", *_sets(over)],
                                capture_output=True, text=True, timeout=300,
                                env=runtime.mpi_environment())
        assert first.proc.poll() is None  # the first goes on
    finally:
        first.close()
    assert second.returncode != 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"is being written by process {first.proc.pid} on " in second.stderr, \
        second.stderr[-2000:]
    assert "Traceback" not in second.stdout + second.stderr


def test_an_engine_killed_mid_training_ends_train_on_engines(tmp_path):
    from gan3d.exceptions import RankFailed
    from gan3d.parallel.cluster import train_on_engines

    cfg = config.resolve("quick", _overrides(tmp_path))
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    killed = {}

    def kill_rank_1():
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not killed:
            for p in me.children(recursive=True):
                try:
                    if (_engine(p)
                            and p.environ().get("OMPI_COMM_WORLD_RANK") == "1" and _training(p)):
                        p.send_signal(signal.SIGKILL)
                        killed.update(pid=p.pid, t=time.monotonic())
                        return
                except psutil.Error:
                    continue
            time.sleep(0.5)

    threading.Thread(target=kill_rank_1, daemon=True).start()
    with pytest.raises(RankFailed) as err:
        train_on_engines(cfg, workers=2)
    elapsed = time.monotonic() - killed["t"]
    print(f"\nengine of rank 1 killed -> RankFailed in {elapsed:.1f} s: {err.value}")
    # ipyparallel's own report (the engine's socket closed) or the package's liveness check
    assert err.value.rank == 1 and ("died" in str(err.value) or str(killed["pid"]) in str(err.value))
    assert elapsed < 60
    left = [p for p in me.children(recursive=True) if p.pid not in before]
    assert _gone(left) == []


def test_interrupting_the_kernel_stops_the_engines(tmp_path):
    """Ctrl-C (SIGINT to the kernel) while a notebook cell runs train_on_engines."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="gan3d")
    km.start_kernel(env={**runtime.mpi_environment(), "IPP_NONINTERACTIVE": "1"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        kernel = psutil.Process(km.provisioner.process.pid)
        code = textwrap.dedent(f"""
            from gan3d import config
            from gan3d.parallel.cluster import train_on_engines
            train_on_engines(config.resolve("quick", {_overrides(tmp_path)!r}), workers=2)
        """)
        msg_id = kc.execute(code)
        deadline = time.monotonic() + 180
        engines = []
        while time.monotonic() < deadline and not (len(engines) == 2
                                                    and all(map(_training, engines))):
            engines = [p for p in kernel.children(recursive=True) if _engine(p)]
            time.sleep(0.5)
        assert len(engines) == 2 and all(map(_training, engines)), "the engines are not training"
        tree = kernel.children(recursive=True)
        t0 = time.monotonic()
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=120)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=120)
        elapsed = time.monotonic() - t0
        print(f"\nkernel interrupted -> cell ended in {elapsed:.1f} s")
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert _gone(tree, timeout=15) == [], "engines or controller survived the interrupt"
        assert kernel.is_running()  # the kernel itself lives on for the next cell
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _snippet(tmp: Path, body: str) -> subprocess.CompletedProcess:
    """Run ``body`` in a fresh interpreter with ``cfg`` (a tiny run into ``tmp/out``) and
    ``training`` in scope, under a ``__main__`` guard."""
    (tmp / "overrides.json").write_text(json.dumps(_overrides(tmp, **{
        "data.n_showers": 48, "train.steps_per_epoch": 1, "train.eval_fraction": 0.5})))
    code = (textwrap.dedent(f"""
        import json, os, signal, sys
        from pathlib import Path
        from gan3d import config
        from gan3d.gan import training
        cfg = config.resolve("quick", json.loads(Path({str(tmp / "overrides.json")!r}).read_text()))
        if __name__ == "__main__":
    """) + textwrap.indent(textwrap.dedent(body), "    "))
    script = tmp / "snippet.py"
    script.write_text(code)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, env=runtime.mpi_environment())


def test_a_writer_killed_while_writing_a_checkpoint_leaves_the_last_one_and_can_resume(tmp_path):
    first = _snippet(tmp_path, "training.train(cfg)")
    assert first.returncode == 0, first.stderr[-3000:]
    ckpts = tmp_path / "out" / "checkpoints"
    good = (ckpts / "epoch-0001.npz").read_bytes()
    killed = _snippet(tmp_path, """
        real_write = Path.write_bytes
        def dying_write(self, data):  # a part of the checkpoint on disk, then SIGKILL
            if self.name.startswith(".epoch-0002.tmp-"):
                with open(self, "wb") as fh:
                    fh.write(bytes(data)[:100_000])
                    fh.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return real_write(self, data)
        Path.write_bytes = dying_write
        training.train(cfg.replace(**{"train.epochs": 2}), resume=True)
    """)
    assert killed.returncode == -signal.SIGKILL
    assert (ckpts / "epoch-0001.npz").read_bytes() == good  # the last good one, untouched
    left = [p.name for p in ckpts.iterdir() if p.name != "epoch-0001.npz"]
    assert len(left) == 1 and left[0].startswith(".epoch-0002.tmp-")  # what the kill left
    history = (tmp_path / "out" / "history.jsonl").read_text().splitlines()
    assert len(history) == 1  # no epoch that no checkpoint holds
    resumed = _snippet(tmp_path, "print(json.dumps(training.train(cfg.replace("
                                 "**{'train.epochs': 2}), resume=True).to_dict()))")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["resumed_from"] == 1
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch-0001.npz", "epoch-0002.npz"]
    assert "removed" in resumed.stderr and ".epoch-0002.tmp-" in resumed.stderr


def test_a_full_disk_is_a_named_error_and_keeps_the_last_good_checkpoint(tmp_path):
    out = _snippet(tmp_path, """
        import resource
        from gan3d.exceptions import OutputNotWritable
        training.train(cfg)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # as a full disk: write() fails, no signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))
        try:
            training.train(cfg.replace(**{"train.epochs": 2}), resume=True)
        except OutputNotWritable as exc:
            print("NAMED", exc)
            sys.exit(3)
    """)
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-3000:]
    assert "file-size limit" in out.stdout and "epoch-0002.npz" in out.stdout
    ckpts = tmp_path / "out" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch-0001.npz"]
    assert len((tmp_path / "out" / "history.jsonl").read_text().splitlines()) == 1


def test_a_non_finite_test_loss_stops_the_run_like_a_training_one(tmp_path, monkeypatch):
    from gan3d.exceptions import NonFiniteLoss
    from gan3d.gan import training
    from gan3d.gan.horovod import HorovodStep

    real = HorovodStep.eval_sums
    monkeypatch.setattr(HorovodStep, "eval_sums",
                        lambda self, batch, draws: real(self, batch, draws) * np.nan)
    cfg = config.resolve("quick", _overrides(tmp_path, **{
        "data.n_showers": 48, "train.steps_per_epoch": 1, "train.eval_fraction": 0.5}))
    with pytest.raises(NonFiniteLoss, match=r"non-finite test loss .*test_d_loss=nan"):
        training.train(cfg)
    assert not list((tmp_path / "out" / "checkpoints").glob("*.npz"))


def test_six_engine_clusters_in_a_row_leave_nothing_behind(tmp_path, monkeypatch):
    import tempfile

    from gan3d.parallel.cluster import mpi_engines

    private = tmp_path / "tmp"  # the cluster's temporary files go here, and only theirs
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", None)
    # Its own IPython folder: another test process may run a cluster meanwhile, whose connection
    # files would show in a shared security/ folder (seen once in CI).
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    security = tmp_path / "ipython" / "profile_default" / "security"
    files_before = set(security.glob("*")) if security.is_dir() else set()
    me = psutil.Process()
    listening_before = {c.laddr for c in me.net_connections("inet") if c.status == "LISTEN"}
    children_before = {p.pid for p in me.children(recursive=True)}
    t0 = time.monotonic()
    # Each cycle is checked on its own (its processes gone within 10 s), so a leak shows in the
    # cycle that makes it; six cycles also catch one that needs a few to add up (ports, files).
    for _ in range(6):
        with mpi_engines(2) as cluster:
            assert cluster.run(os.getpid, stream=False) == [cluster.pid_of_rank[r] for r in (0, 1)]
        new = [p for p in me.children(recursive=True) if p.pid not in children_before]
        assert _gone(new, timeout=10) == [], [" ".join(p.cmdline()) for p in new]
    print(f"\n6 start/stop cycles of a 2-engine cluster: {time.monotonic() - t0:.0f} s")
    listening = {c.laddr for c in me.net_connections("inet") if c.status == "LISTEN"}
    assert listening <= listening_before
    assert (set(security.glob("*")) if security.is_dir() else set()) <= files_before
    assert list(private.iterdir()) == []


def test_a_killed_kernel_leaves_no_engine_behind(tmp_path):
    """A kernel that dies without cleaning up (SIGKILL: out of memory, "kill kernel"): the
    watchdog started beside the cluster ends the engines, the controller and mpiexec, and removes
    the cluster file the kernel would have removed."""
    from jupyter_client.manager import KernelManager

    security = tmp_path / "ipython" / "profile_default" / "security"
    km = KernelManager(kernel_name="gan3d")
    km.start_kernel(env={**runtime.mpi_environment(), "IPP_NONINTERACTIVE": "1",
                         "IPYTHONDIR": str(tmp_path / "ipython")})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        kernel = psutil.Process(km.provisioner.process.pid)
        msg_id = kc.execute("from gan3d.parallel.cluster import start_engines\n"
                            "engines = start_engines(2)")
        reply = kc.get_shell_msg(timeout=180)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=180)
        assert reply["content"]["status"] == "ok"
        tree = kernel.children(recursive=True)
        assert sum(map(_engine, tree)) == 2
        assert any(security.glob("cluster-*.json"))  # the file a clean stop would remove
        t0 = time.monotonic()
        kernel.send_signal(signal.SIGKILL)
        left = _gone(tree, timeout=20)
        print(f"\nkernel killed -> its engines ended in {time.monotonic() - t0:.1f} s")
        assert left == [], [" ".join(p.cmdline())[:80] for p in left]
        deadline = time.monotonic() + 10  # the watchdog removes the file after the processes
        while any(security.glob("*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(p.name for p in security.glob("*")) == []
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
