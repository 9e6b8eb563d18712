"""The performance model: collective formulas, Amdahl's law, calibration, the paper's numbers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gan3d.scaling import perfmodel as pm

WL = pm.threedgan_workload()
LINK = pm.Link(bandwidth=1e9, latency=10e-6)


# A workload small enough to work through by hand: 1 GFLOP per shower, two all-reduces (4 MB and
# 1 MB), 2 GFLOP per test shower, 3,200 training and 1,000 test showers.
TOY = pm.Workload(step_flops=1e9, allreduce_bytes=(4e6, 1e6), eval_flops=2e9,
                  train_showers=3200, test_showers=1000)


def _hw(**kw) -> pm.Hardware:
    return dataclasses.replace(pm.Hardware(name="toy", rate=50e9, intra=LINK), **kw)


def test_reference_counts_are_the_models():
    import numpy as np

    from gan3d.gan import model

    g, d = model.build_generator(), model.build_discriminator()
    assert pm.REFERENCE_COUNTS == {
        "d_forward_flops": model.forward_flops(d), "g_forward_flops": model.forward_flops(g),
        "d_trainable_params": sum(int(np.prod(v.shape)) for v in d.trainable_variables),
        "g_trainable_params": sum(int(np.prod(v.shape)) for v in g.trainable_variables)}
    assert WL.step_flops == model.step_flops(g, d)  # same convention as gan3d.model


def test_workload_matches_the_step():
    c = pm.REFERENCE_COUNTS
    assert WL.allreduce_bytes == (4 * c["d_trainable_params"],) * 2 + (4 * c["g_trainable_params"],) * 2
    assert WL.eval_flops == 3 * c["d_forward_flops"] + 2 * c["g_forward_flops"]
    assert pm.threedgan_workload(frozen_weight_grads=True).step_flops - WL.step_flops == \
        2 * c["d_forward_flops"]


def test_ring_allreduce_formula():
    n = 4e6
    assert pm.allreduce_time(n, 1, LINK) == 0.0
    assert pm.allreduce_time(n, 2, LINK) == pytest.approx(2 * 10e-6 + n / 1e9)
    assert pm.allreduce_time(n, 4, LINK, overhead=1e-3) == pytest.approx(1e-3 + 6 * 10e-6 + 1.5 * n / 1e9)
    # The bandwidth term tends to 2 n / beta; the latency term grows linearly.
    big = pm.allreduce_time(n, 10_001, pm.Link(1e9, 0.0))
    assert big == pytest.approx(2 * n / 1e9, rel=1e-3)
    # Recursive halving/doubling moves the same volume with log2(p) latency hops.
    assert pm.allreduce_time(n, 1024, LINK, algorithm="tree") == pytest.approx(
        20 * 10e-6 + 2 * 1023 / 1024 * n / 1e9)


def test_ring_crosses_the_slowest_link():
    hw = _hw(inter=pm.Link(1e8, 50e-6), workers_per_node=4)
    assert pm.ring_link(hw, 4) == LINK
    assert pm.ring_link(hw, 5) == pm.Link(1e8, 50e-6)


def test_expected_max_of_normals():
    assert pm.expected_max_normal(1) == 0.0
    assert pm.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert pm.expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-6)
    vals = [pm.expected_max_normal(p) for p in (2, 4, 12, 100)]
    assert vals == sorted(vals) and vals[-1] < math.sqrt(2 * math.log(100))


def test_step_time_and_efficiency():
    hw = _hw()
    # By hand: 8 showers x 1 GFLOP at 50 GFLOP/s = 0.16 s. A 2-worker ring all-reduce of n bytes:
    # 2 hops x 10 us + 2 x 1/2 x n / 1 GB/s, i.e. 4.02 ms for 4 MB and 1.02 ms for 1 MB.
    st = pm.step_time(2, 8, TOY, hw)
    assert st.compute == pytest.approx(0.16)
    assert st.comm == pytest.approx(0.00402 + 0.00102)
    assert st.wait == 0.0 and st.total == pytest.approx(0.16504)
    eff = pm.efficiency([1, 2], 8, TOY, hw)
    assert eff[0] == 1.0 and eff[1] == pytest.approx(0.16 / 0.16504)  # 96.9 %
    # Without communication, weak and strong scaling are ideal; overlap hides comm entirely.
    silent = _hw(intra=pm.Link(math.inf, 0.0))
    assert np.allclose(pm.efficiency([1, 2, 8], 8, WL, silent, mode="strong"), 1.0)
    assert pm.step_time(4, 8, WL, _hw(overlap=1.0)).comm == 0.0
    # Workers sharing a node's cores each keep a share of the 1-worker rate; one worker keeps all.
    shared = _hw(shared=0.8)  # 2 workers on a node: 40 GFLOP/s each, 8 GFLOP in 0.2 s
    assert pm.step_time(1, 8, TOY, shared).compute == pytest.approx(0.16)
    assert pm.step_time(2, 8, TOY, shared).compute == pytest.approx(0.2)
    assert pm.step_time(8, 8, TOY, dataclasses.replace(shared, workers_per_node=1)).compute == \
        pytest.approx(0.16)  # one worker per node: nothing shared
    # Jitter: the slowest of p workers sets the pace.
    jit = pm.step_time(2, 8, WL, _hw(jitter=0.1))
    assert jit.wait == pytest.approx(0.1 * jit.compute / math.sqrt(math.pi), rel=1e-6)


def test_epoch_time_serial_against_distributed_evaluation():
    hw = _hw()
    ser, dis = pm.epoch_time(4, 8, TOY, hw, "serial"), pm.epoch_time(4, 8, TOY, hw, "distributed")
    # By hand: 3,200 showers / (4 workers x 8) = 100 steps of 0.16 s + the 4-worker all-reduces,
    # each 6 hops x 10 us + 2 x 3/4 x n / 1 GB/s: 6.06 ms (4 MB) + 1.56 ms (1 MB) = 7.62 ms.
    assert ser["steps"] == pytest.approx(100.0)
    assert ser["train"] == dis["train"] == pytest.approx(100 * (0.16 + 0.00762))
    # 1,000 test showers x 2 GFLOP at 50 GFLOP/s = 40 s on one worker; a quarter of it on each of
    # 4, plus the all-reduce of the 64-byte loss sums: 6 x 10 us + 1.5 x 64 B / 1 GB/s.
    assert ser["eval"] == pytest.approx(40.0)
    assert dis["eval"] == pytest.approx(10.0 + 6e-5 + 9.6e-8)
    assert pm.epoch_time(4, 8, TOY, hw, "none")["eval"] == 0.0


def test_amdahl_and_its_inverse():
    for s in (0.0, 0.03, 0.3):
        for p, e in ((2, 1.0), (12, 0.989), (100, 0.9)):
            assert pm.serial_fraction(pm.amdahl_speedup(p, s, e), p, e) == pytest.approx(s, abs=1e-12)
    assert pm.amdahl_speedup(1e9, 0.05) == pytest.approx(20.0, rel=1e-6)  # limit 1/s
    with pytest.raises(ValueError):
        pm.serial_fraction(1.0, 1)


@pytest.mark.parametrize("p", [2, 4])
def test_fit_allreduce_recovers_latency_and_bandwidth(p):
    sizes = np.geomspace(1e3, 6.4e7, 9)
    times = [pm.allreduce_time(n, p, pm.Link(2e9, 30e-6)) for n in sizes]
    fit = pm.fit_allreduce(sizes, times, p)
    assert fit["latency_s"] == pytest.approx(30e-6, rel=1e-6)
    assert fit["bandwidth_Bps"] == pytest.approx(2e9, rel=1e-6)
    assert fit["max_rel_residual"] < 1e-9
    part = pm.fit_allreduce(sizes, times, p, lo=1e5, hi=1e7)
    assert part["range_bytes"][0] >= 1e5 and part["range_bytes"][1] <= 1e7


def test_calibration_reproduces_the_measurement():
    hw = pm.calibrate(1.7, 4, TOY, bandwidth=1e9, latency=1e-5, overhead=2e-3)
    assert hw.rate == pytest.approx(4e9 / 1.7)  # 4 showers x 1 GFLOP measured in 1.7 s
    assert pm.step_time(1, 4, TOY, hw).total == pytest.approx(1.7)
    two = pm.step_time(2, 4, TOY, hw)
    # Each of the 2 all-reduces: 2 ms overhead + 2 hops x 10 us + n / 1 GB/s (4 MB, then 1 MB).
    assert two.compute == pytest.approx(1.7) and two.comm == pytest.approx(0.00602 + 0.00302)


def test_paper_numbers():
    rate = pm.paper_sustained_rate(WL)
    # 40 epochs of 180k training + 20k test showers in 20 h 16 min on one P100: ~19 % of peak.
    assert 0.15 < rate / pm.PAPER["p100_peak_flops"] < 0.25
    hw = pm.paper_hardware(WL)
    assert pm.step_time(12, 512, WL, hw).total < 1.001 * pm.step_time(1, 512, WL, hw).total
    eff12 = pm.efficiency([12], 512, WL, hw)[0]
    assert eff12 > pm.PAPER["train_efficiency"]  # compute + all-reduce alone: above 98.9 %
    cv = pm.paper_jitter(WL, hw)
    # The same jitter by hand. One step of 512 showers on a P100 takes c = 512 F / R; over 12
    # GPUs add the wait for the slowest (E[max of 12 standard normals] = 1.6292, tabulated, times
    # cv c) and the 4 all-reduces, whose ring crosses InfiniBand: 4 x 22 hops x 5 us +
    # 2 x 11/12 x 8 x (73,402 + 872,808) B / 12.5 GB/s. 98.9 % = c / (c (1 + 1.6292 cv) + comm).
    rate = 40 * (180_000 * WL.step_flops + 20_000 * WL.eval_flops) / (20 * 3600 + 16 * 60)
    c = 512 * WL.step_flops / rate
    comm = 88 * 5e-6 + 2 * 11 / 12 * 8 * (73_402 + 872_808) / 12.5e9
    assert cv == pytest.approx(((1 / 0.989 - 1) - comm / c) / 1.62922, rel=1e-4)  # 0.66 %
    # 9.07x overall with 98.9 % training efficiency: Amdahl's serial fraction is 2.8 %, and
    # Amdahl's law with it, written out, gives back the published 2 h 14 min on 12 GPUs.
    s = pm.serial_fraction(pm.PAPER["time_1_s"] / pm.PAPER["time_12_s"], 12, 0.989)
    assert s == pytest.approx(0.0283, abs=5e-4)
    assert 72_960 * (s + (1 - s) / (12 * 0.989)) == pytest.approx(2 * 3600 + 14 * 60, rel=1e-9)


def test_crossover_moves_with_batch():
    hw = pm.paper_hardware(WL)
    small, large = pm.crossover_workers(1, WL, hw), pm.crossover_workers(8, WL, hw)
    assert small is not None and large is not None and small < large
    for b, p in ((1, small), (8, large)):
        at, before = pm.step_time(p, b, WL, hw), pm.step_time(p - 1, b, WL, hw)
        assert at.comm >= at.compute and before.comm < before.compute
    assert pm.crossover_workers(512, WL, hw, pmax=10_000) is None


@pytest.mark.parametrize("serial", [0.0, 0.029, 0.25])
def test_the_serial_fraction_of_exact_amdahl_speedups_is_recovered(serial):
    workers = [1, 2, 4, 12]
    speedups = pm.amdahl_speedup(workers, serial)
    assert pm.fit_serial_fraction(workers, speedups) == pytest.approx(serial, abs=1e-12)
    # one point: the fit is the inversion of Amdahl's law at that point
    assert pm.fit_serial_fraction([1, 3], [1.0, 2.0]) == pytest.approx(pm.serial_fraction(2.0, 3))
