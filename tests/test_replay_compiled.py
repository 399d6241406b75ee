"""The replay compiled with numba (analyzer/whatif/waves.py) gives the numpy form's bits, on real graphs.

The numpy form of ``replay.run`` is the reference: every scenario an analysis replays (the counterfactual's
put-backs, the what-if scenarios, the study model's steps apart with declared dependencies on op tables) is
replayed both ways and compared exactly, signs of zeros included (a JSON report prints -0.0 and 0.0 apart).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analyzer.crossrank import graph
from analyzer.whatif import replay, waves  # noqa: F401 - numba must be there: else both forms are numpy's
from tests.conftest import SAMPLES
from tests.helpers import run
from tests.test_graph import gpu_table
from tests.test_replay import _crossing, _no_comm, _steps

SETS = [SAMPLES / "gpu_h200" / "compute_straggler", SAMPLES / "gpu_h200" / "host_straggler",
        SAMPLES / "real_parallel" / "pp4_1f1b_mps_host_slow", SAMPLES / "real_parallel" / "cp_ring_mps_slow",
        SAMPLES / "real_parallel" / "moe_a2a_slow", SAMPLES / "real_parallel" / "tp_pp_dp_mps_slow",
        SAMPLES / "whatif" / "SE"]


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and np.array_equal(x, y, equal_nan=True) and np.array_equal(np.signbit(x), np.signbit(y))


def _same_schedule(x: replay.Schedule, y: replay.Schedule) -> bool:
    return all(np.array_equal(getattr(x, f.name), getattr(y, f.name)) for f in dataclasses.fields(replay.Schedule))


@pytest.mark.parametrize("folder", SETS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_replay_of_an_analysis_is_the_same_compiled(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []
    plain = replay.run

    def both(a: replay.Arrays, sch: replay.Schedule, mods: replay.Mods, compiled: bool | None = None):
        want = plain(a, sch, mods, compiled=False)
        got = plain(a, sch, mods, compiled=True)
        assert _same(want[0], got[0]) and _same(want[1], got[1])
        seen.append((sch.n_waves, *mods.ddur.shape))
        return want

    plain_spans = replay.spans

    def both_spans(a: replay.Arrays, sch: replay.Schedule, seg: replay.Segments, mods: replay.Mods,
                   compiled: bool | None = None) -> np.ndarray:
        want = replay.step_spans(seg, *plain(a, sch, mods, compiled=False))
        got = plain_spans(a, sch, seg, mods, compiled=True)
        assert _same(want, got)
        seen.append((sch.n_waves, *mods.ddur.shape))
        return want

    plain_schedule = replay.schedule

    def both_schedules(a: replay.Arrays, compiled: bool | None = None) -> replay.Schedule:
        want, got = plain_schedule(a, compiled=False), plain_schedule(a, compiled=True)
        assert _same_schedule(want, got)
        return want

    monkeypatch.setattr(replay, "schedule", both_schedules)
    monkeypatch.setattr(replay, "run", both)
    monkeypatch.setattr(replay, "spans", both_spans)
    a = run(folder)
    assert a.whatif is not None and a.counterfactual is not None
    # every scenario row went through both (the counterfactual's and the what-if's): dozens, on 10 waves at least
    assert sum(s for _, s, _ in seen) >= 10 and max(w for w, _, _ in seen) >= 10


def test_random_changes_on_a_real_graph() -> None:
    # changes no analysis makes (hidden kernels beside longer ones, gaps shrinking past zero, faster transfers)
    a = run(SAMPLES / "real_parallel" / "pp4_1f1b_mps_host_slow")
    arr = replay.Arrays.of(a.graph)
    sch = replay.schedule(arr)
    n, k = a.graph.n_nodes, arr.n_graph_instances
    rng = np.random.default_rng(7)
    mods = replay.Mods(ddur=rng.normal(0, 2e4, (6, n)).round(), dgap=rng.normal(0, 5e4, (6, n)).round(),
                       dtr=rng.normal(-1e4, 1e4, (6, k)), hide=rng.random((6, n)) < 0.3)
    mods.ddur[0] = mods.dgap[0] = mods.dtr[0] = 0.0  # and the unchanged run: every Δ is zero
    mods.hide[0] = False
    want, got = replay.run(arr, sch, mods, compiled=False), replay.run(arr, sch, mods, compiled=True)
    assert _same(want[0], got[0]) and _same(want[1], got[1])
    assert not want[1][0].any() and np.abs(want[1][1:]).max() > 1e4
    seg = replay.segments(a.graph, a.traces.steps)
    assert _same(replay.step_spans(seg, *want), replay.spans(arr, sch, seg, mods, compiled=True))


def test_crossing_orders_forced_through_the_same_compiled() -> None:
    # collectives matched in crossing order: the schedule forces ends through; both forms replay that schedule
    gpu, rows = _crossing()
    later = [pl.col("start_ns") + 1000, pl.col("end_ns") + 1000,
             pl.col("name").str.replace("_a", "_c").str.replace("_b", "_d")]  # and a second crossing pair after it
    gpu = pl.concat([gpu, gpu.with_columns(*later)])
    rows = pl.concat([rows, rows.with_columns(*later, pl.col("instance").replace({"a": "c", "b": "d"}))])
    g = graph.build(gpu, rows, _steps({0: 1400, 1: 1400}))
    arr = replay.Arrays.of(g)
    sch = replay.schedule(arr)
    assert sch.forced == 4 and _same_schedule(sch, replay.schedule(arr, compiled=True))
    mods = replay.Mods.zeros(2, g.n_nodes, g.instances.height)
    mods.ddur[1] = -5.0
    want, got = replay.run(arr, sch, mods, compiled=False), replay.run(arr, sch, mods, compiled=True)
    assert _same(want[0], got[0]) and _same(want[1], got[1])
    # a graph of one operation and of none
    for table in ([(0, 7, 0, 100, "X", "compute")], []):
        g = graph.build(gpu_table(table), _no_comm(), _steps({0: 100} if table else {}))
        arr = replay.Arrays.of(g)
        mods = replay.Mods.zeros(1, g.n_nodes, g.instances.height)
        assert _same_schedule(replay.schedule(arr), replay.schedule(arr, compiled=True))
        want, got = replay.run(arr, replay.schedule(arr), mods, compiled=False), replay.run(
            arr, replay.schedule(arr), mods, compiled=True)
        assert _same(want[0], got[0]) and _same(want[1], got[1])


def test_levels_handed_to_numba_midway(monkeypatch: pytest.MonkeyPatch) -> None:
    # by default numpy finds the first COMPILED_WAVES levels and numba the rest, from the state numpy left
    arr = replay.Arrays.of(run(SAMPLES / "real_parallel" / "tp_pp_dp_mps_slow").graph)
    want = replay.schedule(arr, compiled=False)
    assert want.n_waves > 20
    monkeypatch.setattr(replay, "COMPILED_WAVES", 7)
    assert _same_schedule(want, replay.schedule(arr))
