"""analyzer.views.figures: pure figures whose numbers are the JSON report's numbers; timeline downsampling."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analyzer.analysis import analyze
from analyzer.ingest.loader import LoadOptions, load
from analyzer.report.json import to_dict
from analyzer.views import figures
from analyzer.views import timeline as tl

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "gpu_h200" / "hybrid_tp_dp"


@pytest.fixture(scope="module")
def analysis():
    return analyze(load([SAMPLE], LoadOptions(cache=False)))


@pytest.fixture(scope="module")
def report(analysis):
    return to_dict(analysis)


def test_breakdown_parts_are_json_numbers_and_sum_to_span(analysis, report):
    fig = figures.breakdown_figure(analysis)
    assert [t.name for t in fig.data] == [name for _, name, _ in figures.BREAKDOWN_PARTS]
    by_rank = {r["rank"]: r for r in report["ranks"]}
    for i, rank in enumerate(analysis.ranks["rank"].to_list()):
        values = [trace.y[i] for trace in fig.data]
        for (col, _, _), v in zip(figures.BREAKDOWN_PARTS, values):
            assert v == pytest.approx(by_rank[rank][col], abs=1e-6)
        assert sum(values) == pytest.approx(by_rank[rank]["span_ms"], rel=1e-9)


@pytest.mark.parametrize("metric", sorted(figures.HEATMAP_METRICS))
def test_heatmap_cells_are_json_step_numbers(analysis, report, metric):
    fig = figures.heatmap_figure(analysis, metric)
    hm = fig.data[0]
    z = np.asarray(hm.z)
    for rec in report["steps"]:
        i, j = list(hm.y).index(rec["rank"]), list(hm.x).index(rec["step"])
        assert z[i, j] == pytest.approx(rec[metric], abs=1e-6)


def test_heatmap_rejects_unknown_metric(analysis):
    with pytest.raises(ValueError, match="unknown metric"):
        figures.heatmap_figure(analysis, "bogus")


def test_straggler_stands_out_in_caused_wait_heatmap(analysis):
    z = np.asarray(figures.heatmap_figure(analysis, "caused_wait_ms").data[0].z)
    assert analysis.verdict is not None
    rows = list(figures.heatmap_figure(analysis, "caused_wait_ms").data[0].y)
    assert int(np.argmax(z.sum(axis=1))) == rows.index(analysis.verdict.rank)


def _random_lanes(n: int, seed: int = 3) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for rank in range(2):
        t = 0
        for _ in range(n):
            t += rng.randint(0, 3_000)
            d = rng.randint(100, 20_000)
            rows.append((rank, 7, t, t + d, "k", rng.choice(["compute", "comm"])))
    return pl.DataFrame(rows, schema=["rank", "stream", "start_ns", "end_ns", "name", "group"], orient="row")


def test_segments_cap_count_and_keep_exact_busy_time():
    gpu = _random_lanes(50_000)
    cap = 200
    segs = tl.segments(gpu, ["rank"], None, cap)
    for (rank, group), part in segs.group_by("rank", "group"):
        src = gpu.filter((pl.col("rank") == rank) & (pl.col("group") == group))
        assert part.height <= cap
        exact = tl.union_length(src["start_ns"].to_list(), src["end_ns"].to_list())
        drawn = int((part["end_ns"] - part["start_ns"]).sum())
        assert drawn == exact == int(part["busy_ns"].sum())  # the drawn busy time is the true busy time
        assert (part["start_ns"].to_numpy()[1:] > part["end_ns"].to_numpy()[:-1]).all()  # disjoint, ordered


def test_segments_clip_to_window():
    gpu = _random_lanes(5_000)
    segs = tl.segments(gpu, ["rank"], (1_000_000, 2_000_000), 50)
    assert segs["start_ns"].min() >= 1_000_000 and segs["end_ns"].max() <= 2_000_000
    assert segs.group_by("rank", "group").len()["len"].max() <= 50


def test_timeline_caps_points_and_keeps_union_per_lane(analysis):
    cap = 40
    fig = figures.timeline_figure(analysis, max_shapes=cap)
    lanes = fig.layout.meta["lanes"]
    assert len(lanes) == len(analysis.source["ranks"])
    prep = tl.prepare(analysis)
    for trace in fig.data[1:]:
        x = np.asarray(trace.x, dtype=float)
        y = np.asarray(trace.y, dtype=float)
        assert len(x) <= 3 * cap * len(lanes)
        for lane, (rank,) in enumerate(lanes):
            sel = np.round(y[0::3]) == lane
            drawn = float(np.sum(x[1::3][sel] - x[0::3][sel]))
            src = prep.gpu.filter((pl.col("rank") == rank) & (pl.col("group") == trace.name))
            exact = tl.union_length(src["start_ns"].to_list(), src["end_ns"].to_list()) / 1e6
            assert drawn == pytest.approx(exact, rel=1e-9, abs=1e-6)


def test_timeline_window_and_lanes(analysis):
    lo, hi = tl.step_window_ms(analysis, int(analysis.steps["step"].min()))
    fig = figures.timeline_figure(analysis, window_ms=(lo, hi))
    xs = np.concatenate([np.asarray(t.x, dtype=float) for t in fig.data])
    xs = xs[~np.isnan(xs)]
    assert xs.min() >= lo - 1e-9 and xs.max() <= hi + 1e-9
    assert list(fig.layout.xaxis.range) == [lo, hi]
    streams = analysis.traces.gpu.filter(pl.col("rank") == 3)["stream"].n_unique()
    expanded = figures.timeline_figure(analysis, expand_rank=3)
    assert len(expanded.layout.meta["lanes"]) == len(analysis.source["ranks"]) - 1 + streams
    per_stream = figures.timeline_figure(analysis, by_stream=True)
    assert len(per_stream.layout.meta["lanes"]) == analysis.traces.gpu.select("rank", "stream").n_unique()
    only = figures.timeline_figure(analysis, ranks=[1])
    assert only.layout.meta["lanes"] == [[1]]


def test_wait_and_busbw_are_json_collectives(analysis, report):
    fig = figures.wait_figure(analysis)
    waits = sorted(v for t in fig.data if t.yaxis in (None, "y") for v in t.y)
    # the JSON rounds to 6 decimals; the figure carries the same numbers unrounded
    assert waits == pytest.approx(sorted(c["max_wait_ms"] for c in report["collectives"]), abs=1e-6)
    bw = figures.busbw_figure(analysis)
    points = sorted(v for t in bw.data if t.mode == "markers" for v in t.y)
    expected = sorted(c["busbw_gbps"] for c in report["collectives"] if c["busbw_gbps"] is not None)
    assert points == pytest.approx(expected, abs=1e-6)
    for_rank = figures.wait_figure(analysis, [3])
    n = sum(len(t.y) for t in for_rank.data if t.yaxis in (None, "y"))
    assert n == sum(1 for c in report["collectives"] if 3 in c["ranks"])


def test_marker_figures_past_the_limit_keep_the_longest_waits_and_an_even_sample(analysis, report, monkeypatch):
    limit = 7
    monkeypatch.setattr(figures, "MARKER_LIMIT", limit)
    colls = report["collectives"]
    assert len(colls) > limit
    fig = figures.wait_figure(analysis)
    waits = sorted((v for t in fig.data if t.yaxis in (None, "y") for v in t.y), reverse=True)
    assert waits == pytest.approx(sorted((c["max_wait_ms"] for c in colls), reverse=True)[:limit], abs=1e-6)
    assert f"the {limit} longest waits of {len(colls)}" in fig.layout.title.text
    bw = figures.busbw_figure(analysis)
    with_bw = [c for c in colls if c["busbw_gbps"] is not None]
    every = -(-len(with_bw) // limit)
    by_time = sorted(with_bw, key=lambda c: c["start_ms"])[::every]
    points = sorted(v for t in bw.data if t.mode == "markers" for v in t.y)
    assert len(points) <= limit
    assert points == pytest.approx(sorted(c["busbw_gbps"] for c in by_time), abs=1e-6)
    assert f"1 in {every} of {len(with_bw)} instances" in bw.layout.title.text


def test_every_figure_uses_a_trace_type_of_the_shipped_cartesian_bundle(analysis):
    # the page loads plotly.js's cartesian bundle only (dashboards/assets): no WebGL or other trace types
    bundle = (ROOT / "dashboards" / "assets" / "plotly-cartesian.min.js").read_text()
    assert "plotly.js (cartesian" in bundle[:200]
    figs = [figures.breakdown_figure(analysis), figures.heatmap_figure(analysis), figures.timeline_figure(analysis),
            figures.wait_figure(analysis), figures.busbw_figure(analysis)]
    types = {t.type for f in figs for t in f.data}
    assert types and types <= {"scatter", "bar", "box", "heatmap"}


def test_figures_import_without_dash():
    code = "import sys, analyzer.views.figures; assert 'dash' not in sys.modules, 'figures pulled in dash'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
