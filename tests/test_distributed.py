"""Real multi-process runs: Horovod all-reduce over 2 MPI ranks launched by the package's mpirun,
and a failing rank that ends the job at once (ipyparallel engines: test_cluster.py)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gan3d.parallel import distributed
from gan3d.parallel.launch import launch
from gan3d.exceptions import RankFailed

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "mpi_scripts" / "collectives.py"

pytestmark = pytest.mark.mpi


def test_world_size_one_needs_no_launcher():
    world = distributed.init()
    assert (world.rank, world.size, world.is_root) == (0, 1, True)
    assert distributed.average([3.0]) == [3.0]


def test_mpirun_two_ranks_allreduce(tmp_path):
    launch(2, [sys.executable, str(SCRIPT), str(tmp_path)], timeout=120, stream=False)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r, res in enumerate(ranks):
        assert (res["rank"], res["size"], res["local_size"]) == (r, 2, 2)
        assert res["sum"] == [3.0, 20.0]          # 1 + 2, 10 + 10
        assert res["mean"] == 0.5                 # (0 + 1) / 2
        assert res["yield_when_idle"] == "1"      # applied by the package, not by the user
        assert res["inter_threads"] == 1
        # Bound by the package's mpirun to its share of the cores: one thread per core it holds.
        assert res["cores"] == max(1, len(os.sched_getaffinity(0)) // 2)
        assert res["intra_threads"] == res["cores"]
    assert ranks[0]["pid"] != ranks[1]["pid"]


def test_mpirun_fails_fast_with_the_failing_rank(tmp_path):
    start = time.monotonic()
    with pytest.raises(RankFailed) as err:
        launch(2, [sys.executable, str(SCRIPT), str(tmp_path), "1"], timeout=120,
                           stream=False)
    assert err.value.rank == 1
    assert "deliberate failure on rank 1" in err.value.message
    assert time.monotonic() - start < 90  # rank 0 was stuck in an all-reduce: it must not hang
