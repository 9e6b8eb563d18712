"""Horovod's timeline, read: where each step's time goes - computation, all-reduce, waiting.

With ``HOROVOD_TIMELINE=file`` rank 0 (the coordinator) writes a Chrome trace: one "process" per
tensor, and per collective a ``NEGOTIATE_<OP>`` span with a tick per rank when that rank submitted
the tensor, then the ``<OP>`` span in which the data moves. For one collective ``c``:

* ``ready[c][r]`` - the tick of rank r; ``all_ready`` = the latest tick;
* waiting of rank r = ``all_ready - ready[r]`` (it had nothing to do but wait for the others);
* communication = ``end - all_ready`` (coordination until the op starts, then the transfer).

A step is one period of the repeating sequence of tensors (not of collectives: which tensors
Horovod fuses into one collective depends on timing); its duration is the time between
the ends of the last collectives of consecutive steps, and computation = duration - waiting -
communication. Ticks of ranks other than 0 reach the coordinator at its next cycle
(``HOROVOD_CYCLE_TIME``), so the split between waiting and coordination is good to about a cycle.
Times in the results are seconds.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from ..exceptions import Gan3dError

__all__ = ["load", "collectives", "period", "breakdown", "breakdown_line", "breakdown_reading"]

_DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8,
                "uint8": 1, "int8": 1, "bool": 1}


class TimelineError(Gan3dError, ValueError):
    """A Horovod timeline file is missing, unreadable, or holds no repeating step."""


def load(path: str | Path) -> list[dict]:
    """The events of a timeline file. Horovod leaves the JSON array open until it shuts down
    cleanly, so a missing closing bracket (or a trailing comma) is tolerated."""
    path = Path(path)
    if not path.is_file():
        raise TimelineError(f"timeline {path} does not exist; was HOROVOD_TIMELINE passed to the ranks?")
    text = path.read_text().strip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    try:
        events = json.loads(re.sub(r",\s*\]$", "]", text))
    except json.JSONDecodeError as exc:
        raise TimelineError(f"timeline {path} is not valid JSON ({exc})") from None
    return [e for e in events if isinstance(e, dict)]


def _nbytes(args: dict | None) -> int:
    if not args or "shape" not in args:
        return 0
    dims = [int(d) for d in re.findall(r"\d+", str(args["shape"]))]
    return int(np.prod(dims, dtype=np.int64)) * _DTYPE_BYTES.get(str(args.get("dtype")), 4)


def _tensor_ops(events: list[dict]) -> list[dict]:
    """Per tensor and collective: its name, rank ticks, op start/end (us), bytes."""
    names = {e["pid"]: e["args"].get("name", str(e["pid"])) for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in e.get("args", {})}
    ops, open_ = [], {}  # open_[pid] = (record, stack of open span names)
    for e in events:
        pid, ph = e.get("pid"), e.get("ph")
        if pid not in names or ph not in ("B", "E", "X"):
            continue
        rec, stack = open_.get(pid, (None, []))
        if ph == "B" and not stack:
            if e["name"].startswith("NEGOTIATE_"):
                rec = {"tensor": names[pid], "ready": {}, "op": e["name"][len("NEGOTIATE_"):]}
            elif rec is not None:
                rec["start"] = e["ts"]
            stack = [e["name"]]
        elif ph == "B":
            stack = stack + [e["name"]]
        elif ph == "X" and rec is not None and stack and stack[0].startswith("NEGOTIATE_"):
            if e["name"].isdigit():
                rec["ready"][int(e["name"])] = e["ts"]
        elif ph == "E" and stack:
            stack = stack[:-1]
            if not stack and rec is not None and "start" in rec:
                rec["end"], rec["bytes"] = e["ts"], _nbytes(e.get("args"))
                ops.append(rec)
                rec = None
        open_[pid] = (rec, stack)
    return ops


def _ordered_ops(events: list[dict], workers: int, op: str | None = None) -> list[dict]:
    """The per-tensor collectives every rank took part in, in order of start; only
    those of kind ``op`` if given. ``group`` is the tensor's name without the ``_<i>of<n>`` that
    tells the members of a grouped all-reduce apart."""
    ops = [o for o in _tensor_ops(events) if len(o["ready"]) == workers and op in (None, o["op"])]
    for o in ops:
        o["group"] = re.sub(r"_\d+of\d+$", "", o["tensor"])
    return sorted(ops, key=lambda o: o["start"])


def _fuse(ops: list[dict], workers: int) -> list[dict]:
    """Tensors whose op spans overlap were fused into one collective: the collectives, in time
    order, each with ``tensors``, ``members`` (indices into ``ops``), ``bytes``, per-rank
    ``ready`` (us), ``all_ready``, ``start``, ``end`` and a ``signature``."""
    out: list[dict] = []
    for i, o in enumerate(ops):
        if out and o["start"] <= out[-1]["end"]:
            c = out[-1]
            c["tensors"].append(o["tensor"])
            c["members"].append(i)
            c["bytes"] += o["bytes"]
            c["end"] = max(c["end"], o["end"])
            c["ready"] = [max(a, o["ready"][r]) for r, a in enumerate(c["ready"])]
        else:
            out.append({"tensors": [o["tensor"]], "members": [i], "bytes": o["bytes"],
                        "start": o["start"], "end": o["end"],
                        "ready": [o["ready"][r] for r in range(workers)], "op": o["op"]})
    for c in out:
        c["all_ready"] = max(c["ready"])
        c["signature"] = "|".join(sorted({ops[i]["group"] for i in c["members"]}))
    return out


def collectives(events: list[dict], workers: int, op: str | None = None) -> list[dict]:
    """The collectives of a timeline in time order (tensors fused by Horovod counted as one);
    see :func:`_fuse` for their fields."""
    return _fuse(_ordered_ops(events, workers, op), workers)


def period(signatures: list[str], min_match: float = 0.9) -> int:
    """The length of one step in a sequence of names: the smallest lag at which the sequence
    repeats itself (at least ``min_match`` of the positions agree). Start-up broadcasts and a
    trailing summary barely lower the score; a step of K items scores 1 at lags K, 2K, ..."""
    m = len(signatures)
    for k in range(1, m // 2 + 1):
        agree = sum(signatures[i] == signatures[i + k] for i in range(m - k))
        if agree / (m - k) >= min_match:
            return k
    raise TimelineError(f"no repeating step in {m} tensors; record more steps (>= 3)")


def _step_of_ops(names: list[str], k: int) -> list[int]:
    """The step each tensor belongs to (0, 1, ...), -1 outside the complete steps of the periodic
    stretch. Steps are found on tensors, not on fused collectives, because which tensors Horovod
    fuses depends on timing (a small loss tensor joins the gradients in one step, not in the next).

    A step ends with the tensor that carries the step's losses when there is one (its name
    contains ``loss``), so that figures show whole steps; otherwise the phase is arbitrary, which
    changes no mean.
    """
    end = max((i for i in range(k, len(names)) if names[i] == names[i - k]), default=-1)
    if end < 0:
        raise TimelineError(f"no repeating step in {len(names)} tensors; record more steps (>= 3)")
    start = end
    while start - k >= 0 and names[start - k] == names[start]:
        start -= 1
    start = max(start - k + 1, 0)  # first index of the periodic stretch
    window = names[start:start + k]
    first_end = start + ([j for j in range(k) if "loss" in window[j]] or [k - 1])[0]
    step = [-1] * len(names)
    for s, e in enumerate(range(first_end, end + 1, k)):
        if e - k + 1 >= start:
            for i in range(e - k + 1, e + 1):
                step[i] = s
    return step


def _steps(colls: list[dict], step_of_op: list[int], last_steps: int | None) -> list[list[int]]:
    """Indices of the collectives of each complete step, oldest first (the last ``last_steps``).
    A collective belongs to the latest step among its tensors. A step is measured from the end of
    the collective before it, so a complete step at the very start of the trace only marks where
    the second begins; one preceded by part of a step (the trace began mid-period: the loss
    tensor is reduced before the last update's gradients) is measured from that part's end."""
    by_step: dict[int, list[int]] = {}
    for ci, c in enumerate(colls):
        s = max(step_of_op[i] for i in c["members"])
        if s >= 0:
            by_step.setdefault(s, []).append(ci)
    steps = [idx for s, idx in sorted(by_step.items()) if idx[0] > 0]
    if last_steps:
        steps = steps[-last_steps:]
    if not steps:
        raise TimelineError("the timeline holds no complete step after the first one")
    return steps


def breakdown(events: list[dict], workers: int, *, last_steps: int | None = None,
              strip_steps: int = 3) -> dict:
    """Per-step computation, waiting and communication of each rank from a timeline's events.

    Returns ``per_step`` (lists per rank), ``mean`` (seconds per step, averaged over steps and
    ranks, plus fractions of the step), ``collectives_per_step`` (the median: fusion varies),
    ``tensors_per_step``, the ``messages`` of the last step (bytes) and a ``strip`` of the last
    ``strip_steps`` steps for drawing: spans ``[rank, kind, start_s, end_s]`` with kind
    compute | wait | comm, time from the strip's start.
    """
    # Steps are made of all-reduces; the start-up broadcasts (one per variable) are not.
    ops = _ordered_ops(events, workers, "ALLREDUCE")
    colls = _fuse(ops, workers)
    if len(colls) < 4:
        raise TimelineError(f"only {len(colls)} complete collectives in the timeline")
    # The tensors in a canonical order: collective by collective; within one (the members of a
    # fused or grouped collective start microseconds apart, in an order that varies) by the
    # collective each tensor first travelled in, then by name. A tensor fused into its neighbour's
    # collective in one step so keeps its place in the step's sequence (by name alone, the losses
    # fused with the discriminator's next gradients sorted after them, and 5 steps of 63 tensors
    # then repeated at 126).
    first: dict[str, int] = {}
    for ci, c in enumerate(colls):
        for i in c["members"]:
            first.setdefault(ops[i]["tensor"], ci)
    order = [i for c in colls
             for i in sorted(c["members"], key=lambda i: (first[ops[i]["tensor"]], ops[i]["tensor"]))]
    names = [ops[i]["tensor"] for i in order]
    k = period(names)
    step_of_op = [-1] * len(ops)
    for i, s in zip(order, _step_of_ops(names, k)):
        step_of_op[i] = s
    steps = _steps(colls, step_of_op, last_steps)
    us = 1e-6
    per_step = []
    for idx in steps:
        prev_end = colls[idx[0] - 1]["end"]
        tiles = [_tiles(colls, idx, r, prev_end) for r in range(workers)]
        dur = (tiles[0][-1][2] - prev_end) * us
        comm = sum(b - a for kind, a, b in tiles[0] if kind == "comm") * us  # alike on all ranks
        transfer = sum(max(0.0, colls[i]["end"] - max(colls[i]["start"], a))
                       for i, (_, a, _) in zip(idx, [t for t in tiles[0] if t[0] == "comm"])) * us
        wait = [sum(b - a for kind, a, b in tiles[r] if kind == "wait") * us
                for r in range(workers)]
        per_step.append({"duration_s": dur, "comm_s": comm, "transfer_s": transfer,
                         "coordination_s": comm - transfer, "wait_s": wait,
                         "compute_s": [dur - w - comm for w in wait], "collectives": len(idx)})
    mean = {"step_s": float(np.mean([s["duration_s"] for s in per_step])),
            "compute_s": float(np.mean([s["compute_s"] for s in per_step])),
            "wait_s": float(np.mean([s["wait_s"] for s in per_step])),
            "comm_s": float(np.mean([s["comm_s"] for s in per_step])),
            "transfer_s": float(np.mean([s["transfer_s"] for s in per_step])),
            "coordination_s": float(np.mean([s["coordination_s"] for s in per_step]))}
    for key in ("compute", "wait", "comm"):
        mean[f"{key}_fraction"] = mean[f"{key}_s"] / mean["step_s"] if mean["step_s"] > 0 else math.nan
    return {"steps": len(per_step), "tensors_per_step": k,
            "collectives_per_step": int(np.median([len(idx) for idx in steps])),
            "per_step": per_step, "mean": mean,
            "messages": [{"tensors": len(colls[i]["tensors"]), "bytes": colls[i]["bytes"],
                          "name": colls[i]["signature"]} for i in steps[-1]],
            "strip": _strip(colls, steps[-strip_steps:], workers)}


def _strip(colls: list[dict], steps: list[list[int]], workers: int) -> list[list]:
    """Spans of the given steps per rank: compute until ready, wait until all ready, comm to end."""
    t0 = colls[steps[0][0] - 1]["end"]
    spans = []
    for r in range(workers):
        prev = t0
        for idx in steps:
            tiles = _tiles(colls, idx, r, prev)
            spans += [[r, *t] for t in tiles]
            prev = tiles[-1][2]
    return [[r, kind, (a - t0) * 1e-6, (b - t0) * 1e-6] for r, kind, a, b in spans if b > a]


def _tiles(colls: list[dict], idx: list[int], rank: int, prev: float) -> list[tuple]:
    """``rank``'s time from ``prev`` to the end of the collectives ``idx``, in spans that follow
    one another: computation until its tensor is ready, waiting until every rank's is, the
    all-reduce until it ends - 3 per collective, ``(kind, start, end)``, some empty. Horovod may
    start a collective before the one before it has ended (a rank submits its next tensor while
    the previous one is still being reduced): the overlap is counted once, in the earlier
    collective, so that the spans add up to the step's duration on every rank."""
    out = []
    for i in idx:
        c = colls[i]
        ready = max(c["ready"][rank], prev)
        all_ready = max(c["all_ready"], ready)
        end = max(c["end"], all_ready)
        out += [("compute", prev, ready), ("wait", ready, all_ready), ("comm", all_ready, end)]
        prev = end
    return out


def breakdown_line(result: dict) -> str:
    """A recorded step breakdown (``result``: :func:`gan3d.scaling.experiments.record_timeline`)
    in one line: all-reduces per step and the shares of computation, waiting and all-reduce."""
    m = result["mean"]
    return (f"{result['collectives_per_step']} all-reduces per step; computation "
            f"{100 * m['compute_fraction']:.1f} %, waiting {100 * m['wait_fraction']:.1f} %, "
            f"all-reduce {100 * m['comm_fraction']:.2f} % of {m['step_s']:.2f} s")


def breakdown_reading(result: dict) -> str:
    """Markdown: whether training is compute-bound here (all-reduce under 10 % of a step), as in
    the paper's profile."""
    m = result["mean"]
    bound = m["comm_fraction"] < 0.10
    return (f"Reading: the all-reduce takes {100 * m['comm_fraction']:.1f} % of a step, so "
            "training is " + ("**compute-bound** here, as in the paper's nvprof profile" if bound
                              else "**not** compute-bound here, unlike in the paper's nvprof "
                              "profile")
            + f"; the step is {100 * m['compute_fraction']:.1f} % computation and "
            f"{100 * m['wait_fraction']:.1f} % one worker waiting for the other.")
