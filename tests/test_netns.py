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
from gan3d.scaling import network

needs_root = pytest.mark.skipif(netns.unavailable() is not None,
                                reason=f"cannot emulate a network here: {netns.unavailable()}")


def test_the_ring_model_is_calibrated_on_the_link_and_on_the_unshaped_ring():
    sizes = [2**k for k in range(10, 27, 2)]
    o, lat, endpoint = 1e-3, 5e-5, 1e9  # the CPUs reduce at 1 GB/s

    def row(profile, bandwidth):  # p = 2: 2(p-1)/p = 1
        t = {str(n): o + 2 * lat + max(n / bandwidth, n / endpoint) for n in sizes}
        return {"profile": profile, "ranks": 2, "slow_link": None, "time_s": t,
                "links": [{"bandwidth_Bps": bandwidth, "latency_s": lat}]}

    result = network._with_model({"sizes": sizes, "rows": [row("native", 3e9), row("1gbe", 1e8),
                                                            row("10gbe", 1.2e9)]})
    cal = result["calibration"]["2"]
    assert cal["overhead_s"] == pytest.approx(o, rel=0.1)  # the link's latency hops taken out
    assert cal["endpoint_Bps"] == pytest.approx(endpoint, rel=0.05)
    native, slow, fast = result["rows"]
    assert native["calibration_row"] and not slow["calibration_row"]
    assert slow["max_abs_error_ge_1MiB"] < 0.03  # link-bound: the link's bandwidth sets it
    assert fast["max_abs_error_ge_1MiB"] < 0.03  # 1.2 GB/s link, 1 GB/s CPUs: the CPUs set it
    assert "(calibration)" in network.model_table(result)


def test_unknown_profiles_and_single_ranks_are_refused():
    with pytest.raises(ValueError, match="unknown network profile"):
        netns._profile("carrier-pigeon")
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
        link = network.link_check(net)
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
    table = network.fusion_table({"rows": [row]})
    assert "| 1gbe | G | 13 | 3.49 | 33.5 (31.5) | 57.5 | 2.00 | 42% |" in table
