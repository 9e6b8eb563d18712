"""Energy per trained shower, the paper's unanswered question: measured where counters exist,
estimated elsewhere, and always labelled which.

**Measured** (:func:`meter`): energy counters read before and after the work, ``kind:
"measured"`` with the counters named. RAPL through Linux powercap (``/sys/class/powercap``, on
Intel and AMD CPUs, :func:`rapl_zones`) and NVML on NVIDIA GPUs (``pynvml`` from the
``nvidia-ml-py`` package, Volta and newer). The counters are the whole machine's: other work on it
is counted too. Virtual machines rarely expose them, and kernels patched for CVE-2020-8694 let
only root read RAPL; then the numbers here are **estimates**: every busy component draws a fixed
power, idle ones a smaller one, nothing else counted (lower bounds of the wall-socket energy)::

    with energy.meter() as m:
        work()
    m.result()  # {"kind": "measured", "source": "RAPL package-0", "joules": {...}, "seconds": ...}

Powers are vendor figures (thermal design power, TDP) or stated assumptions: :data:`WATTS` for
the paper's hardware, :data:`CPU_TDP` for a CPU run, per core of the CPU the run used
(:func:`cpu_model`); a CPU not in the table gets :data:`UNKNOWN_CPU_WATTS_PER_CORE`, said so.
The paper's runs (20 h 16 min on 1 P100, 2 h 14 min on 12) are split with the serial fraction
that its published speed-up implies (:func:`gan3d.scaling.perfmodel.serial_fraction`): during the
serial test-loss evaluation one GPU works and the others of the job idle, which costs energy as
well as time; with a distributed evaluation (what the package does) every GPU evaluates.
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import console
from . import perfmodel as pm

__all__ = ["WATTS", "CPU_TDP", "UNKNOWN_CPU_WATTS_PER_CORE", "Zone", "rapl_zones", "counters",
           "counter_delta", "Meter", "meter", "cpu_model", "cpu_watts", "cpu_estimate", "per_shower",
           "run_energy", "describe", "paper_runs", "energy_table", "largest_run", "reading"]

POWERCAP = Path("/sys/class/powercap")
CPUINFO = Path("/proc/cpuinfo")

# name: (watts, source). "vendor": a published TDP; "assumption": stated here, change it to taste.
WATTS = {
    "p100": (300.0, "vendor: NVIDIA Tesla P100 SXM2 TDP"),
    "p100_idle": (30.0, "assumption: an idle P100 at 10 % of its TDP"),
    "power8_socket": (190.0, "vendor: IBM POWER8 in the S822LC for HPC, 190 W per socket"),
    "socket_load": (0.5, "assumption: the hosts' sockets at half their TDP while GPUs train"),
}

# CPU model (as /proc/cpuinfo names it, without (R)/(TM)): (TDP watts, cores, source). A busy
# core draws its share of the TDP. Only figures of the vendors' product pages.
CPU_TDP = {
    "AMD EPYC 7763": (280.0, 64, "vendor: AMD EPYC 7763 (Milan), 280 W default TDP, 64 cores"),
    "AMD EPYC 7742": (225.0, 64, "vendor: AMD EPYC 7742 (Rome), 225 W default TDP, 64 cores"),
    "AMD EPYC 9654": (360.0, 96, "vendor: AMD EPYC 9654 (Genoa), 360 W default TDP, 96 cores"),
    "Intel Xeon Platinum 8480+": (350.0, 56, "vendor: Intel Xeon Platinum 8480+ (Sapphire "
                                  "Rapids, AMX), 350 W TDP, 56 cores"),
    "Intel Xeon Platinum 8380": (270.0, 40, "vendor: Intel Xeon Platinum 8380 (Ice Lake), "
                                 "270 W TDP, 40 cores"),
    "Intel Xeon Platinum 8280": (205.0, 28, "vendor: Intel Xeon Platinum 8280 (Cascade Lake), "
                                 "205 W TDP, 28 cores"),
}
UNKNOWN_CPU_WATTS_PER_CORE = 5.0  # assumption: a server core's share of a 200-350 W socket
SAMPLE_S = 30.0  # a background read this often: AMD's package counter wraps after ~65 kJ
_ROOT_ONLY = "root-only on kernels patched for CVE-2020-8694: run as root or make it readable"

# ---------------------------------------------------------------------------------------------
# Counters: RAPL zones and NVML devices


@dataclass(frozen=True)
class Zone:
    """One RAPL zone: ``domain`` ("package-0", "package-0/dram"), its ``energy_uj`` file, the
    value after which the counter wraps to 0 (``max_uj``), and whether it is ``counted`` in the
    total: packages and DRAM are; core and uncore lie inside their package, psys (the whole
    platform) holds the packages and DRAM, so adding them would count twice."""

    domain: str
    path: Path
    max_uj: int | None
    counted: bool


_ZONE_ID = re.compile(r"^(?P<iface>[\w-]*rapl[\w-]*):(?P<ids>\d+(?::\d+)*)$")


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def rapl_zones(root: Path = POWERCAP) -> list[Zone]:
    """The RAPL zones under ``root`` (powercap lists sub-zones flat and inside their package; each
    is taken once), a package seen through both the MSR and the MMIO interface once."""
    dirs = {}
    if Path(root).is_dir():
        for d in [*sorted(Path(root).glob("*rapl*")), *sorted(Path(root).glob("*rapl*/*rapl*"))]:
            m = _ZONE_ID.match(d.name)
            if m and (d / "energy_uj").exists():
                dirs.setdefault(d.name, (d, m["iface"], m["ids"].split(":")))
    names = {n: _text(d / "name") or n for n, (d, _, _) in dirs.items()}
    msr_tops = {names[n] for n, (_, iface, ids) in dirs.items()
                if len(ids) == 1 and "mmio" not in iface}
    zones = []
    for n, (d, iface, ids) in dirs.items():
        top = f"{iface}:{ids[0]}"
        if "mmio" in iface and names.get(top, top) in msr_tops:
            continue  # the same package through the MMIO interface
        name = names[n]
        domain = name if len(ids) == 1 else f"{names.get(top, top)}/{name}"
        counted = name == "dram" or (len(ids) == 1 and name != "psys")
        top_uj = _text(d / "max_energy_range_uj")
        zones.append(Zone(domain, d / "energy_uj", int(top_uj) if top_uj else None, counted))
    return zones


def counters(root: Path = POWERCAP) -> dict[str, Path]:
    """The RAPL energy counters of this machine (``{domain: energy_uj file}``); empty when there
    are none (most virtual machines), so energy can only be estimated. Listed, not yet read."""
    return {z.domain: z.path for z in rapl_zones(root)}


def counter_delta(before: int, after: int, max_range: int | None) -> int:
    """Counts between two readings of a counter that wraps to 0 after ``max_range`` (at most one
    wrap between readings: :class:`Meter` reads often enough)."""
    if after >= before:
        return after - before
    if max_range is None:
        raise ValueError(f"counter went back from {before} to {after} and has no known range")
    return max_range - before + after


class _Source:
    """Counters of one kind: ``reads`` {domain: reader}, ``joules`` per count, ``wrap`` ranges."""

    def __init__(self, name: str, joules: float, reads: dict, wrap: dict, counted: set):
        self.name, self.joules, self.reads, self.wrap, self.counted = name, joules, reads, wrap, counted

    def read(self) -> dict[str, int]:
        return {d: int(f()) for d, f in self.reads.items()}


def _rapl(root: Path, why: list[str]) -> _Source | None:
    zones = rapl_zones(root)
    if not zones:
        why.append(f"no RAPL counters under {root} (virtual machines rarely expose them)")
    reads = {}
    for z in zones:
        if z.max_uj is None:
            why.append(f"RAPL {z.domain}: no max_energy_range_uj, a wrap could not be corrected")
            continue
        try:
            int(z.path.read_text())
        except (OSError, ValueError) as exc:
            what = f"permission denied; {_ROOT_ONLY}" if isinstance(exc, PermissionError) else exc
            why.append(f"RAPL {z.domain}: {z.path} not readable ({what})")
            continue
        reads[z.domain] = z.path.read_text
    return _Source("RAPL", 1 / 1e6, reads, {z.domain: z.max_uj for z in zones},
                   {z.domain for z in zones if z.counted}) if reads else None


def _nvml(why: list[str]):
    """NVML's total-energy counters (mJ) of every GPU that has one, and ``nvmlShutdown``."""
    try:
        import pynvml  # lazily: only machines with NVIDIA GPUs have it (pip install nvidia-ml-py)
    except ImportError:
        why.append("NVML: pynvml not installed (pip install nvidia-ml-py where there are NVIDIA GPUs)")
        return None, None
    try:
        pynvml.nvmlInit()
        reads, n = {}, pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        why.append(f"NVML: not available ({exc})")
        return None, None
    if n == 0:
        why.append("NVML: no NVIDIA GPU")
    for i in range(n):
        domain = f"gpu{i}"
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            domain = f"gpu{i} ({name.decode() if isinstance(name, bytes) else name})"
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        except pynvml.NVMLError as exc:  # NOT_SUPPORTED before Volta
            why.append(f"NVML {domain}: no total-energy counter ({exc})")
            continue
        reads[domain] = lambda h=h: pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    source = _Source("NVML", 1e-3, reads, dict.fromkeys(reads), set(reads)) if reads else None
    return source, pynvml.nvmlShutdown


class Meter:
    """Joules of every readable counter between :meth:`start` and :meth:`stop` (or a ``with``
    block), read every ``interval`` seconds in between so that no counter wraps twice unseen
    (``None``: at start and stop only). :meth:`result` says what was measured, or why nothing."""

    def __init__(self, *, root: Path = POWERCAP, nvml: bool = True,
                 interval: float | None = SAMPLE_S):
        self.root, self.nvml, self.interval = Path(root), nvml, interval
        self._lock, self._done = threading.Lock(), threading.Event()
        self._sources, self._last, self._counts, self._why = [], {}, {}, []
        self._t0 = self._t1 = self._thread = self._shutdown = None
        self.readings = 0  # of every counter, the one at start included

    def start(self) -> Meter:
        rapl = _rapl(self.root, self._why)
        nvml, self._shutdown = _nvml(self._why) if self.nvml else (None, None)
        self._sources = [s for s in (rapl, nvml) if s]
        self._last, self.readings = {s.name: s.read() for s in self._sources}, 1
        self._counts = {s.name: dict.fromkeys(s.reads, 0) for s in self._sources}
        self._t0 = time.perf_counter()
        if self._sources and self.interval:
            self._thread = threading.Thread(target=self._poll, daemon=True, name="energy-meter")
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._done.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        """Read every counter and add what it counted since the last reading."""
        with self._lock:
            for s in self._sources:
                now = s.read()
                for d, v in now.items():
                    self._counts[s.name][d] += counter_delta(self._last[s.name][d], v, s.wrap[d])
                self._last[s.name] = now
            self.readings += 1

    def stop(self) -> None:
        if self._t0 is None:
            raise RuntimeError("Meter.stop() before start()")
        self._done.set()
        if self._thread:
            self._thread.join()
        self.sample()
        self._t1 = time.perf_counter()
        if self._shutdown:
            self._shutdown()

    def __enter__(self) -> Meter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def result(self) -> dict:
        """``kind: "measured"``: ``joules`` per domain, ``total_joules`` of the ``counted`` ones
        (no sub-zone twice), ``seconds``, ``source`` and what was ``not_measured``; else
        ``kind: "estimate"`` with the ``reason``. Both record the ``cpu`` model."""
        if self._t1 is None:
            raise RuntimeError("Meter.result() before stop()")
        seconds, cpu = self._t1 - self._t0, cpu_model()
        joules = {d: n * s.joules for s in self._sources for d, n in self._counts[s.name].items()}
        counted = [d for s in self._sources for d in s.reads if d in s.counted]
        if not counted:
            return {"kind": "estimate", "label": "estimated from TDP", "seconds": seconds,
                    "cpu": cpu, "reason": "; ".join(self._why) or "no energy counter"}
        return {"kind": "measured", "seconds": seconds, "joules": joules, "counted": counted,
                "total_joules": sum(joules[d] for d in counted), "cpu": cpu,
                "source": "; ".join(f"{s.name} {', '.join(d for d in s.reads if d in s.counted)}"
                                    for s in self._sources if s.counted & set(s.reads)),
                "not_measured": self._why}


def meter(**kwargs) -> Meter:
    """A :class:`Meter` to use as ``with energy.meter() as m: ...``, then ``m.result()``."""
    return Meter(**kwargs)


# ---------------------------------------------------------------------------------------------
# Estimates: the TDP share of the CPU the run used


def cpu_model(text: str | None = None, keys: tuple[str, ...] = ("model name", "Processor")
              ) -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (or its ``text``), the first of ``keys``
    it has (``Processor``: older ARM kernels); "" if it names none. The package's one reader."""
    text = (_text(CPUINFO) or "") if text is None else text
    for key in keys:
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.M)
        if m:
            return m.group(1).strip()
    return ""


def cpu_watts(model: str) -> dict:
    """A busy core's share of the TDP of the CPU ``model`` (:data:`CPU_TDP`), with its source;
    a model not in the table gets :data:`UNKNOWN_CPU_WATTS_PER_CORE`, labelled an assumption."""
    plain = " ".join(re.sub(r"\((R|TM|tm|r)\)", " ", model).split())
    for name, (tdp, cores, source) in CPU_TDP.items():
        if re.search(rf"(?<![\w+]){re.escape(name)}(?![\w+])", plain):
            return {"cpu": model, "watts_per_core": tdp / cores, "source": source, "known": True}
    return {"cpu": model, "watts_per_core": UNKNOWN_CPU_WATTS_PER_CORE, "known": False,
            "source": f"assumption: unknown CPU {model or '(no model name)'}, "
                      f"{UNKNOWN_CPU_WATTS_PER_CORE:g} W per busy core"}


def cpu_estimate(showers_per_s: float, cores: int, cpu: str | None = None) -> dict:
    """Estimated joules per trained shower of a CPU run: ``cores`` busy cores of the CPU model
    ``cpu`` (default: this machine's) at their TDP share each, ``showers_per_s`` trained."""
    w = cpu_watts(cpu_model() if cpu is None else cpu)
    watts = cores * w["watts_per_core"]
    return {"kind": "estimate", "label": "estimated from TDP", **w, "cores": cores,
            "watts": watts, "joule_per_shower": watts / showers_per_s}


# ---------------------------------------------------------------------------------------------
# Per trained shower, and which kind a number is


def per_shower(runs: list[dict | None]) -> dict:
    """Joules per trained shower over repeated runs, each a :meth:`Meter.result` with the
    ``showers`` trained while it measured: ``kind: "measured"`` (summed joules over summed
    showers, mean ``watts``) when every run was measured by the same counters, else
    ``kind: "estimate"`` with the ``reason`` (the caller estimates, :func:`cpu_estimate`)."""
    got = [r for r in runs if r]
    cpu = next((r["cpu"] for r in got if r.get("cpu")), None)
    missing = next((r.get("reason", "not measured") for r in got if r["kind"] != "measured"), None)
    if not got or len(got) < len(runs):
        missing = "the runs recorded no energy reading"
    elif missing is None and len({r["source"] for r in got}) > 1:
        missing = f"the runs were measured by different counters: {sorted({r['source'] for r in got})}"
    elif missing is None and not sum(r["showers"] for r in got):
        missing = "no shower was trained while the counters were read"
    if missing:
        return {"kind": "estimate", "label": "estimated from TDP", "reason": missing, "cpu": cpu}
    total, seconds, showers = (sum(r[k] for r in got) for k in ("total_joules", "seconds", "showers"))
    joules = {d: sum(r["joules"].get(d, 0.0) for r in got) for d in got[0]["joules"]}
    return {"kind": "measured", "source": got[0]["source"], "runs": len(got), "cpu": cpu,
            "joules": joules, "total_joules": total, "seconds": seconds, "showers": showers,
            "watts": total / seconds, "joule_per_shower": total / showers,
            "not_measured": got[0].get("not_measured", [])}


def run_energy(scale: dict) -> dict:
    """Joules per trained shower of the largest run of a scaling result (:func:`gan3d.scaling.
    experiments.run`): measured if its timed steps were, else estimated from the TDP of the CPU
    that run used (its recorded model; this machine's for results that recorded none)."""
    point = max(scale["points"], key=lambda q: q["workers"])
    cores = point["workers"] * point["threads_per_worker"]
    e = point.get("energy") or {}
    if e.get("kind") == "measured":
        return {**e, "cores": cores}
    label = ((scale.get("machine") or {}).get("topology") or {}).get("cpu")  # "socket 0: NAME"
    cpu = e.get("cpu") or (label and re.sub(r"^socket \d+:\s*", "", label)) or cpu_model()
    return {**cpu_estimate(point["showers_per_s"], cores, cpu=cpu),
            "reason": e.get("reason", "these scaling results hold no energy reading")}


def describe(e: dict) -> str:
    """How a number was got: "measured (RAPL package-0)" or "estimated from TDP (AMD EPYC 7763,
    4.38 W/core)", the unknown CPU's assumption said so."""
    if e["kind"] == "measured":
        return f"measured ({e['source']})"
    assumed = "" if e.get("known", True) else ", assumed: CPU not in the TDP table"
    return f"estimated from TDP ({e['cpu'] or 'unknown CPU'}, {e['watts_per_core']:.2f} W/core{assumed})"


# ---------------------------------------------------------------------------------------------
# The paper's runs


def _node_watts(busy: int, gpus: int) -> float:
    """A job's power: ``busy`` of its ``gpus`` P100 working, the rest idle, on 4-GPU nodes."""
    nodes, w = math.ceil(gpus / 4), WATTS
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
    """Markdown: the paper's runs (estimated) and, if given, a run here (``run`` names it),
    measured or estimated and said which (:func:`describe`)."""
    rows = [[name, f"{r['hours']:.2f}", f"{r['kwh']:.1f}", f"{r['joule_per_shower']:.2f}",
             "estimated from vendor TDPs"] for name, r in paper["runs"].items()]
    if here:
        rows.append([f"this machine, {here.get('run', 'largest run')}", "-", "-",
                     f"{here['joule_per_shower']:.2f}", describe(here)])
    return console.table(rows, ["run", "hours", "energy kWh", "J per trained shower", "kind"])


def largest_run(scale: dict) -> dict:
    """:func:`run_energy` of a scaling result's largest run, named by its workers, cores and
    batch (the row "this machine, ..." of :func:`energy_table`)."""
    point = max(scale["points"], key=lambda q: q["workers"])
    return {"run": f"{point['workers']} workers, {point['workers'] * point['threads_per_worker']} "
                   f"cores, batch {point['batch_per_worker']}", **run_energy(scale)}


def reading(here: dict, paper: dict) -> str:
    """Markdown: how this machine's energy was got (``here``: :func:`largest_run`), and the
    energy the paper's serial evaluation spends on idle GPUs (``paper``: :func:`paper_runs`)."""
    serial = paper["runs"]["12 GPUs, serial evaluation (paper)"]
    return (f"This machine's row is {describe(here)}"
            + (f", over {here['seconds']:.1f} s of timed steps. " if here["kind"] == "measured" else
               f"; not measured because {here['reason']}. ")
            + "The paper's rows are estimates. At 12 GPUs the serial evaluation leaves 11 GPUs "
            f"idling for {100 * paper['serial_fraction']:.1f} % of the 1-GPU time: "
            f"{serial['eval_idle_kwh']:.2f} kWh of a run, which a distributed evaluation saves "
            "along with the time.")
