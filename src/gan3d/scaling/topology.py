"""Node fabrics as data: the paper's IBM S822LC node, and this machine as the operating system reports it.

A fabric is a plain dict (JSON-ready), drawn by :func:`gan3d.plots.scaling.node_fabric`::

    {"name": str, "source": str,
     "components": [{"id", "kind", "label", "detail", "group"}],   # kind: cpu memory gpu nic network
     "links": [{"a", "b", "kind", "label", "bandwidth_GBps"}]}     # bandwidth one direction, or None

``group`` is the socket/NUMA domain a component hangs off. :data:`PAPER_NODE` describes Figure 1
of the paper; :func:`read_machine` builds the same description from ``/sys``, ``/proc`` and, when
present, ``nvidia-smi``. Bandwidths the OS does not report (memory, most virtual NICs) are None.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["PAPER_NODE", "read_machine", "summary", "describe", "parse_nvidia_topo",
           "pcie_bandwidth"]

_NV = "2 links,"
# Figure 1 of the paper: an IBM Power System S822LC for HPC (8335-GTB, "Minsky"). Structure and
# bandwidths from IBM Redpaper REDP-5405: each POWER8 socket feeds 4 memory buffers (28.8 GB/s
# each) and 2 P100 over NVLink 1.0 (20 GB/s per link and direction, 2 links per pair); the two
# GPUs of a socket are joined by 2 links; the sockets by the SMP X-bus (38.4 GB/s). EDR
# InfiniBand (100 Gb/s) through PCIe Gen3 x16; one adapter per socket is drawn (an assumption:
# the paper does not say how many).
PAPER_NODE: dict = {
    "name": "IBM Power System S822LC for HPC (paper, Figure 1)",
    "source": "Hesam et al. 2019, Fig. 1; bandwidths from IBM Redpaper REDP-5405 (vendor figures)",
    "components": [
        *({"id": f"mem{s}", "kind": "memory", "label": "DDR4 via 4 buffers",
           "detail": "up to 512 GB", "group": s} for s in (0, 1)),
        *({"id": f"cpu{s}", "kind": "cpu", "label": f"POWER8 socket {s}",
           "detail": "8-10 cores, SMT8", "group": s} for s in (0, 1)),
        *({"id": f"gpu{g}", "kind": "gpu", "label": f"P100 SXM2 #{g}",
           "detail": "16 GB HBM2, 10.6 TFLOP/s fp32", "group": g // 2} for g in range(4)),
        *({"id": f"ib{s}", "kind": "nic", "label": "EDR InfiniBand",
           "detail": "100 Gb/s", "group": s} for s in (0, 1)),
        {"id": "net", "kind": "network", "label": "InfiniBand switch (other nodes)", "detail": "",
         "group": None},
    ],
    "links": [
        *({"a": f"cpu{s}", "b": f"mem{s}", "kind": "memory", "label": "4 x 28.8 GB/s",
           "bandwidth_GBps": 115.2} for s in (0, 1)),
        *({"a": f"cpu{g // 2}", "b": f"gpu{g}", "kind": "nvlink", "label": f"{_NV} 40 GB/s",
           "bandwidth_GBps": 40.0} for g in range(4)),
        *({"a": f"gpu{2 * s}", "b": f"gpu{2 * s + 1}", "kind": "nvlink",
           "label": f"{_NV} 40 GB/s", "bandwidth_GBps": 40.0} for s in (0, 1)),
        {"a": "cpu0", "b": "cpu1", "kind": "smp", "label": "X-bus 38.4 GB/s", "bandwidth_GBps": 38.4},
        *({"a": f"cpu{s}", "b": f"ib{s}", "kind": "pcie", "label": "PCIe3 x16 15.8 GB/s",
           "bandwidth_GBps": 15.75} for s in (0, 1)),
        *({"a": f"ib{s}", "b": "net", "kind": "infiniband", "label": "EDR 12.5 GB/s",
           "bandwidth_GBps": 12.5} for s in (0, 1)),
    ],
}


def _read(path: Path | str, default: str = "") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def _cpu_list(text: str) -> list[int]:
    """``"0-3,8"`` -> [0, 1, 2, 3, 8]."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 10 else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _sockets(root: Path) -> dict[int, dict]:
    """{package id: {"cpus": [...], "cores": n}} from the CPU topology in sysfs."""
    sockets: dict[int, dict] = {}
    online = _cpu_list(_read(root / "sys/devices/system/cpu/online", "0"))
    for cpu in online:
        topo = root / f"sys/devices/system/cpu/cpu{cpu}/topology"
        pkg = int(_read(topo / "physical_package_id", "0") or 0)
        core = _read(topo / "core_id", str(cpu))
        s = sockets.setdefault(max(pkg, 0), {"cpus": [], "core_ids": set()})
        s["cpus"].append(cpu)
        s["core_ids"].add(core)
    return sockets


def _caches(root: Path) -> list[str]:
    """``["L1d 32 KiB/core", ...]`` from cpu0's cache descriptions."""
    out = []
    for idx in sorted((root / "sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind, size = _read(idx / "level"), _read(idx / "type"), _read(idx / "size")
        shared = len(_cpu_list(_read(idx / "shared_cpu_list", "0")))
        tag = {"Data": "d", "Instruction": "i"}.get(kind, "")
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if m:
            size = _human_bytes(int(m.group(1)) * 1024 ** " KMG".index(m.group(2) or " "))
        out.append(f"L{level}{tag} {size}" + (f" shared by {shared}" if shared > 1 else ""))
    return out


def _numa(root: Path) -> dict[int, dict]:
    """{node: {"cpus": [...], "mem_bytes": n}}; one node holding everything when sysfs has none."""
    nodes = {}
    for d in sorted((root / "sys/devices/system/node").glob("node[0-9]*")):
        m = re.search(r"MemTotal:\s+(\d+) kB", _read(d / "meminfo"))
        nodes[int(d.name[4:])] = {"cpus": _cpu_list(_read(d / "cpulist")),
                                  "mem_bytes": int(m.group(1)) * 1024 if m else None}
    if not nodes:
        m = re.search(r"MemTotal:\s+(\d+) kB", _read(root / "proc/meminfo"))
        nodes[0] = {"cpus": [], "mem_bytes": int(m.group(1)) * 1024 if m else None}
    return nodes


def pcie_bandwidth(speed: str, width: str) -> float | None:
    """GB/s in one direction of a PCIe link from sysfs ``current_link_speed``/``width``.

    ``"8.0 GT/s PCIe"``, ``"16"`` -> 15.75 (Gen3 and later encode 128 bits in 130).
    """
    m = re.match(r"([\d.]+)\s*GT/s", speed or "")
    if not m or not (width or "").strip().isdigit():
        return None
    gts = float(m.group(1))
    coding = 0.8 if gts <= 5.0 else 128 / 130
    return round(gts * coding * int(width) / 8, 2)


def _nics(root: Path) -> list[dict]:
    """Network interfaces that are up (loopback left out): name, kind, speed, NUMA node, PCIe."""
    out = []
    for d in sorted((root / "sys/class/net").glob("*")):
        kind = {"1": "Ethernet", "32": "InfiniBand", "772": None}.get(_read(d / "type"), "other")
        if kind is None or _read(d / "operstate") not in ("up", "unknown"):
            continue
        speed = _read(d / "speed", "-1")
        mbps = int(speed) if speed.lstrip("-").isdigit() and int(speed) > 0 else None
        numa = _read(d / "device/numa_node", "-1")
        out.append({"name": d.name, "kind": kind, "speed_GBps": mbps / 8000 if mbps else None,
                    "numa": max(int(numa), 0) if numa.lstrip("-").isdigit() else 0,
                    "virtual": not (d / "device").exists(),
                    "pcie_GBps": pcie_bandwidth(_read(d / "device/current_link_speed"),
                                                _read(d / "device/current_link_width"))})
    return out


def parse_nvidia_topo(text: str) -> list[tuple[int, int, str]]:
    """GPU pairs and their connection from ``nvidia-smi topo -m``: [(0, 1, "NV12"), (0, 2, "SYS")]."""
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) > 1 and "GPU" not in cells[1]:
            rows[int(cells[0][3:])] = cells[1:]
    pairs = []
    for i, cells in rows.items():
        for j in range(len(rows)):
            if j > i and j < len(cells):
                pairs.append((i, j, cells[j]))
    return pairs


def _gpus(root: Path) -> tuple[list[dict], list[tuple[int, int, str]]]:
    """NVIDIA GPUs from nvidia-smi (none when it is absent or fails) and their pairwise links."""
    smi = shutil.which("nvidia-smi")
    if smi is None or root.resolve() != Path("/"):  # a fake sysfs has no GPUs of its own
        return [], []
    try:
        q = subprocess.run([smi, "--query-gpu=index,name,memory.total,pci.bus_id",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=20, check=True).stdout
        topo = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return [], []
    gpus = []
    for line in q.strip().splitlines():
        idx, name, mem, bus = (c.strip() for c in line.split(",")[:4])
        dev = root / "sys/bus/pci/devices" / bus.lower()[-12:]
        numa = _read(dev / "numa_node", "-1")
        gpus.append({"index": int(idx), "name": name, "mem_bytes": float(mem) * 2**20,
                     "numa": max(int(numa), 0) if numa.lstrip("-").isdigit() else 0,
                     "pcie_GBps": pcie_bandwidth(_read(dev / "current_link_speed"),
                                                 _read(dev / "current_link_width"))})
    return gpus, parse_nvidia_topo(topo)


def _cpu_model(root: Path) -> str:
    from .energy import cpu_model

    return (cpu_model(_read(root / "proc/cpuinfo"), ("model name", "cpu", "Processor"))
            or platform.processor() or platform.machine())


def read_machine(root: str | os.PathLike = "/") -> dict:
    """This machine's fabric as the OS reports it (``root`` lets tests point at a fake sysfs)."""
    root = Path(root)
    sockets, numa, caches = _sockets(root), _numa(root), _caches(root)
    nics, (gpus, gpu_links) = _nics(root), _gpus(root)
    model = _cpu_model(root)
    comps, links = [], []
    for s, info in sorted(sockets.items()):
        comps.append({"id": f"cpu{s}", "kind": "cpu", "label": f"socket {s}: {model}",
                      "detail": f"{len(info['core_ids'])} cores, {len(info['cpus'])} threads; "
                                + ", ".join(caches), "group": s})
    first = min(sockets) if sockets else 0
    for n, info in sorted(numa.items()):
        s = next((k for k, v in sockets.items() if set(info["cpus"]) & set(v["cpus"])), first)
        size = _human_bytes(info["mem_bytes"]) if info["mem_bytes"] else "?"
        comps.append({"id": f"mem{n}", "kind": "memory", "label": f"NUMA node {n} memory",
                      "detail": size, "group": s})
        links.append({"a": f"cpu{s}", "b": f"mem{n}", "kind": "memory",
                      "label": "bandwidth not reported", "bandwidth_GBps": None})
    for a, b in zip(sorted(sockets), sorted(sockets)[1:]):
        links.append({"a": f"cpu{a}", "b": f"cpu{b}", "kind": "smp", "label": "inter-socket",
                      "bandwidth_GBps": None})
    _attach_devices(comps, links, nics, gpus, gpu_links, numa, sockets, first)
    return {"name": "this machine",
            "source": "read from /sys, /proc" + (" and nvidia-smi" if gpus else ""),
            "components": comps, "links": links}


def _socket_of(numa_node: int, numa: dict, sockets: dict, first: int) -> int:
    cpus = set(numa.get(numa_node, {}).get("cpus", []))
    return next((k for k, v in sockets.items() if cpus & set(v["cpus"])), first)


def _attach_devices(comps, links, nics, gpus, gpu_links, numa, sockets, first) -> None:
    """Add NICs, GPUs and their links to a fabric under construction."""
    for g in gpus:
        s = _socket_of(g["numa"], numa, sockets, first)
        comps.append({"id": f"gpu{g['index']}", "kind": "gpu", "label": g["name"],
                      "detail": _human_bytes(g["mem_bytes"]), "group": s})
        bw = g["pcie_GBps"]
        links.append({"a": f"cpu{s}", "b": f"gpu{g['index']}", "kind": "pcie",
                      "label": f"PCIe {bw:.1f} GB/s" if bw else "PCIe", "bandwidth_GBps": bw})
    for i, j, kind in gpu_links:
        if kind.startswith("NV"):
            links.append({"a": f"gpu{i}", "b": f"gpu{j}", "kind": "nvlink",
                          "label": f"NVLink x{kind[2:]}", "bandwidth_GBps": None})
    if nics:
        comps.append({"id": "net", "kind": "network", "label": "network", "detail": "",
                      "group": None})
    for k, nic in enumerate(nics):
        s = _socket_of(nic["numa"], numa, sockets, first)
        speed = nic["speed_GBps"]
        comps.append({"id": f"nic{k}", "kind": "nic", "label": f"{nic['name']} ({nic['kind']})",
                      "detail": "virtual" if nic["virtual"] else "", "group": s})
        links.append({"a": f"cpu{s}", "b": f"nic{k}", "kind": "pcie",
                      "label": f"PCIe {nic['pcie_GBps']:.1f} GB/s" if nic["pcie_GBps"] else "",
                      "bandwidth_GBps": nic["pcie_GBps"]})
        links.append({"a": f"nic{k}", "b": "net", "kind": "network",
                      "label": f"{speed:.3g} GB/s" if speed else "speed not reported",
                      "bandwidth_GBps": speed})


def summary(fabric: dict) -> dict:
    """Counts of a fabric for results files: sockets, GPUs, NICs, memory (as labelled)."""
    kinds = [c["kind"] for c in fabric["components"]]
    return {"name": fabric["name"], "sockets": kinds.count("cpu"), "gpus": kinds.count("gpu"),
            "nics": kinds.count("nic"), "numa_nodes": kinds.count("memory"),
            "cpu": next((c["label"] for c in fabric["components"] if c["kind"] == "cpu"), None),
            "memory": [c["detail"] for c in fabric["components"] if c["kind"] == "memory"]}


def describe(counts: dict) -> str:
    """A machine's fabric in one sentence (``counts``: a :func:`summary`), and how its workers
    talk."""
    return (f"This machine: {counts['sockets']} socket(s), {counts['numa_nodes']} memory node(s), "
            f"{counts['gpus']} GPU(s), {counts['nics']} network interface(s); {counts['cpu']}. "
            + ("All workers share one socket and talk through shared memory."
               if counts["sockets"] == 1 and counts["gpus"] == 0 else
               "Workers on different sockets or GPUs talk over the links drawn above."))
