"""Marked blocks of a page: the text between two HTML comments that ``tools/pages`` renders.

The README's claims summary (:mod:`pages.claims`) and the long runs' progress in
``studies/README.md`` (:mod:`pages.longruns`) are not typed by hand: each sits between
a begin and an end marker (``<!-- claims:begin -->`` ... ``<!-- claims:end -->``) and is
rewritten from the results it states. :func:`spans` finds each block's content - every marker
exactly once, the begin before its end, or a :class:`~gan3d.exceptions.PageBlockError` that says
which - :func:`replaced` puts new content in, and :func:`write_if_changed` rewrites the page
atomically only when its text changed. :func:`command_line` reads both tools' arguments.
"""

from __future__ import annotations

from pathlib import Path

from gan3d.exceptions import PageBlockError
from gan3d.io import atomic_path, repo_root

__all__ = ["spans", "replaced", "write_if_changed"]


def spans(text: str, markers: dict[str, tuple[str, str]], where: str = "the page"
          ) -> dict[str, tuple[int, int]]:
    """The (start, end) of each named block's content in ``text``: ``markers`` maps a name to
    its (begin, end) markers; each must occur once, the begin first."""
    out = {}
    for name, (begin, end) in markers.items():
        if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
            raise PageBlockError(f"{where} needs one {begin} ... {end} block (found "
                                 f"{text.count(begin)} begin and {text.count(end)} end "
                                 "markers): restore them around the block")
        out[name] = (text.index(begin) + len(begin), text.index(end))
    ordered = sorted(out.values())
    if any(a[1] > b[0] for a, b in zip(ordered, ordered[1:])):
        raise PageBlockError(f"{where}: the blocks {sorted(markers)} overlap")
    return out


def replaced(text: str, at: dict[str, tuple[int, int]], new: dict[str, str]) -> str:
    """``text`` with the content of each block of ``at`` (from :func:`spans`) replaced by its
    ``new`` text, on lines of its own between the markers."""
    out, pos = [], 0
    for name, (start, end) in sorted(at.items(), key=lambda kv: kv[1][0]):
        out += [text[pos:start], "\n", new[name].strip("\n"), "\n"]
        pos = end
    return "".join(out + [text[pos:]])


def write_if_changed(path: str | Path, old: str, new: str) -> bool:
    """Write ``new`` to ``path`` atomically if it differs from ``old`` (the text read); True if
    it did."""
    if new != old:
        with atomic_path(path) as tmp:
            Path(tmp).write_text(new)
    return new != old


def command_line(argv: list[str] | None, prog: str, doc: str, default_page: str,
                 write_help: str, root_help: str) -> tuple[bool, Path, Path]:
    """A page tool's arguments, ``[page] [--write] [--root ROOT]``: whether to write, the
    checkout whose results are read, and the page (``default_page`` under that checkout)."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("page", nargs="?", default=None, help=f"default: {default_page}")
    parser.add_argument("--write", action="store_true", help=write_help)
    parser.add_argument("--root", help=root_help)
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else repo_root()
    return args.write, root, Path(args.page) if args.page else root / default_page
