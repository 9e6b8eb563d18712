"""tools/pages/blocks.py: the marked blocks that the README's claims and the long runs' page are
rendered into - found once each, replaced in place, written only when changed."""

from __future__ import annotations

import pytest

from gan3d.report.claims import VERDICTS
from pages import blocks
from pages import claims as readme
from gan3d.exceptions import PageBlockError

MARKS = {"a": ("<!-- a -->", "<!-- /a -->"), "b": ("<!-- b -->", "<!-- /b -->")}
PAGE = "# t\n<!-- a -->\nold a\n<!-- /a -->\nmiddle\n<!-- b -->\nold b\n<!-- /b -->\nend\n"


def test_spans_hold_each_blocks_content_and_replaced_keeps_the_rest():
    at = blocks.spans(PAGE, MARKS)
    assert {k: PAGE[slice(*v)] for k, v in at.items()} == {"a": "\nold a\n", "b": "\nold b\n"}
    new = blocks.replaced(PAGE, at, {"a": "new a\n", "b": "new\nb"})
    assert new == PAGE.replace("old a", "new a").replace("old b", "new\nb")
    assert blocks.replaced(PAGE, at, {"a": "old a", "b": "old b"}) == PAGE  # a fixed point


@pytest.mark.parametrize("page", [
    PAGE.replace("<!-- /b -->", ""),                                   # an end lost
    PAGE + "<!-- a -->\n",                                            # a begin twice
    PAGE.replace("<!-- a -->", "@").replace("<!-- /a -->", "<!-- a -->").replace("@",
                                                                                   "<!-- /a -->"),
])
def test_a_lost_doubled_or_reversed_marker_is_named(page):
    with pytest.raises(PageBlockError, match="needs one"):
        blocks.spans(page, MARKS, "p.md")


def test_overlapping_blocks_are_refused():
    page = "<!-- a --> x <!-- b --> y <!-- /a --> z <!-- /b -->"
    with pytest.raises(PageBlockError, match="overlap"):
        blocks.spans(page, MARKS)


def test_write_if_changed_writes_only_a_change(tmp_path):
    path = tmp_path / "p.md"
    path.write_text(PAGE)
    before = path.stat().st_mtime_ns, path.stat().st_ino
    assert blocks.write_if_changed(path, PAGE, PAGE) is False
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == before
    assert blocks.write_if_changed(path, PAGE, PAGE + "x") is True
    assert path.read_text() == PAGE + "x" and [p.name for p in tmp_path.iterdir()] == ["p.md"]


def test_the_readmes_claims_block_must_be_there_once(tmp_path):
    data = {"run": {}, "provenance": {}, "claims": [], "counts": {v: 0 for v in VERDICTS}}
    page = tmp_path / "README.md"
    page.write_text(f"x\n{readme.BEGIN}\n{readme.END}\n{readme.BEGIN}\n")
    with pytest.raises(PageBlockError, match="claims' summary"):
        readme.update_readme(page, data)
    assert page.read_text() == f"x\n{readme.BEGIN}\n{readme.END}\n{readme.BEGIN}\n"  # untouched
