"""Energy per trained shower, the paper's unanswered question: measured where counters exist,
estimated elsewhere, and always labelled which.

**Measured** needs energy counters: RAPL through ``/sys/class/powercap`` on Intel and recent AMD
CPUs (:func:`counters`), NVML (``nvidia-smi``) on GPUs. Virtual machines rarely expose them;
then the numbers here are **estimates** from a documented model: every busy component draws a
fixed power, idle ones a smaller one, and nothing else is counted (memory, fans, network,
power supply losses: the estimates are lower bounds of the wall-socket energy).

Powers (:data:`WATTS`) are vendor figures (thermal design power, TDP) or stated assumptions.
The paper's runs (20 h 16 min on 1 P100, 2 h 14 min on 12) are split with the serial fraction
that its published speed-up implies (:func:`gan3d.scaling.perfmodel.serial_fraction`): during the
serial test-loss evaluation one GPU works and the others of the job idle, which costs energy as
well as time; with a distributed evaluation (what the package does) every GPU evaluates.
"""

from __future__ import annotations

import math
from pathlib import Path

from . import perfmodel as pm

__all__ = ["WATTS", "counters", "cpu_estimate", "paper_runs", "energy_table"]

POWERCAP = Path("/sys/class/powercap")

# name: (watts, source). "vendor": a published TDP; "assumption": stated here, change it to taste.
WATTS = {
    "cpu_core": (280.0 / 64, "vendor: AMD EPYC 7763, 280 W TDP over 64 cores (a busy core's share)"),
    "p100": (300.0, "vendor: NVIDIA Tesla P100 SXM2 TDP"),
    "p100_idle": (30.0, "assumption: an idle P100 at 10 % of its TDP"),
    "power8_socket": (190.0, "vendor: IBM POWER8 in the S822LC for HPC, 190 W per socket"),
    "socket_load": (0.5, "assumption: the hosts' sockets at half their TDP while GPUs train"),
}


def counters(root: Path = POWERCAP) -> dict[str, Path]:
    """The RAPL energy counters of this machine (``{domain name: energy_uj file}``); empty when
    there are none (most virtual machines), so energy can only be estimated."""
    out = {}
    if root.is_dir():
        for zone in sorted(root.glob("*rapl*")):
            f, name = zone / "energy_uj", zone / "name"
            if f.is_file():
                out[name.read_text().strip() if name.is_file() else zone.name] = f
    return out


def cpu_estimate(showers_per_s: float, cores: int) -> dict:
    """Estimated joules per trained shower of a CPU run: ``cores`` busy cores at
    ``WATTS["cpu_core"]`` each, ``showers_per_s`` trained."""
    watts = cores * WATTS["cpu_core"][0]
    return {"kind": "estimate", "watts": watts, "joule_per_shower": watts / showers_per_s,
            "source": WATTS["cpu_core"][1]}


def _node_watts(busy: int, gpus: int) -> float:
    """A job's power: ``busy`` of its ``gpus`` P100 working, the rest idle, on 4-GPU nodes."""
    nodes = math.ceil(gpus / 4)
    w = WATTS
    return (busy * w["p100"][0] + (gpus - busy) * w["p100_idle"][0]
            + nodes * 2 * w["power8_socket"][0] * w["socket_load"][0])


def paper_runs() -> dict:
    """Estimated energy of the paper's runs: 1 GPU, 12 GPUs with the serial evaluation it used,
    and 12 GPUs with a distributed evaluation, from its published times and speed-up."""
    P = pm.PAPER
    p, e = P["workers"], P["train_efficiency"]
    s = pm.serial_fraction(P["time_1_s"] / P["time_12_s"], p, e)
    t1 = P["time_1_s"]
    train1, eval1 = (1 - s) * t1, s * t1
    trained = P["epochs"] * P["train_showers"]
    runs = {
        "1 GPU": [(train1, _node_watts(1, 1)), (eval1, _node_watts(1, 1))],
        "12 GPUs, serial evaluation (paper)": [(train1 / (p * e), _node_watts(p, p)),
                                               (eval1, _node_watts(1, p))],
        "12 GPUs, distributed evaluation": [(train1 / (p * e), _node_watts(p, p)),
                                            (eval1 / p, _node_watts(p, p))],
    }
    out = {}
    for name, phases in runs.items():
        joules = sum(t * w for t, w in phases)
        seconds = sum(t for t, _ in phases)
        out[name] = {"hours": seconds / 3600, "kwh": joules / 3.6e6,
                     "joule_per_shower": joules / trained,
                     "eval_idle_kwh": (phases[1][0] * (phases[1][1] - _node_watts(1, 1))
                                       / 3.6e6 if "serial" in name else 0.0)}
    return {"kind": "estimate", "serial_fraction": s, "trained_showers": trained, "runs": out,
            "watts": {k: {"value": v, "source": src} for k, (v, src) in WATTS.items()}}


def energy_table(paper: dict, here: dict | None = None) -> str:
    """Markdown: the paper's runs (estimated) and, if given, a run here (measured or estimated)."""
    lines = ["| run | hours | energy kWh | J per trained shower | kind |", "|---|---|---|---|---|"]
    for name, r in paper["runs"].items():
        lines.append(f"| {name} | {r['hours']:.2f} | {r['kwh']:.1f} | {r['joule_per_shower']:.2f} "
                     f"| estimate (vendor TDPs) |")
    if here:
        lines.append(f"| this machine, {here['label']} | - | - | {here['joule_per_shower']:.2f} | "
                     f"{here['kind']} |")
    return "\n".join(lines)
