"""Hand-built cases for the metric modules' edges that the generated scenarios never reach (mutation testing,
issue #17). Every expected value is worked out by hand in the test from the module's stated rule, never copied
from the analyzer's output."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analyzer.metrics import experts
from analyzer.metrics.flat import FlatAxis

# ---------------------------------------------------------------- flat.py


def _gpu(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")


def test_flat_axis_maps_a_rank_it_lacks_to_an_empty_interval() -> None:
    # one rank on the axis, busy over its whole extent [0, 10]; rank 5 has no kernels at all
    axis = FlatAxis.of(_gpu([(0, 0, 10)]))
    a, b = axis.map(_gpu([(5, 2, 8), (0, 2, 8)]))
    # the lacking rank: an empty interval (length 0, nothing of rank 0's time inside it)
    assert b[0] - a[0] == 0
    assert axis.coverage(_gpu([(0, 0, 10)])).within(a[:1], b[:1]).tolist() == [0]
    # the held rank: its 6 ns, all covered
    assert (b[1] - a[1]) == 6 and axis.coverage(_gpu([(0, 0, 10)])).within(a[1:], b[1:]).tolist() == [6]
    # an interval of a lacking rank adds nothing to a coverage
    assert axis.coverage(_gpu([(5, 0, 10)])).total == 0


def test_flat_axis_coverage_reads_the_named_columns() -> None:
    axis = FlatAxis.of(_gpu([(0, 0, 100), (1, 0, 100)]))
    df = pl.DataFrame({"rank": [0, 1], "a": [10, 20], "b": [30, 25], "start_ns": [0, 0], "end_ns": [100, 100]})
    cov = axis.coverage(df, "a", "b")
    assert cov.total == 20 + 5  # [10, 30] on rank 0 and [20, 25] on rank 1, nothing else
    a, b = axis.map(df, "a", "b")
    assert np.asarray(cov.within(a, b)).tolist() == [20, 5]


# ---------------------------------------------------------------- experts.py

ROW = 8  # bytes per split row in these hand-built all-to-alls


def _a2a(sends: dict[int, tuple[int, ...]], group: tuple[int, ...], instance: str | None = "i1", *, step: int = 1,
         start: int = 1000, waits: dict[int, int] | None = None, out: bool | set[int] = True, row: int = ROW,
         pg: str = "7") -> pl.DataFrame:
    """One matched all-to-all: ``sends[r][j]`` rows rank r sends group member j (global rank group[j]); in_bytes and
    out_bytes the rows x ``row``; out-splits what r receives from each member (null unless ``out`` is True or holds r)."""
    rows = []
    for r, s in sends.items():
        j = group.index(r)
        has_out = out is True or (out is not False and r in out)
        got = tuple(sends[group[i]][j] for i in range(len(group)) if group[i] in sends)
        rows.append({
            "rank": r, "instance": instance, "op": "all_to_all", "pg": pg, "step": step, "start_ns": start + r,
            "group_ranks": ",".join(map(str, group)), "in_splits": ",".join(map(str, s)),
            "out_splits": ",".join(map(str, got)) if has_out else None,
            "in_bytes": sum(s) * row, "out_bytes": sum(got) * row if has_out else None,
            "wait_ns": (waits or {}).get(r, 0),
        })
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "instance": pl.String, "op": pl.String, "pg": pl.String,
                                      "step": pl.Int64, "start_ns": pl.Int64, "group_ranks": pl.String,
                                      "in_splits": pl.String, "out_splits": pl.String, "in_bytes": pl.Int64,
                                      "out_bytes": pl.Int64, "wait_ns": pl.Int64})


def _recv(sends: dict[int, tuple[int, ...]], group: tuple[int, ...], row: int = ROW) -> dict[int, int]:
    """Bytes each member receives, brute force: the column sums of the send matrix."""
    return {group[j]: sum(sends[r][j] for r in sends) * row for j in range(len(group))}


# global ranks 2, 5, 7; ranks 5 and 7 both receive 4 rows, rank 2 three: a tie for top receiver
GROUP = (2, 5, 7)
TIE = {2: (0, 3, 1), 5: (1, 0, 3), 7: (2, 1, 0)}
# instance name, step, start (the min over its ranks is start), waits: names out of time order, b and d start together
TIE_INSTANCES = (("c", 1, 1000, {2: 1500, 7: 250_000}), ("a", 1, 2000, {5: 3}), ("b", 2, 3000, {}),
                 ("d", 2, 3000, {7: 7}), ("e", 3, 4000, {2: 9}), ("f", 3, 5000, {5: 1}))


def test_experts_hand_built_tie_peers_order_and_per_instance_fields() -> None:
    rows = pl.concat([_a2a(TIE, GROUP, name, step=st, start=t, waits=w) for name, st, t, w in TIE_INSTANCES])
    ex = experts.analyze(rows)
    assert ex is not None
    recv = _recv(TIE, GROUP)
    assert recv == {2: 24, 5: 32, 7: 32}
    mean = sum(recv.values()) / 3
    n = len(TIE_INSTANCES)
    assert ex["instances"] == n
    assert ex["imbalance_max"] == pytest.approx(32 / mean) and ex["imbalance_p50"] == pytest.approx(32 / mean)
    # per instance, in order of start (ties by instance): c, a, b, d, e, f; the tie for most received goes to rank 5
    per = ex["per_instance"]
    assert per.columns == ["pg", "step", "ranks", "recv_bytes_max", "recv_bytes_mean", "imbalance", "top_rank",
                           "max_wait_ns"]
    want = [{"pg": "7", "step": st, "ranks": 3, "recv_bytes_max": 32.0, "recv_bytes_mean": pytest.approx(mean),
             "imbalance": pytest.approx(32 / mean), "top_rank": 5, "max_wait_ns": max([0, *w.values()])}
            for _, st, _, w in sorted(TIE_INSTANCES, key=lambda x: (x[2], x[0]))]
    assert per.to_dicts() == want
    # bytes per (src, dst): n instances x rows x ROW, zero pairs left out, sorted by src then dst
    peers = ex["peers"].to_dicts()
    assert peers == [{"src": GROUP[i], "dst": GROUP[j], "bytes": n * TIE[GROUP[i]][j] * ROW}
                     for i in range(3) for j in range(3) if TIE[GROUP[i]][j]]
    # per rank: received, sent, instances topped (0 where never top); the tie over the run goes to rank 5
    assert ex["ranks"].to_dicts() == [
        {"rank": r, "recv_bytes": n * recv[r], "sent_bytes": n * sum(TIE[r]) * ROW, "instances_top": n if r == 5 else 0}
        for r in GROUP]
    assert ex["top_receiver"] == 5


def test_experts_without_out_splits_take_what_the_others_sent() -> None:
    rows = pl.concat([_a2a(TIE, GROUP, name, step=st, start=t, waits=w, out=False) for name, st, t, w in TIE_INSTANCES])
    ex = experts.analyze(rows)
    assert ex is not None and ex["instances"] == len(TIE_INSTANCES)
    recv = _recv(TIE, GROUP)
    assert ex["per_instance"]["top_rank"].to_list() == [5] * len(TIE_INSTANCES)
    assert ex["per_instance"]["recv_bytes_max"].to_list() == [32.0] * len(TIE_INSTANCES)
    assert {r["rank"]: r["recv_bytes"] for r in ex["ranks"].to_dicts()} == {
        r: len(TIE_INSTANCES) * recv[r] for r in GROUP}
    # one instance of one rank alone (a group of one, no out-splits): what it sent itself is what it received
    one = experts.analyze(_a2a({3: (4,)}, (3,), out=False))
    assert one is not None and one["instances"] == 1 and one["top_receiver"] == 3
    assert one["per_instance"].select("ranks", "recv_bytes_max", "imbalance").row(0) == (1, 4.0 * ROW, 1.0)


def test_experts_rank_without_out_splits_has_unknown_received_bytes() -> None:
    # rank 1 recorded no out-splits while rank 0 did: rank 1's received bytes are unknown (null), not guessed,
    # and it cannot be the top receiver; what it sent is known
    sends = {0: (1, 2), 1: (5, 1)}
    ex = experts.analyze(_a2a(sends, (0, 1), out={0}))
    assert ex is not None
    ranks = {r["rank"]: r for r in ex["ranks"].to_dicts()}
    assert ranks == {0: {"rank": 0, "recv_bytes": 6.0 * ROW, "sent_bytes": 3.0 * ROW, "instances_top": 1},
                     1: {"rank": 1, "recv_bytes": None, "sent_bytes": 6.0 * ROW, "instances_top": 0}}
    assert ex["top_receiver"] == 0 and ex["per_instance"]["ranks"].to_list() == [1]


def test_experts_a_rank_in_a_group_of_one() -> None:
    ex = experts.analyze(_a2a({3: (4,)}, (3,)))
    assert ex is not None and ex["instances"] == 1 and ex["top_receiver"] == 3
    assert ex["per_instance"].select("ranks", "recv_bytes_max", "imbalance").row(0) == (1, 4.0 * ROW, 1.0)


def test_experts_zero_and_one_byte_edges() -> None:
    # rank 0 sends rank 1 one byte (one row of 1 byte); rank 1 sends nothing: rank 0 receives nothing
    tiny = experts.analyze(_a2a({0: (0, 1), 1: (0, 0)}, (0, 1), row=1))
    assert tiny is not None
    assert tiny["peers"].to_dicts() == [{"src": 0, "dst": 1, "bytes": 1.0}]
    assert tiny["per_instance"].select("recv_bytes_max", "recv_bytes_mean", "imbalance", "top_rank").row(0) == (
        1.0, 0.5, 2.0, 1)
    assert tiny["ranks"].to_dicts() == [{"rank": 0, "recv_bytes": 0.0, "sent_bytes": 1.0, "instances_top": 0},
                                        {"rank": 1, "recv_bytes": 1.0, "sent_bytes": 0.0, "instances_top": 1}]
    # a rank that sends exactly one row (split total 1) sends its whole buffer to that peer
    one = experts.analyze(_a2a({0: (0, 1, 0), 1: (2, 0, 0), 2: (1, 1, 0)}, (0, 1, 2)))
    assert one is not None
    assert {(p["src"], p["dst"]): p["bytes"] for p in one["peers"].to_dicts()} == {
        (0, 1): 1.0 * ROW, (1, 0): 2.0 * ROW, (2, 0): 1.0 * ROW, (2, 1): 1.0 * ROW}
    assert {r["rank"]: r["recv_bytes"] for r in one["ranks"].to_dicts()} == {0: 3.0 * ROW, 1: 2.0 * ROW, 2: 0.0}
    # nobody sends anything: no imbalance to speak of (null), and nothing received
    idle = experts.analyze(_a2a({0: (0, 0), 1: (0, 0)}, (0, 1)))
    assert idle is not None
    assert idle["per_instance"].select("recv_bytes_max", "recv_bytes_mean", "imbalance").row(0) == (0.0, 0.0, None)
    assert idle["peers"].height == 0 and idle["ranks"]["recv_bytes"].to_list() == [0.0, 0.0]


def test_experts_keep_only_matched_all_to_all_with_split_sizes() -> None:
    base = _a2a(TIE, GROUP, "m")
    unmatched = _a2a({2: (9, 0, 0), 5: (9, 0, 0), 7: (9, 0, 0)}, GROUP, None)
    ex = experts.analyze(pl.concat([base, unmatched]))
    assert ex is not None and ex["instances"] == 1 and ex["top_receiver"] == 5
    assert {r["rank"]: r["recv_bytes"] for r in ex["ranks"].to_dicts()} == _recv(TIE, GROUP)
    # all-to-alls that recorded no split sizes (null, or PyTorch's empty list for even splits): no report
    assert experts.analyze(base.with_columns(pl.lit(None, pl.String).alias("in_splits"),
                                             pl.lit(None, pl.String).alias("out_splits"))) is None
    assert experts.analyze(base.with_columns(pl.lit("").alias("in_splits"), pl.lit("").alias("out_splits"))) is None
    assert experts.analyze(base.drop("in_splits", "out_splits")) is None
    # a row whose group membership was not recorded is left out, the others still count
    part = experts.analyze(base.with_columns(pl.when(pl.col("rank") == 5).then(pl.lit("")).otherwise("group_ranks")
                                             .alias("group_ranks")))
    assert part is not None and part["per_instance"]["ranks"].to_list() == [2]
    # out-splits without their byte count are left out (a rank's received bytes then unknown)
    nob = experts.analyze(base.with_columns(pl.when(pl.col("rank") == 2).then(None).otherwise("out_bytes")
                                            .alias("out_bytes")))
    assert nob is not None and nob["per_instance"]["ranks"].to_list() == [2]
    assert {r["rank"]: r["recv_bytes"] for r in nob["ranks"].to_dicts()} == {2: None, 5: 32.0, 7: 32.0}


def test_experts_without_a_wait_column_have_null_max_wait() -> None:
    ex = experts.analyze(_a2a(TIE, GROUP).drop("wait_ns"))
    assert ex is not None and ex["per_instance"]["max_wait_ns"].to_list() == [None]
    ex = experts.analyze(_a2a(TIE, GROUP, waits={7: 2_500_000}))
    assert ex is not None and ex["per_instance"]["max_wait_ns"].to_list() == [2_500_000]


def test_experts_order_instances_by_start_then_name_and_peers_by_source_then_destination() -> None:
    # ten instances starting together: listed by instance name (step k for instance "i<k>" shows the order)
    group = tuple(range(8))
    full = {r: tuple(1 + (r + j) % 3 for j in range(8)) for r in group}  # every pair sends something
    rows = pl.concat([_a2a(full, group, f"i{k}", step=k, start=1000) for k in range(10)])
    ex = experts.analyze(rows)
    assert ex is not None and ex["per_instance"]["step"].to_list() == list(range(10))
    peers = ex["peers"].select("src", "dst").rows()
    assert peers == [(i, j) for i in group for j in group]
    assert ex["peers"]["bytes"].to_list() == [10.0 * full[i][j] * ROW for i in group for j in group]


# ---------------------------------------------------------------- critical_path.py

CP_SCHEMA = {"step": pl.Int64, "rank": pl.Int32, "compute_ns": pl.Float64, "exposed_transfer_ns": pl.Float64,
             "wait_ns": pl.Float64, "host_idle_ns": pl.Float64}


def test_critical_path_step_summary_adds_up_each_step_and_names_its_top_rank() -> None:
    from analyzer.metrics.critical_path import step_summary

    cp = pl.DataFrame([(2, 2, 1.0, 2.0, 3.0, 4.0), (1, 0, 100.0, 20.0, 0.0, 5.0), (1, 1, 0.0, 0.0, 0.0, 40.0),
                       (1, 3, 10.0, 0.0, 300.0, 0.0)], schema=CP_SCHEMA, orient="row")
    # step 1: rank 0 holds 125 ns of the path, rank 1 40, rank 3 310 (the most); step 2: rank 2 alone, 10 ns
    assert step_summary(cp).to_dicts() == [
        {"step": 1, "compute_ns": 110.0, "exposed_transfer_ns": 20.0, "wait_ns": 300.0, "host_idle_ns": 45.0,
         "path_ns": 475.0, "top_rank": 3, "ranks": 3},
        {"step": 2, "compute_ns": 1.0, "exposed_transfer_ns": 2.0, "wait_ns": 3.0, "host_idle_ns": 4.0,
         "path_ns": 10.0, "top_rank": 2, "ranks": 1}]
    # a path of one row is summed like any other; no path: no steps
    assert step_summary(cp.tail(1)).to_dicts() == [
        {"step": 1, "compute_ns": 10.0, "exposed_transfer_ns": 0.0, "wait_ns": 300.0, "host_idle_ns": 0.0,
         "path_ns": 310.0, "top_rank": 3, "ranks": 1}]
    none = step_summary(cp.clear())
    assert none.columns == ["step"] and none.height == 0


def _gpu_table(ops: list[tuple]) -> pl.DataFrame:
    """(rank, stream, start, end, name, kind) -> the canonical gpu table (as tests/test_graph.py builds it)."""
    from analyzer.model import GPU_SCHEMA, conform

    return conform(pl.DataFrame(ops, schema=["rank", "stream", "start_ns", "end_ns", "name", "kind"], orient="row"),
                   GPU_SCHEMA)


def _comm_rows(rows: list[tuple]) -> pl.DataFrame:
    """(rank, stream, start, end, name, instance, wait, transfer) -> waits.per_row's shape, waits given by hand."""
    df = pl.DataFrame(rows, schema=["rank", "stream", "start_ns", "end_ns", "name", "instance", "wait_ns",
                                    "transfer_ns"], orient="row")
    # the last arriver, as per_row names it: the row with no wait
    last = pl.col("rank").sort_by("wait_ns", "rank").first().over("instance")
    return df.with_columns(pl.col("rank").cast(pl.Int32), (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
                           pl.lit("all_reduce").alias("op"), pl.lit("0").alias("pg"), pl.lit(1 << 20).alias("in_bytes"),
                           pl.lit(1 << 20).alias("out_bytes"), pl.lit(2).alias("group_size"), pl.lit(2).alias("n_ranks"),
                           last.cast(pl.Int32).alias("last_rank"), last.cast(pl.Int32).alias("inst_last"))


def _steps(windows: list[tuple[int, int, int, int]]) -> pl.DataFrame:
    from analyzer.model import STEP_SCHEMA, conform

    return conform(pl.DataFrame(windows, schema=["rank", "step", "start_ns", "end_ns"], orient="row"), STEP_SCHEMA)


@pytest.mark.parametrize(("o0", "o1"), [(0, 0), (500, 1000)])
def test_critical_path_through_wait_tail_unmatched_comm_and_a_kernel_crossing_the_step_start(o0: int, o1: int) -> None:
    """One step, [100, 1000] on both ranks (reference clock; rank r's own clock is ``o_r`` ns ahead). Rank 0:
    X compute [0, 150] (starts before the step), C0 [200, 300] the last arriver of i0 (wait 0, transfer 60: its
    first 40 ns are still waiting). Rank 1: Y [100, 120], C1 [130, 350] (waits for rank 0, ends 50 ns after C0),
    U [360, 400] an unmatched comm kernel, Z compute [420, 900], the step's last operation.

    Backwards from Z: Z 480 compute, 20 idle (after U); U 40 transfer (unmatched: all transfer), 10 idle; at C1 the
    path jumps to C0: rank 1 keeps C1's last 50 ns (after C0 ended) as transfer; C0 40 wait, 60 transfer, 50 idle
    after X; X: 50 compute inside the step (from 100 to 150), nothing before it. The step's tail [900, 1000] is
    rank 1's idle. Rank 0: 50 + 60 + 40 + 50 = 200, rank 1: 480 + 90 + 0 + 130 = 700: the step's 900 ns."""
    from analyzer.crossrank import graph
    from analyzer.metrics import critical_path as cpm

    o, p = o1, o0
    gpu = _gpu_table([(0, 7, 0 + p, 150 + p, "X", "compute"), (0, 20, 200 + p, 300 + p, "ar", "comm"),
                      (1, 7, 100 + o, 120 + o, "Y", "compute"), (1, 20, 130 + o, 350 + o, "ar", "comm"),
                      (1, 21, 360 + o, 400 + o, "send", "comm"), (1, 7, 420 + o, 900 + o, "Z", "compute")])
    rows = _comm_rows([(0, 20, 200 + p, 300 + p, "ar", "i0", 0, 60), (1, 20, 130 + o, 350 + o, "ar", "i0", 160, 60),
                       (1, 21, 360 + o, 400 + o, "send", None, 0, None)])
    steps = _steps([(0, 1, 100 + p, 1000 + p), (1, 1, 100 + o, 1000 + o)])
    clock = graph.Clock.from_offsets({0: float(p), 1: float(o)}) if o or p else None
    g = graph.build(gpu, rows, steps, clock)
    cp = cpm.critical_path(g)
    assert cp.to_dicts() == [
        {"step": 1, "rank": 0, "compute_ns": 50.0, "exposed_transfer_ns": 60.0, "wait_ns": 40.0, "host_idle_ns": 50.0},
        {"step": 1, "rank": 1, "compute_ns": 480.0, "exposed_transfer_ns": 90.0, "wait_ns": 0.0, "host_idle_ns": 130.0}]
    assert cp.schema == CP_SCHEMA


def _cp(gpu: pl.DataFrame, rows: pl.DataFrame, steps: pl.DataFrame) -> list[dict]:
    from analyzer.crossrank import graph
    from analyzer.metrics import critical_path as cpm

    cp = cpm.critical_path(graph.build(gpu, rows, steps))
    assert cp.schema == CP_SCHEMA
    return cp.to_dicts()


NO_COMM = [(0, 0, 0, 0, "x", "i", 0, 0)]  # a row that matches no kernel (stream 0): no collective at all


def test_critical_path_of_a_single_compute_kernel_and_of_no_step() -> None:
    gpu = _gpu_table([(0, 7, 10, 60, "A", "compute")])
    rows = _comm_rows(NO_COMM)
    # the step [0, 100]: 10 ns idle before the kernel, 50 compute, 40 idle after it (the step's tail)
    assert _cp(gpu, rows, _steps([(0, 1, 0, 100)])) == [
        {"step": 1, "rank": 0, "compute_ns": 50.0, "exposed_transfer_ns": 0.0, "wait_ns": 0.0, "host_idle_ns": 50.0}]
    # no step windows (or no kernel inside one): no path, the same columns
    assert _cp(gpu, rows, _steps([])) == []
    assert _cp(gpu, rows, _steps([(0, 1, 100, 200)])) == []


def test_critical_path_stops_at_a_predecessor_that_ended_when_the_step_began() -> None:
    # step [100, 500] on both ranks; rank 0's collective [0, 100] ends exactly at the step's start (its last arriver
    # is rank 1's [50, 100]), then P computes [100, 500]: the path is P alone, rank 1 is not on it
    gpu = _gpu_table([(0, 20, 0, 100, "ar", "comm"), (0, 7, 100, 500, "P", "compute"),
                      (1, 20, 50, 100, "ar", "comm"), (1, 7, 100, 300, "Q", "compute")])
    rows = _comm_rows([(0, 20, 0, 100, "ar", "i0", 50, 50), (1, 20, 50, 100, "ar", "i0", 0, 50)])
    assert _cp(gpu, rows, _steps([(0, 1, 100, 500), (1, 1, 100, 500)])) == [
        {"step": 1, "rank": 0, "compute_ns": 400.0, "exposed_transfer_ns": 0.0, "wait_ns": 0.0, "host_idle_ns": 0.0}]


def test_critical_path_jump_to_a_last_arriver_whose_transfer_starts_after_the_waiter_ended() -> None:
    # step [0, 400]. Rank 0: A [0, 100], C0 [100, 200] (waits), D [200, 400]. Rank 1: B [0, 150], C1 [150, 300], the
    # last arriver, its transfer the last 100 ns. The path: D 200 compute; jump at C0 (ends 200) to C1, counted up
    # to 200 only: [150, 200] is before C1's transfer, so 50 wait and no transfer; then B 150 compute.
    gpu = _gpu_table([(0, 7, 0, 100, "A", "compute"), (0, 20, 100, 200, "ar", "comm"), (0, 7, 200, 400, "D", "compute"),
                      (1, 7, 0, 150, "B", "compute"), (1, 20, 150, 300, "ar", "comm")])
    rows = _comm_rows([(0, 20, 100, 200, "ar", "i0", 50, 50), (1, 20, 150, 300, "ar", "i0", 0, 100)])
    assert _cp(gpu, rows, _steps([(0, 1, 0, 400), (1, 1, 0, 400)])) == [
        {"step": 1, "rank": 0, "compute_ns": 200.0, "exposed_transfer_ns": 0.0, "wait_ns": 0.0, "host_idle_ns": 0.0},
        {"step": 1, "rank": 1, "compute_ns": 150.0, "exposed_transfer_ns": 0.0, "wait_ns": 50.0, "host_idle_ns": 0.0}]


def test_critical_path_rows_are_ordered_by_step_then_rank(tmp_path) -> None:
    from sample_traces.generate import Scenario, build, write_kineto
    from tests.helpers import run

    write_kineto(build(Scenario(ranks=8, tp=2, steps=4, late_ranks={3: (500_000, "host")}, seed=3)), tmp_path)
    cp = run(tmp_path).critical_path
    keys = cp.select("step", "rank").rows()
    assert len(set(keys)) == len(keys) > 4 and len({r for _, r in keys}) > 1
    assert keys == sorted(keys)


# ---------------------------------------------------------------- pipeline.py


def _p2p(rows: list[tuple]) -> pl.DataFrame:
    """(rank, op, start, end, instance, transfer, wait, last_rank) -> matched p2p rows (waits.per_row's shape)."""
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "op": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                      "instance": pl.String, "transfer_ns": pl.Int64, "wait_ns": pl.Int64,
                                      "last_rank": pl.Int32}, orient="row").with_columns(
        pl.lit("p2p_pair").alias("match_rule"))


# rank 0 (stage 0) sends to rank 1 (stage 1); (rank, kind, start, end) on the reference clock. Step 1 [0, 1000] has no
# transfer: rank 0 computes [100, 600], rank 1 [0, 100] and [300, 400]. Step 2 [1000, 2000]: rank 0 F [1000, 1200],
# send [1200, 1300] (transfer 100), F2 [1300, 1500], send [1500, 1600] (transfer 100); rank 1 Pre [1000, 1050]
# (before its first recv), recv [1100, 1300] (100 waiting, then the transfer), B [1300, 1500], recv [1500, 1600],
# B2 [1600, 1900].
PIPE_KERNELS = [(0, "compute", 100, 600), (1, "compute", 0, 100), (1, "compute", 300, 400),
                (0, "compute", 1000, 1200), (0, "comm", 1200, 1300), (0, "compute", 1300, 1500), (0, "comm", 1500, 1600),
                (1, "compute", 1000, 1050), (1, "comm", 1100, 1300), (1, "compute", 1300, 1500), (1, "comm", 1500, 1600),
                (1, "compute", 1600, 1900),
                # step 3 (its own test): the last stage computes nothing, both ranks copy / compute with gaps
                (0, "compute", 2000, 2100), (0, "memcpy", 2150, 2200), (1, "memcpy", 2000, 2050), (1, "memset", 2150, 2200)]


def _pipeline_case(d: int, windows: list[tuple[int, int, int, int]], offset_ranks: tuple[int, ...] = (0, 1),
                   extra: tuple[tuple[int, str, int, int], ...] = ()) -> dict:
    """PIPE_KERNELS with rank 1's clock ``d`` ns ahead; ``windows``: (rank, step, start, end) on the reference clock;
    offsets listed for ``offset_ranks`` only (a rank left out has none: its clock is the reference); ``extra``:
    unmatched collectives (rank, op, start, end) on rank 0, kernels without a match rule."""
    from analyzer.crossrank.graph import Clock
    from analyzer.metrics import pipeline

    def at(r: int, t: int) -> int:
        return t + (d if r == 1 else 0)

    kernels = [*PIPE_KERNELS, *((r, "comm", s, e) for r, _, s, e in extra)]
    gpu = pl.DataFrame([(r, k, at(r, s), at(r, e)) for r, k, s, e in kernels],
                       schema={"rank": pl.Int32, "kind": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")
    # rows in no particular order (p2 first)
    rows = pl.concat([
        _p2p([(0, "send", 1500, 1600, "p2", 100, 0, 0), (1, "recv", at(1, 1500), at(1, 1600), "p2", 100, 0, 0),
              (0, "send", 1200, 1300, "p1", 100, 0, 0), (1, "recv", at(1, 1100), at(1, 1300), "p1", 100, 100, 0)]),
        _p2p([(r, op, s, e, None, None, None, None) for r, op, s, e in extra]).with_columns(
            pl.lit(None, pl.String).alias("match_rule"))])
    win = pl.DataFrame([(r, st, at(r, s), at(r, e)) for r, st, s, e in windows],
                       schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")
    offsets = Clock.from_offsets({r: 0.0 if r == 0 else float(d) for r in offset_ranks})
    p = pipeline.analyze(rows, gpu, win, offsets)
    assert p is not None
    return p


@pytest.mark.parametrize(("d", "offset_ranks"), [(0, (0, 1)), (10_000, (0, 1)), (10_000, (1,))])
def test_pipeline_two_stage_bubbles_by_phase_with_a_step_without_transfers(d: int, offset_ranks: tuple[int, ...]) -> None:
    """Windows from each rank's first to its last kernel: rank 0 [100, 1000], [1000, 1600]; rank 1 [0, 1000],
    [1000, 1900]. Step 1: the last stage has no recv, so it is full from its first compute (0) to its last compute's
    end (400): rank 0 (window from 100) cool-down [400, 1000] 400 idle; rank 1 steady [0, 400] 200 idle, cool-down 600.
    Step 2: full from B (the last stage's first compute after its first recv ended, 1300) to 1900: rank 0 warm-up
    [1000, 1300] and steady [1300, 1600] all useful; rank 1 warm-up 300 - 50 - 100 = 150 idle, steady none."""
    p = _pipeline_case(d, [(1, 2, 1000, 1900), (0, 2, 1000, 1600), (1, 1, 0, 1000), (0, 1, 100, 1000)], offset_ranks)
    assert (p["stage_source"], p["steps"], p["chains"], p["bottleneck_stage"]) == ("p2p", 2, 1, 0)
    per = 2  # steps: the stage table holds ns per rank and step (ms only at the edge)
    want = [
        {"stage": 0, "ranks": [0], "bubble_ns": 400 / per, "bubble_pct": 100 * 400 / 1500, "warmup_bubble_ns": 0.0,
         "steady_bubble_ns": 0.0, "cooldown_bubble_ns": 400 / per, "recv_wait_ns": 0.0, "step_ns": 1500 / per,
         "compute_ns": 900 / per, "caused_wait_ns": 100 / per},
        {"stage": 1, "ranks": [1], "bubble_ns": 950 / per, "bubble_pct": 50.0, "warmup_bubble_ns": 150 / per,
         "steady_bubble_ns": 200 / per, "cooldown_bubble_ns": 600 / per, "recv_wait_ns": 100 / per, "step_ns": 1900 / per,
         "compute_ns": 750 / per, "caused_wait_ns": 0.0}]
    got = p["stages"].to_dicts()
    assert [list(g) for g in got] == [list(w) for w in want]
    for g, w in zip(got, want, strict=True):
        assert g == {k: pytest.approx(v, abs=1e-12) if isinstance(v, float) else v for k, v in w.items()}
    per = {(r["rank"], r["step"]): (r["warmup_bubble_ns"], r["steady_bubble_ns"], r["cooldown_bubble_ns"])
           for r in p["rank_steps"].to_dicts()}
    assert per == {(0, 1): (0, 0, 400), (1, 1): (0, 200, 600), (0, 2): (0, 0, 0), (1, 2): (150, 0, 0)}
    assert p["rank_steps"].columns == ["rank", "stage", "chain", "step", "start_ns", "end_ns", "bubble_ns",
                                       "warmup_bubble_ns", "steady_bubble_ns", "cooldown_bubble_ns"]
    assert p["rank_steps"].select("rank", "stage", "chain", "step", "end_ns", "bubble_ns").rows() == [
        (0, 0, 0, 1, 1000, 400), (0, 0, 0, 2, 1600, 0), (1, 1, 0, 1, d + 1000, 800), (1, 1, 0, 2, d + 1900, 150)]
    # the matched transfers, by rank and start, on each rank's own clock
    assert p["transfers"].rows() == [(0, "send", 1200, 1300, 100, "p1"), (0, "send", 1500, 1600, 100, "p2"),
                                     (1, "recv", d + 1100, d + 1300, 100, "p1"), (1, "recv", d + 1500, d + 1600, 100, "p2")]
    assert p["transfers"].columns == ["rank", "op", "start_ns", "end_ns", "transfer_ns", "instance"]


def test_pipeline_bubble_counts_idle_at_the_window_edges() -> None:
    # the same kernels, windows [0, 1000] and [1000, 2000] on both ranks: bubble = window - useful work
    p = _pipeline_case(0, [(r, s, 1000 * (s - 1), 1000 * s) for r in (0, 1) for s in (1, 2)])
    bubble = {(r["rank"], r["step"]): r["bubble_ns"] for r in p["rank_steps"].to_dicts()}
    # useful: rank 0 500 (step 1), 200 + 100 + 200 + 100 (step 2); rank 1 200, 50 + 100 + 200 + 100 + 300
    assert bubble == {(0, 1): 500, (0, 2): 400, (1, 1): 800, (1, 2): 250}


def _pairs(edges: list[tuple[int, int]]) -> pl.DataFrame:
    """Matched send/recv pairs: (sender, receiver), one instance each, in time order."""
    rows = []
    for i, (a, b) in enumerate(edges):
        rows += [(a, b, "send", 100 * i), (b, a, "recv", 100 * i)]
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "_peer": pl.Int32, "op": pl.String, "start_ns": pl.Int64},
                        orient="row")


def _stage_map(got) -> dict[int, tuple[int, int]]:
    assert got is not None
    df, _ = got
    assert df.schema["rank"] == pl.Int32 and df.schema["stage"] == pl.Int32 and df.schema["chain"] == pl.Int32
    assert df["rank"].n_unique() == df.height  # one stage and one chain per rank
    return {r["rank"]: (r["stage"], r["chain"]) for r in df.to_dicts()}


def test_pipeline_stages_from_the_layout_chain_through_peers_down_to_stage_zero() -> None:
    from analyzer.metrics import pipeline

    # layout stage = rank // 2: chains 0-2-4 and 1-3-5
    got = pipeline.stages(_pairs([(0, 2), (1, 3), (2, 4), (3, 5)]), pl.col("rank") // 2)
    assert got is not None and got[1] == "layout"
    assert _stage_map(got) == {0: (0, 0), 2: (1, 0), 4: (2, 0), 1: (0, 1), 3: (1, 1), 5: (2, 1)}
    # ranks 8 and 9 (stage 4) talk only to each other: each is its own chain
    got = pipeline.stages(_pairs([(0, 2), (1, 3), (2, 4), (3, 5), (8, 9)]), pl.col("rank") // 2)
    assert _stage_map(got) == {0: (0, 0), 2: (1, 0), 4: (2, 0), 1: (0, 1), 3: (1, 1), 5: (2, 1), 8: (4, 8), 9: (4, 9)}
    # send/recv between ranks of one stage (a context-parallel ring: 0-1 and 2-3) and a stage-1 rank fed by both
    # stage-0 ranks: still one stage and one chain per rank, a stage-0 rank its own chain
    got = _stage_map(pipeline.stages(_pairs([(0, 1), (1, 0), (2, 3), (3, 2), (0, 2), (1, 3), (1, 2)]),
                                     pl.col("rank") // 2))
    assert got[0] == (0, 0) and got[1] == (0, 1) and got[3] == (1, 1) and got[2] in ((1, 0), (1, 1))


def test_pipeline_stages_from_p2p_topology_edges() -> None:
    from analyzer.metrics import pipeline

    # one chain holding every rank (pp only), and a pipeline of two stages
    assert _stage_map(pipeline.stages(_pairs([(0, 1), (1, 2)]), None)) == {0: (0, 0), 1: (1, 0), 2: (2, 0)}
    got = pipeline.stages(_pairs([(5, 6)]), None)
    assert got is not None and got[1] == "p2p" and _stage_map(got) == {5: (0, 5), 6: (1, 5)}
    # two chains starting at 0 and 1 meet at rank 2: it gets one stage and one chain
    both = _stage_map(pipeline.stages(_pairs([(0, 2), (1, 2)]), None))
    assert both[0] == (0, 0) and both[1] == (0, 1) and both[2] in ((1, 0), (1, 1))
    # no end rank that starts with a send: no chain
    assert pipeline.stages(_pairs([(0, 1)]).with_columns(pl.lit("recv").alias("op")), None) is None


def test_pipeline_bottleneck_needs_two_stages_and_a_margin() -> None:
    from analyzer.metrics.pipeline import bottleneck

    def table(ns: list[float]) -> pl.DataFrame:
        return pl.DataFrame({"stage": list(range(len(ns))), "compute_ns": ns})

    assert bottleneck(table([5.0])) is None
    assert bottleneck(table([1.0, 3.0])) == 1
    assert bottleneck(table([1.0, 3.0, 2.0])) == 1
    # exactly the margin above the second is not above it: 3 = 2 x (1 + 0.5)
    assert bottleneck(table([3.0, 2.0]), margin=0.5) is None
    assert bottleneck(table([3.0, 2.0]), margin=0.25) == 0


def test_pipeline_needs_step_windows() -> None:
    p = _pipeline_case(0, [(0, 1, 100, 1000), (1, 1, 0, 1000)])
    assert p["steps"] == 1
    from analyzer.metrics import pipeline

    empty = pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    rows = _p2p([(0, "send", 1200, 1300, "p1", 100, 0, 0), (1, "recv", 1100, 1300, "p1", 100, 100, 0)])
    gpu = pl.DataFrame({"rank": [0, 1], "kind": ["comm", "comm"], "start_ns": [1200, 1100], "end_ns": [1300, 1300]},
                       schema={"rank": pl.Int32, "kind": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64})
    from analyzer.crossrank.graph import Clock

    assert pipeline.analyze(rows, gpu, empty, Clock.from_offsets({0: 0.0, 1: 0.0})) is None


def test_pipeline_step_where_the_last_stage_computes_nothing_is_all_steady() -> None:
    # step 3 alone: no compute on the last stage, so no phase boundaries: the whole window is steady state.
    # rank 0 [2000, 2200]: compute 100 + memcpy 50, 50 idle; rank 1: memcpy 50 + memset 50, 100 idle
    p = _pipeline_case(10_000, [(0, 3, 2000, 2200), (1, 3, 2000, 2200)])
    per = {(r["rank"], r["step"]): (r["warmup_bubble_ns"], r["steady_bubble_ns"], r["cooldown_bubble_ns"])
           for r in p["rank_steps"].to_dicts()}
    assert per == {(0, 3): (0, 50, 0), (1, 3): (0, 100, 0)}
    assert p["stages"].select("stage", "compute_ns").rows() == [(0, 100.0), (1, 0.0)]


def test_pipeline_an_unmatched_collective_is_useful_work() -> None:
    # rank 0 also runs a collective [600, 700] that matched nothing: "collectives" are useful work, so rank 0's
    # step-1 cool-down [400, 1000] holds 300 ns of bubble (A until 600, the collective until 700), not 400
    p = _pipeline_case(0, [(0, 1, 100, 1000), (1, 1, 0, 1000)], extra=((0, "all_reduce", 600, 700),))
    assert p["rank_steps"].filter(pl.col("rank") == 0)["cooldown_bubble_ns"].to_list() == [300]


def test_critical_path_last_arriver_with_no_transfer_is_all_waiting() -> None:
    # step [0, 400] on both ranks. Rank 0: A [0, 100], C0 [100, 200], D [200, 400]; rank 1: C1 [100, 200]. Both
    # kernels of i0 are given wait 0 and transfer 0 (the tie goes to the lower rank: C0 is the last arriver). A
    # kernel's last `transfer` ns are transfer, what comes before them waiting: with transfer 0 all of C0's 100 ns
    # are wait, none is exposed transfer. The path: D 200 compute, C0 100 wait, A 100 compute; rank 1 not on it.
    gpu = _gpu_table([(0, 7, 0, 100, "A", "compute"), (0, 20, 100, 200, "ar", "comm"), (0, 7, 200, 400, "D", "compute"),
                      (1, 20, 100, 200, "ar", "comm")])
    rows = _comm_rows([(0, 20, 100, 200, "ar", "i0", 0, 0), (1, 20, 100, 200, "ar", "i0", 0, 0)])
    assert _cp(gpu, rows, _steps([(0, 1, 0, 400), (1, 1, 0, 400)])) == [
        {"step": 1, "rank": 0, "compute_ns": 300.0, "exposed_transfer_ns": 0.0, "wait_ns": 100.0, "host_idle_ns": 0.0}]


def _bounds_inputs(recvs: list[tuple[int, int]], computes: list[tuple[int, int, int]],
                   windows: list[tuple[int, int, int, int, int, int, float]]) -> tuple[pl.DataFrame, ...]:
    """recvs (rank, end), computes (rank, start, end) on each rank's own clock; windows (rank, stage, chain, step,
    start, end, off_ns) -> _phase_bounds' pairs, gpu, win and clock (each rank's off_ns)."""
    from analyzer.crossrank.graph import Clock

    pairs = pl.DataFrame([(r, "recv", e) for r, e in recvs], schema={"rank": pl.Int32, "op": pl.String,
                                                                     "end_ns": pl.Int64}, orient="row")
    gpu = pl.DataFrame([(r, "compute", s, e) for r, s, e in computes],
                       schema={"rank": pl.Int32, "kind": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64},
                       orient="row")
    win = pl.DataFrame(windows, schema={"rank": pl.Int32, "stage": pl.Int32, "chain": pl.Int32, "step": pl.Int64,
                                        "start_ns": pl.Int64, "end_ns": pl.Int64, "off_ns": pl.Float64}, orient="row")
    return pairs, gpu, win.drop("off_ns"), Clock.from_offsets(dict(win.select("rank", "off_ns").iter_rows()))


def _bounds(*args: tuple) -> dict[tuple[int, int], tuple]:
    from analyzer.metrics import pipeline

    out = pipeline._phase_bounds(*_bounds_inputs(*args))
    return {(r["chain"], r["step"]): (r["full_start"], r["full_end"]) for r in out.to_dicts()}


def test_pipeline_phase_bounds_of_two_chains_whose_last_stages_have_offset_clocks() -> None:
    # chains 0 (0 -> 1) and 2 (2 -> 3); the last stages are ranks 1 and 3, rank 3's clock 500 ns ahead. Rank 1's
    # window [0, 1000]: A [100, 200] before its recv (ends 600), B [700, 900] after it: full from 700 to 900.
    # Rank 3's window [500, 1500] (own clock): C [800, 900] before its recv (ends 1100), E [1200, 1300] after it:
    # full from 1200 to 1300 on its clock, 700 to 800 on the reference clock. Rank 1's recv (600) lies inside
    # rank 3's window too: it must not count for chain 2 (nor leave chain 0 without a first recv).
    got = _bounds([(1, 600), (3, 1100)], [(1, 100, 200), (1, 700, 900), (3, 800, 900), (3, 1200, 1300)],
                  [(0, 0, 0, 1, 0, 1000, 0.0), (1, 1, 0, 1, 0, 1000, 0.0),
                   (2, 0, 2, 1, 500, 1500, 500.0), (3, 1, 2, 1, 500, 1500, 500.0)])
    assert got == {(0, 1): (700.0, 900.0), (2, 1): (700.0, 800.0)}


def test_pipeline_phase_bounds_at_the_window_end() -> None:
    # rank 1 (last stage) windows: step 1 [0, 1000], step 2 [1200, 2000]. Step 1: A [100, 200], then its first recv
    # ends exactly at the window's end (1000): that recv is the step's, and no compute starts after it inside the
    # step, so the pipeline never fills (full start unknown); the compute K [1000, 1100] starts when step 1 has
    # ended (and before step 2 began): it is in neither, so step 1 is full until A's end (200). Step 2: its recv
    # ends 1300, G [1400, 1500]: full from 1400 to 1500.
    got = _bounds([(1, 1000), (1, 1300)], [(1, 100, 200), (1, 1000, 1100), (1, 1400, 1500)],
                  [(0, 0, 0, 1, 0, 1000, 0.0), (1, 1, 0, 1, 0, 1000, 0.0),
                   (0, 0, 0, 2, 1200, 2000, 0.0), (1, 1, 0, 2, 1200, 2000, 0.0)])
    assert got == {(0, 1): (None, 200.0), (0, 2): (1400.0, 1500.0)}


def _small_pipeline(windows: dict[int, tuple[int, int]], offset_ranks: tuple[int, ...]) -> dict:
    """Rank 0 (stage 0): compute [0, 100], send [100, 200] (all transfer), compute D [350, 380]; rank 1 (stage 1):
    recv [100, 200] (all transfer), compute B [300, 600]. One step; ``windows``: rank -> (start, end); offsets 0,
    listed for ``offset_ranks`` only (the others have none: their clock is the reference)."""
    from analyzer.metrics import pipeline

    gpu = pl.DataFrame([(0, "compute", 0, 100), (0, "comm", 100, 200), (0, "compute", 350, 380),
                        (1, "comm", 100, 200), (1, "compute", 300, 600)],
                       schema={"rank": pl.Int32, "kind": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64},
                       orient="row")
    rows = _p2p([(0, "send", 100, 200, "p", 100, 0, 0), (1, "recv", 100, 200, "p", 100, 0, 0)])
    win = pl.DataFrame([(r, 1, s, e) for r, (s, e) in windows.items()],
                       schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
                       orient="row")
    from analyzer.crossrank.graph import Clock

    p = pipeline.analyze(rows, gpu, win, Clock.from_offsets({r: 0.0 for r in offset_ranks}))
    assert p is not None
    return {r["rank"]: (r["warmup_bubble_ns"], r["steady_bubble_ns"], r["cooldown_bubble_ns"])
            for r in p["rank_steps"].to_dicts()}


def test_pipeline_phases_of_a_rank_without_offset_and_of_a_window_starting_after_the_warmup() -> None:
    # the last stage (rank 1) is full from B's start (its first compute after its first recv ended at 200) to B's
    # end: [300, 600]. Both windows [0, 1000], rank 1 missing from the offsets (its clock is the reference):
    # rank 0 warm-up [0, 300] 100 idle (useful [0, 200]), steady [300, 600] 270 (D's 30 useful), cool-down 400;
    # rank 1 warm-up [0, 300] 200 idle (the recv [100, 200] useful), steady 0, cool-down [600, 1000] 400
    assert _small_pipeline({0: (0, 1000), 1: (0, 1000)}, (0,)) == {0: (100, 270, 400), 1: (200, 0, 400)}
    # rank 0's window starts at 350, after the warm-up ended (300): its warm-up is empty, steady [350, 600] 220
    # idle (D's 30 useful), cool-down 400
    assert _small_pipeline({0: (350, 1000), 1: (0, 1000)}, (0, 1)) == {0: (0, 220, 400), 1: (200, 0, 400)}
