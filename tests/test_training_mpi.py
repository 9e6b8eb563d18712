"""Data-parallel training with real MPI processes: 2 ranks launched by the package's mpirun.

The scripts run in tests/mpi_scripts/training_checks.py and write JSON that these tests read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gan3d.parallel import runtime
from gan3d.config import resolve
from gan3d.parallel.launch import launch
from gan3d.exceptions import RankFailed

SCRIPT = Path(__file__).resolve().parent / "mpi_scripts" / "training_checks.py"

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def _ranks(folder: Path, n: int = 2) -> list[dict]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(n)]


def _tiny(tmp: Path, **extra) -> dict:
    """Overrides of the quick profile for a run of a few tiny steps."""
    base = {"data.path": str(tmp / "data"), "data.n_showers": 48, "data.n_files": 4,
            "data.test_fraction": 0.25, "train.batch_size": 2, "train.steps_per_epoch": 1,
            "train.precision": "float32",  # the equality checks are exact in float32
            "train.eval_fraction": 1 / 3}
    return {**base, **extra}


def _launch(np_: int, out: Path, plan: list) -> None:
    launch(np_, [sys.executable, str(SCRIPT), str(out), json.dumps(plan)],
                       timeout=900, stream=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """All 2-rank checks in one launch (starting TensorFlow and Horovod is most of the cost),
    plus the 1-rank reference of the equality check, run without any launcher."""
    out = tmp_path_factory.mktemp("mpi")
    full = _tiny(out, **{"train.epochs": 2, "train.output": str(out / "full")})
    part = _tiny(out, **{"train.epochs": 1, "train.output": str(out / "part"),
                         "train.eval_mode": "serial"})
    local = _tiny(out, **{"train.epochs": 2, "train.steps_per_epoch": 3, "train.sync_every": 2,
                          "train.eval_mode": "none", "train.output": str(out / "localsgd")})
    bf16 = [["sync_bf16", "sync", [2, 2, "bfloat16"]]] if runtime.cpu_has_bf16() else []
    # Forks of `full` after its epoch 1 (a different worker count is the 1-process test's), and
    # `part` resumed, in the same launch once `train` has written their checkpoints.
    parent = str(out / "full" / "checkpoints" / "epoch-0001.npz")
    same = _tiny(out, **{"train.epochs": 2, "train.output": str(out / "fork_same"),
                         "train.fork_from": parent})
    warm = _tiny(out, **{"train.epochs": 2, "train.output": str(out / "fork_warm"),
                         "train.fork_from": parent, "train.lr_warmup_epochs": 2,
                         "train.seed": 8})
    _launch(2, out, [["equal2", "equal", [HALF]], ["sync", "sync", []], *bf16,
                     ["local", "local", []],
                     ["train", "train", [[[full, False], [part, False], [local, False]]]],
                     ["resumed", "train", [[[dict(part, **{"train.epochs": 2}), True],
                                            [same, False], [warm, False]]]]])
    plan = json.dumps([["equal1", "equal", [HALF]]])
    subprocess.run([sys.executable, str(SCRIPT), str(out), plan], check=True,
                   env=runtime.mpi_environment(), timeout=900, capture_output=True)
    return out


HALF = 2  # the equality check's per-rank batch; the 1-rank reference gets 2 x HALF


def test_weights_are_bit_identical_on_all_ranks_after_steps(runs):
    r0, r1 = _ranks(runs / "sync")
    assert (r0["size"], r1["size"]) == (2, 2)
    assert r0["initial"] != r1["initial"]  # each rank built its own weights: only the
    # broadcast of rank 0's can make them equal (a missing broadcast fails below)
    assert r0["seeds"] != r1["seeds"]  # per-rank noise and dropout ...
    assert r0["trained"] == r1["trained"]  # ... yet every weight is bit-identical after 2 steps
    assert r0["optimiser"] == r1["optimiser"]  # RMSprop state too
    # BatchNorm moving statistics come from each rank's own batches until they are averaged.
    assert r0["bn_before_sync"] != r1["bn_before_sync"]
    assert r0["all_after_sync"] == r1["all_after_sync"]
    assert r0["losses"] == r1["losses"]  # the step's losses are averaged over ranks


@pytest.mark.skipif(not runtime.cpu_has_bf16(), reason="this CPU has no bfloat16 arithmetic "
                    "(AVX512_BF16 or AMX): bfloat16 would be emulated, and the float32 test holds")
def test_weights_are_bit_identical_on_all_ranks_in_bfloat16_with_the_cpu_layers(runs):
    """bfloat16 asked for on a CPU that has it (mixed bfloat16 with the discriminator's CPU
    layers: 3x the float32 rate with AMX) keeps the ranks identical too: its dropout mask, fused BatchNorm and folded
    convolution draw and reduce nothing that differs between ranks."""
    r0, r1 = _ranks(runs / "sync_bf16")
    assert r0["policy"] == "mixed_bfloat16"
    assert {"FoldedConv3D", "FusedBatchNormalization", "MaskDropout"} <= set(r0["layers"])
    assert r0["initial"] != r1["initial"] and r0["seeds"] != r1["seeds"]
    assert r0["trained"] == r1["trained"] and r0["optimiser"] == r1["optimiser"]
    assert r0["bn_before_sync"] != r1["bn_before_sync"]
    assert r0["all_after_sync"] == r1["all_after_sync"]
    assert r0["losses"] == r1["losses"]
    assert r0["trained"] != _ranks(runs / "sync")[0]["trained"]  # it did train in bfloat16


def test_local_sgd_steps_alone_then_averages_every_state_variable(runs):
    r0, r1 = _ranks(runs / "local")
    assert r0["losses"] != r1["losses"]  # local steps: each rank's own losses, no all-reduce
    differ = sum(a != b for a, b in zip(r0["before"], r1["before"]))
    assert differ > 50  # weights, BN statistics and RMSprop states drifted apart
    assert r0["after"] == r1["after"] and r0["all_after"] == r1["all_after"]
    mean = (np.asarray(r0["sums_before"]) + np.asarray(r1["sums_before"])) / 2
    np.testing.assert_allclose(r0["sums_after"], mean, rtol=1e-4, atol=1e-4)
    params = 73_402 + 872_808  # trainable: D, G
    assert 8 * params <= r0["bytes"] < 1.01 * 8 * params  # weights + mean squares (+ BN), float32
    # A 2-epoch training with k = 2 and 3 steps per epoch: syncs after steps 2 and 4, and the
    # final one after step 6 (the end of the run).
    rows = [json.loads(s) for s in (runs / "localsgd" / "history.jsonl").read_text().splitlines()]
    assert [(r["sync_every"], r["syncs"]) for r in rows] == [(2, 1), (2, 2)]
    # Each sync all-reduces at least the state's 8 bytes per parameter, which no memory moves
    # faster than 1 TB/s; and the syncs happen inside the epoch's training time.
    assert all(r["syncs"] * 8 * params / 1e12 < r["time_sync_s"] < r["time_train_s"] for r in rows)
    assert all(np.isfinite(r["d_loss"]) for r in rows)


def _rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


def test_two_ranks_of_batch_b_equal_one_rank_of_batch_2b(runs):
    ref = _ranks(runs / "equal1", 1)[0]
    r0, r1 = _ranks(runs / "equal2")
    assert (ref["size"], r0["size"]) == (1, 2)
    for key in ("d_inf", "g_inf", "d_bn", "g_bn", "update"):
        assert r0[key] == r1[key]  # both ranks hold the same averaged gradients
    # Inference-mode BatchNorm, per-sample noise and flips: equal up to float rounding.
    assert _rel(ref["d_inf"], r0["d_inf"]) < 1e-4
    assert _rel(ref["g_inf"], r0["g_inf"]) < 1e-4
    # The weight update of a full step (4 RMSprop updates) agrees too; RMSprop normalises each
    # gradient element, so a handful of near-zero elements may flip sign: allow 0.1 % of them.
    update, diff = np.abs(ref["update"]), np.abs(np.subtract(ref["update"], r0["update"]))
    assert np.median(diff) < 1e-3 * np.median(update)
    assert np.mean(diff > 0.02 * update.max()) < 1e-3
    # Per-rank batch statistics (training mode, Dropout off) move the gradients measurably:
    # the paper's set-up (no synchronised BatchNorm) is not exactly large-batch SGD.
    d_bn, g_bn = _rel(ref["d_bn"], r0["d_bn"]), _rel(ref["g_bn"], r0["g_bn"])
    print(f"relative gradient change from per-rank BN statistics: D {d_bn:.3g}, G {g_bn:.3g}")
    assert d_bn > 100 * _rel(ref["d_inf"], r0["d_inf"])
    assert g_bn > 100 * _rel(ref["g_inf"], r0["g_inf"])


def test_resume_continues_exactly_and_serial_eval_equals_distributed(runs):
    resumed = json.loads((runs / "resumed" / "rank0.json").read_text())["runs"][0]
    assert resumed["resumed_from"] == 1 and resumed["workers"] == 2
    a = np.load(runs / "full" / "checkpoints" / "epoch-0002.npz")
    b = np.load(runs / "part" / "checkpoints" / "epoch-0002.npz")
    names = [k for k in a.files if k != "meta"]
    assert len(names) > 70
    assert all(np.array_equal(a[k], b[k]) for k in names)  # bit-identical models and optimisers
    ha = [json.loads(s) for s in (runs / "full" / "history.jsonl").read_text().splitlines()]
    hb = [json.loads(s) for s in (runs / "part" / "history.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in hb] == [1, 2]
    for ra, rb in zip(ha, hb):
        assert [ra[k] for k in ("d_loss", "g_loss", "d_aux", "g_ecal")] == \
               [rb[k] for k in ("d_loss", "g_loss", "d_aux", "g_ecal")]
        # Serial (rank 0 alone) and distributed evaluation see the same showers and fakes.
        assert (rb["eval_mode"], ra["eval_mode"]) == ("serial", "distributed")
        assert rb["test_d_loss"] == pytest.approx(ra["test_d_loss"], rel=1e-5)
        assert rb["test_g_loss"] == pytest.approx(ra["test_g_loss"], rel=1e-5)


def test_a_fork_on_two_ranks_continues_its_parent_exactly_and_warms_up_from_the_fork(runs):
    """A fork that changes nothing is the uninterrupted run, bit for bit: every weight, RMSprop
    and BatchNorm variable of the parent came back on both ranks. A fork with a warm-up starts its
    ramp at the fork (lr = the base lr in its first step), not at the parent's first epoch."""
    r = json.loads((runs / "resumed" / "rank0.json").read_text())["runs"]
    parent = str(runs / "full" / "checkpoints" / "epoch-0001.npz")
    assert [x["forked_from"] for x in r] == [None, parent, parent]
    assert [x["resumed_from"] for x in r] == [1, None, None]
    a = np.load(runs / "full" / "checkpoints" / "epoch-0002.npz")
    b = np.load(runs / "fork_same" / "checkpoints" / "epoch-0002.npz")
    names = [k for k in a.files if k != "meta"]
    assert all(np.array_equal(a[k], b[k]) for k in names)
    rows = [json.loads(s) for s in (runs / "fork_same" / "history.jsonl").read_text().splitlines()]
    full = [json.loads(s) for s in (runs / "full" / "history.jsonl").read_text().splitlines()]
    assert [x["d_loss"] for x in rows] == [x["d_loss"] for x in full]  # the parent's row kept
    record = json.loads((runs / "fork_same" / "config.json").read_text())["fork"]
    assert (record["epoch"], record["workers"], record["changed"]) == (1, 2, {})
    warm = json.loads((runs / "fork_warm" / "config.json").read_text())["fork"]
    assert warm["changed"] == {"train.lr_warmup_epochs": [0, 2], "train.seed": [7, 8]}
    meta = json.loads(str(np.load(runs / "fork_warm" / "checkpoints" / "epoch-0002.npz")["meta"]))
    assert meta["fork"]["sha256"] == warm["sha256"]  # every checkpoint of a fork names its parent
    lr = [json.loads(s)["lr"] for s in (runs / "fork_warm" / "history.jsonl").read_text().splitlines()]
    base = resolve("quick", {}).train.learning_rate
    assert lr[0] == full[0]["lr"] == pytest.approx(2 * base)  # the parent's epoch: lr x 2 workers
    assert lr[1] == pytest.approx(base)  # the fork's first (and only) step: the ramp's start


def test_missing_data_stops_every_rank_with_the_named_error(tmp_path, capfd):
    """Each rank reports the named error in one marked line, with no traceback (a traceback is
    for errors that are not named)."""
    bad = {"data.source": "clic", "data.path": str(tmp_path / "nowhere"),
           "train.output": str(tmp_path / "out")}
    with pytest.raises(RankFailed) as err:
        launch(2, [sys.executable, str(SCRIPT), str(tmp_path),
                   json.dumps([["bad", "train", [[[bad, False]]]]])], timeout=900, stream=True)
    assert "DataFileMissing" in err.value.message and "nowhere" in err.value.message
    seen = capfd.readouterr()
    assert "FAILED: DataFileMissing" in seen.out and "Traceback" not in seen.out + seen.err
    assert not list((tmp_path / "out").glob("checkpoints/*.npz"))
