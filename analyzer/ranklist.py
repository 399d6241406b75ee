"""Rank lists as people write them: [0, 1, 2, 3, 7] <-> '0-3, 7' (options, warnings and reports at thousands of ranks)."""

from __future__ import annotations

from collections.abc import Iterable


def compact(ranks: Iterable[int], most: int = 8) -> str:
    """Runs of consecutive ranks, at most ``most`` of them, then how many more runs there are."""
    runs: list[list[int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = [f"{a}-{b}" if b > a else f"{a}" for a, b in runs[:most]]
    more = len(runs) - most
    return ", ".join(text) + (f" and {more} more runs" if more > 0 else "")


def parse(text: str) -> tuple[int, ...]:
    """``"0,2,4-7"`` -> (0, 2, 4, 5, 6, 7): sorted, each number once; spaces around items allowed.

    The one parser of ``--ranks`` / ``--steps``. Raises ``ValueError`` naming the bad item on an empty
    item, a negative number, anything not a number, or a range whose end is below its start (silently
    empty before): callers turn it into their one-line usage error.
    """
    out: set[int] = set()
    for part in text.split(","):
        a, dash, b = (x.strip() for x in part.partition("-"))
        if not _number(a) or (dash and not _number(b)):
            raise ValueError(f"{part.strip()!r} is not a number or a range N-M")
        lo, hi = int(a), int(b) if dash else int(a)
        if hi < lo:
            raise ValueError(f"{part.strip()!r} ends before it starts")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit()  # '²'.isdigit() is true too, and int() refuses it
