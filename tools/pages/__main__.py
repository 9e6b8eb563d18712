"""``python tools/pages [--check | --write]``: every page's rendered numbers checked or rewritten;
``python tools/pages quotes|longruns|claims ARGS``: one of them, with its own options (``--help``)."""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1]
if str(TOOLS) not in sys.path:  # run as a folder: its parent holds the package
    sys.path.insert(0, str(TOOLS))

from pages import claims, longruns, quotes  # noqa: E402 - after the path above

COMMANDS = {"quotes": quotes.main, "longruns": longruns.main, "claims": claims.main}


def main(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    if argv not in ([], ["--check"], ["--write"]):
        print(__doc__, file=sys.stderr)
        return 2
    root = TOOLS.parent
    pages = [str(root / "README.md"), *map(str, sorted((root / "docs").glob("*.md")))]
    write = ["--write"] if argv == ["--write"] else []
    status = quotes.main([*write, *pages])
    return max(status, longruns.main([*write, "--root", str(root)]),
               claims.main([*write, "--root", str(root)]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
