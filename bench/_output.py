"""The result file every benchmark writes, and its checks before any work: ``--output`` names it,
an existing result is refused unless ``--force`` (one argparse error line that names the file),
and ``--allow-dirty`` lets a result go into ``studies/`` from a tree with uncommitted changes
(:func:`gan3d.records.check_writable`, which each script calls before its work)."""

from __future__ import annotations

import argparse


def add_options(parser: argparse.ArgumentParser, default: str, *aliases: str) -> None:
    """``--output`` (default ``default``; ``aliases``: its older names), ``--force``,
    ``--allow-dirty``."""
    parser.add_argument("--output", *aliases, default=default, help="the result's JSON file")
    parser.add_argument("--force", action="store_true",
                        help="replace the result --output names (else an existing one is refused)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="write into studies/ from a tree with uncommitted changes "
                             "(the file is then marked clean: false)")


def parse(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """The parsed arguments, once ``--output`` is known not to replace another result."""
    from gan3d.exceptions import Gan3dError
    from gan3d.io import check_output

    opts = parser.parse_args(argv)
    try:  # before any work: a result is never replaced silently
        check_output(opts.output, force=opts.force)
    except Gan3dError as exc:
        parser.error(str(exc))
    return opts
