"""ipyparallel MPI engines: Horovod across engines, a clean shutdown, a failing rank reported
at once, and rank 0's output streamed while it runs."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import psutil
import pytest

from gan3d.exceptions import RankFailed
from gan3d.parallel import cluster
from gan3d.parallel.cluster import mpi_engines

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "mpi_scripts"))  # the engines import the same module


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_stream_writes_only_what_is_new_to_the_right_stream(capsys):
    ar = types.SimpleNamespace(stdout="a\n", stderr="")
    shown = {"stdout": 0, "stderr": 0}
    cluster._stream(ar, shown)
    ar.stdout, ar.stderr = "a\nb\n", "epoch 1/3 ...\r"
    cluster._stream(ar, shown)
    cluster._stream(ar, shown)  # nothing new: nothing written
    out = capsys.readouterr()
    assert out.out == "a\nb\n" and out.err == "epoch 1/3 ...\r"
    assert shown == {"stdout": 4, "stderr": 14}


def test_remote_error_names_the_exception():
    class Failed:
        def get(self, timeout):
            err = RuntimeError("boom")
            err.ename, err.evalue = "ValueError", "deliberate failure on rank 1"
            raise err

    assert cluster._remote_error(Failed()) == "ValueError: deliberate failure on rank 1"


@pytest.mark.slow
@pytest.mark.mpi
def test_ipyparallel_mpi_engines_allreduce_and_clean_shutdown():
    before = _children()
    with mpi_engines(2) as cluster:
        cluster.add_import_path(str(HERE / "mpi_scripts"))
        from collectives import allreduce_check  # noqa: E402 - same module the engines import

        results = cluster.run(allreduce_check, stream=False)
        engine_pids = {r["pid"] for r in results}
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["sum"] == [3.0, 20.0] and r["size"] == 2 for r in results)
    time.sleep(0.5)
    assert _children() <= before, "processes left behind after the cluster stopped"
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in engine_pids)


@pytest.mark.slow
@pytest.mark.mpi
def test_ipyparallel_rank_failure_is_reported_and_cleaned_up():
    before = _children()
    start = time.monotonic()
    with pytest.raises(RankFailed) as err:
        with mpi_engines(2) as cluster:
            cluster.add_import_path(str(HERE / "mpi_scripts"))
            from collectives import fail_on

            cluster.run(fail_on, 1, stream=False, timeout=120)
    assert err.value.rank == 1 and "deliberate failure on rank 1" in str(err.value)
    assert time.monotonic() - start < 120
    time.sleep(0.5)
    assert _children() <= before
