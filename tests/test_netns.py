"""The emulated network: namespaces really separate the ranks, links are shaped, nothing is left
behind (also when the block fails, a rank dies or the process is told to stop), and the ring
model is set against the measurements the right way round."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from gan3d.exceptions import RankFailed
from gan3d.parallel import netns
from gan3d.scaling import interconnect
from markdown_table import rows

needs_root = pytest.mark.skipif(netns.unavailable() is not None,
                                reason=f"cannot emulate a network here: {netns.unavailable()}")


def test_the_ring_model_is_calibrated_on_the_link_and_on_the_unshaped_ring():
    sizes = [2**k for k in range(10, 27, 2)]
    o, lat, endpoint = 1e-3, 5e-5, 1e9  # the CPUs reduce at 1 GB/s

    def row(profile, bandwidth):  # p = 2: 2(p-1)/p = 1
        t = {str(n): o + 2 * lat + max(n / bandwidth, n / endpoint) for n in sizes}
        return {"profile": profile, "ranks": 2, "slow_link": None, "time_s": t,
                "links": [{"bandwidth_Bps": bandwidth, "latency_s": lat}]}

    result = interconnect._with_model({"sizes": sizes, "rows": [row("native", 3e9), row("1gbe", 1e8),
                                                            row("10gbe", 1.2e9)]})
    cal = result["calibration"]["2"]
    assert cal["overhead_s"] == pytest.approx(o, rel=0.1)  # the link's latency hops taken out
    assert cal["endpoint_Bps"] == pytest.approx(endpoint, rel=0.05)
    native, slow, fast = result["rows"]
    assert native["calibration_row"] and not slow["calibration_row"]
    assert slow["max_abs_error_ge_1MiB"] < 0.03  # link-bound: the link's bandwidth sets it
    assert fast["max_abs_error_ge_1MiB"] < 0.03  # 1.2 GB/s link, 1 GB/s CPUs: the CPUs set it
    assert "(calibration)" in interconnect.model_table(result)


def test_unknown_profiles_and_single_ranks_are_refused():
    with pytest.raises(ValueError, match="unknown network profile"):
        netns.link_profile("carrier-pigeon")
    if netns.unavailable() is None:
        with pytest.raises(ValueError, match="at least 2 ranks"):
            netns.Network(1)


@needs_root
@pytest.mark.slow
def test_ranks_sit_in_their_own_namespaces_and_links_are_shaped():
    with netns.Network(2, "1gbe") as net:
        tag = net.tag
        assert set(netns.leftovers(tag)) >= set(net.namespaces)
        out = subprocess.run(net.command(1, ["sh", "-c", "hostname; ip -o -4 addr show eth0"]),
                             capture_output=True, text=True, timeout=30).stdout
        assert net.hosts[1] in out and net.addresses[1] in out
        assert net.addresses[0] not in out  # not rank 0's interface: another namespace
        link = interconnect.link_check(net)
        # tbf at 125 MB/s: TCP's payload gets within 10 % of it
        assert 0.85 * 125e6 < link["bandwidth_Bps"] < 1.02 * 125e6, link
        assert 0 < link["latency_s"] < 5e-3
    assert netns.leftovers(tag) == []


@needs_root
@pytest.mark.slow
def test_a_failing_block_and_a_dead_rank_leave_nothing():
    with pytest.raises(RuntimeError, match="boom"):
        with netns.Network(2) as net:
            tag = net.tag
            raise RuntimeError("boom")
    assert netns.leftovers(tag) == []
    with netns.Network(2) as net:
        tag = net.tag
        t0 = time.monotonic()
        with pytest.raises(RankFailed, match="rank 1 failed") as info:
            # rank 1 dies at once; rank 0 would wait forever for it in the rendezvous
            net.run_horovod([sys.executable, "-c", "import os, sys, time\n"
                             "sys.exit(3) if os.environ['HOROVOD_RANK'] == '1' else time.sleep(600)"],
                            timeout=120)
        assert time.monotonic() - t0 < 30 and info.value.rank == 1
    assert netns.leftovers(tag) == []
    left = subprocess.run(["pgrep", "-f", "time.sleep\\(600\\)"], capture_output=True, text=True)
    assert left.stdout == ""


@needs_root
@pytest.mark.slow
def test_sigterm_while_the_network_exists_still_removes_it(tmp_path):
    script = ("import sys, time\nfrom gan3d.parallel import netns\n"
              "with netns.Network(2) as net:\n"
              "    print(net.tag, flush=True)\n    time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    tag = proc.stdout.readline().strip()
    assert tag.startswith(netns.PREFIX) and netns.leftovers(tag)
    proc.terminate()
    assert proc.wait(timeout=60) != 0
    proc.stdout.close()
    assert netns.leftovers(tag) == []


def test_the_fusion_table_reads_measured_against_modelled():
    row = {"profile": "1gbe", "ranks": 2, "net": "G", "tensors": 13, "bytes": 3_491_232,
           "link": {"bandwidth_Bps": 1.2e8, "latency_s": 1.5e-5}, "fused_s": 0.0335,
           "unfused_s": 0.0575, "model_fused_s": 0.0315, "per_message_s": (0.0575 - 0.0335) / 12}
    table = interconnect.fusion_table({"rows": [row]})
    assert ["1gbe", "G", "13", "3.49", "33.5 (31.5)", "57.5", "2.00", "42%"] in rows(table)


@needs_root
@pytest.mark.slow
def test_an_mpi_job_spans_the_namespaces_and_a_dead_rank_ends_it():
    """mpirun starts one daemon per namespace (an ssh stand-in runs it there): every rank sees
    only its own namespace's interface and host name, they all-reduce over TCP, and the forced
    algorithm is the one Open MPI runs; a rank that dies ends the job, and nothing is left."""
    from gan3d.scaling import algorithms

    script = ("import socket, numpy as np\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\n"
              "y = np.zeros(4)\nc.Allreduce(np.full(4, c.Get_rank() + 1.0), y)\n"
              "print('RANK', c.Get_rank(), socket.gethostname(), int(y[0]), flush=True)\n")
    with netns.Network(2, "10gbe") as net:
        tag = net.tag
        out = net.mpirun([sys.executable, "-c", script], per_host=2, timeout=120)
        ranks = sorted(ln.split()[1:] for ln in out.splitlines() if ln.startswith("RANK"))
        assert [r[0] for r in ranks] == ["0", "1", "2", "3"] and {r[2] for r in ranks} == {"10"}
        assert [r[1] for r in ranks] == [net.hosts[0]] * 2 + [net.hosts[1]] * 2  # by namespace
        res = algorithms.allreduce_times(net, "ring", [4096, 2**24], repeats=3, seconds=0.05)
        assert set(res["time_s"]) == {"4096", "16777216"} and res["ranks"] == 2
        # not faster than the shaped link lets through: n bytes each way at 1.25 GB/s, less the
        # token bucket's burst (1 ms of traffic) that may pass at once
        assert res["time_s"]["16777216"] > (2**24 - 1.25e6) / 1.25e9
        t0 = time.monotonic()
        with pytest.raises(RankFailed):
            # rank 1 dies (no MPI_Finalize: a crash); rank 0 would wait for it forever
            net.mpirun([sys.executable, "-c", "import os, time\nfrom mpi4py import MPI\n"
                        "MPI.COMM_WORLD.Get_rank() == 1 and os._exit(3)\ntime.sleep(600)"],
                       timeout=120)
        assert time.monotonic() - t0 < 60
    assert netns.leftovers(tag) == []
    left = subprocess.run(["pgrep", "-f", "time.sleep\\(600\\)"], capture_output=True, text=True)
    assert left.stdout == ""


def test_textbook_all_reduce_costs_and_their_winners():
    """The costs of Thakur et al.: at p = 2 ring and Rabenseifner coincide; recursive doubling
    wins on latency-bound messages at many ranks, the bandwidth-optimal ones on big messages."""
    from gan3d.scaling import algorithms as A

    a, b, g = 20e-6, 1 / 1.25e9, 1e-10
    assert A.cost("ring", 2**20, 2, a, b, g) == pytest.approx(A.cost("rabenseifner", 2**20, 2, a, b, g))
    assert A.cost("ring", 1e6, 4, a, b, 0) == pytest.approx(6 * a + 1.5e6 * b)
    assert A.cost("recursive_doubling", 1e6, 4, a, b, 0) == pytest.approx(2 * (a + 1e6 * b))
    assert A.cost("linear", 1e6, 4, a, b, 0) == pytest.approx(6 * (a + 1e6 * b))
    assert A.cost("ring", 1e6, 1, a, b) == 0.0
    with pytest.raises(ValueError, match="no textbook cost"):
        A.cost("han", 1e6, 4, a, b)
    win = A.winners(3.5e6, [2, 64], [1e-6, 1e-3], 1.25e9, g)
    best = {(c["ranks"], c["latency_s"]): c["best"] for row in win["grid"] for c in row}
    assert best[(64, 1e-6)] in ("ring", "rabenseifner")  # bandwidth-bound: n/p pieces
    assert best[(64, 1e-3)] in ("rabenseifner", "recursive_doubling")  # 2(p-1) hops cost too much
    small = A.winners(4096, [64], [1e-4], 1.25e9, g)["grid"][0][0]["best"]
    assert small == "recursive_doubling"


def test_scale_over_an_unknown_network_is_refused_before_anything_runs(tmp_path):
    from gan3d import cli

    rc = cli.main(["scale", "--workers", "1,2", "--network", "carrier-pigeon",
                   "--output", str(tmp_path / "s")])
    assert rc == 2 and not (tmp_path / "s").exists()


def test_non_powers_of_two_pay_the_fold_in_the_doubling_algorithms():
    from gan3d.scaling import algorithms as A

    a, b = 20e-6, 1 / 1.25e9
    # 12 ranks: the doubling algorithms run on 8 after 4 ranks fold in (and get the result back)
    fold = 2 * a + 2 * 1e6 * b
    assert A.cost("recursive_doubling", 1e6, 12, a, b) == pytest.approx(3 * (a + 1e6 * b) + fold)
    assert A.cost("rabenseifner", 1e6, 12, a, b) == pytest.approx(6 * a + 1.75e6 * b + fold)
    # so at 12 workers and a big message the ring, which needs no power of two, wins
    assert A.winners(3.5e6, [12], [1e-6], 1.25e9)["grid"][0][0]["best"] == "ring"


def test_slower_networks_stop_scaling_at_fewer_workers_and_bigger_batches_scale_further():
    from gan3d.scaling import multinode

    proj = multinode.projection(batches=(8, 512), share=0.1)
    w = {r["profile"]: r["workers"] for r in proj["rows"]}
    assert w["edr"]["512"] > w["10gbe"]["512"] > w["1gbe"]["512"] > 4  # past one node of 4 GPUs
    for prof in w:
        assert w[prof]["8"] <= w[prof]["512"]
    assert "1 GbE (0.125 GB/s, 50 us)" in [r[0] for r in rows(multinode.projection_table(proj))]


def test_the_committed_network_studies_are_shown_section_by_section():
    """What notebook 03 shows of studies/network.json and studies/algorithms.json (no root)."""
    from pathlib import Path

    from gan3d import records
    from gan3d.scaling import algorithms, multinode

    studies = Path(__file__).resolve().parents[1] / "studies"
    net = records.read(studies / "network.json", "interconnect")
    parts = multinode.network_sections(net)
    assert parts[0] == interconnect.model_table(net) and parts[1].startswith("Measured on ")
    assert len(parts) == 2 + ("fusion" in net) + ("steps" in net)
    proj = multinode.projection_section(multinode.projection(batches=(8,), share=0.1))
    assert "reaches 10 % of a step" in proj
    assert rows(proj)[0] == ["network between nodes", "batch 8"]
    algs = records.read(studies / "algorithms.json", "algorithms")
    table, fastest, *rest = algorithms.sections(algs)
    assert rows(table)[0][:3] == ["network", "ranks", "algorithm"]
    assert fastest.count("\n- ") == 2 * len(algorithms.fastest(algs, 2**20))  # D and G each
    assert fastest.count("EDR (paper), ") == 2 and fastest.endswith(").")
    assert rest[-1].startswith("Measured on ") and len(rest) == 1 + ("horovod" in algs)
