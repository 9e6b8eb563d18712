"""The envelope of the study files (``gan3d.records``): written with schema and kind, every
committed study (written before the envelope: schema 0) still reads, and a newer schema or the
wrong kind of file is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gan3d import records
from gan3d.exceptions import StudyFileError
from gan3d.io import write_json

STUDIES = Path(__file__).resolve().parents[1] / "studies"
KIND_OF = {"network": "interconnect", "algorithms": "algorithms", "convergence": "convergence",
           "warm_start": "warm_start",
           "inference": "inference", "inference_amx": "inference", "precision": "precision",
           "bfloat16_accuracy": "bfloat16_accuracy"}


def _kind(path: Path) -> str:
    return KIND_OF.get(path.stem, "training" if path.stem.startswith("training") else "?")


@pytest.mark.parametrize("path", sorted(STUDIES.glob("*.json")), ids=lambda p: p.name)
def test_every_committed_study_reads_with_its_kind(path):
    data = records.read(path, _kind(path))
    assert records.schema_of(data) in (0, records.SCHEMA)
    if records.schema_of(data):  # rewritten since the envelope: it names its kind
        assert data["kind"] == _kind(path)
    assert data["provenance"]["gan3d"]  # every study says who made it, old or new


def test_a_record_round_trips_with_its_envelope(tmp_path):
    body = {"rows": [1, 2], "schema": 7, "kind": "other", "provenance": {"gan3d": "9.9"}}
    rec = records.record("interconnect", body)
    assert list(rec)[:2] == ["schema", "kind"]  # the envelope first, the body's own overridden
    assert (rec["schema"], rec["kind"], rec["rows"]) == (records.SCHEMA, "interconnect", [1, 2])
    assert rec["provenance"] == {"gan3d": "9.9"}  # the body's provenance is kept
    made = records.record("algorithms", {"rows": []})
    assert made["provenance"]["gan3d"]  # or made now
    write_json(tmp_path / "net.json", rec)
    assert records.read(tmp_path / "net.json", "interconnect") == rec
    kept = {"runs": {}}
    assert records.stamp(kept, "convergence") is kept and kept["schema"] == records.SCHEMA


def test_an_old_file_is_schema_0_and_a_newer_or_other_one_is_refused(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"rows": [], "provenance": {"gan3d": "0.2.0"}}))
    assert records.schema_of(records.read(old, "interconnect")) == 0
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema": records.SCHEMA + 1, "kind": "interconnect"}))
    with pytest.raises(StudyFileError, match=f"schema {records.SCHEMA + 1}; this gan3d reads up"):
        records.read(newer)
    other = tmp_path / "other.json"
    write_json(other, records.record("algorithms", {"rows": []}))
    with pytest.raises(StudyFileError, match="holds a study of kind 'algorithms', not 'interconnect'"):
        records.read(other, "interconnect")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(StudyFileError, match="not a study file"):
        records.read(listed)
    with pytest.raises(StudyFileError, match="unknown study kind 'netwrok'"):
        records.record("netwrok", {})


def test_a_missing_committed_study_names_the_benchmark_that_makes_it(tmp_path, capsys):
    missing = tmp_path / "network.json"
    assert records.read_if_present(missing, "interconnect", "bench/bench_interconnect.py") is None
    assert f"python bench/bench_interconnect.py --output {missing}" in capsys.readouterr().out
    write_json(missing, {"kind": "algorithms"})
    with pytest.raises(StudyFileError, match="kind"):
        records.read_if_present(missing, "interconnect", "bench/bench_interconnect.py")
