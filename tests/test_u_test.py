"""The compare gate's Mann-Whitney U p-value against brute force over every relabelling of the samples."""

from __future__ import annotations

from itertools import combinations

import pytest

from analyzer.compare.diff import mann_whitney_p


def _u(x: list[float], y: list[float]) -> float:
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)


def _brute_p(x: list[float], y: list[float]) -> float:
    """Two-sided exact p: share of all splits of the pooled values whose U is at least as far from n1*n2/2."""
    pooled, n1, n2 = x + y, len(x), len(y)
    far = abs(_u(x, y) - n1 * n2 / 2)
    hits = total = 0
    for idx in combinations(range(len(pooled)), n1):
        a = [pooled[i] for i in idx]
        b = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        hits += abs(_u(a, b) - n1 * n2 / 2) >= far - 1e-9
    return hits / total


@pytest.mark.parametrize("x, y", [
    ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]),
    ([3.1, 0.4, 2.2, 5.0, 1.7], [2.9, 6.3, 4.4, 7.1]),
    ([10.0, 12.5, 11.0, 9.5, 13.0, 12.0], [12.2, 14.0, 13.5, 11.8, 15.1, 16.0, 12.9]),
])
def test_exact_p_matches_brute_force(x: list[float], y: list[float]) -> None:
    assert mann_whitney_p(x, y) == pytest.approx(_brute_p(x, y), rel=1e-9)
    assert mann_whitney_p(y, x) == pytest.approx(_brute_p(x, y), rel=1e-9)  # two-sided: symmetric


def test_ties_use_the_tie_corrected_normal_approximation() -> None:
    # [1,1,2,3] vs [2,4,5,6]: U = 1.5; ties (1,1), (2,2):
    # var = 16/12 * (9 - 12/56) = 11.71; z = (8 - 1.5 - 0.5)/3.423 = 1.753
    p = mann_whitney_p([1, 1, 2, 3], [2, 4, 5, 6])
    assert p == pytest.approx(0.0795940892792763, rel=1e-9)
