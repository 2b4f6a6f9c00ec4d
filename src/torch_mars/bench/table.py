"""Markdown tables of benchmark rows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table, the first column left-aligned and the others (numbers) right-aligned.

    >>> print(markdown_table(["optimizer", "ms"], [["adamw", "1.0"]]))
    | optimizer | ms |
    |---|---:|
    | adamw | 1.0 |
    """
    lines = [
        "| " + " | ".join(headers) + " |",
        "|---|" + "---:|" * (len(headers) - 1),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
