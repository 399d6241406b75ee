"""Hand-built cases for the survivors of mutation testing over analyzer/crossrank/graph.py (issue #17).

Every expected value is worked out by hand from the docstrings of ``analyzer.crossrank.graph``; no frame is built at import
(mutmut forks its workers from the collecting process, and Polars work at import deadlocks them)."""

from __future__ import annotations

import polars as pl

from analyzer.crossrank import graph
from analyzer.model import GPU_SCHEMA, STEP_SCHEMA, conform


def _gpu(ops: list[tuple]) -> pl.DataFrame:
    """(rank, stream, start, end, name, kind) -> the canonical gpu table."""
    return conform(pl.DataFrame(ops, schema=["rank", "stream", "start_ns", "end_ns", "name", "kind"], orient="row"),
                   GPU_SCHEMA)


def _rows(rows: list[tuple], n_ranks: bool = True) -> pl.DataFrame:
    """(rank, stream, start, end, name, instance, wait, transfer, in_bytes, out_bytes, group_size, n_ranks, pg)
    -> waits.per_row's shape."""
    cols = ["rank", "stream", "start_ns", "end_ns", "name", "instance", "wait_ns", "transfer_ns", "in_bytes",
            "out_bytes", "group_size", "n_ranks", "pg"]
    df = pl.DataFrame(rows, schema=cols, orient="row").with_columns(
        pl.col("rank").cast(pl.Int32), pl.lit("all_reduce").alias("op"),
        pl.col("group_size").cast(pl.Int64), pl.col("n_ranks").cast(pl.Int64))
    # the last arriver, as per_row names it: the row with no wait (the waits here are given by hand)
    last = pl.col("rank").sort_by("wait_ns", "rank").first().over("instance")
    df = df.with_columns(last.alias("last_rank"), last.alias("inst_last"))
    return df if n_ranks else df.drop("n_ranks")


def _steps(rows: list[tuple]) -> pl.DataFrame:
    return conform(pl.DataFrame(rows, schema=["rank", "step", "start_ns", "end_ns"], orient="row"), STEP_SCHEMA)


def _no_steps() -> pl.DataFrame:
    return pl.DataFrame(schema=STEP_SCHEMA)


def _by_name(g: graph.Graph) -> dict[tuple[int, str], dict]:
    return {(r["rank"], r["name"]): r for r in g.nodes.to_dicts()}


def test_aligned_times_and_first_gaps_use_the_clock_offsets() -> None:
    # aligned = own clock - offset. rank 0: offset 1000, first op at 1100 -> aligned 100;
    # rank 1: offset -500, first op at 0 -> aligned 500. The job's first op is rank 0's (aligned 100), so the
    # first gaps are 0 (rank 0) and 400 (rank 1); a later op's gap is on the rank's own clock.
    gpu = _gpu([(0, 7, 1100, 1200, "A", "compute"), (0, 7, 1300, 1350, "B", "compute"),
                (1, 7, 0, 50, "C", "compute")])
    g = graph.build(gpu, pl.DataFrame(), _no_steps(), graph.Clock.from_offsets({0: 1000.0, 1: -500.0}))
    n = _by_name(g)
    assert (n[(0, "A")]["a_start_ns"], n[(0, "A")]["a_end_ns"]) == (100, 200)
    assert (n[(1, "C")]["a_start_ns"], n[(1, "C")]["a_end_ns"]) == (500, 550)
    assert n[(0, "A")]["gap_ns"] == 0 and n[(1, "C")]["gap_ns"] == 400
    assert n[(0, "B")]["gap_ns"] == 100 and n[(0, "B")]["bind_pred"] == n[(0, "A")]["node"]


def test_no_steps_and_no_comm_rows() -> None:
    # without step windows every op's step is null and occurrence counts the name on the rank
    gpu = _gpu([(0, 7, 0, 10, "A", "compute"), (0, 7, 20, 30, "A", "compute"), (1, 7, 5, 15, "A", "compute")])
    g = graph.build(gpu, pl.DataFrame(), _no_steps())
    assert g.nodes["step"].null_count() == 3 and g.nodes.schema["step"] == pl.Int64
    assert g.nodes.filter(pl.col("rank") == 0)["occurrence"].to_list() == [0, 1]
    assert g.nodes.filter(pl.col("rank") == 1)["occurrence"].to_list() == [0]
    assert g.nodes["inst"].null_count() == 3 and g.instances.height == 0


def test_zero_length_op_ends_one_ns_after_its_start() -> None:
    gpu = _gpu([(0, 7, 100, 100, "Z", "compute"), (0, 7, 100, 90, "Y", "compute"), (0, 7, 0, 50, "A", "compute")])
    n = _by_name(graph.build(gpu, pl.DataFrame(), _no_steps()))
    assert (n[(0, "Z")]["end_ns"], n[(0, "Z")]["dur_ns"], n[(0, "Z")]["a_end_ns"]) == (101, 1, 101)
    assert (n[(0, "Y")]["end_ns"], n[(0, "Y")]["dur_ns"]) == (101, 1)


def test_duplicate_ops_are_one_node_the_first_kept() -> None:
    # the same (rank, stream, start, end, name) twice, with a different kind: one node, the first row's kind
    gpu = _gpu([(0, 7, 0, 10, "A", "compute"), (0, 7, 0, 10, "A", "memcpy"), (0, 7, 20, 30, "B", "compute")])
    g = graph.build(gpu, pl.DataFrame(), _no_steps())
    assert g.n_nodes == 2
    assert _by_name(g)[(0, "A")]["kind"] == "compute"


def test_nodes_are_ordered_by_rank_start_end_stream_name() -> None:
    gpu = _gpu([
        (1, 7, 0, 10, "R1", "compute"),            # rank 1 starts first on the clock, but rank 0 comes first
        (0, 3, 500, 600, "Late", "compute"),
        (0, 1, 100, 900, "LongFirst", "compute"),  # starts before ShortSecond, ends after it
        (0, 2, 200, 300, "ShortSecond", "compute"),
        (0, 2, 400, 450, "b", "compute"),          # same start: shorter end first
        (0, 1, 400, 460, "a", "compute"),
        (0, 5, 700, 750, "a2", "compute"),         # same start and end: lower stream first
        (0, 4, 700, 750, "b2", "compute"),
        (0, 6, 800, 850, "z", "compute"),          # same start, end and stream: name order
        (0, 6, 800, 850, "y", "compute"),
    ])
    g = graph.build(gpu, pl.DataFrame(), _no_steps())
    want = ["LongFirst", "ShortSecond", "b", "a", "Late", "b2", "a2", "y", "z", "R1"]
    assert g.nodes["name"].to_list() == want
    assert g.nodes["node"].to_list() == list(range(10))
    assert g.nodes["ordinal"].to_list() == [*range(9), 0]


def test_occurrence_counts_the_name_per_rank_and_step() -> None:
    gpu = _gpu([
        (0, 7, 0, 10, "A", "compute"), (0, 7, 20, 30, "B", "compute"), (0, 7, 40, 50, "A", "compute"),
        (0, 7, 100, 110, "A", "compute"),
        (1, 7, 0, 10, "A", "compute"), (1, 7, 100, 110, "A", "compute"),
    ])
    steps = _steps([(0, 1, 0, 100), (0, 2, 100, 200), (1, 1, 0, 100), (1, 2, 100, 200)])
    g = graph.build(gpu, pl.DataFrame(), steps)
    got = g.nodes.select("rank", "name", "step", "occurrence").rows()
    assert got == [(0, "A", 1, 0), (0, "B", 1, 0), (0, "A", 1, 1), (0, "A", 2, 0), (1, "A", 1, 0), (1, "A", 2, 0)]


def test_slack_is_measured_on_the_ranks_own_stream_and_never_negative() -> None:
    gpu = _gpu([
        (0, 7, 0, 50, "A", "compute"),
        (1, 7, 100, 200, "B", "compute"),   # first on rank 1's stream 7: no predecessor, slack 0
        (1, 7, 200, 300, "C", "compute"),   # back to back: slack 0
        (1, 7, 250, 400, "D", "compute"),   # overlaps C on the stream: slack clamped at 0
        (1, 7, 450, 500, "E", "compute"),   # 50 after D
    ])
    n = _by_name(graph.build(gpu, pl.DataFrame(), _no_steps()))
    assert n[(1, "B")]["stream_pred"] is None
    assert [n[(1, k)]["slack_ns"] for k in "BCDE"] == [0, 0, 0, 50]
    assert n[(0, "A")]["slack_ns"] == 0


def test_binding_predecessor_is_the_latest_end_not_the_latest_node() -> None:
    # A [0,1000] on stream 1 is node 0; B [10,20] on stream 2 is node 1; C starts at 500: only B has ended
    gpu = _gpu([(0, 1, 0, 1000, "A", "compute"), (0, 2, 10, 20, "B", "compute"), (0, 2, 500, 600, "C", "compute"),
                (0, 3, 30, 40, "D", "compute")])
    n = _by_name(graph.build(gpu, pl.DataFrame(), _no_steps()))
    assert n[(0, "C")]["bind_pred"] == n[(0, "D")]["node"] and n[(0, "C")]["gap_ns"] == 460
    assert n[(0, "D")]["bind_pred"] == n[(0, "B")]["node"] and n[(0, "D")]["gap_ns"] == 10


def _two_instances(n_ranks: bool = True, group_size: int | None = 8, nr: int | None = 4) -> tuple:
    # instance "b" arrives first (aligned 0), "a" later (aligned 1000): inst ids follow first arrival
    gpu = _gpu([
        (0, 20, 0, 100, "nccl", "comm"), (1, 20, 50, 100, "nccl", "comm"),
        (0, 20, 1000, 1200, "nccl", "comm"), (1, 20, 1100, 1200, "nccl", "comm"),
    ])
    rows = _rows([
        (0, 20, 0, 100, "nccl", "b", 50, 50, 300, 100, group_size, nr, "pgX"),
        (1, 20, 50, 100, "nccl", "b", 0, 50, 100, 200, group_size, nr, "pgX"),
        (0, 20, 1000, 1200, "nccl", "a", 100, 100, 10, 10, group_size, nr, "pgY"),
        (1, 20, 1100, 1200, "nccl", "a", 0, 100, 10, 10, group_size, nr, "pgY"),
    ], n_ranks=n_ranks)
    return gpu, rows


def test_instance_fields_bytes_group_and_pg() -> None:
    gpu, rows = _two_instances()
    g = graph.build(gpu, rows, _no_steps())
    inst = {r["instance"]: r for r in g.instances.to_dicts()}
    assert inst["b"]["inst"] == 0 and inst["a"]["inst"] == 1
    assert inst["b"]["bytes"] == 300 and inst["b"]["pg"] == "pgX" and inst["a"]["pg"] == "pgY"
    assert inst["b"]["group_n"] == 8 and inst["b"]["n"] == 2  # the group's size, not the participants seen
    n = g.nodes.sort("node").to_dicts()  # rank 0's b, a, then rank 1's b, a
    assert [r["bytes"] for r in n] == [300, 10, 200, 10]
    assert [r["group_n"] for r in n] == [8, 8, 8, 8]
    assert [r["inst"] for r in n] == [0, 1, 0, 1]
    assert inst["b"]["last_rank"] == 1 and inst["b"]["last_node"] == 2


def test_group_n_falls_back_to_n_ranks_then_to_the_participants() -> None:
    gpu, rows = _two_instances(group_size=None, nr=4)
    g = graph.build(gpu, rows, _no_steps())
    assert g.nodes["group_n"].to_list() == [4, 4, 4, 4] and g.instances["group_n"].to_list() == [4, 4]
    gpu, rows = _two_instances(group_size=None, nr=None)
    g = graph.build(gpu, rows, _no_steps())
    assert g.nodes["group_n"].null_count() == 4 and g.instances["group_n"].to_list() == [2, 2]


def test_group_n_without_an_n_ranks_column() -> None:
    gpu, rows = _two_instances(n_ranks=False, group_size=8, nr=None)
    g = graph.build(gpu, rows, _no_steps())
    assert g.nodes["group_n"].to_list() == [8, 8, 8, 8] and g.instances["group_n"].to_list() == [8, 8]


def test_instance_ids_tie_on_first_arrival_by_instance_key() -> None:
    gpu = _gpu([(0, 20, 0, 100, "x", "comm"), (1, 20, 0, 100, "x", "comm"),
                (0, 21, 0, 100, "y", "comm"), (1, 21, 0, 100, "y", "comm")])
    rows = _rows([(0, 20, 0, 100, "x", "k2", 0, 100, 1, 1, 2, 2, "p"), (1, 20, 0, 100, "x", "k2", 0, 100, 1, 1, 2, 2, "p"),
                  (0, 21, 0, 100, "y", "k1", 0, 100, 1, 1, 2, 2, "p"), (1, 21, 0, 100, "y", "k1", 0, 100, 1, 1, 2, 2, "p")])
    g = graph.build(gpu, rows, _no_steps())
    assert dict(g.instances.select("instance", "inst").rows()) == {"k1": 0, "k2": 1}
    # equal waits: the last arriver is the lower rank
    assert g.instances["last_rank"].to_list() == [0, 0]


def test_a_single_comm_row_is_joined() -> None:
    gpu = _gpu([(0, 20, 0, 100, "x", "comm"), (0, 7, 200, 300, "A", "compute")])
    rows = _rows([(0, 20, 0, 100, "x", "solo", 0, 100, 1, 1, 1, 1, "p")])
    n = _by_name(graph.build(gpu, rows, _no_steps()))
    assert n[(0, "x")]["inst"] == 0 and n[(0, "x")]["transfer_ns"] == 100


def test_duplicate_comm_rows_give_one_node_the_first_kept() -> None:
    gpu = _gpu([(0, 20, 0, 100, "x", "comm"), (1, 20, 50, 100, "x", "comm")])
    rows = _rows([(0, 20, 0, 100, "x", "i", 50, 50, 1, 1, 2, 2, "p"), (0, 20, 0, 100, "x", "i", 7, 50, 1, 1, 2, 2, "p"),
                  (1, 20, 50, 100, "x", "i", 0, 50, 1, 1, 2, 2, "p")])
    g = graph.build(gpu, rows, _no_steps())
    assert g.n_nodes == 2 and g.nodes["wait_ns"].to_list() == [50, 0]
    assert g.instances["n"].to_list() == [2]


def test_many_instances_arriving_together_are_numbered_by_key() -> None:
    # 40 instances whose first kernels all start at aligned 0: ids follow the instance key (k00 -> 0 ... k39 -> 39)
    gpu, rows = [], []
    for i in range(40):
        for r in range(2):
            gpu.append((r, 100 + i, 0, 100, f"x{i}", "comm"))
            rows.append((r, 100 + i, 0, 100, f"x{i}", f"k{i:02d}", 0, 100, 1, 1, 2, 2, "p"))
    g = graph.build(_gpu(gpu), _rows(rows), _no_steps())
    assert dict(g.instances.select("instance", "inst").rows()) == {f"k{i:02d}": i for i in range(40)}
    assert g.instances["inst"].to_list() == list(range(40))
