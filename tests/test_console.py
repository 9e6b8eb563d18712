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
