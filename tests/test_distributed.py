"""Real multi-process runs: Horovod all-reduce over 2 MPI ranks, by mpirun and by ipyparallel."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil
import pytest

from gan3d import distributed
from gan3d.engines import mpi_engines
from gan3d.exceptions import RankFailed

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "mpi_scripts" / "collectives.py"
sys.path.insert(0, str(SCRIPT.parent))  # the engines import the same module (add_import_path)

pytestmark = pytest.mark.mpi


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_world_size_one_needs_no_launcher():
    world = distributed.init()
    assert (world.rank, world.size, world.is_root) == (0, 1, True)
    assert distributed.average([3.0]) == [3.0]


def test_mpirun_two_ranks_allreduce(tmp_path):
    distributed.launch(2, [sys.executable, str(SCRIPT), str(tmp_path)], timeout=120, stream=False)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r, res in enumerate(ranks):
        assert (res["rank"], res["size"], res["local_size"]) == (r, 2, 2)
        assert res["sum"] == [3.0, 20.0]          # 1 + 2, 10 + 10
        assert res["mean"] == 0.5                 # (0 + 1) / 2
        assert res["yield_when_idle"] == "1"      # applied by the package, not by the user
        assert res["inter_threads"] == 1
        assert res["intra_threads"] == max(1, psutil.cpu_count() // 2)
    assert ranks[0]["pid"] != ranks[1]["pid"]


def test_mpirun_fails_fast_with_the_failing_rank(tmp_path):
    start = time.monotonic()
    with pytest.raises(RankFailed) as err:
        distributed.launch(2, [sys.executable, str(SCRIPT), str(tmp_path), "1"], timeout=120,
                           stream=False)
    assert err.value.rank == 1
    assert "deliberate failure on rank 1" in err.value.message
    assert time.monotonic() - start < 90  # rank 0 was stuck in an all-reduce: it must not hang


@pytest.mark.slow
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
