"""bench/bench_precision.py's comparison of bfloat16 against float32 runs (no training here: the
runs are made up, so that what the comparison must say is known)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def bp():
    spec = importlib.util.spec_from_file_location("bench_precision", ROOT / "bench" / "bench_precision.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _runs(shift: float, rng) -> dict:
    runs = {}
    for prec, offset in (("float32", 0.0), ("bfloat16", shift)):
        for seed in range(3):
            rows = [{"d_loss": 10 + offset + rng.normal(0, 0.01), "g_loss": 20 + rng.normal(0, 0.01),
                     "mon_targets_met": 5.0, "profile_distance": 0.3 + rng.normal(0, 1e-3)}
                    for _ in range(4)]
            runs[f"{prec}-s{seed}"] = {"precision": prec, "rows": rows, "showers": 800,
                                       "train_s": 100.0 if prec == "float32" else 50.0}
    return runs


def test_alike_runs_are_called_equivalent_and_a_shifted_loss_different(bp):
    rng = np.random.default_rng(0)
    same = bp.compare(_runs(0.0, rng))
    assert same["tost"]["d_loss"]["verdict"] == "equivalent"
    assert same["tost"]["profile_distance"]["verdict"] == "equivalent"
    assert same["inside"]["d_loss"]["of"] == 12 and same["inside"]["d_loss"]["expected_if_alike"] == 0.5
    assert same["rate"] == {"float32": 8.0, "bfloat16": 16.0}
    shifted = bp.compare(_runs(5.0, rng))  # bfloat16's D loss 50 % higher
    assert shifted["tost"]["d_loss"]["verdict"] == "different"
    assert shifted["inside"]["d_loss"]["inside"] == 0
    assert shifted["tost"]["g_loss"]["verdict"] == "equivalent"
    table = bp.table({"comparison": shifted})
    assert "| d_loss |" in table and "different" in table and "(2.00x)" in table


def test_it_refuses_where_bfloat16_is_emulated(bp, monkeypatch, capsys):
    monkeypatch.setattr(bp.runtime, "cpu_has_bf16", lambda: False)
    assert bp.main(["--steps", "10", "--points", "5"]) == 2
    assert "neither AVX512_BF16 nor AMX" in capsys.readouterr().err
