"""The validator's sensitivity: power grows with the sample size and the size of the flaw."""

from __future__ import annotations

from gan3d.validation import sensitivity


def test_power_grows_with_size_and_flaw():
    r = sensitivity.sensitivity(sizes=(60, 600), trials=6, seed=1, progress=False)
    p = r["power"]
    assert set(p) == set(sensitivity.DISTORTIONS) and r["sizes"] == [60, 600]
    # a 2 % shift of the sampling fraction is seen at least as often as a 1 % one, and more
    # often with ten times the showers; the null threshold falls with the sample size
    assert p["sampling fraction +2 %"][600] >= p["sampling fraction +1 %"][600]
    assert p["sampling fraction +2 %"][600] > p["sampling fraction +2 %"][60]
    for f, t in r["threshold"].items():
        assert t[600] < t[60], f
    assert 0.015 < r["effect"]["sampling fraction +2 %"] < 0.025  # its feature's mean moved 2 %
    assert r["effect"]["5 % wider"] > 0.1  # variance: more than (1.05)^2 - 1 with the re-binning
    table = sensitivity.sensitivity_table(r)
    assert table.count("\n| ") == len(sensitivity.DISTORTIONS) and "visible from" in table
