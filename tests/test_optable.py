"""Op-table reader on generated jobs whose every op is known (sample_traces/optable_gen.py): times to the
nanosecond, kinds, groups, collectives matched across ranks, send/recv pairs, steps; every file format and
dialect gives the same tables."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analyzer.crossrank import match
from analyzer.ingest.loader import LoadOptions, load
from sample_traces.optable_gen import Job, simulate, write

JOB = Job(dp=2, pp=4, microbatches=6, steps=3, schedule="1f1b", slow_worker=(1, 2, 1.5))


def _load(path: Path):
    return load([path], LoadOptions(jobs=1, cache=False))


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    out = tmp_path_factory.mktemp("optable")
    return _load(write(JOB, out)), simulate(JOB)


def _truth_rows(job: Job, truth) -> pl.DataFrame:
    """Every op of every step on the reader's clock: steps back to back, each from its first op's start."""
    rows = [(r, op.optype, op.seq, op.start, op.end, op.data_mb if op.partner else op.mb)
            for r, ops in truth.ops.items() for op in ops]
    one = pl.DataFrame(rows, schema={"rank": pl.Int32, "name": pl.Utf8, "op_seq": pl.Int32, "t0": pl.Int64,
                                     "t1": pl.Int64, "mb": pl.Int32}, orient="row")
    first = int(one["t0"].min())
    span = int(one["t1"].max()) - first
    steps = pl.DataFrame({"step": [job.first_step + k for k in range(job.steps)],
                          "off": [k * span - first for k in range(job.steps)]}, schema={"step": pl.Int64, "off": pl.Int64})
    return one.join(steps, how="cross").with_columns(
        (pl.col("t0") + pl.col("off")).alias("start_ns"), (pl.col("t1") + pl.col("off")).alias("end_ns"))


def test_every_op_at_its_true_nanosecond(gen) -> None:
    ts, truth = gen
    want = _truth_rows(JOB, truth)
    assert ts.gpu.height == want.height == JOB.steps * sum(len(v) for v in truth.ops.values())
    # every true op has its row at its true start (the key is unique), ending at its true end
    both = ts.gpu.join(want, on=["rank", "name", "op_seq", "start_ns"], how="inner")
    assert both.height == want.height
    assert (both["end_ns"] == both["end_ns_right"]).all()
    compute = both.filter(pl.col("name").is_in(["forward-compute", "backward-compute"]))
    assert (compute["micro_batch"] == compute["mb"]).all()


def test_kinds_and_streams(gen) -> None:
    ts, _ = gen
    kinds = dict(ts.gpu.group_by("name").agg(pl.col("kind").unique()).rows())
    assert kinds == {
        "forward-compute": ["compute"], "backward-compute": ["compute"], "optimizer": ["compute"], "gc": ["other"],
        # tp = 1: the layernorm all-reduce runs on a group of one rank, local work
        "layernorm-grads-all-reduce": ["other"],
        **{k: ["comm"] for k in ("params-all-gather", "grads-reduce-scatter", "embedding-grads-all-reduce",
                                 "optimizer-clip-main-grad", "forward-send", "forward-recv", "backward-send",
                                 "backward-recv")},
    }
    # each p2p op type on a stream of its own (a batched send+recv is two operations at one time)
    streams = ts.gpu.group_by("name").agg(pl.col("stream").unique())
    p2p = streams.filter(pl.col("name").str.contains("send|recv"))
    assert sorted(s[0] for s in p2p["stream"].to_list()) == [1, 2, 3, 4]


def test_groups_from_the_layout(gen) -> None:
    ts, _ = gen
    # dp 2 x pp 4, Megatron order: rank = dp_rank + 2 * stage
    c = ts.collectives.select("rank", "name", "pg", "group_ranks", "group_size", "op").unique(
        ["rank", "name"]).sort("rank", "name")
    for r, name, _pg, members, size, op in c.rows():
        d, s = r % 2, r // 2
        want = {
            "params-all-gather": ([s * 2, s * 2 + 1], "all_gather"),
            "grads-reduce-scatter": ([s * 2, s * 2 + 1], "reduce_scatter"),
            "embedding-grads-all-reduce": ([d, d + 6], "all_reduce"),
            "optimizer-clip-main-grad": (list(range(8)), "all_reduce"),
        }.get(name, ([d, d + 2, d + 4, d + 6], "send" if name.endswith("send") else "recv"))
        assert [int(x) for x in members.split(",")] == want[0], (r, name)
        assert size == len(want[0]) and op == want[1]
    assert {m.rank: len(m.process_groups) for m in ts.ranks} == {r: 4 if r // 2 in (0, 3) else 3 for r in range(8)}


def test_collectives_match_across_ranks_by_type_step_and_seq(gen) -> None:
    ts, _ = gen
    inst = match.instances(ts.collectives)
    coll = inst.filter(~pl.col("op").is_in(["send", "recv"]))
    assert coll["instance"].null_count() == 0
    per = coll.group_by("instance").agg(pl.col("name").n_unique().alias("types"), pl.col("step").n_unique().alias("steps"),
                                        pl.len(), pl.col("group_size").first())
    assert (per["types"] == 1).all() and (per["steps"] == 1).all() and (per["len"] == per["group_size"]).all()
    # per step: an all-gather and a reduce-scatter per stage, an embedding all-reduce per dp rank, one clip
    assert per.height == JOB.steps * (4 + 4 + 2 + 1)
    # seq: the ordinal within the group, the same on every member for one instance
    assert (coll.group_by("instance").agg(pl.col("seq").n_unique())["seq"] == 1).all()


def test_send_recv_pairs_are_the_true_partners(gen) -> None:
    ts, truth = gen
    want = _truth_rows(JOB, truth).select("rank", "name", "start_ns", "mb")
    inst = match.instances(ts.collectives).filter(pl.col("op").is_in(["send", "recv"]))
    assert inst["instance"].null_count() == 0
    pairs = inst.join(want, on=["rank", "name", "start_ns"]).group_by("instance").agg(
        pl.col("op").sort(), pl.col("name").sort(), pl.col("mb").n_unique().alias("mbs"), pl.col("rank").sort(),
        pl.col("peer").sort())
    assert pairs.height == inst.height // 2
    assert all(ops == ["recv", "send"] for ops in pairs["op"].to_list())
    assert all(a.split("-")[0] == b.split("-")[0] for a, b in pairs["name"].to_list())  # forward with forward
    assert (pairs["mbs"] == 1).all()  # the recv got the micro-batch its sender sent
    # adjacent stages of one dp rank, each naming the other as its peer
    assert all(abs(a - b) == 2 and p == [a, b] for (a, b), p in zip(pairs["rank"].to_list(), pairs["peer"].to_list()))


def test_steps_span_the_same_window_on_every_rank(gen) -> None:
    ts, truth = gen
    assert ts.steps.height == 8 * JOB.steps
    win = ts.steps.group_by("step").agg(pl.col("start_ns").n_unique().alias("a"), pl.col("end_ns").n_unique().alias("b"),
                                        (pl.col("end_ns") - pl.col("start_ns")).first().alias("span"))
    assert (win["a"] == 1).all() and (win["b"] == 1).all()
    assert win["span"].to_list() == [truth.step_ns[s] for s in win["step"].to_list()]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_replay_reproduces_the_generated_steps(tmp_path: Path, schedule: str) -> None:
    from analyzer.analysis import analyze

    job = Job(dp=2, pp=3, microbatches=4, steps=2, schedule=schedule, slow_stage=(2, 1.4))
    a = analyze(_load(write(job, tmp_path)))
    truth = simulate(job)
    assert a.whatif.measured_step_time_ns == pytest.approx(next(iter(truth.step_ns.values())))
    assert abs(a.whatif.replay_error_pct) < 0.5


FORMATS = [("whatif", "parquet"), ("whatif", "arrow"), ("whatif", "csv"), ("canonical", "parquet"),
           ("canonical", "csv")]


def test_formats_and_dialects_give_identical_tables(tmp_path: Path) -> None:
    job = Job(dp=2, pp=2, microbatches=3, steps=2, slow_worker=(0, 1, 1.3))
    sets = [_load(write(job, tmp_path / f"{d}-{f}", dialect=d, fmt=f)) for d, f in FORMATS]
    base = sets[0]
    for ts in sets[1:]:
        assert ts.gpu.equals(base.gpu)
        assert ts.collectives.equals(base.collectives)
        assert ts.steps.equals(base.steps)
        assert [m.process_groups for m in ts.ranks] == [m.process_groups for m in base.ranks]


def test_layout_inferred_without_a_meta_file(tmp_path: Path) -> None:
    job = Job(dp=2, pp=2, tp=4, microbatches=2, steps=2)
    path = write(job, tmp_path)
    with_meta = _load(path)
    (tmp_path / "meta-gen.yaml").unlink()
    inferred = _load(path)
    assert with_meta.world_size == inferred.world_size == 16
    assert inferred.collectives.equals(with_meta.collectives)
    assert any("tp=4,cp=1,dp=2,pp=2" in w and "sizes from the rank numbers" in w for w in inferred.warnings)


def test_profiler_noops_are_other_work_and_pairs_stay_true(tmp_path: Path) -> None:
    """The artifact's profiler records send/recv ops that launched nothing: a recv after the step's last forward
    started, a send before its first forward ended, a first stage's forward-recv. They must not shift the pairs."""
    path = write(JOB, tmp_path)
    df = pl.read_parquet(path)
    step = JOB.first_step
    row = df.filter((pl.col("step") == step) & (pl.col("rank") == 2) & (pl.col("optype") == "forward-recv")).head(1)
    last = df.filter((pl.col("step") == step) & (pl.col("rank") == 2) & (pl.col("optype") == "forward-compute"))
    extra = pl.concat([
        row.with_columns(pl.lit(float(last["start_ts"].max()) + 0.001).alias("start_ts"), pl.lit(99).alias("seq_id")),
        row.with_columns(pl.lit(0).cast(pl.Int64).alias("rank"), pl.lit(0).cast(pl.Int64).alias("stage"),
                         pl.lit("forward-send").alias("optype"), pl.lit(0.0).alias("start_ts"), pl.lit(98).alias("seq_id")),
        row.with_columns(pl.lit(0).cast(pl.Int64).alias("rank"), pl.lit(0).cast(pl.Int64).alias("stage"),
                         pl.lit(0.02).alias("start_ts"), pl.lit(97).alias("seq_id")),
    ])
    pl.concat([df, extra.select(df.columns).cast(df.schema)]).write_parquet(path)
    ts = _load(path)
    w = " | ".join(ts.warnings)
    assert "2 send/recv ops recorded outside the computes they serve" in w
    assert "1 send/recv ops have no peer (" in w
    noops = ts.gpu.filter(pl.col("op_seq") >= 97)
    assert noops.height == 3 and (noops["kind"] == "other").all()
    assert ts.collectives.filter(pl.col("name").str.contains("send|recv")).height == \
        JOB.steps * sum(1 for ops in simulate(JOB).ops.values() for op in ops if op.partner)
    inst = match.instances(ts.collectives).filter(pl.col("op").is_in(["send", "recv"]))
    assert inst["instance"].null_count() == 0 and not any("unequal" in x for x in ts.warnings)


def test_virtual_stages_pair_across_the_wrap_and_drop_chunkless_noops(tmp_path: Path) -> None:
    """vpp 2 on 3 stages (interleaved GPipe): the last stage's chunk-0 output goes to stage 0's chunk 1; the
    profiler's no-ops of the model's first and last chunk (the artifact's "type 2") are other work."""
    from analyzer.analysis import analyze

    job = Job(dp=2, pp=3, vpp=2, microbatches=2, steps=2, record_noops=True)
    truth = simulate(job)
    ts = _load(write(job, tmp_path))
    n_noops = job.steps * sum(1 for ops in truth.ops.values() for op in ops
                              if op.optype.endswith(("send", "recv")) and op.partner is None)
    assert n_noops == job.steps * job.dp * 4 * job.microbatches
    assert any(w.startswith(f"{n_noops} send/recv ops have no peer") for w in ts.warnings)
    want = _truth_rows(job, truth).select("rank", "name", "start_ns", "mb")
    inst = match.instances(ts.collectives).filter(pl.col("op").is_in(["send", "recv"]))
    assert inst.height == job.steps * sum(1 for ops in truth.ops.values() for op in ops if op.partner)
    assert inst["instance"].null_count() == 0
    pairs = inst.join(want, on=["rank", "name", "start_ns"]).group_by("instance").agg(
        pl.col("mb").n_unique().alias("mbs"), pl.col("rank").sort(), pl.col("name").sort())
    assert (pairs["mbs"] == 1).all() and pairs.height * 2 == inst.height
    # stage 2 -> stage 0 (the wrap) carries forward traffic: ranks d + 2*2 and d
    assert any(r == [0, 4] and n == ["forward-recv", "forward-send"] for r, n in pairs.select("rank", "name").rows())
    a = analyze(ts)
    assert abs(a.whatif.replay_error_pct) < 0.5


@pytest.mark.parametrize("unit,end", [("us", False), ("us", True), ("ms", False), ("s", True)])
def test_units_in_column_names(tmp_path: Path, unit: str, end: bool) -> None:
    """start_<u> with dur_<u> or end_<u>: every unit gives the nanosecond table (times are whole microseconds)."""
    job = Job(dp=2, pp=2, microbatches=2, steps=2)
    base = _load(write(job, tmp_path / "ns", dialect="canonical"))
    path = tmp_path / "u" / "trace-gen.parquet"
    path.parent.mkdir()
    df = pl.read_parquet(tmp_path / "ns" / "trace-gen.parquet")
    div = {"us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}[unit]
    conv = (lambda c: c // div) if unit == "us" else (lambda c: c / div)
    second = (pl.col("start_ns") + pl.col("dur_ns")) if end else pl.col("dur_ns")
    df.with_columns(conv(pl.col("start_ns")).alias(f"start_{unit}"),
                    conv(second).alias(f"{'end' if end else 'dur'}_{unit}")).drop("start_ns", "dur_ns").write_parquet(path)
    (tmp_path / "ns" / "meta-gen.yaml").rename(tmp_path / "u" / "meta-gen.yaml")
    got = _load(path)
    assert got.gpu.equals(base.gpu) and got.collectives.equals(base.collectives) and got.steps.equals(base.steps)


def test_one_file_per_rank_through_the_workers(tmp_path: Path, monkeypatch) -> None:
    """Op tables split by rank (times on one running clock, sizes from --layout) read by parallel workers with
    the cache on: the collectives table the reader built survives the trip (op tables are never cached)."""
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    job = Job(dp=4, pp=4, microbatches=2, steps=2)  # 16 files: two to a worker task (loader._chunks)
    truth = simulate(job)
    df = pl.read_parquet(write(job, tmp_path / "one", dialect="canonical")).with_columns(
        (pl.col("start_ns") + (pl.col("step") - job.first_step) * truth.step_ns[job.first_step]).alias("start_ns"))
    whole = tmp_path / "whole" / "trace-all.parquet"
    whole.parent.mkdir()
    df.write_parquet(whole)
    split = tmp_path / "split"
    split.mkdir()
    for (r,), part in df.partition_by("rank", as_dict=True).items():
        part.write_parquet(split / f"ops-rank{r}.parquet")
    lay = "dp=4,pp=4"
    one = load([whole], LoadOptions(jobs=1, cache=False, layout=lay))
    many = load([split], LoadOptions(jobs=2, cache=True, layout=lay))
    assert many.rank_ids == one.rank_ids == list(range(16))
    assert many.gpu.equals(one.gpu)
    assert many.collectives.equals(one.collectives)
    assert not list((tmp_path / "cache").rglob("manifest.json"))


def test_dask_scheduler_reads_op_tables_here(tmp_path: Path, monkeypatch) -> None:
    """--scheduler hands ranks over through the cache, which op tables skip: they are read in this process,
    the rest of the job on the cluster."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    path = write(JOB, tmp_path)
    ref = _load(path)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as c:
        got = load([path], LoadOptions(scheduler=c.scheduler_address))
    assert got.collectives.equals(ref.collectives) and got.gpu.equals(ref.gpu)


def test_running_clock_with_spill_keeps_its_times(tmp_path: Path) -> None:
    """A table on one running clock whose step's last op ends after the next step began is not re-laid."""
    job = Job(dp=2, pp=2, microbatches=2, steps=3)
    truth = simulate(job)
    span = truth.step_ns[job.first_step]
    df = pl.read_parquet(write(job, tmp_path, dialect="canonical")).with_columns(
        (pl.col("start_ns") + (pl.col("step") - job.first_step) * span).alias("start_ns"))
    last = (pl.col("step") == job.first_step) & (pl.col("optype") == "optimizer") & (pl.col("rank") == 0)
    df = df.with_columns(pl.when(last).then(pl.col("dur_ns") + 50_000).otherwise(pl.col("dur_ns")).alias("dur_ns"))
    df.write_parquet(tmp_path / "trace-gen.parquet")
    ts = _load(tmp_path / "trace-gen.parquet")
    assert ts.gpu["start_ns"].sort().to_list() == df["start_ns"].sort().to_list()


def test_virtual_stages_from_the_chunk_column_without_meta(tmp_path: Path) -> None:
    job = Job(dp=2, pp=3, vpp=2, microbatches=2, steps=1)
    path = write(job, tmp_path)
    ref = _load(path)
    (tmp_path / "meta-gen.yaml").unlink()
    got = load([path], LoadOptions(jobs=1, cache=False, layout="dp=2,pp=3"))
    assert got.collectives.equals(ref.collectives)
    assert any("vpp=2" in w and "vpp from the mc column" in w for w in got.warnings)
