"""Change points on generated series with exact truth: a step is found at its run, a drift is not a step,
stable noise flags nothing."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.history.changepoints import detect, noise


def _noisy(rng: np.random.Generator, n: int, sd: float) -> np.ndarray:
    return 100.0 * (1.0 + sd * rng.standard_normal(n))


@pytest.mark.parametrize("seed", range(8))
def test_stable_noise_flags_nothing(seed):
    rng = np.random.default_rng(seed)
    for sd in (0.01, 0.02):
        shifts, drifts = detect(_noisy(rng, 60, sd))
        assert shifts == [] and drifts == []


@pytest.mark.parametrize("seed", range(8))
def test_eight_percent_step_is_found_at_its_run(seed):
    rng = np.random.default_rng(100 + seed)
    y = _noisy(rng, 60, 0.01)
    y[35:] *= 1.08
    shifts, drifts = detect(y)
    assert [s.index for s in shifts] == [35]
    s = shifts[0]
    assert s.delta_pct == pytest.approx(8.0, abs=2.0)  # the fitted size, noise 1%
    assert s.confidence > 0.999
    assert drifts == []


@pytest.mark.parametrize("seed", range(8))
def test_slow_drift_is_a_drift_not_a_step(seed):
    rng = np.random.default_rng(200 + seed)
    y = 100.0 * 1.003 ** np.arange(60) * (1.0 + 0.01 * rng.standard_normal(60))
    shifts, drifts = detect(y)
    assert shifts == []
    assert len(drifts) == 1
    assert drifts[0].slope_pct == pytest.approx(0.3, abs=0.12)


def test_two_steps_and_a_fall():
    rng = np.random.default_rng(7)
    y = _noisy(rng, 90, 0.01)
    y[30:] *= 1.10
    y[60:] *= 0.85
    shifts, _ = detect(y)
    assert [s.index for s in shifts] == [30, 60]
    assert shifts[0].delta > 0 > shifts[1].delta


def test_missing_values_keep_positions():
    rng = np.random.default_rng(3)
    y = _noisy(rng, 60, 0.01)
    y[40:] *= 1.08
    y[[5, 20, 50]] = np.nan
    shifts, _ = detect(y)
    assert [s.index for s in shifts] == [40]


def test_small_step_below_the_minimum_size_is_not_reported():
    # 2% step in 0.2% noise: significant, but below the 3% minimum relative size
    rng = np.random.default_rng(4)
    y = _noisy(rng, 60, 0.002)
    y[30:] *= 1.02
    assert detect(y)[0] == []


def test_short_and_constant_series():
    assert detect([1.0, 2.0, 3.0]) == ([], [])
    assert detect([5.0] * 40) == ([], [])
    y = [0.0] * 20 + [4.0] * 20  # from nothing to something: no relative size, still a shift
    assert [s.index for s in detect(y)[0]] == [20]


def test_noise_estimate_ignores_the_step():
    rng = np.random.default_rng(5)
    y = _noisy(rng, 200, 0.02)
    y[100:] *= 1.5
    assert noise(y) == pytest.approx(2.0, rel=0.2)
