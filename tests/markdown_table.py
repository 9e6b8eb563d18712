"""Reading a Markdown table back in the tests: its rows as cells, whatever the padding, so that a
test asserts a table's columns and values, not its whitespace."""

from __future__ import annotations

import re


def cells(line: str) -> list[str]:
    """The cells of one table row: split at the pipes that are not escaped, stripped, unescaped."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def rows(text: str) -> list[list[str]]:
    """Every row of the tables in ``text`` (header rows included, the ``|---|`` rules left out)."""
    out = []
    for line in text.splitlines():
        if line.strip().startswith("|"):
            row = cells(line)
            if not all(set(c) <= set("-:") and c for c in row):
                out.append(row)
    return out
