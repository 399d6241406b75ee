"""The dependency graph and the critical path: hand-built timelines and generated runs with known answers."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analyzer.crossrank import graph
from analyzer.metrics import critical_path as cpm
from analyzer.metrics import waits
from analyzer.model import GPU_SCHEMA, STEP_SCHEMA, conform
from sample_traces.generate import Scenario, build, write_kineto
from tests.helpers import run


def gpu_table(ops: list[tuple]) -> pl.DataFrame:
    """(rank, stream, start, end, name, kind) -> the canonical gpu table."""
    return conform(pl.DataFrame(ops, schema=["rank", "stream", "start_ns", "end_ns", "name", "kind"], orient="row"),
                   GPU_SCHEMA)


def comm_rows(rows: list[tuple]) -> pl.DataFrame:
    """(rank, stream, start, end, name, instance) -> waits.per_row of them (one clock: aligned = own times)."""
    df = pl.DataFrame(rows, schema=["rank", "stream", "start_ns", "end_ns", "name", "instance"], orient="row")
    df = df.with_columns(pl.col("rank").cast(pl.Int32),
                         pl.lit("all_reduce").alias("op"), pl.lit("0").alias("pg"), pl.lit(1 << 20).alias("in_bytes"),
                         pl.lit(1 << 20).alias("out_bytes"), pl.lit(2).alias("group_size"), pl.lit(2).alias("n_ranks"))
    return waits.per_row(df, df["start_ns"], df["end_ns"])


def hand() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The hand-built two-rank job: (gpu table, comm rows, steps).
    rank 0: A [0,100] compute, C [100,300] comm (stream 20), D [300,400] compute
    rank 1: B [0,200] compute, C [200,300] comm (stream 20), E [350,380] compute (idle gap of 50 after C)
    Built when called, not at import: Polars work at import starts its thread pool in the process that
    collects the tests, and mutation testing forks its workers from that process (they then deadlock)."""
    gpu = gpu_table([
        (0, 7, 0, 100, "A", "compute"), (0, 20, 100, 300, "nccl_ar", "comm"), (0, 7, 300, 400, "D", "compute"),
        (1, 7, 0, 200, "B", "compute"), (1, 20, 200, 300, "nccl_ar", "comm"), (1, 7, 350, 380, "E", "compute"),
    ])
    rows = comm_rows([(0, 20, 100, 300, "nccl_ar", "i0"), (1, 20, 200, 300, "nccl_ar", "i0")])
    steps = conform(pl.DataFrame({"rank": [0, 1], "step": [1, 1], "start_ns": [0, 0], "end_ns": [400, 380]}),
                    STEP_SCHEMA)
    return gpu, rows, steps


def test_hand_built_predecessors_gaps_and_instance() -> None:
    g = graph.build(*hand())
    n = {(r["rank"], r["name"]): r for r in g.nodes.to_dicts()}
    a, c0, d = n[(0, "A")], n[(0, "nccl_ar")], n[(0, "D")]
    b, c1, e = n[(1, "B")], n[(1, "nccl_ar")], n[(1, "E")]
    assert c0["bind_pred"] == a["node"] and c0["gap_ns"] == 0 and c0["stream_pred"] is None
    # D waits for the collective (latest end before its start), on its stream after A with 200 ns slack
    assert d["bind_pred"] == c0["node"] and d["stream_pred"] == a["node"] and d["slack_ns"] == 200
    assert e["bind_pred"] == c1["node"] and e["gap_ns"] == 50
    assert c0["wait_ns"] == 100 and c1["wait_ns"] == 0 and c0["inst"] == c1["inst"] is not None
    inst = g.instances.row(0, named=True)
    assert inst["n"] == 2 and inst["last_rank"] == 1 and inst["last_node"] == c1["node"] and inst["transfer_ns"] == 100
    edges = set(g.edges.iter_rows())
    assert (c1["node"], c0["node"], "collective") in edges and (c0["node"], c1["node"], "collective") not in edges
    assert (a["node"], d["node"], "stream") in edges and (c0["node"], d["node"], "binding") in edges
    assert b["gap_ns"] == 0 and a["gap_ns"] == 0  # first ops: measured from the job's first op


def test_hand_built_critical_path_jumps_to_the_last_arriver() -> None:
    gpu, rows, steps = hand()
    g = graph.build(gpu, rows, steps)
    cp = {r["rank"]: r for r in cpm.critical_path(g).to_dicts()}
    # the step ends with D on rank 0 (400); D <- collective, whose last arriver is rank 1: C1 (100 transfer) <- B
    assert cp[0] == {"step": 1, "rank": 0, "compute_ns": 100.0, "exposed_transfer_ns": 0.0, "wait_ns": 0.0,
                     "host_idle_ns": 0.0}
    assert cp[1] == {"step": 1, "rank": 1, "compute_ns": 200.0, "exposed_transfer_ns": 100.0, "wait_ns": 0.0,
                     "host_idle_ns": 0.0}


def _generated(tmp_path: Path, sc: Scenario):
    wl = build(sc)
    write_kineto(wl, tmp_path)
    return run(tmp_path), wl.truth


def test_generated_instances_join_all_participants_with_the_true_last_rank(tmp_path: Path) -> None:
    a, truth = _generated(tmp_path, Scenario(ranks=8, tp=2, steps=2, late_ranks={5: (1_000_000, "host")}))
    g = a.graph
    gpu_ops = a.traces.gpu.filter(pl.col("kind").is_in(graph.NODE_KINDS)).height
    assert g.n_nodes == gpu_ops
    assert g.instances.height == len(truth.instances)
    got = sorted((r["n"], r["last_rank"]) for r in g.instances.to_dicts())
    want = sorted((len(t.ranks), t.last_rank) for t in truth.instances)
    assert got == want
    # collective edges: each instance's last arriver -> every other participant
    assert g.edges.filter(pl.col("kind") == "collective").height == sum(len(t.ranks) - 1 for t in truth.instances)


@pytest.mark.parametrize("kind", ["host", "compute"])
def test_critical_path_runs_through_the_late_ranks_gap_or_compute(tmp_path: Path, kind: str) -> None:
    delay = 2_000_000
    a, _ = _generated(tmp_path, Scenario(ranks=8, tp=2, steps=3, late_ranks={3: (delay, kind)}))
    cp = a.critical_path
    # the critical path runs through each step's own windows (a.traces.steps; one host: no clock offsets), from
    # the first rank's start to the last one's end; steps[] also hold the gap to the next step (step_sync.py)
    spans = a.traces.steps.group_by("step").agg(((pl.col("end_ns").max() - pl.col("start_ns").min()) / 1e6)
                                                 .alias("span_ms"))
    for step in spans["step"].to_list():
        mine = cp.filter((pl.col("step") == step) & (pl.col("rank") == 3)).row(0, named=True)
        if kind == "host":  # the late rank's GPU idled `delay` before its step's work: that is on the path
            assert mine["host_idle_ns"] == pytest.approx(delay, rel=0.01)
        else:  # its slower kernels are: compute on the path beyond the delay
            assert mine["compute_ns"] >= delay
            assert cp.filter(pl.col("step") == step)["host_idle_ns"].sum() < 0.01 * delay
        total = cp.filter(pl.col("step") == step).select(pl.sum_horizontal(*cpm.FIELDS).sum()).item()
        longest = spans.filter(pl.col("step") == step)["span_ms"][0] * 1e6
        assert total == pytest.approx(longest, rel=0.01)  # the path covers the step (one host: no clock offsets)
