"""Energy: counters read where they exist (RAPL zones of a fake powercap tree, a fake NVML),
estimates from the TDP of the CPU actually used, the paper's runs estimated consistently."""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path

import pytest

from gan3d.scaling import energy
from gan3d.scaling import perfmodel as pm
from markdown_table import rows

MAX_UJ = 262_143_328_850  # an Intel package counter's range: wraps after ~262 kJ


def _zone(root: Path, zone: str, name: str, uj: int | None, max_uj: int | None = MAX_UJ) -> Path:
    d = root / zone
    d.mkdir(parents=True)
    (d / "name").write_text(f"{name}\n")
    if uj is not None:
        (d / "energy_uj").write_text(f"{uj}\n")
    if max_uj is not None:
        (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d / "energy_uj"


def _powercap(root: Path) -> dict[str, Path]:
    """Two packages as a 2-socket Intel server shows them: sub-zones flat (powercap's symlinks)
    and inside their package, psys, the MMIO interface repeating package-0, the control type."""
    files = {"package-0": _zone(root, "intel-rapl:0", "package-0", 1_000_000),
             "package-0/core": _zone(root, "intel-rapl:0:0", "core", 5_000_000),
             "package-0/dram": _zone(root, "intel-rapl:0:1", "dram", 7_000_000),
             "package-1": _zone(root, "intel-rapl:1", "package-1", MAX_UJ - 1_000_000),
             "psys": _zone(root, "intel-rapl:2", "psys", 0)}
    _zone(root / "intel-rapl:0", "intel-rapl:0:0", "core", 5_000_000)  # the same zone, nested
    _zone(root, "intel-rapl-mmio:0", "package-0", 3)  # package-0 again, through MMIO
    (root / "intel-rapl").mkdir()  # the control type: no counter
    return files


def _add(path: Path, uj: int, max_uj: int = MAX_UJ) -> None:
    """``uj`` more on a counter that wraps to 0 after ``max_uj``."""
    path.write_text(f"{(int(path.read_text()) + uj) % max_uj}\n")


def _replace(path: Path, text: str) -> None:
    """Write at once, as sysfs gives a counter: a reader in another thread never sees it empty."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_rapl_counters_are_found_by_domain_name(tmp_path):
    assert energy.counters(tmp_path / "absent") == {}
    files = _powercap(tmp_path)
    assert energy.counters(tmp_path) == files  # each zone once, sub-zones under their package
    counted = {z.domain for z in energy.rapl_zones(tmp_path) if z.counted}
    # core lies inside its package, psys holds packages and DRAM; DRAM is outside the package
    assert counted == {"package-0", "package-0/dram", "package-1"}
    assert {z.max_uj for z in energy.rapl_zones(tmp_path)} == {MAX_UJ}


def test_a_wrapping_counter_is_corrected():
    assert energy.counter_delta(10, 25, 100) == 15
    assert energy.counter_delta(90, 5, 100) == 15  # 90 -> 100, wrap to 0, -> 5
    with pytest.raises(ValueError, match="no known range"):
        energy.counter_delta(90, 5, None)


def test_the_meter_adds_packages_and_dram_once_across_a_wrap(tmp_path):
    files = _powercap(tmp_path)
    with energy.meter(root=tmp_path, nvml=False, interval=None) as m:
        _add(files["package-0"], 40_000_000)  # 40 J
        _add(files["package-0/core"], 30_000_000)  # 30 J of those 40, not to add again
        _add(files["package-0/dram"], 6_000_000)
        _add(files["package-1"], 3_000_000)  # MAX - 1 J + 3 J: wraps to 2 J
        _add(files["psys"], 90_000_000)
    r = m.result()
    assert int(files["package-1"].read_text()) < MAX_UJ - 1_000_000  # it did wrap
    assert r["kind"] == "measured" and r["seconds"] >= 0
    assert r["joules"] == pytest.approx({"package-0": 40, "package-0/core": 30,
                                         "package-0/dram": 6, "package-1": 3, "psys": 90})
    assert r["total_joules"] == pytest.approx(40 + 6 + 3)
    assert r["source"] == "RAPL package-0, package-0/dram, package-1"


def test_readings_in_between_catch_what_one_wrap_would_hide(tmp_path):
    f = _zone(tmp_path, "intel-rapl:0", "package-0", 100, max_uj=1000)
    m = energy.meter(root=tmp_path, nvml=False, interval=None).start()
    f.write_text("900\n")
    m.sample()
    f.write_text("300\n")  # wrapped
    m.stop()
    # 100 -> 900 -> (wrap at 1000) -> 300: 1,200 uJ; start and stop alone would say 200
    assert m.result()["total_joules"] == pytest.approx(1200e-6)
    assert m.readings == 3
    g = _zone(tmp_path / "b", "intel-rapl:0", "package-0", 100, max_uj=1000)
    m = energy.meter(root=tmp_path / "b", nvml=False, interval=0.005).start()  # the background
    _replace(g, "900\n")
    seen, deadline = m.readings + 2, time.monotonic() + 30  # a whole reading after the write
    while m.readings < seen and time.monotonic() < deadline:
        time.sleep(0.01)
    _replace(g, "300\n")
    m.stop()
    assert m.readings > seen and m.result()["total_joules"] == pytest.approx(1200e-6)


def test_unreadable_counters_give_an_estimate_that_says_why(tmp_path, monkeypatch):
    files = _powercap(tmp_path)
    real = Path.read_text

    def read_text(self, *a, **k):  # what a kernel patched for CVE-2020-8694 does to non-root
        if self.name == "energy_uj" and self.parent.name.startswith("intel-rapl:0"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", read_text)
    with energy.meter(root=tmp_path, nvml=False, interval=None) as m:
        _add(files["package-1"], 3_000_000)
    r = m.result()  # package-1 still measured; package-0 and its DRAM said missing
    assert r["kind"] == "measured" and r["total_joules"] == pytest.approx(3)
    assert r["source"] == "RAPL package-1"
    assert any("package-0/dram" in w and "permission denied" in w for w in r["not_measured"])
    files["package-1"].unlink()
    (tmp_path / "intel-rapl:2" / "energy_uj").unlink()
    with energy.meter(root=tmp_path, nvml=False, interval=None) as m:
        pass
    r = m.result()
    assert r["kind"] == "estimate" and r["label"] == "estimated from TDP"
    assert "RAPL package-0: " in r["reason"] and "permission denied" in r["reason"]
    with energy.meter(root=tmp_path / "absent", nvml=False, interval=None) as m:
        pass
    assert m.result()["reason"].startswith("no RAPL counters under ")


class _FakeNVML(types.ModuleType):
    """pynvml's calls the meter makes: GPU 0 counts millijoules, GPU 1 (a P100) has no counter."""

    NVML_ERROR_NOT_SUPPORTED = 3

    class NVMLError(Exception):
        pass

    def __init__(self, names=(b"NVIDIA H100 80GB HBM3", "Tesla P100-SXM2-16GB"), supported=(0,)):
        super().__init__("pynvml")
        self.names, self.supported, self.mj, self.shut = names, supported, {0: 5_000}, False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.names[h]

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if h not in self.supported:
            raise self.NVMLError("Not Supported")
        return self.mj[h]


def test_nvml_energy_is_read_in_millijoules_where_supported(tmp_path, monkeypatch):
    fake = _FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    files = _powercap(tmp_path)
    with energy.meter(root=tmp_path, interval=None) as m:
        fake.mj[0] += 250_000  # 250 J
        _add(files["package-0"], 40_000_000)
    r = m.result()
    assert r["joules"]["gpu0 (NVIDIA H100 80GB HBM3)"] == pytest.approx(250)
    assert not any(d.startswith("gpu1") for d in r["joules"])  # unsupported: not measured
    assert any(w.startswith("NVML gpu1 (Tesla P100-SXM2-16GB): no total-energy counter")
               for w in r["not_measured"])
    assert r["total_joules"] == pytest.approx(250 + 40) and fake.shut
    assert r["source"] == "RAPL package-0, package-0/dram, package-1; NVML gpu0 (NVIDIA H100 80GB HBM3)"
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML(supported=()))
    with energy.meter(root=tmp_path / "absent", interval=None) as m:
        pass
    assert m.result()["kind"] == "estimate" and "gpu1 (Tesla P100" in m.result()["reason"]
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import fails
    with energy.meter(root=tmp_path / "absent", interval=None) as m:
        pass
    assert "pynvml not installed" in m.result()["reason"]


INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu amx_bf16
"""


def test_the_cpu_model_and_its_tdp_share_are_the_cpu_actually_used():
    assert energy.cpu_model(INTEL) == "Intel(R) Xeon(R) Platinum 8480+"
    assert energy.cpu_model("processor\t: 0\nflags\t: fpu\n") == ""
    w = energy.cpu_watts(energy.cpu_model(INTEL))
    assert w["watts_per_core"] == pytest.approx(350 / 56) and "8480+" in w["source"] and w["known"]
    assert energy.cpu_watts("AMD EPYC 7763 64-Core Processor")["watts_per_core"] == pytest.approx(4.375)
    assert energy.cpu_watts("Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz")["watts_per_core"] == 6.75
    for other in ("Intel(R) Xeon(R) Platinum 8480C", "AMD EPYC 77630", "AMD EPYC"):
        u = energy.cpu_watts(other)  # a near name is not the part: the stated assumption
        assert (u["watts_per_core"], u["known"]) == (energy.UNKNOWN_CPU_WATTS_PER_CORE, False)
        assert u["source"].startswith(f"assumption: unknown CPU {other},")
    assert all(src.startswith("vendor: ") for _, _, src in energy.CPU_TDP.values())


def test_a_cpu_run_is_estimated_per_busy_core():
    est = energy.cpu_estimate(showers_per_s=5.0, cores=2, cpu="AMD EPYC 7763 64-Core Processor")
    assert (est["kind"], est["label"]) == ("estimate", "estimated from TDP")
    # 2 busy cores of a 280 W, 64-core EPYC: 8.75 W; 5 showers/s: 50 showers in 10 s, 87.5 J.
    assert est["watts"] == pytest.approx(8.75)
    assert est["joule_per_shower"] == pytest.approx(87.5 / 50)
    table = energy.energy_table(energy.paper_runs(), {"run": "2 cores", **est})
    head, *body = rows(table)
    assert head == ["run", "hours", "energy kWh", "J per trained shower", "kind"] and len(body) == 4
    assert body[-1] == ["this machine, 2 cores", "-", "-", "1.75",
                        "estimated from TDP (AMD EPYC 7763 64-Core Processor, 4.38 W/core)"]
    unknown = energy.cpu_estimate(5.0, 2, cpu="AMD EPYC")  # 2 cores at the assumed 5 W
    assert unknown["watts"] == 10 and unknown["cpu"] == "AMD EPYC"
    assert energy.describe(unknown) == ("estimated from TDP (AMD EPYC, 5.00 W/core, assumed: "
                                        "CPU not in the TDP table)")


def _measured(joules: float, showers: int, seconds: float = 10.0, source: str = "RAPL package-0"):
    return {"kind": "measured", "source": source, "joules": {"package-0": joules}, "seconds": seconds,
            "total_joules": joules, "showers": showers, "cpu": "AMD EPYC 7763", "not_measured": []}


def test_measured_repeats_are_summed_per_shower_and_the_scaling_run_labelled():
    e = energy.per_shower([_measured(300.0, 40), _measured(500.0, 40)])
    # 800 J for 80 showers in 20 s: 10 J per shower at 40 W
    assert (e["kind"], e["joule_per_shower"], e["watts"]) == ("measured", 10.0, 40.0)
    e = energy.per_shower([_measured(300.0, 20), _measured(500.0, 60)])
    assert e["joule_per_shower"] == 10.0  # 800 J / 80 showers, not the mean of 15 and 8.33
    assert energy.per_shower([_measured(1, 1), None])["kind"] == "estimate"
    mixed = energy.per_shower([_measured(1, 1), _measured(1, 1, source="RAPL package-1")])
    assert mixed["kind"] == "estimate" and "different counters" in mixed["reason"]
    # A scaling result made on a Sapphire Rapids and read here: its CPU, not this machine's.
    point = {"workers": 2, "threads_per_worker": 4, "batch_per_worker": 2, "showers_per_s": 8.0,
             "energy": {"kind": "estimate", "reason": "no RAPL counters under /sys/class/powercap"}}
    scale = {"points": [{**point, "workers": 1}, point],
             "machine": {"topology": {"cpu": "socket 0: Intel(R) Xeon(R) Platinum 8480+"}}}
    here = energy.run_energy(scale)
    assert here["cpu"] == "Intel(R) Xeon(R) Platinum 8480+" and here["cores"] == 8
    assert here["joule_per_shower"] == pytest.approx(8 * 350 / 56 / 8.0)
    assert here["reason"].startswith("no RAPL counters")
    point["energy"] = energy.per_shower([_measured(300.0, 20), _measured(500.0, 60)])
    here = energy.run_energy(scale)
    assert energy.describe(here) == "measured (RAPL package-0)" and here["joule_per_shower"] == 10


def test_the_paper_runs_add_up_and_serial_evaluation_costs_energy():
    p = energy.paper_runs()
    P = pm.PAPER
    # Amdahl's law with 98.9 % training efficiency on 12 GPUs, solved by hand for 20 h 16 min ->
    # 2 h 14 min: s = (8,040 / 72,960 - 1 / 11.868) / (1 - 1 / 11.868) = 2.832 %.
    assert p["serial_fraction"] == pytest.approx(0.0283237, abs=1e-7)
    one, serial, dist = (p["runs"][k] for k in ("1 GPU", "12 GPUs, serial evaluation (paper)",
                                               "12 GPUs, distributed evaluation"))
    # Energy = watts x seconds. One GPU: a P100 at 300 W and its node's two POWER8 sockets at
    # half of 190 W, 490 W for 72,960 s: 35.75 MJ = 9.931 kWh, over 40 x 180,000 showers 4.965 J.
    assert one["hours"] == pytest.approx(72_960 / 3600)
    assert one["kwh"] == pytest.approx(490 * 72_960 / 3.6e6)
    assert p["trained_showers"] == 7_200_000
    assert one["joule_per_shower"] == pytest.approx(490 * 72_960 / 7_200_000)
    assert serial["hours"] == pytest.approx(P["time_12_s"] / 3600, rel=0.01)  # its own numbers
    # 12 GPUs on 3 nodes: training 70,893.5 s / 11.868 = 5,973.5 s at 12 x 300 + 3 x 190 = 4,170 W;
    # the serial evaluation 2,066.5 s with one GPU busy and 11 idle at 30 W: 300 + 330 + 570 W.
    train12, eval1 = 72_960 * (1 - 0.0283237) / 11.868, 72_960 * 0.0283237
    assert serial["kwh"] == pytest.approx((train12 * 4170 + eval1 * 1200) / 3.6e6, rel=1e-5)
    # what the idle GPUs and the other nodes burn while one evaluates: 1,200 - 490 W for 2,066.5 s
    assert serial["eval_idle_kwh"] == pytest.approx(eval1 * (1200 - 490) / 3.6e6, rel=1e-5)
    assert dist["kwh"] == pytest.approx((train12 + eval1 / 12) * 4170 / 3.6e6, rel=1e-5)
    assert dist["hours"] < serial["hours"] and dist["kwh"] < serial["kwh"]
    assert dist["eval_idle_kwh"] == 0
    assert all("vendor" in w["source"] or "assumption" in w["source"] for w in p["watts"].values())


def test_the_largest_run_is_named_and_read():
    point = {"workers": 2, "threads_per_worker": 1, "batch_per_worker": 4, "showers_per_s": 5.0,
             "energy": {"kind": "measured", "source": "RAPL package-0", "joule_per_shower": 3.0,
                        "seconds": 12.5}}
    here = energy.largest_run({"points": [dict(point, workers=1), point]})
    assert here["run"] == "2 workers, 2 cores, batch 4" and here["kind"] == "measured"
    text = energy.reading(here, energy.paper_runs())
    assert text.startswith("This machine's row is measured (RAPL package-0), over 12.5 s of "
                           "timed steps. The paper's rows are estimates.")
    idle = energy.paper_runs()["runs"]["12 GPUs, serial evaluation (paper)"]["eval_idle_kwh"]
    assert f"{idle:.2f} kWh of a run" in text
