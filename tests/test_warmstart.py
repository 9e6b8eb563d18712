"""The warm-start equivalence study: configuration names, the plan's order, the forked runs'
settings, the paired test against an independent computation, and (slow) a tiny study end to end
from a real checkpoint with real MPI runs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from gan3d import config
from gan3d.parallel import runtime
from gan3d.convergence import analysis, warmstart
from gan3d.exceptions import ConfigError


def test_configuration_names_say_workers_rule_k_and_precision():
    assert warmstart.parse("1w") == {"workers": 1, "rule": "linear", "sync_every": 1,
                                     "precision": "float32"}
    assert warmstart.parse("2w-none") == {"workers": 2, "rule": "none", "sync_every": 1,
                                          "precision": "float32"}
    assert warmstart.parse("2w-linear-k16")["sync_every"] == 16
    assert warmstart.parse("1w-bf16")["precision"] == "bfloat16"
    assert warmstart.parse("2w-sqrt")["rule"] == "sqrt"
    assert warmstart.parse("4w-linear-wu1") == {"workers": 4, "rule": "linear", "sync_every": 1,
                                                "precision": "float32", "warmup": 1}
    for bad in ("2workers", "1w-linear", "2w-k0", "0w", "1w-k4", "1w-wu1", "2w-none-wu1",
                "2w-linear-wu0", "2w-wu"):
        with pytest.raises(ConfigError, match="warm.configs"):
            warmstart.parse(bad)


def test_a_rule_sets_the_lr_of_every_step_and_a_warm_up_ramps_from_the_fork():
    """lr x N, lr x sqrt(N), lr, and lr ramped to lr x N over the fork's first evaluation
    interval, computed here from the rules' definitions."""
    from gan3d.gan.training import learning_rate

    cfg = config.resolve("quick", {})
    lr, per = cfg.warm.learning_rate, 1 / 1  # an evaluation interval is one epoch of the run
    for name, workers, at_fork, after in (("4w-linear", 4, 4 * lr, 4 * lr),
                                          ("4w-sqrt", 4, 2 * lr, 2 * lr),
                                          ("2w-none", 2, lr, lr),
                                          ("2w-linear-wu1", 2, lr, 2 * lr),
                                          ("2w-sqrt-wu2", 2, lr, 2 ** 0.5 * lr)):
        c = warmstart.run_config(cfg, warmstart.WarmRun(name, 0), _start())
        assert c.train.workers == workers
        assert learning_rate(c, workers, 0.0) == pytest.approx(at_fork), name
        assert learning_rate(c, workers, 2 * per) == pytest.approx(after), name
    half = warmstart.run_config(cfg, warmstart.WarmRun("2w-linear-wu1", 0), _start())
    assert learning_rate(half, 2, 0.5) == pytest.approx(1.5 * lr)  # halfway up the ramp
    assert warmstart.run_kind({"workers": 2, "warmup": 1}) == "warmup"
    assert warmstart.run_kind({"workers": 2, "sync_every": 1}) == "allreduce"


def test_the_plan_runs_block_by_block_each_seed_as_a_pair(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda *a: False)
    cfg = config.resolve("quick", {"warm.seeds": 2,
                                   "warm.configs": ["1w", "2w-linear", "1w-bf16", "2w-none"]})
    assert [r.id for r in warmstart.plan(cfg)] == [
        "1w-s0", "2w-linear-s0", "1w-s1", "2w-linear-s1", "2w-none-s0", "2w-none-s1"]
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda *a: True)
    assert "1w-bf16-s1" in [r.id for r in warmstart.plan(cfg)]


def _start():
    return {"path": "p.npz", "file": "/x/p.npz", "epoch": 26, "showers_seen": 41600,
            "config": {"data": {"source": "synthetic", "n_showers": 24000, "n_files": 12,
                                "seed": 20190620}}}


def test_a_pair_forks_the_checkpoint_and_sees_the_same_showers_in_the_same_order():
    cfg = config.resolve("quick", {})
    one = warmstart.run_config(cfg, warmstart.WarmRun("1w", 3), _start())
    two = warmstart.run_config(cfg, warmstart.WarmRun("2w-linear", 3), _start())
    for c in (one, two):
        assert c.train.fork_from == "/x/p.npz" and c.train.data_order == "global"
        assert c.train.epochs == 26 + cfg.warm.points and c.train.eval_mode == "none"
        assert c.data.n_showers == 24000 and c.data.seed == 20190620
        assert c.data.path == cfg.warm.data_path
    assert one.train.seed == two.train.seed  # the seed sets the sequence, whatever the workers
    # the same showers per point: 1 worker x 32 x s1 = 2 workers x 32 x s2
    assert one.train.steps_per_epoch == 2 * two.train.steps_per_epoch
    assert one.train.steps_per_epoch * 32 * cfg.warm.points == cfg.warm.showers
    assert (two.train.workers, two.train.scale_lr, one.train.precision) == (2, True, "float32")
    with pytest.raises(ConfigError, match="must be a multiple of"):
        warmstart.run_config(cfg.replace(**{"warm.showers": 100}), warmstart.WarmRun("1w", 0),
                             _start())


def test_the_paired_interval_is_the_t_interval_of_the_differences():
    rng = np.random.default_rng(4)
    common = rng.normal(0, 1.0, 6)  # a large seed-to-seed spread, shared by the pair
    ref = common + rng.normal(0, 0.01, 6)
    cand = common + 0.02 + rng.normal(0, 0.01, 6)
    res = analysis.paired_tost(cand, ref, 0.1)
    d = cand - ref
    low, high = stats.t.interval(0.90, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert res["low"] == pytest.approx(low) and res["high"] == pytest.approx(high)
    assert res["verdict"] == "equivalent" and res["corr"] > 0.99
    # unpaired, the same numbers decide nothing: the seeds' spread swamps the margin
    assert analysis.tost(cand, ref, 0.1)["verdict"] == "inconclusive"
    assert analysis.paired_tost(cand + 0.5, ref, 0.1)["verdict"] == "different"
    assert analysis.paired_tost(cand[:1], ref[:1], 0.1)["verdict"] == "too few seeds"
    with pytest.raises(ValueError, match="as many"):
        analysis.paired_tost(cand, ref[:3], 0.1)


@pytest.mark.parametrize("diff,sd,margin", [(0.0, 0.1, 0.05), (0.02, 0.05, 0.05),
                                            (0.2, 0.3, 0.05)])
def test_seeds_needed_is_the_least_count_that_decides(diff, sd, margin):
    n = int(analysis.paired_seeds_needed(diff, sd, margin))
    half = lambda k: stats.t.ppf(0.95, k - 1) * sd / np.sqrt(k)  # noqa: E731
    gap = abs(margin - abs(diff))
    assert half(n) < gap and (n == 2 or half(n - 1) >= gap)
    assert np.isnan(analysis.paired_seeds_needed(margin, sd, margin))  # on the margin: never


@pytest.mark.slow
@pytest.mark.mpi
def test_a_tiny_warm_start_study_forks_a_real_checkpoint_on_1_and_2_workers(tmp_path):
    data = tmp_path / "data"
    parent = subprocess.run(
        [sys.executable, "-m", "gan3d", "train", "--set", "data.n_showers=160",
         "--set", "data.n_files=2", "--set", f"data.path={data}", "--set", "train.epochs=1",
         "--set", "train.steps_per_epoch=2", "--set", "train.batch_size=8",
         "--set", "train.eval_mode=none", "--set", "train.monitor_showers=0",
         "--set", f"train.output={tmp_path / 'parent'}"],
        capture_output=True, text=True, timeout=600)
    assert parent.returncode == 0, parent.stderr[-2000:]
    out = tmp_path / "warm.json"
    args = [sys.executable, "-m", "gan3d", "warm-start",
            "--set", f"warm.checkpoint={tmp_path / 'parent'}", "--set", f"warm.data_path={data}",
            "--set", "warm.showers=32", "--set", "warm.points=2", "--set", "warm.batch_size=8",
            "--set", "warm.monitor_showers=4", "--set", "warm.seeds=2",
            "--set", 'warm.configs=["1w", "2w-linear"]', "--set", f"warm.output={out}",
            "--set", f"warm.workdir={tmp_path / 'runs'}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "4 of 4 runs done" in done.stdout
    # one line per quantity, numbers rounded, a quantity the JSON holds as null reads n/a
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("  2w-linear vs 1w ")]
    assert [ln.split()[3].rstrip(":") for ln in lines] == list(analysis.MARGINS)
    assert all("2 seeds, diff " in ln and "90 % [" in ln for ln in lines)
    res = json.loads(out.read_text())
    assert res["kind"] == "warm_start" and res["parent"]["epoch"] == 1
    assert set(res["runs"]) == {"1w-s0", "2w-linear-s0", "1w-s1", "2w-linear-s1"}
    for rid, run in res["runs"].items():
        assert run["showers"] == 32 and len(run["rows"]) == 2
        assert run["machine"] == res["machine"]["cpu_model"]  # each run records its CPU
        assert run["lr"] == pytest.approx(2e-3 if rid.startswith("2w") else 1e-3)
        conf = json.loads((tmp_path / "runs" / rid / "config.json").read_text())
        assert conf["fork"]["epoch"] == 1 and conf["config"]["train"]["data_order"] == "global"
    rows = res["verdicts"]
    assert [r["monitor"] for r in rows] == list(analysis.MARGINS)
    assert all(r["n"] == 2 and r["seeds"] == [0, 1] for r in rows)
    # the seeds differ: seed 1's pair did not repeat seed 0's
    assert res["runs"]["1w-s0"]["rows"][-1]["g_loss"] != res["runs"]["1w-s1"]["rows"][-1]["g_loss"]


def test_a_verdict_line_rounds_and_says_what_is_not_finite():
    row = {"candidate": "2w-linear", "reference": "1w", "monitor": "max_layer", "n": 9,
           "verdict": "inconclusive", "diff": 0.123456, "low": None, "high": 0.5, "margin": 0.5,
           "seeds_needed": 27.0}
    line = warmstart.describe(row)
    assert line == ("2w-linear vs 1w max_layer: inconclusive (9 seeds, diff +0.123, 90 % [n/a, "
                    "+0.5], margin +-0.5; ~27 seeds to decide)")
    assert "to decide" not in warmstart.describe({**row, "verdict": "equivalent"})
    # a count that cannot be had (no spread, or the interval as wide as the margin) is left out
    for nothing in (None, float("nan")):
        assert warmstart.describe({**row, "seeds_needed": nothing}).endswith("margin +-0.5)")
    assert warmstart.describe({**row, "diff": float("nan")}).count("n/a") == 2


def test_the_committed_study_is_current_for_this_checkouts_training_code():
    """Main may add runs to studies/warm_start.json only where a behavioural check showed that
    its training code makes the runs already there (bit for bit, or within the machine's noise
    where each code trains alike but the two differ in the last bits), of every kind; a change
    that trains otherwise fails here (and `gan3d warm-start` refuses) rather than mix numbers."""
    from pathlib import Path

    from gan3d.convergence.verify import stale_runs

    committed = warmstart.load(Path(__file__).resolve().parents[1] / "studies" / "warm_start.json")
    old = stale_runs(committed, warmstart.SUBJECT)
    assert old == [], (
        f"{len(old)} run(s) of studies/warm_start.json were made by other training code: run "
        "`gan3d warm-start --verify-code COMMIT` from a clean checkout")
