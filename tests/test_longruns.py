"""studies/README.md's progress of the long runs is their checkpoints' (tools/pages/longruns.py:
the sessions' numbers and the standing table, rendered into the page's blocks).

The committed page must be current; the mutations below show that a number edited by hand, a
session left out, rows that do not chain and a checkpoint that moved on without a row are caught,
and that ``render`` puts the checkpoints' numbers back.
"""

from __future__ import annotations

import re
import shutil
import statistics
from pathlib import Path

import pytest

from gan3d.exceptions import PageBlockError, StudyFileError
from gan3d.validation import longruns
from pages import longruns as page_blocks

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "studies" / "README.md"


def _session_rows(text: str) -> list[str]:
    block = text.split(page_blocks.SESSIONS_BEGIN)[1].split(page_blocks.SESSIONS_END)[0]
    return [line for line in block.strip().splitlines()[2:]]


@pytest.fixture
def page(tmp_path) -> Path:
    copy = tmp_path / "README.md"
    shutil.copy(PAGE, copy)
    return copy


def test_the_committed_page_is_current():
    assert page_blocks.check(PAGE, ROOT) == []
    assert page_blocks.main([str(PAGE), "--root", str(ROOT)]) == 0


def test_each_sessions_row_is_the_median_and_range_of_its_epochs_rates():
    hist = {run: r.history for run, r in page_blocks.runs(ROOT).items()}
    rows = _session_rows(PAGE.read_text())
    assert rows
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        run, (first, last) = cells[2], map(int, cells[3].split("-"))
        rates = [r["showers_per_s"] for r in hist[run] if first < r["epoch"] <= last]
        assert len(rates) == last - first > 0
        assert float(cells[4]) == pytest.approx(statistics.median(rates), abs=0.05)
        lo, hi = map(float, cells[5].split("-"))
        assert (lo, hi) == pytest.approx((min(rates), max(rates)), abs=0.05)


def test_the_standing_table_says_where_each_committed_checkpoint_is():
    found = page_blocks.runs(ROOT)
    text = PAGE.read_text()
    block = text.split(page_blocks.STANDING_BEGIN)[1].split(page_blocks.STANDING_END)[0]
    rows = {c[0]: c for c in ([x.strip() for x in line.strip("|").split("|")]
                               for line in block.strip().splitlines()[2:])}
    assert set(rows) == set(longruns.RUNS)
    for run, (history, fork) in found.items():
        # both runs fork the learning curve's epoch 26 (studies/warm-start/epoch-0026.npz)
        assert fork == 26 and history[fork - 1]["epoch"] == fork
        own = sum(r["time_epoch_s"] for r in history if r["epoch"] > 26)
        assert int(rows[run][1]) == history[-1]["epoch"]
        assert int(rows[run][2].replace(",", "")) == history[-1]["showers_seen"]
        assert float(rows[run][3]) == pytest.approx(own / 3600, abs=0.005)
        # an own epoch's showers: 1,600 per worker (batch 32, 50 steps), not the parent's 1,600
        per_epoch = 1600 * int(run.split()[0])
        assert history[-1]["showers_seen"] - history[-2]["showers_seen"] == per_epoch
        last = [r for r in _session_rows(PAGE.read_text()) if f"| {run} |" in r][-1]
        first, end = map(int, re.search(r"\| (\d+)-(\d+) \|", last).groups())
        epoch_s = statistics.median(r["time_epoch_s"] for r in history if first < r["epoch"] <= end)
        left = (longruns.BUDGET - history[-1]["showers_seen"]) / per_epoch
        assert float(rows[run][4]) == pytest.approx(left * epoch_s / 3600, abs=0.05)
        met = [r["mon_targets_met"] for r in history[-page_blocks.LAST:]]
        assert rows[run][5] == (f"{min(met)} of 20" if min(met) == max(met)
                                else f"{min(met)}-{max(met)} of 20")


def test_a_number_edited_by_hand_is_reported_and_render_puts_it_back(page):
    text = page.read_text()
    row = _session_rows(text)[0]
    cells = row.split("|")
    cells[5] = f" {float(cells[5]) + 0.3:.1f} "  # the median showers/s
    page.write_text(text.replace(row, "|".join(cells)))
    stale = page_blocks.check(page, ROOT)
    assert len(stale) == 1 and "should read" in stale[0] and row.strip() in stale[0]
    assert page_blocks.main([str(page), "--root", str(ROOT)]) == 1
    assert page_blocks.render(page, ROOT) is True
    assert page.read_text() == text and page_blocks.check(page, ROOT) == []


def test_an_edited_standing_number_is_reported(page):
    text = page.read_text()
    edited = re.sub(r"(\| 1 worker \| \d+ \| [\d,]+ \| )(\d+\.\d\d)",
                    lambda m: m[1] + f"{float(m[2]) - 0.5:.2f}", text, count=1)
    assert edited != text
    page.write_text(edited)
    assert len(page_blocks.check(page, ROOT)) == 1


def test_a_checkpoint_that_moved_on_without_a_row_is_refused(page):
    text = page.read_text()
    last_1w = [r for r in _session_rows(text) if "| 1 worker |" in r][-1]
    page.write_text(text.replace(last_1w + "\n", ""))
    with pytest.raises(StudyFileError, match="add a row for the session"):
        page_blocks.check(page, ROOT)
    assert page_blocks.main([str(page), "--root", str(ROOT)]) == 2


def test_rows_that_do_not_chain_are_refused(page):
    text = page.read_text()
    first_2w = [r for r in _session_rows(text) if "| 2 workers |" in r][0]
    a, b = re.search(r"\| (\d+)-(\d+) \|", first_2w).groups()
    page.write_text(text.replace(first_2w, first_2w.replace(f"| {a}-{b} |",
                                                            f"| {int(a) + 1}-{b} |")))
    with pytest.raises(StudyFileError, match="must chain"):
        page_blocks.check(page, ROOT)


def test_a_row_beyond_the_checkpoint_and_a_page_without_blocks_are_refused(page):
    text = page.read_text()
    last_2w = [r for r in _session_rows(text) if "| 2 workers |" in r][-1]
    end = int(re.search(r"\| \d+-(\d+) \|", last_2w)[1])
    extra = f"| 99 | 2099-01-01 | 2 workers | {end}-{end + 3} | | | |"
    page.write_text(text.replace(last_2w, last_2w + "\n" + extra))
    with pytest.raises(StudyFileError, match="does not hold"):
        page_blocks.check(page, ROOT)
    page.write_text(text.replace(page_blocks.STANDING_END, ""))
    with pytest.raises(PageBlockError, match="needs one"):
        page_blocks.check(page, ROOT)
    assert page_blocks.main([str(page), "--root", str(ROOT)]) == 2


def test_estimates_are_quoted_to_two_significant_digits():
    assert (page_blocks._rounded("2,319,183 [380,984, > 100x now]")
            == "2,300,000 [380,000, > 100x now]")
    assert page_blocks._rounded("277,215 [226,964, 320,459]") == "280,000 [230,000, 320,000]"
    assert page_blocks._rounded("met now") == "met now"


def test_the_sessions_table_is_the_pages():
    block = PAGE.read_text().split(page_blocks.SESSIONS_BEGIN)[1].split(page_blocks.SESSIONS_END)[0]
    assert page_blocks.sessions_table(ROOT) == block.strip()


def test_the_sessions_table_needs_its_markers_once(tmp_path):
    (tmp_path / "studies").mkdir()
    page = tmp_path / "studies" / "README.md"
    page.write_text(PAGE.read_text().replace(page_blocks.SESSIONS_END, ""))
    with pytest.raises(PageBlockError, match="needs one"):
        page_blocks.sessions_table(tmp_path)


def test_the_sessions_chain_from_each_runs_recorded_fork():
    """The chain starts at the fork the checkpoint records, not at a number in the code."""
    found = page_blocks.runs(ROOT)
    block = PAGE.read_text().split(page_blocks.SESSIONS_BEGIN)[1].split(page_blocks.SESSIONS_END)[0]
    assert page_blocks.sessions_block(block, found) == block.strip()
    moved = {run: r._replace(fork=r.fork - 1) for run, r in found.items()}
    with pytest.raises(StudyFileError, match="must chain"):
        page_blocks.sessions_block(block, moved)


SHIPPED = {"1 worker": "long-1w", "2 workers": "long-2w",  # gan3d.gan.reference.SHIPPED's names
           "2 workers, plain lr": "long-2w-none"}


def _pair():
    """(run, shipped name, the run's newest committed checkpoint) of each long run."""
    from gan3d.validation.study import newest_checkpoint

    return [(run, name, newest_checkpoint(ROOT / longruns.RUNS[run]))
            for run, name in SHIPPED.items()]


def test_the_shipped_pair_is_each_long_runs_newest_committed_checkpoint_as_weights_only():
    import hashlib

    from gan3d.gan import reference
    from gan3d.validation.study import checkpoint_record, generator_record

    for run, name, ckpt in _pair():
        folder = reference.SHIPPED[name]
        assert sum(f.stat().st_size for f in folder.iterdir()) <= 5e6  # weights only, float32
        rec, ck = generator_record(name), checkpoint_record(ckpt)
        again = (f"re-export: gan3d export {ckpt.relative_to(ROOT)} "
                 f"src/gan3d/gan/reference/{name} --force")
        assert rec["exported_from"] == {
            "checkpoint": str(ckpt.relative_to(ROOT)),
            "sha256": hashlib.sha256(ckpt.read_bytes()).hexdigest()}, again
        assert rec["workers"] == ck["workers"] == int(run.split()[0])
        assert (rec["epoch"], rec["showers_seen"], rec["precision"]) == \
            (ck["epoch"], ck["showers_seen"], ck["precision"])
        # its learning curve is the run's whole history, the monitors and rates of every epoch
        assert [r["epoch"] for r in rec["history"]] == [r["epoch"] for r in ck["history"]]
        for key in ("mon_targets_met", "lr", "showers_per_s", "time_epoch_s"):
            assert [r.get(key) for r in rec["history"]] == [r.get(key) for r in ck["history"]]
        # its provenance is the training's, and the forks it descends through, oldest first
        assert rec["provenance"] == ck["provenance"] and rec["provenance"]["clean"] is True
        assert [(f["epoch"], f["changed"]) for f in rec["forks"]] == \
            [(f["epoch"], f["changed"]) for f in ck["forks"]]
        assert rec["forks"][0]["from"] == "studies/warm-start/epoch-0026.npz"
        assert '"/' not in (folder / "reference.json").read_text()  # no folder of a machine


@pytest.mark.slow
def test_the_shipped_pair_simulates_the_showers_of_the_committed_checkpoints():
    import numpy as np

    from gan3d.gan.model import generate_showers
    from gan3d.gan.reference import networks_from_checkpoint
    from gan3d.validation.study import load_networks

    e = np.array([50.0, 400.0])
    for _, name, ckpt in _pair():
        (gen, disc), (ck_gen, ck_disc) = load_networks(name), networks_from_checkpoint(ckpt)
        assert np.array_equal(generate_showers(gen, e, seed=5), generate_showers(ck_gen, e, seed=5))
        for a, b in zip(disc.weights, ck_disc.weights, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_shipped_pair_and_the_third_run_are_read_as_the_committed_long_runs():
    third = "long-2w-none"
    found = longruns.records(["long-1w", "long-2w", third, str(ROOT / "no-such-run")])  # last: out
    assert len(found) == 3
    for lab, rec in found.items():
        w = rec["workers"]
        rule = rec["config"]["train"]["lr_rule"]  # the paper's, linear, goes unnamed
        assert rule == ("none" if rec["source"] == third else "linear")
        assert lab == (f"{w} worker{'s' if w > 1 else ''}{', plain lr' if rule == 'none' else ''}"
                       f", long run ({rec['showers_seen']:,} showers)")
        assert lab == longruns.label(rec) and rec["source"] in ("long-1w", "long-2w", third)
    assert longruns.are_committed(found)
    assert not longruns.are_committed(dict(list(found.items())[:2]))


def test_each_n_worker_run_is_shown_against_one_worker_by_the_rule_fixed_before_the_third():
    from gan3d.report.claims.equivalence import DRAWS, long_like_one

    one = {"showers_seen": 227_200, "targets_met_draws": [17, 18, 17, 18, 18, 17, 18, 17, 18, 18],
           "fpd": 3.47, "fpd_error": 0.32}
    like = dict(one, targets_met_draws=[t - (i % 2) for i, t in enumerate(one["targets_met_draws"])],
                fpd=3.6, fpd_error=0.3)
    worse = dict(one, targets_met_draws=[t - 5 for t in one["targets_met_draws"]])
    early = dict(like, showers_seen=140_800)
    judged = {"a": long_like_one(one, like), "b": long_like_one(one, worse),
              "c": long_like_one(one, early)}
    assert [j["verdict"] for j in judged.values()] == ["equivalent", "different", "not comparable"]
    rows = longruns.like_one_table(judged).splitlines()[2:]
    # targets: paired mean -0.5 over the draws; FPD +0.13, its interval 1.645 x hypot(0.32, 0.3)
    half = 1.645 * (0.32 ** 2 + 0.3 ** 2) ** 0.5
    assert "-0.50 [" in rows[0] and f"+0.13 [{0.13 - half:+.2f}, {0.13 + half:+.2f}]" in rows[0]
    assert rows[0].split("|")[-2].strip() == "**equivalent**"
    assert "margin +-2: equivalent" in rows[0]
    assert "-5.00 [-5.00, -5.00], margin +-2: different" in rows[1]
    assert f"{DRAWS} paired draws at equal showers" in rows[2] and "140800" in rows[2]
