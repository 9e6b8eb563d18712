"""tools/pages/quotes.py: every measured number of the README and docs/ is rendered from its JSON
file.

The pages in the repository must be current (every marker renders to its text, no number that
looks measured outside a marker); the mutations below show that an edited number on either side,
in a page or in its JSON file, is caught, and that ``render`` puts the data's text back.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pages import quotes
from pages.quotes import QUOTES, check, render, render_quote, unmarked

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# Pages whose measured numbers are not quotes yet, each with the reason. strict: once a page is
# clean the exemption fails, so it cannot outlive its reason.
NOT_YET: dict[str, str] = {}  # pages not yet sourced: none left


def _copy_sources(root: Path) -> None:
    """Every file a quote reads, into ``root`` (a copy of the repository's data)."""
    for source in {q.source for q in QUOTES.values()}:
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, root / source)


def _page(name: str) -> pytest.param:
    marks = [pytest.mark.xfail(strict=True, reason=NOT_YET[name])] if name in NOT_YET else []
    return pytest.param(ROOT / ("README.md" if name == "README.md" else f"docs/{name}"),
                        marks=marks, id=name)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_marker_renders_to_its_text(page):
    assert check(page) == []


@pytest.mark.parametrize("page", [_page(p.name) for p in PAGES])
def test_no_number_that_looks_measured_is_left_unmarked(page):
    assert unmarked(page) == []


def test_every_quote_is_on_a_page_and_renders_from_its_file():
    used = {m["id"] for page in PAGES for m in quotes.MARKER.finditer(page.read_text())}
    assert set(QUOTES) - used == set()  # no quote that no page shows
    assert set(quotes.BLOCKS) - used == set()  # every table (every quote's file and machine,
    # the warm-start blocks) is on a page
    for q in QUOTES.values():
        assert (ROOT / q.source).is_file() and q.source.endswith(".json")
        text = render_quote(q)
        assert re.match(r"^-?[\d,.]+", text), text
        n = re.search(r"(\d+) (?:repeats|runs)", text)
        if q.samples:
            assert "{n}" in q.statistic and n, q.id  # the statistic says over how many
            if int(n.group(1)) <= 3:  # no three-digit medians of three repeats
                assert q.digits <= 2, q.id
        assert "-core" in quotes.machine(q)  # read from the file's provenance


def test_render_quote_names_the_statistic_and_the_spread(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"eff": [0.99966, 0.97142, 0.93921]}))
    q = quotes.Quote("t.eff", "r.json", lambda d: sorted(d["eff"])[1], "median of {n} repeats",
                     " %", samples=lambda d: d["eff"], spread="per repeat", scale=100.0)
    assert render_quote(q, tmp_path) == "97 % (median of 3 repeats; per repeat 93.9-100.0 %)"
    big = quotes.Quote("t.big", "r.json", lambda d: 1398.13, "median of {n} runs",
                       " showers/s", samples=lambda d: [1425.14, 1276.69, 1398.13])
    assert render_quote(big, tmp_path) == "1,400 showers/s (median of 3 runs; range 1,277-1,425)"
    exact = quotes.Quote("t.x", "r.json", lambda d: 2.4678, "counted", "x")
    assert render_quote(exact, tmp_path) == "2.5x (counted)"


def test_a_number_edited_on_the_page_is_reported(tmp_path):
    page = tmp_path / "performance.md"
    text = (ROOT / "docs" / "performance.md").read_text()
    right = render_quote(QUOTES["train.amx.float32.efficiency"])
    wrong = re.sub(r"^\d+", lambda m: str(int(m.group(0)) + 1), right)  # 95 % -> 96 %
    marked = f"<!--q:train.amx.float32.efficiency-->{right}<!--/q-->"
    assert text.count(marked) == 1
    page.write_text(text.replace(marked, marked.replace(right, wrong)))
    stale = check(page)
    assert [(s.id, s.found, s.expected) for s in stale] == [
        ("train.amx.float32.efficiency", wrong, right)]
    assert stale[0].line == text[:text.index(marked)].count("\n") + 1
    # render puts the data's text back and changes nothing else
    assert render(page) == (1, [])
    assert page.read_text() == text and check(page) == []
    assert render(page) == (0, [])


def test_a_number_changed_in_the_json_file_is_reported(tmp_path):
    _copy_sources(tmp_path)
    page = ROOT / "docs" / "performance.md"
    assert check(page, root=tmp_path) == []  # the copy renders as the repository does
    path = tmp_path / "studies" / "training_batches_amx.json"
    data = json.loads(path.read_text())
    row = next(r for r in data["precisions"]["float32"] if r["batch_per_rank"] == 32)
    two = next(r for r in row["runs"] if r["ranks"] == 2)
    for rep in two["repeats"]:  # 2 ranks 10 % slower in every repeat
        rep["showers_per_s"] *= 0.9
    path.write_text(json.dumps(data))
    stale = {s.id for s in check(page, root=tmp_path)}
    assert stale == {"train.amx.float32.2x1", "train.amx.float32.efficiency",
                     "train.amx.bfloat16_over_float32", "sources"}


def test_a_json_file_of_another_layout_is_a_named_error(tmp_path):
    _copy_sources(tmp_path)
    path = tmp_path / "studies" / "inference.json"
    data = json.loads(path.read_text())
    del data["folded_forward_flops"]
    path.write_text(json.dumps(data))
    with pytest.raises(quotes.StudyFileError, match="inference.flops_ratio.*layout changed"):
        render_quote(QUOTES["inference.flops_ratio"], tmp_path)
    path.unlink()
    with pytest.raises(quotes.StudyFileError, match="studies/inference.json is missing"):
        render_quote(QUOTES["inference.flops_ratio"], tmp_path)


def test_the_warm_start_blocks_table_counts_the_studys_verdicts(tmp_path):
    """Each block's row counts its rows' verdicts in studies/warm_start.json, and a verdict
    flipped in the file flips the row: 2 or more different fail a block that held."""
    study = json.loads((ROOT / quotes._WARM).read_text())
    (tmp_path / "studies").mkdir()
    save = lambda: (tmp_path / quotes._WARM).write_text(json.dumps(study))
    save()
    row = lambda name: next(line for line in quotes.BLOCKS["warm-blocks"](tmp_path, {})
                            .splitlines() if line.startswith(f"| `{name}` |"))
    block = [r for r in study["verdicts"] if r["candidate"] == "2w-none"]
    counts = [sum(r["verdict"] == v for r in block) for v in ("equivalent", "inconclusive",
                                                              "different")]
    cells = [c.strip() for c in row("2w-none").split("|")[1:-1]]
    assert cells[:4] == ["`2w-none`", "2", "lr", str(min(r["n"] for r in block))]
    assert list(map(int, cells[4:7])) == counts and sum(counts) == 8
    for r in [r for r in block if r["verdict"] != "different"][:2]:
        r["verdict"] = "different"
    save()
    assert row("2w-none").endswith("| fails |")


def test_unknown_and_unclosed_markers_are_reported_and_left_alone(tmp_path):
    page = tmp_path / "p.md"
    text = "a <!--q:no.such.quote-->1.5x<!--/q--> b\nc <!--q:inference.flops_ratio-->2x and on\n"
    page.write_text(text)
    found = [(s.line, s.id, s.expected) for s in check(page)]
    assert found == [(1, "no.such.quote", None), (2, "inference.flops_ratio", None)]
    assert render(page)[0] == 0 and page.read_text() == text


def test_a_new_unmarked_number_is_found(tmp_path):
    page = tmp_path / "README.md"
    text = README.read_text()
    page.write_text(text)
    assert unmarked(page) == []
    lines = text.count("\n")
    added = ("\nTraining is 1.64x faster, 7.03 showers/s at 97.1 %, in 7 min 56 s or 20 minutes.\n"
             "Not these: `1.64x` in code, 2 x 1 ranks, 3 seeds, batch 32, 10-500 GeV.\n"
             "```\nmake figures   # 8 s\n```\n")
    page.write_text(text + added)
    found = [(s.line, s.number) for s in unmarked(page)]
    assert found == [(lines + 2, n) for n in ("1.64x", "7.03 showers/s", "97.1 %", "7 min",
                                              "56 s", "20 minutes")]


def test_the_papers_numbers_are_allowed_only_as_written(tmp_path):
    page = tmp_path / "README.md"
    text = README.read_text()
    assert "98.9 %" in text and "98.9 %" in quotes.NOT_MEASURED
    page.write_text(text.replace("98.9 %", "98.7 %", 1))
    assert [s.number for s in unmarked(page)] == ["98.7 %"]


def test_the_command_line_checks_and_writes(tmp_path, capsys):
    page = tmp_path / "p.md"
    right = render_quote(QUOTES["inference.amx.float32.b64"])
    page.write_text(f"x <!--q:inference.amx.float32.b64-->{right.replace('560', '558')}<!--/q-->\n")
    assert quotes.main([str(page)]) == 1
    assert "inference.amx.float32.b64" in capsys.readouterr().err
    assert quotes.main(["--write", str(page)]) == 0
    assert page.read_text() == f"x <!--q:inference.amx.float32.b64-->{right}<!--/q-->\n"
    page.write_text(page.read_text() + "and 3.5 ms more\n")
    assert quotes.main([str(page)]) == 1 and "3.5 ms" in capsys.readouterr().err


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"\w+:", t)]


# Written by the claims ledger of `make figures`, not yet committed.
PENDING_LINKS = {"figures/CLAIMS.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_of_the_pages_exist(page):
    missing = []
    for link in _links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            missing.append(link)
        elif anchor and anchor not in {_slug(h) for h in
                                       re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M)}:
            missing.append(link)
    rel = {str((page.parent / m).resolve().relative_to(ROOT)) for m in missing}
    assert rel <= PENDING_LINKS, missing


def test_the_readme_links_every_docs_page_and_shows_figures():
    links = set(_links(README))
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= links
    figures = [link for link in links if re.fullmatch(r"figures/\w+\.png", link)]
    assert len(figures) >= 3 and "figures/README.md" in links
    text = README.read_text()
    section = text[text.index("## What a run reproduces"):]
    assert section.index("<!-- claims:begin -->") < section.index("<!-- claims:end -->")
    assert len(text.splitlines()) < 120  # a landing page, read in minutes
