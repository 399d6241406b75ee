"""Streamed NCCL Inspector summaries (``ingest.inspector_stream``): the same numbers as the whole-table path,
memory that does not grow with the records, and medians within the sketch's documented error.

The reference is ``metrics.inspector.analyze`` over the in-memory record table (tested against the
generator's exact truth in test_nccl_inspector.py); the sketch is checked against exact medians (numpy).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from analyzer.ingest.inspector import fold as inspector_fold
from analyzer.ingest.inspector import reader as nccl_inspector
from analyzer.ingest.inspector import stream as inspector_stream
from analyzer.metrics import inspector as im
from analyzer.metrics import inspector_folded
from sample_traces.inspector_gen import Spec, write

TABLES = ["communicators", "busbw", "bandwidth", "slow_links", "ranks", "dimensions"]


def _both(files: list[Path], monkeypatch: pytest.MonkeyPatch) -> tuple[im.InspectorSummary, im.InspectorSummary]:
    monkeypatch.setattr(nccl_inspector, "STREAM_MIN_BYTES", 1 << 62)
    whole = nccl_inspector.read(files, jobs=1)
    assert whole.inspector.folded is None
    monkeypatch.setattr(nccl_inspector, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(inspector_stream, "STREAM_BLOCK_BYTES", 16 << 10)  # many rounds, instances across blocks
    streamed = nccl_inspector.read(files, jobs=1)
    assert streamed.inspector.folded is not None and streamed.inspector.records.height == 0
    return inspector_folded.summarize(whole.inspector), inspector_folded.summarize(streamed.inspector)


def _same(a: im.InspectorSummary, b: im.InspectorSummary) -> None:
    for name in TABLES:
        # float sums in another order, and the plugin's float32 busbw medians averaged in float64: 1e-6
        assert_frame_equal(getattr(a, name), getattr(b, name), check_dtypes=False, rel_tol=1e-6, abs_tol=1e-9)
    # outliers: the same instances and numbers (the last rank among ties may differ: it is any of them)
    assert_frame_equal(a.outliers.drop("last_rank"), b.outliers.drop("last_rank"), check_dtypes=False, rel_tol=1e-9)
    assert a.verdict is not None and b.verdict is not None
    assert a.verdict["rank"] == b.verdict["rank"]
    assert a.verdict["caused_wait_ns"] == pytest.approx(b.verdict["caused_wait_ns"], rel=1e-9)
    assert a.verdict["z"] == pytest.approx(b.verdict["z"], rel=1e-9)
    for k in ("records", "instances", "complete_instances", "bad_lines", "lines"):
        assert a.counts[k] == b.counts[k], k


@pytest.mark.parametrize("verbose", [False, True])
def test_streamed_summary_equals_the_in_memory_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   verbose: bool) -> None:
    truth = write(Spec(nodes=2, gpus_per_node=4, iterations=40, verbose=verbose, slow_rank=5, slow_link=2, seed=11),
                  tmp_path)
    a, b = _both(sorted(tmp_path.glob("*.log")), monkeypatch)
    _same(a, b)
    assert b.verdict["rank"] == truth["slow_rank"]
    assert b.counts["records"] == truth["records"] and b.counts["complete_instances"] > 500


def test_streamed_with_a_missing_rank_and_bad_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a missing member leaves its communicators' instances incomplete (held until the end, then counted)
    src = tmp_path / "all"
    truth = write(Spec(nodes=2, gpus_per_node=4, iterations=40, verbose=False, slow_rank=5, slow_link=1, seed=12),
                  src)
    gone = truth["processes"][2]
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in src.glob("*.log"):
        if f.name != f"{gone['hostname']}-pid{gone['pid']}.log":
            shutil.copy(f, logs / f.name)
    first = sorted(logs.glob("*.log"))[0]
    lines = first.read_text().splitlines(keepends=True)
    first.write_text("".join(lines[:100]) + "not json\n" + "".join(lines[100:]))
    a, b = _both(sorted(logs.glob("*.log")), monkeypatch)
    _same(a, b)
    assert b.counts["bad_lines"] == 1 and b.counts["complete_instances"] < b.counts["instances"]


def test_memory_held_does_not_grow_with_the_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the fold holds for 1x and 4x the records (once the window has settled, past its first few hundred
    operations): the open instances stay the same, the aggregates stay
    under their bound (keys x quantities x the cap), while the in-memory table grows 4x. RSS for 64 ranks:
    benchmarks/inspector_bench.py."""
    monkeypatch.setattr(inspector_stream, "STREAM_BLOCK_BYTES", 16 << 10)
    folds = {}
    for k in (1, 4):
        d = tmp_path / str(k)
        truth = write(Spec(nodes=2, gpus_per_node=4, iterations=200 * k, verbose=False, slow_rank=5, seed=13), d)
        folded, st = inspector_stream.fold_files(sorted(d.glob("*.log")), 1000)
        assert st["n_records"] == truth["records"]
        folds[k] = folded
    assert folds[4].peak_open <= 1.15 * folds[1].peak_open, (folds[1].peak_open, folds[4].peak_open)
    # + aggregates, whose sketches fill up to their cap: 6.3 k rows from 16 k records on to 34 k (measured)
    assert folds[4].peak_rows <= 1.25 * folds[1].peak_rows, (folds[1].peak_rows, folds[4].peak_rows)
    assert folds[1].peak_open < truth["records"] / 4 / 4  # a small part of the records
    keys = folds[4].bw_stats.height
    assert folds[4].sketch.height <= keys * 4 * inspector_fold.SKETCH_CAP
    assert folds[4].per_proc.height == folds[1].per_proc.height  # communicator x process: no growth


def _sketch(values: dict[str, np.ndarray]) -> pl.DataFrame:
    rows = pl.concat([pl.DataFrame({"cid": 0, "op": k, "size_bucket": 1, "algo": None, "proto": None, "m": 0,
                                    "v": v, "n": 1}, schema={"cid": pl.Int32, "op": pl.Utf8, "size_bucket": pl.Int64,
                                                             "algo": pl.Utf8, "proto": pl.Utf8, "m": pl.Int8,
                                                             "v": pl.Float64, "n": pl.Int64})
                      for k, v in values.items()])
    # folded in pieces, as batches arrive (binning happens once a key passes the cap)
    parts = [inspector_fold._compact("sketch", rows[i::7]) for i in range(7)]
    return inspector_fold._compact("sketch", pl.concat(parts))


def test_sketch_median_is_exact_under_the_cap_and_within_its_bound_over_it() -> None:
    rng = np.random.default_rng(7)
    few = rng.integers(1, 10**6, 300).astype(float)  # 300 distinct values: exact
    many = np.concatenate([rng.lognormal(3, 1.5, 20_001), rng.lognormal(8, 0.3, 5_000)])  # bimodal, odd count
    even = rng.uniform(0.5, 400.0, 10_000)
    sk = _sketch({"few": few, "many": many, "even": even})
    assert sk.filter(pl.col("op") == "many").height < 2_000  # bounded: bins, not values
    med = dict(inspector_fold.median_of(sk, ["op"]).select("op", "median").iter_rows())
    bound = math.sqrt(1 + inspector_fold.SKETCH_EPS) - 1
    assert med["few"] == np.median(few)
    for k, v in (("many", many), ("even", even)):
        exact = float(np.median(v))
        assert abs(med[k] - exact) <= bound * exact, (k, med[k], exact)
        assert med[k] != exact  # binned indeed


def test_streamed_with_worker_processes_gives_the_same_summary(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write(Spec(nodes=2, gpus_per_node=4, iterations=40, verbose=False, slow_rank=3, slow_link=2, seed=14), tmp_path)
    files = sorted(tmp_path.glob("*.log"))
    a, one = _both(files, monkeypatch)
    # still streaming, small blocks (monkeypatched)
    two = inspector_folded.summarize(nccl_inspector.read(files, jobs=2).inspector)
    _same(a, two)
    _same(one, two)


def test_streamed_verbose_logs_put_their_latest_part_on_the_timeline(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    truth = write(Spec(nodes=2, gpus_per_node=4, iterations=30, verbose=True, slow_rank=6, seed=4), tmp_path)
    files = sorted(tmp_path.glob("*.log"))
    monkeypatch.setattr(nccl_inspector, "STREAM_MIN_BYTES", 1 << 62)
    whole = nccl_inspector.read(files, jobs=1).inspector.records
    monkeypatch.setattr(nccl_inspector, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(nccl_inspector, "TIMELINE_MAX_RECORDS", 300)
    monkeypatch.setattr(inspector_stream, "STREAM_BLOCK_BYTES", 16 << 10)
    ts = nccl_inspector.read(files, jobs=1)
    assert ts.inspector.counts["verbose_records"] == truth["records"]
    # records that start in the same microsecond as the 300th latest are kept with it (here 4 more)
    assert 0 < ts.collectives.height <= 300 + 8 and any("covers the" in w for w in ts.warnings)
    per = ts.collectives.group_by("pg", "op", "seq").agg(pl.len().alias("n"), pl.col("group_size").first())
    assert per.filter((pl.col("n") != pl.col("group_size")) & ~pl.col("op").is_in(["send", "recv"])).height == 0
    # the latest: the last operation logged is kept, nothing kept starts before the 300 latest starts
    assert ts.collectives["start_ns"].max() == whole["start_ns"].max()
    assert ts.collectives["start_ns"].min() >= whole["start_ns"].top_k(300).min()


def test_a_full_window_closes_the_oldest_instances_with_a_warning(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # rank 2's log is missing: its communicators' instances can never complete and stay open; a window of
    # 400 records forces the oldest closed (counted as incomplete) instead of growing
    src = tmp_path / "all"
    truth = write(Spec(nodes=2, gpus_per_node=4, iterations=60, verbose=False, slow_rank=5, seed=15), src)
    gone = truth["processes"][2]
    files = [f for f in sorted(src.glob("*.log")) if f.name != f"{gone['hostname']}-pid{gone['pid']}.log"]
    monkeypatch.setattr(nccl_inspector, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(inspector_stream, "STREAM_BLOCK_BYTES", 8 << 10)
    monkeypatch.setattr(inspector_fold, "OPEN_MAX", 400)
    ts = nccl_inspector.read(files, jobs=1)
    f = ts.inspector.folded
    assert f.forced > 0 and f.peak_open < 400 + 8 * 40  # the cap + one round of blocks
    assert any("closed before every member's record" in w for w in ts.warnings)
    s = inspector_folded.summarize(ts.inspector)
    assert s.verdict is not None and s.verdict["rank"] == truth["slow_rank"]  # the complete instances still tell
