"""The program order an op table declares (analyzer/ingest/optable/deps.py): on a generated 1F1B job, each op
waits for what the What-if artifact's dependency model says, checked op by op against rules written out here."""

from __future__ import annotations

import polars as pl
import pytest

from analyzer.ingest.loader import LoadOptions, load
from sample_traces.optable_gen import Job, write

JOB = Job(dp=2, pp=4, microbatches=6, steps=2, schedule="1f1b", slow_worker=(1, 2, 1.5))


@pytest.fixture(scope="module")
def gpu(tmp_path_factory) -> pl.DataFrame:
    out = tmp_path_factory.mktemp("deps")
    return load([write(JOB, out)], LoadOptions(jobs=1, cache=False)).gpu


def _by_step(gpu: pl.DataFrame, rank: int) -> list[pl.DataFrame]:
    one = gpu.filter(pl.col("rank") == rank).sort("start_ns")
    # a step starts at its params all-gather (the first op of each step in the generated program)
    first = one.with_columns((pl.col("name") == "params-all-gather").cum_sum().alias("_s"))
    return [f for _, f in sorted(first.partition_by("_s", as_dict=True).items())]


@pytest.mark.parametrize("stage", [1, 2])
def test_middle_stage_waits_as_the_artifact_says(gpu: pl.DataFrame, stage: int) -> None:
    rank = JOB.rank(0, stage)
    for step in _by_step(gpu, rank):
        key = {(n, s): k for n, s, k in step.select("name", "op_seq", "op_key").rows()}
        after = {k: set(a) for k, a in step.select("op_key", "after").rows()}
        comp = [k for n, k in step.filter(pl.col("name").is_in(["forward-compute", "backward-compute"]))
                .select("name", "op_key").rows()]
        for d in ("forward", "backward"):
            n = JOB.microbatches
            for i in range(n):
                c, r, s = key[(f"{d}-compute", i)], key[(f"{d}-recv", i)], key[(f"{d}-send", i)]
                assert r in after[c]  # the compute waits for its recv
                assert c in after[s]  # the send waits for its compute
                if i:
                    assert key[(f"{d}-compute", i - 1)] in after[r]  # the recv for the previous compute
                    assert key[(f"{d}-recv", i - 1)] in after[r]  # and its own order
        first_b = comp.index(key[("backward-compute", 0)])
        for t in ("backward-recv", "backward-send"):
            assert comp[first_b - 2] in after[key[(t, 0)]]
        # the step's closing chain, and the first forward after the params all-gather
        assert key[("params-all-gather", 0)] in after[key[("forward-compute", 0)]]
        assert key[("gc", 0)] in after[key[("layernorm-grads-all-reduce", 0)]]
        assert key[("optimizer-clip-main-grad", 0)] in after[key[("optimizer", 0)]]
        assert key[("grads-reduce-scatter", 0)] in after[key[("optimizer-clip-main-grad", 0)]]


def test_every_declared_dependency_started_earlier_on_the_same_rank(gpu: pl.DataFrame) -> None:
    d = gpu.select("rank", "op_key", "start_ns", "after").explode("after").drop_nulls("after").join(
        gpu.select("rank", pl.col("op_key").alias("after"), pl.col("start_ns").alias("_s"),
                   pl.col("end_ns").alias("_e")), on=["rank", "after"])
    assert d.height > 0
    assert (d["_s"] <= d["start_ns"]).all() and (d["_e"] <= d["start_ns"]).all()
