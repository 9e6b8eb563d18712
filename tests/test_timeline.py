"""Horovod timelines split into computation, waiting and all-reduce per step, on synthetic traces
with known answers (the real 2-worker trace is checked in test_notebook_scaling.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gan3d.scaling import timeline


def _trace(compute: np.ndarray, coord: float = 200.0, transfer: float = 300.0,
           names=("d1", "d2", "g1", "g2", "step_losses"), fused=()) -> list[dict]:
    """A Horovod-style trace of steps x collectives, compute[r, step, c] microseconds on rank r
    before it submits collective c; returns events in the order rank 0's timeline holds them.
    In the steps listed in ``fused`` the last tensor travels in the same collective as the one
    before it (Horovod's fusion, which depends on timing)."""
    workers, steps, k = compute.shape
    ev = [{"name": "process_name", "ph": "M", "pid": i + 1, "args": {"name": f"{n}_1of1"}}
          for i, n in enumerate(names)]
    ev.append({"name": "process_name", "ph": "M", "pid": 99, "args": {"name": "broadcast_1of1"}})
    ev += [{"ph": "B", "name": "NEGOTIATE_BROADCAST", "ts": 0, "pid": 99},
           *({"ph": "X", "name": str(r), "ts": 0, "pid": 99, "dur": 0} for r in range(workers)),
           {"ph": "E", "ts": 1, "pid": 99}, {"ph": "B", "name": "BROADCAST", "ts": 2, "pid": 99},
           {"ph": "E", "ts": 10, "pid": 99, "args": {"dtype": "float32", "shape": "[4]"}}]
    t = np.full(workers, 10.0)
    for s in range(steps):
        for c in range(k):
            if s in fused and c == k - 1:  # same spans as the previous tensor: one collective
                ready, t[:] = ready, end - transfer - coord
            else:
                ready = t + compute[:, s, c]
            start, end = ready.max() + coord, ready.max() + coord + transfer
            if s in fused and c == k - 1:
                start -= 1  # fused members start microseconds apart, in no fixed order
            pid = c + 1
            ev.append({"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": ready.min(), "pid": pid})
            ev += [{"ph": "X", "name": str(r), "ts": ready[r], "pid": pid, "dur": 0}
                   for r in range(workers)]
            ev += [{"ph": "E", "ts": ready.max(), "pid": pid},
                   {"ph": "B", "name": "ALLREDUCE", "ts": start, "pid": pid},
                   {"ph": "B", "name": "MPI_ALLREDUCE", "ts": start + 1, "pid": pid},
                   {"ph": "E", "ts": end - 1, "pid": pid},
                   {"ph": "E", "ts": end, "pid": pid, "args": {"dtype": "float32", "shape": f"[{c + 1}, 10]"}}]
            t[:] = end
    return ev


def test_timeline_breakdown_recovers_compute_wait_and_comm(tmp_path):
    rng = np.random.default_rng(0)
    compute = rng.uniform(1e4, 3e4, (2, 6, 5))
    path = tmp_path / "timeline.json"
    text = json.dumps(_trace(compute))
    path.write_text(text[:-1] + ",")  # as Horovod leaves it while running: no closing bracket
    res = timeline.breakdown(timeline.load(path), 2, last_steps=4)
    assert res["collectives_per_step"] == 5 and res["steps"] == 4
    assert [m["bytes"] for m in res["messages"]] == [40 * (c + 1) for c in range(5)]
    for s, step in enumerate(res["per_step"]):
        c = compute[:, 2 + s, :]
        assert step["compute_s"] == pytest.approx(c.sum(axis=1) * 1e-6)
        assert step["wait_s"] == pytest.approx((c.max(axis=0) - c).sum(axis=1) * 1e-6)
        assert step["comm_s"] == pytest.approx(5 * 500e-6)
        assert step["transfer_s"] == pytest.approx(5 * 300e-6)
        assert step["duration_s"] == pytest.approx((c.max(axis=0).sum() + 5 * 500) * 1e-6)
    m = res["mean"]
    assert m["compute_fraction"] + m["wait_fraction"] + m["comm_fraction"] == pytest.approx(1.0)
    spans = np.array([[s[2], s[3]] for s in res["strip"] if s[0] == 1])
    assert np.all(np.diff(spans, axis=1) > 0) and np.all(spans[1:, 0] >= spans[:-1, 1] - 1e-12)


def test_a_collective_started_before_the_previous_one_ended_is_counted_once():
    """Horovod may take a rank's next tensor while the previous all-reduce still runs (seen on a
    loaded 2-core machine): that rank's waiting starts when the previous collective ends, not
    before, so its spans follow one another and add up to the step on every rank."""
    rng = np.random.default_rng(1)
    compute = rng.uniform(1e4, 3e4, (2, 6, 5))
    compute[0, 3, 2] = -100.0  # rank 0 submits 100 us before collective 1 of step 3 has ended
    res = timeline.breakdown(_trace(compute), 2, last_steps=4)
    step = res["per_step"][1]  # step 3 (the first two are the warm-up and the measuring start)
    c = compute[:, 3, :].copy()
    c[0, 2] = 0.0  # clipped at the previous end: no computation, no extra waiting
    assert step["wait_s"] == pytest.approx((c.max(axis=0) - c).sum(axis=1) * 1e-6)
    for s in res["per_step"]:
        assert min(s["compute_s"]) >= 0
        for r in range(2):
            assert s["compute_s"][r] + s["wait_s"][r] + s["comm_s"] == pytest.approx(s["duration_s"])
    for r in range(2):
        spans = sorted((a, b) for rank, _, a, b in res["strip"] if rank == r)
        assert all(b0 <= a1 + 1e-12 for (_, b0), (a1, _) in zip(spans, spans[1:]))


def test_timeline_steps_survive_fusion_that_varies_between_steps():
    """The loss tensor fused into the gradients' collective in some steps only (as Horovod does
    when it is submitted within one cycle), and starting just before them there: the collectives
    no longer repeat, the tensors in a canonical order still do."""
    compute = np.random.default_rng(1).uniform(1e4, 3e4, (2, 7, 5))
    ev = _trace(compute, fused=(2, 4))
    colls = timeline.collectives(ev, 2, "ALLREDUCE")
    assert len(colls) == 7 * 5 - 2
    with pytest.raises(timeline.TimelineError, match="no repeating step"):
        timeline.period([c["signature"] for c in colls])  # what a collective-level period sees
    res = timeline.breakdown(ev, 2)
    assert res["tensors_per_step"] == 5 and res["steps"] == 6
    assert [s["collectives"] for s in res["per_step"]] == [5, 4, 5, 4, 5, 5]
    for s, step in enumerate(res["per_step"], start=1):
        c = compute[:, s, :4] if s in (2, 4) else compute[:, s, :]
        assert step["duration_s"] == pytest.approx((c.max(axis=0).sum() + c.shape[1] * 500) * 1e-6)
        assert step["compute_s"] == pytest.approx(c.sum(axis=1) * 1e-6)
    assert res["messages"][-1]["name"] == "step_losses"


def test_a_loss_fused_with_the_next_collective_keeps_the_step_length():
    """The losses travel between two gradient collectives and, in one step, with the next one -
    whose tensor sorts before them by name (seen in a loaded CI run: 5 steps of 63 tensors read
    as 1 step of 126). Within a collective the tensors keep the order they first travelled in."""
    compute = np.random.default_rng(3).uniform(1e4, 3e4, (2, 7, 5))
    ev = _trace(compute, names=("d1", "d2", "g1", "step_losses", "g2"), fused=(3,))
    colls = timeline.collectives(ev, 2, "ALLREDUCE")
    assert len(colls) == 7 * 5 - 1
    by_name = [m for c in colls for m in sorted(c["tensors"])]
    assert by_name[3 * 5 + 3:3 * 5 + 5] == ["g2_1of1", "step_losses_1of1"]  # by name: out of place
    res = timeline.breakdown(ev, 2)
    assert res["tensors_per_step"] == 5 and res["steps"] == 6
    assert sorted(s["collectives"] for s in res["per_step"]) == [4, 5, 5, 5, 5, 5]  # the fused one: the later step


def test_a_trace_that_begins_mid_step_keeps_every_complete_step():
    """The losses reduced before the last update's gradients (TensorFlow may schedule them so):
    the trace begins with part of a step, and each step is measured from the loss of the one
    before, the first included."""
    compute = np.random.default_rng(2).uniform(1e4, 3e4, (2, 6, 5))
    ev = _trace(compute, names=("d1", "d2", "g1", "step_losses", "g2"))
    res = timeline.breakdown(ev, 2)
    assert res["tensors_per_step"] == 5 and res["steps"] == 5  # 6 steps, cut at the losses
    assert res["messages"][-1]["name"] == "step_losses"
    ends = sorted(e["ts"] for e in ev if e.get("ph") == "E" and e.get("pid") == 4
                  and "args" in e)  # every end of the losses' all-reduce
    assert sum(s["duration_s"] for s in res["per_step"]) == pytest.approx((ends[-1] - ends[0]) * 1e-6)
    assert timeline.breakdown(ev, 2, last_steps=4)["steps"] == 4


def test_timeline_errors(tmp_path):
    with pytest.raises(timeline.TimelineError, match="does not exist"):
        timeline.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[{\"ph\": ")
    with pytest.raises(timeline.TimelineError, match="not valid JSON"):
        timeline.load(tmp_path / "bad.json")
    with pytest.raises(timeline.TimelineError, match="no repeating step"):
        timeline.period(["a", "b", "c", "d", "e", "f"])


def test_a_breakdown_is_read_in_words():
    mean = {"compute_fraction": 0.9, "wait_fraction": 0.08, "comm_fraction": 0.02, "step_s": 1.5}
    result = {"collectives_per_step": 5, "mean": mean}
    assert timeline.breakdown_line(result) == ("5 all-reduces per step; computation 90.0 %, "
                                               "waiting 8.0 %, all-reduce 2.00 % of 1.50 s")
    assert "**compute-bound** here" in timeline.breakdown_reading(result)
    busy = {**result, "mean": {**mean, "compute_fraction": 0.7, "comm_fraction": 0.22}}
    assert "**not** compute-bound here" in timeline.breakdown_reading(busy)
