"""Node fabrics: the paper's S822LC description, this machine read from a (fake) sysfs, drawing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gan3d.scaling import topology
from gan3d.plots import scaling as plots


def _ids(fabric):
    return {c["id"] for c in fabric["components"]}


def _check_consistent(fabric):
    ids = _ids(fabric)
    assert len(ids) == len(fabric["components"])  # unique ids
    for link in fabric["links"]:
        assert link["a"] in ids and link["b"] in ids, link


def test_paper_node_is_the_s822lc():
    node = topology.PAPER_NODE
    _check_consistent(node)
    s = topology.summary(node)
    assert (s["sockets"], s["gpus"], s["numa_nodes"]) == (2, 4, 2)
    links = {(lk["a"], lk["b"]): lk for lk in node["links"]}
    for g in range(4):  # every P100: NVLink to its own socket and to its neighbour
        assert links[(f"cpu{g // 2}", f"gpu{g}")]["kind"] == "nvlink"
    assert links[("gpu0", "gpu1")]["bandwidth_GBps"] == 2 * 20.0
    assert links[("cpu0", "cpu1")]["bandwidth_GBps"] == 38.4  # X-bus
    assert links[("cpu0", "mem0")]["bandwidth_GBps"] == pytest.approx(4 * 28.8)
    assert links[("ib0", "net")]["bandwidth_GBps"] == 100 / 8  # EDR, 100 Gb/s


def _fake_sys(root: Path) -> None:
    """Two sockets of two cores, two NUMA nodes, an Ethernet and an InfiniBand NIC, loopback."""
    def w(rel, text):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")

    w("sys/devices/system/cpu/online", "0-3")
    for cpu in range(4):
        w(f"sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id", str(cpu // 2))
        w(f"sys/devices/system/cpu/cpu{cpu}/topology/core_id", str(cpu % 2))
    for i, (level, kind, size, shared) in enumerate(
            [(1, "Data", "48K", "0"), (2, "Unified", "2048K", "0"), (3, "Unified", "36864K", "0-1")]):
        base = f"sys/devices/system/cpu/cpu0/cache/index{i}"
        for name, val in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            w(f"{base}/{name}", str(val))
    for n in (0, 1):
        w(f"sys/devices/system/node/node{n}/cpulist", f"{2 * n}-{2 * n + 1}")
        w(f"sys/devices/system/node/node{n}/meminfo", f"Node {n} MemTotal:       16777216 kB")
    w("proc/cpuinfo", "processor\t: 0\nmodel name\t: Fake CPU 9000")
    for name, typ, speed, numa in (("eth0", "1", "25000", "1"), ("ib0", "32", "100000", "0"),
                                   ("lo", "772", "-1", "-1")):
        w(f"sys/class/net/{name}/type", typ)
        w(f"sys/class/net/{name}/operstate", "up")
        w(f"sys/class/net/{name}/speed", speed)
        if name != "lo":
            w(f"sys/class/net/{name}/device/numa_node", numa)
            w(f"sys/class/net/{name}/device/current_link_speed", "8.0 GT/s PCIe")
            w(f"sys/class/net/{name}/device/current_link_width", "16")


def test_read_machine_from_a_fake_sysfs(tmp_path):
    _fake_sys(tmp_path)
    m = topology.read_machine(tmp_path)
    _check_consistent(m)
    s = topology.summary(m)
    assert (s["sockets"], s["numa_nodes"], s["nics"]) == (2, 2, 2)  # loopback left out
    assert s["memory"] == ["16 GiB", "16 GiB"]
    cpu0 = next(c for c in m["components"] if c["id"] == "cpu0")
    assert "Fake CPU 9000" in cpu0["label"]
    assert "2 cores" in cpu0["detail"] and "L3 36 MiB shared by 2" in cpu0["detail"]
    nics = {c["label"].split()[0]: c for c in m["components"] if c["kind"] == "nic"}
    assert nics["eth0"]["group"] == 1 and nics["ib0"]["group"] == 0  # by their NUMA node
    wire = {lk["a"]: lk["bandwidth_GBps"] for lk in m["links"] if lk["b"] == "net"}
    assert sorted(wire.values()) == [25000 / 8000, 100000 / 8000]  # Mb/s -> GB/s
    pcie = [lk["bandwidth_GBps"] for lk in m["links"] if lk["kind"] == "pcie"]
    assert pcie == [15.75, 15.75]


def test_read_this_machine():
    m = topology.read_machine()
    _check_consistent(m)
    cpus = [c for c in m["components"] if c["kind"] == "cpu"]
    assert cpus
    threads = sum(int(c["detail"].split(" threads")[0].split()[-1]) for c in cpus)
    assert threads == len(os.sched_getaffinity(0)) or threads == os.cpu_count()
    assert all(c["detail"] != "?" for c in m["components"] if c["kind"] == "memory")


def test_pcie_bandwidth():
    assert topology.pcie_bandwidth("8.0 GT/s PCIe", "16") == 15.75
    assert topology.pcie_bandwidth("2.5 GT/s", "1") == 0.25  # 8b/10b coding before Gen3
    assert topology.pcie_bandwidth("Unknown", "16") is None


def test_parse_nvidia_topo():
    text = ("\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV2\tSYS\t0-9\t0\n"
            "GPU1\tNV2\t X \tSYS\t0-9\t0\n"
            "GPU2\tSYS\tSYS\t X \t10-19\t1\n\nLegend: ...\n")
    assert topology.parse_nvidia_topo(text) == [(0, 1, "NV2"), (0, 2, "SYS"), (1, 2, "SYS")]


@pytest.mark.parametrize("which", ["paper", "fake"])
def test_node_fabric_draws_every_component_and_link(which, tmp_path):
    if which == "paper":
        fabric = topology.PAPER_NODE
    else:
        _fake_sys(tmp_path)
        fabric = topology.read_machine(tmp_path)
    fig = plots.node_fabric(fabric)
    ax = fig.axes[0]
    assert len(ax.patches) == len(fabric["components"])
    assert len(ax.lines) == len(fabric["links"])
    texts = " ".join(t.get_text() for t in ax.texts)
    for link in fabric["links"]:
        if link["label"]:
            assert link["label"].split()[0] in texts


def test_a_fabric_is_described_by_its_counts():
    counts = topology.summary(topology.PAPER_NODE)
    text = topology.describe(counts)
    assert text.startswith(f"This machine: {counts['sockets']} socket(s), "
                           f"{counts['numa_nodes']} memory node(s), {counts['gpus']} GPU(s)")
    assert text.endswith("talk over the links drawn above.")  # GPUs on two sockets
    one = {"sockets": 1, "numa_nodes": 1, "gpus": 0, "nics": 1, "cpu": "socket 0: a CPU"}
    assert topology.describe(one).endswith("talk through shared memory.")
