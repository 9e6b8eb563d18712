"""The measuring probes of the scaling experiments (``gan3d.scaling.probes``); the job runner
that runs them in each rank, its pinning and accounting, is tests/test_jobs.py."""

from __future__ import annotations

import pytest

from gan3d.scaling import probes


@pytest.mark.slow
def test_measure_step_rate_times_real_steps_within_physical_limits(tmp_path):
    """The step-rate probe times exactly the steps asked for, within what the cores can do, on
    random batches and on the real pipeline; a bad data source is a named choice."""
    from gan3d import config
    from gan3d.parallel.runtime import cpu_count

    cfg = config.resolve("quick", {"train.batch_size": 2, "data.path": str(tmp_path / "data"),
                                   "data.n_showers": 40, "data.n_files": 4})
    for data in ("random", "files"):
        r = probes.measure_step_rate(cfg, steps=2, warmup=1, data=data)
        assert len(r["step_times_s"]) == len(r["cpu_step_times_s"]) == 2
        # a process cannot use more CPU than its cores for the wall time (a wrong clock would)
        assert 0 < r["cpu_seconds_per_step"] <= 1.1 * cpu_count() * r["seconds_per_step"]
        assert (r["workers"], r["rank"], r["batch_size"]) == (1, 0, 2)
    with pytest.raises(ValueError, match="'random' or 'files'"):
        probes.measure_step_rate(cfg, steps=1, warmup=0, data="memory")
