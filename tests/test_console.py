"""Messages in one format, rank 0 alone informing, progress bars that follow the rank."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from gan3d import console


def _run(code: str) -> subprocess.CompletedProcess:
    """A fresh interpreter: no pytest handlers on the root logger, as for a user."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_one_format_on_stderr_and_only_warnings_from_other_ranks():
    out = _run("""
        from gan3d import console
        log = console.get_logger("gan3d.gan.training")
        log.info("resuming after epoch %d", 2)
        console.set_rank(1, 2)
        log.info("this is not shown")
        log.warning("disk almost full")
    """)
    assert out.returncode == 0 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2, out.stderr
    assert lines[0].endswith("gan3d.gan.training: resuming after epoch 2")
    assert lines[1].endswith("gan3d.gan.training [rank 1]: disk almost full")
    assert all(line[2] == ":" and line[5] == ":" for line in lines)  # HH:MM:SS first


def test_an_application_that_configured_logging_keeps_its_own_handlers():
    out = _run("""
        import logging, sys
        logging.basicConfig(stream=sys.stdout, format="APP %(name)s %(message)s", level="INFO")
        from gan3d import console
        console.get_logger("gan3d.data").info("hello")
    """)
    assert out.stdout.strip() == "APP gan3d.data hello" and out.stderr == ""


def test_progress_bars_are_off_on_other_ranks_and_on_request(monkeypatch, capsys):
    monkeypatch.setitem(console._RANK, "rank", 0)
    monkeypatch.delenv("GAN3D_PROGRESS", raising=False)
    assert not console.progress(range(3)).disable
    monkeypatch.setenv("GAN3D_PROGRESS", "0")
    assert console.progress(range(3)).disable
    monkeypatch.delenv("GAN3D_PROGRESS")
    monkeypatch.setitem(console._RANK, "rank", 1)
    assert console.progress(range(3), disable=False).disable  # a rank other than 0 stays quiet
    capsys.readouterr()
    # What the user sees: rank 1 writes nothing and yields every item; rank 0 draws the bar on
    # stderr (never stdout, which a notebook or a pipe may hold data in), to 3/3.
    assert list(console.progress(range(3), desc="bins")) == [0, 1, 2]
    assert capsys.readouterr() == ("", "")
    monkeypatch.setitem(console._RANK, "rank", 0)
    assert list(console.progress(range(3), desc="bins")) == [0, 1, 2]
    out, err = capsys.readouterr()
    assert out == "" and "bins: 100%" in err and "3/3" in err


def _cells(text: str) -> list[list[str]]:
    """The cells of every line of a Markdown table, its rule included."""
    from markdown_table import cells

    return [cells(line) for line in text.splitlines()]


def test_a_table_reads_back_as_its_headers_and_values():
    import numpy as np

    rows = [["1 worker", 0.123456, 12, None], ["a | b", np.float32(2.5), 3, "0.10"]]
    text = console.table(rows, ["run", "loss", "epochs", "note"], floatfmt=".3g", missing="-")
    head, rule, *body = _cells(text)
    assert head == ["run", "loss", "epochs", "note"]
    assert all(set(c) == {"-"} for c in rule)  # GitHub's header rule, one per column
    assert body == [["1 worker", "0.123", "12", "-"], ["a | b", "2.5", "3", "0.10"]]
    assert float(body[0][1]) == round(rows[0][1], 3)  # the value, to the format's digits
    assert len({len(line) for line in text.splitlines()}) == 1  # the columns are aligned


def test_a_table_takes_a_format_per_column_and_fills_short_rows():
    text = console.table([[1.0, 2.0], [3.0]], ["a", "b"], floatfmt=[".1f", ".2e"])
    assert _cells(text)[2:] == [["1.0", "2.00e+00"], ["3.0", ""]]
    head, (rule,) = _cells(console.table([], ["only"]))  # no rows: the header and its rule
    assert head == ["only"] and set(rule) == {"-"}
