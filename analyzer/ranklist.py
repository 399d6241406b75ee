"""Rank lists as people write them: [0, 1, 2, 3, 7] -> '0-3, 7' (warnings and reports at thousands of ranks)."""

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
