"""Step windows when GPU step annotations cover only part of a step, and a collective's step from its launch."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analyzer.analysis.units import ms_tables
from sample_traces.generate import Scenario, build, write_kineto
from tests.helpers import run

SC = Scenario(ranks=8, tp=2, steps=4, seed=5, late_ranks={3: (1_000_000, "host")})
PER_STEP = ("compute_ms", "comm_ms", "overlapped_comm_ms", "exposed_comm_ms", "exposed_wait_ms", "wait_ms",
            "caused_wait_ms", "root_caused_wait_ms", "memcpy_ms")


def _gpu_steps(events: list) -> list:
    return [e for e in events if e.cat == "gpu_user_annotation" and e.name.startswith("ProfilerStep#")]


def _write(folder: Path, cover: float = 1.0, early: dict[int, int] | None = None):
    """The scenario with each GPU-side ProfilerStep cut to ``cover`` of its length (Kineto's annotation
    spans only what the annotating thread launched); ``early``: rank -> ns the step-2 annotation starts sooner."""
    wl = build(SC)
    for rank, events in wl.events.items():
        for e in _gpu_steps(events):
            e.dur = max(1000, int(e.dur * cover))
            if early and rank in early and e.name == "ProfilerStep#2":
                e.ts -= early[rank]
    write_kineto(wl, folder)
    return wl.truth


def test_partial_annotations_are_tiled_and_give_the_full_per_step_totals(tmp_path: Path) -> None:
    _write(tmp_path / "full")
    _write(tmp_path / "partial", cover=0.15)
    full, partial = run(tmp_path / "full"), run(tmp_path / "partial")
    full_ms, partial_ms = ms_tables(full), ms_tables(partial)  # the report's numbers
    warning = [w for w in partial.warnings if "step annotations cover only" in w]
    # the generated ranks have their host ProfilerStep ranges and launches: each step is the host's range,
    # every GPU operation in the step that launched it (timeline.fill_sparse_steps)
    assert len(warning) == 1 and "on rank(s) 0-7" in warning[0] and "host's ProfilerStep range" in warning[0]
    assert not [w for w in full.warnings if "step annotations cover only" in w]
    cov = [int(x) for x in warning[0].split("cover only ")[1].split("%")[0].split("-")]
    assert all(10 <= c <= 20 for c in cov)
    assert partial.steps.height == full.steps.height == SC.ranks * SC.steps
    for col in PER_STEP:
        a, b = full_ms.steps[col].to_list(), partial_ms.steps[col].to_list()
        assert a == pytest.approx(b, abs=1e-6), col
    assert partial_ms.steps["wait_ms"].sum() > 1.0  # the per-step waits are not all zero
    # tiles: each step runs to the next one's start, so spans add up to the window from the first step
    for r in range(SC.ranks):
        s = partial_ms.steps.filter(pl.col("rank") == r).sort("step")
        starts = s["start_ms"].to_list()
        spans = s["span_ms"].to_list()
        assert all(abs(starts[i] + spans[i] - starts[i + 1]) < 1e-6 for i in range(len(starts) - 1))


def test_untiled_partial_annotations_would_lose_the_wait(tmp_path: Path) -> None:
    """Why tiling matters: inside the 15% windows almost no communication happens."""
    _write(tmp_path, cover=0.15)
    a = run(tmp_path)
    from analyzer.metrics.coverage import Coverage

    ts = a.traces
    comm = ts.gpu.filter(pl.col("kind") == "comm")
    # the raw annotations (before tiling) hold little of the comm time
    raw = [e for e in build(SC).events[0] if e.cat == "gpu_user_annotation" and e.name.startswith("ProfilerStep")]
    assert raw
    windows = Coverage.of([e.ts for e in raw], [e.ts + int(e.dur * 0.15) for e in raw])
    c0 = comm.filter(pl.col("rank") == 0)
    inside = windows.within(c0["start_ns"].to_numpy() - 0, c0["end_ns"].to_numpy()).sum()
    assert inside < 0.2 * (c0["end_ns"] - c0["start_ns"]).sum()
    assert a.steps.filter(pl.col("rank") == 0)["comm_ns"].sum() == pytest.approx(
        a.ranks.filter(pl.col("rank") == 0)["comm_ns"][0], rel=1e-6)


def test_a_kernel_belongs_to_the_step_that_launched_it(tmp_path: Path) -> None:
    # rank 5's step-2 window opens 2 ms early, before its last step-1 collectives ran: by start time they
    # would fall in step 2, split their instances and go unmatched
    truth = _write(tmp_path, cover=0.15, early={5: 2_000_000})
    a = run(tmp_path)
    assert a.matching["unmatched_kernels"] == 0
    assert a.matching["instances"] == len(truth.instances)
    got = {(r, s): w / 1e6 for r, s, w in a.steps.select("rank", "step", "wait_ns").iter_rows()}
    for r in range(SC.ranks):
        for step in range(1, SC.steps + 1):
            want = sum(i.wait_ns[r] for i in truth.instances if i.step == step and r in i.ranks) / 1e6
            assert got[(r, step)] == pytest.approx(want, abs=1e-6), (r, step)
