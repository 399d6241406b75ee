"""Change points in one metric over runs: level shifts (steps) and slow drifts, told apart and tested (pure).

1. Candidates: ruptures' kernel change-point search (``KernelCPD``, linear kernel = least-squares cost,
   PELT in C) with a BIC-like penalty ``3 sigma^2 ln n``, sigma the run-to-run noise estimated robustly
   from successive differences (1.4826 MAD / sqrt 2, which a drift or a step barely moves).
2. Each candidate is confirmed by a local regression test: over up to ``window`` runs each side
   (bounded by the neighbouring candidates), fit level + linear trend + step at the candidate and
   t-test the step (Chow-type). The trend term is what keeps a slow drift from passing as a step: a
   ramp is explained by the slope, leaving the step coefficient near zero. The position is refined
   to the best of the candidate +-2. The p-value is Bonferroni-adjusted for the positions a scan could
   have picked (n - 2 min_size + 1); a shift is reported when it is below ``alpha`` AND its size is
   at least ``min_shift_pct`` of the level before it.
3. Drift: within each segment between reported shifts, the OLS slope's t-test (Bonferroni over the
   segments); reported (separately, never as a shift) when significant and the total change over
   the segment is at least ``min_drift_pct`` of its level.

Confidence is 1 - adjusted p. NaN values (a metric missing in a run) are skipped; indexes refer to
the input positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Options:
    alpha: float = 0.001  # family-wise false-alarm rate per series
    min_shift_pct: float = 3.0  # a shift smaller than this share of the level is not reported
    min_drift_pct: float = 5.0  # total change over the segment
    window: int = 30  # runs each side of a candidate in its regression test
    min_size: int = 5  # runs each side, at least


DEFAULTS = Options()


@dataclass(frozen=True)
class Shift:
    index: int  # position of the first run at the new level
    before: float  # fitted level just before
    after: float  # fitted level at the first run after
    delta: float
    delta_pct: float | None  # of |before|; None when before is 0
    p_value: float  # adjusted
    confidence: float


@dataclass(frozen=True)
class Drift:
    start: int  # positions, inclusive
    end: int
    slope: float  # per run
    slope_pct: float | None  # per run, of |level at start|
    total_pct: float | None
    p_value: float
    confidence: float


def noise(y: np.ndarray) -> float:
    """Run-to-run noise (a standard deviation) from successive differences: robust to steps and drifts."""
    if y.size < 3:
        return 0.0
    d = np.diff(y)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2.0))


def _t_sf(t: float, df: int) -> float:
    from scipy.stats import t as student  # lazy: scipy.stats costs ~0.5 s to import

    return float(2.0 * student.sf(abs(t), df))


def _step_test(y: np.ndarray, lo: int, j: int, hi: int) -> tuple[float, float, float, float]:
    """Fit y[lo:hi] = a + b t + c [t >= j]: (c, p, level before, level after) at the boundary."""
    seg = y[lo:hi]
    m = seg.size
    t = np.arange(m, dtype=float) - (j - lo)  # 0 at the first run after the step
    x = np.column_stack([np.ones(m), t, (t >= 0).astype(float)])
    coef, _, rank, _ = np.linalg.lstsq(x, seg, rcond=None)
    if rank < 3:
        return 0.0, 1.0, float(np.mean(seg)), float(np.mean(seg))
    a, b, c = coef
    resid = seg - x @ coef
    df = m - 3
    rss = float(resid @ resid)
    before, after = a - b, a + c
    if rss <= 1e-24 * max(1.0, float(seg @ seg)):
        return float(c), (0.0 if abs(c) > 0 else 1.0), float(before), float(after)
    cov = np.linalg.inv(x.T @ x) * (rss / df)
    return float(c), _t_sf(c / np.sqrt(cov[2, 2]), df), float(before), float(after)


def _candidates(y: np.ndarray, sigma: float, min_size: int) -> list[int]:
    import ruptures as rpt  # lazy: only trends need it

    n = y.size
    scale = max(float(np.std(y)), 1e-300)
    z = (y - y.mean()) / scale  # the penalty below is in the same units
    pen = 3.0 * max(sigma / scale, 1e-6) ** 2 * np.log(n)
    algo = rpt.KernelCPD(kernel="linear", min_size=min_size).fit(z.reshape(-1, 1))
    return [b for b in algo.predict(pen=pen) if b < n]


def _pct(delta: float, level: float) -> float | None:
    return None if level == 0 else float(100.0 * delta / abs(level))


def detect(values: list[float] | np.ndarray, opts: Options = DEFAULTS) -> tuple[list[Shift], list[Drift]]:
    raw = np.asarray(values, dtype=float)
    pos = np.flatnonzero(np.isfinite(raw))
    y = raw[pos]
    n, k = y.size, opts.min_size
    if n < 2 * k or np.ptp(y) == 0:
        return [], []
    sigma = noise(y)
    cands = _candidates(y, sigma, k)
    tests = n - 2 * k + 1
    shifts: list[Shift] = []
    last = 0
    for i, c in enumerate(cands):
        nxt = cands[i + 1] if i + 1 < len(cands) else n
        best = None
        for j in range(max(c - 2, last + k), min(c + 2, nxt - k) + 1):
            lo, hi = max(last, j - opts.window), min(nxt, j + opts.window)
            delta, p, before, after = _step_test(y, lo, j, hi)
            if best is None or p < best[1]:
                best = (j, p, delta, before, after)
        if best is None:
            continue
        j, p, delta, before, after = best
        p_adj = min(1.0, p * tests)
        big = abs(delta) >= opts.min_shift_pct / 100.0 * abs(before) if before else delta != 0
        if p_adj < opts.alpha and big:
            shifts.append(Shift(int(pos[j]), before, after, delta, _pct(delta, before), float(p_adj), float(1.0 - p_adj)))
            last = j
    return shifts, _drifts(y, pos, [int(np.searchsorted(pos, s.index)) for s in shifts], opts)


def _drifts(y: np.ndarray, pos: np.ndarray, cuts: list[int], opts: Options) -> list[Drift]:
    bounds = [0, *cuts, y.size]
    segs = [(a, b) for a, b in zip(bounds, bounds[1:]) if b - a >= 2 * opts.min_size]
    out = []
    for a, b in segs:
        seg = y[a:b]
        m = seg.size
        t = np.arange(m, dtype=float)
        x = np.column_stack([np.ones(m), t])
        (c0, slope), *_ = np.linalg.lstsq(x, seg, rcond=None)
        resid = seg - x @ np.array([c0, slope])
        rss = float(resid @ resid)
        if rss <= 1e-24 * max(1.0, float(seg @ seg)):
            p = 0.0 if slope else 1.0
        else:
            se = np.sqrt(rss / (m - 2) / float(((t - t.mean()) ** 2).sum()))
            p = _t_sf(slope / se, m - 2)
        p_adj = min(1.0, p * len(segs))
        level = float(np.mean(seg))
        total = slope * (m - 1)
        big = abs(total) >= opts.min_drift_pct / 100.0 * abs(level) if level else slope != 0
        if p_adj < opts.alpha and big:
            out.append(Drift(int(pos[a]), int(pos[b - 1]), float(slope), _pct(slope, c0), _pct(total, c0),
                             float(p_adj), float(1.0 - p_adj)))
    return out
