"""The whole 3DGAN step over emulated networks, and where each network stops scaling.

:func:`step_study` times the full training step on computing ranks that sit in separate network
namespaces (``gan3d scale --network``) over each link profile and sets it against the model;
:func:`projection` asks the model, for the paper's GPUs with nodes joined by each profile's link,
at how many workers the all-reduce reaches a given share of a step (10 %: the point where a
cluster user should start to care), per batch.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import console
from ..parallel import netns
from . import perfmodel
from .interconnect import calibrated, link_check

__all__ = ["step_study", "step_table", "projection", "projection_table", "steps_section",
           "projection_section", "network_sections"]


def step_study(cfg, profiles: Sequence[str] = ("native", "10gbe", "1gbe"), workers: int = 2,
               calibration: dict | None = None, output=None) -> dict:
    """The full 3DGAN training step on ``workers`` computing ranks, one per namespace, over
    each profile (``gan3d scale --network``: Horovod over MPI/TCP), measured; and modelled as
    the step on the first profile (the unshaped one) plus what the ring model says the step's
    all-reduces (D's and G's gradients, twice each, and the losses) take longer on the slower
    link, with no overlap of computation and communication assumed."""
    import tempfile
    from pathlib import Path

    from . import experiments

    wl = experiments.model_workload(cfg)
    rows = []
    folder = Path(output) if output else Path(tempfile.mkdtemp(prefix="gan3d-steps-"))
    for prof in console.progress(profiles, desc="3DGAN step per network", unit="network"):
        with netns.Network(workers, prof) as net:
            link = link_check(net)
        res = experiments.run(cfg, workers=(workers,), network=prof, output=folder / prof)
        pt = res["points"][0]
        rows.append({"profile": prof, "link": link, "workers": workers,
                     "batch_per_worker": pt["batch_per_worker"], "step_s": pt["step_time_s"],
                     "step_times_s": pt["step_times_s"], "showers_per_s": pt["showers_per_s"]})
    o, endpoint = calibrated(calibration, workers)

    def comm(link: dict) -> float:
        model = perfmodel.Link(link["bandwidth_Bps"], link["latency_s"])
        return sum(perfmodel.allreduce_time(n, workers, model, o, endpoint=endpoint)
                   for n in wl.allreduce_bytes)

    base = rows[0]
    for r in rows:
        r["model_comm_s"] = comm(r["link"])
        r["predicted_s"] = base["step_s"] + r["model_comm_s"] - comm(base["link"])
        r["rel_error"] = r["predicted_s"] / r["step_s"] - 1
        r["comm_share_model"] = r["model_comm_s"] / r["step_s"]
    return {"workers": workers, "allreduce_bytes": list(wl.allreduce_bytes), "rows": rows,
            "base": base["profile"], "config": {"batch_size": cfg.train.batch_size,
                                                "steps": cfg.scale.steps,
                                                "repeats": cfg.scale.repeats}}


def step_table(result: dict) -> str:
    """Markdown: the 3DGAN step per network, measured against the model."""
    rows = [[r["profile"] + (" (base)" if r["profile"] == result["base"] else ""),
             f"{r['link']['bandwidth_Bps'] / 1e9:.3g}", f"{r['step_s']:.3f}",
             f"{r['predicted_s']:.3f}", f"{r['rel_error']:+.1%}",
             f"{r['model_comm_s'] * 1e3:.1f} ms ({r['comm_share_model']:.1%})",
             f"{r['showers_per_s']:.2f}"] for r in result["rows"]]
    return console.table(rows, ["network", "link GB/s", "step s (measured)", "model s", "error",
                                "all-reduces (model)", "showers/s"])


def projection(batches: Sequence[int] = (8, 64, 512), share: float = 0.1,
               profiles: Sequence[str] = ("edr", "10gbe", "1gbe")) -> dict:
    """Model: the worker count at which the all-reduce reaches ``share`` of a step, for the
    paper's GPUs (P100 at the rate the paper's own numbers imply, 4 per node on NVLink) with
    nodes joined by each profile's link (its nominal bandwidth and latency), per batch."""
    import dataclasses

    wl = perfmodel.threedgan_workload()
    base = perfmodel.paper_hardware(wl)
    rows = []
    for prof in profiles:
        link = netns.PROFILES[prof]
        hw = dataclasses.replace(base, inter=perfmodel.Link(link.rate_Bps, link.latency_s or 0.0))
        rows.append({"profile": prof, "bandwidth_Bps": link.rate_Bps, "latency_s": link.latency_s,
                     "workers": {str(b): perfmodel.crossover_workers(b, wl, hw, share=share)
                                 for b in batches}})
    ps = [int(round(x)) for x in np.unique(np.logspace(0, 4, 41).round())]
    for r in rows:
        link = netns.PROFILES[r["profile"]]
        hw = dataclasses.replace(base, inter=perfmodel.Link(link.rate_Bps, link.latency_s or 0.0))
        r["efficiency"] = {str(b): [float(e) for e in perfmodel.efficiency(ps, b, wl, hw)]
                           for b in batches}
    return {"share": share, "batches": list(batches), "rows": rows, "workers": ps,
            "hardware": "paper: P100, 4 per node on NVLink, nodes on the profile's link"}


def projection_table(result: dict) -> str:
    """Markdown: per network and batch, the workers at which the all-reduce reaches the share."""
    rows = [[f"{netns.PROFILES[r['profile']].name} ({r['bandwidth_Bps'] / 1e9:.3g} GB/s, "
             f"{r['latency_s'] * 1e6:.0f} us)",
             *(f"{w:,}" if w else "> 10^7" for w in r["workers"].values())]
            for r in result["rows"]]
    return console.table(rows, ["network between nodes",
                                *(f"batch {b}" for b in result["batches"])])


def steps_section(result: dict) -> str:
    """Markdown: the whole 3DGAN step measured over each emulated network (:func:`step_study`),
    introduced, then :func:`step_table`."""
    return (f"**The whole 3DGAN step** on {result['workers']} computing ranks, one per namespace, "
            "over each network (`gan3d scale --network PROFILE`, Horovod over MPI/TCP, batch "
            f"{result['config']['batch_size']} per rank; measured), against the model: the step on "
            "the unshaped network plus what the ring model says the step's all-reduces take longer "
            "on the slower link (no overlap assumed):\n\n" + step_table(result))


def projection_section(result: dict) -> str:
    """Markdown: where each network stops scaling (:func:`projection`), introduced, then
    :func:`projection_table`."""
    return ("**Where each network stops scaling** (model): the paper's GPUs (4 per node on "
            "NVLink), nodes joined by each network, the worker count at which the all-reduce "
            f"reaches {100 * result['share']:g} % of a step, per batch per worker (the paper's is "
            "512). Small batches reach it within a handful of nodes on Ethernet:\n\n"
            + projection_table(result))


def network_sections(result: dict) -> list[str]:
    """What notebook 03 shows of a committed interconnect study (``studies/network.json``), one
    Markdown block each: the model against the measurements per network
    (:func:`gan3d.scaling.interconnect.model_table`) and its reading, tensor fusion and the whole
    step per network where measured."""
    from . import interconnect

    out = [interconnect.model_table(result), interconnect.reading(result)]
    if "fusion" in result:
        out.append(interconnect.fusion_section(result["fusion"]))
    if "steps" in result:
        out.append(steps_section(result["steps"]))
    return out
