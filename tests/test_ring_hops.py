"""A ring's hop (ring attention's key/value exchange): batched SendRecv kernels that send to the next rank
and receive from the previous one. Each kernel waits only for its two peers, and an eager send finishes
without its receiver, so the shortest kernel is not the last arriver's. Hand-built rings with exact truth:
the batch's peers from its records, each kernel's gate, wait and transfer, blame and the graph's edges."""

from __future__ import annotations

import polars as pl
import pytest

from analyzer.crossrank import graph, match
from analyzer.crossrank.members import members
from analyzer.ingest import collectives
from analyzer.metrics import blame, waits
from analyzer.model import COLLECTIVE_SCHEMA, COMM_CALL_SCHEMA, CPU_SCHEMA, GPU_SCHEMA, STEP_SCHEMA, conform

T = 1000  # transfer of every hop (ns)


def _ring_rows(hops: list[dict[int, tuple[int, int]]], n: int = 3) -> pl.DataFrame:
    """hops[k][rank] = (start, end) of that rank's kernel in hop k; rank r sends to r+1 and receives from r-1."""
    rows = [(r, 20, s, e, "ncclDevKernel_SendRecv", f"x|pg5|s1|k{k}", (r + 1) % n, (r - 1) % n)
            for k, hop in enumerate(hops) for r, (s, e) in hop.items()]
    df = pl.DataFrame(rows, schema=["rank", "stream", "start_ns", "end_ns", "name", "instance", "send_peer",
                                    "recv_peer"], orient="row")
    df = df.with_columns(pl.col("rank", "send_peer", "recv_peer").cast(pl.Int32), pl.lit("send_recv").alias("op"),
                         pl.lit("5").alias("pg"), pl.lit(",".join(map(str, range(n)))).alias("group_ranks"),
                         pl.lit(n).alias("group_size"), pl.lit("exchange").alias("match_rule"),
                         pl.lit(1).alias("step"), pl.lit(None, pl.Int64).alias("in_bytes"),
                         pl.lit(None, pl.Int64).alias("out_bytes"), pl.lit(n).alias("n_ranks"))
    return waits.per_row(df, df["start_ns"], df["end_ns"])  # one host: the aligned clock is each rank's own


def _late_rank_two() -> pl.DataFrame:
    # hop 0: rank 2 arrives 10 us late. Rank 0 (receives from 2) waits for it; rank 1 (sends to 2 eagerly,
    # receives from 0 at once) finishes in the transfer time: the shortest kernel, though not the last.
    # hop 1: each starts when its hop 0 ended; rank 2 computes 500 ns more first. Rank 1 now waits for
    # rank 2's send (the later of its peers), rank 0 for 500 ns of rank 2's late start.
    return _ring_rows([
        {0: (0, 10_000 + T), 1: (0, 800), 2: (10_000, 10_000 + T)},
        {0: (11_000, 12_500), 1: (800, 12_500), 2: (11_500, 12_500)},
    ])


def test_each_kernel_waits_for_the_later_of_its_peers_not_for_the_shortest_kernel() -> None:
    rows = _late_rank_two().sort("instance", "rank")
    got = {(int(i[-1]), r): (g, w, x) for i, r, g, w, x in
           rows.select("instance", "rank", "last_rank", "wait_ns", "transfer_ns").iter_rows()}
    assert got == {
        # rank 1's kernel ended before rank 2 started: it waited for nobody
        (0, 0): (2, 10_000, T), (0, 1): (1, 0, 800), (0, 2): (2, 0, T),
        # rank 1: from its start at 800 until rank 2's at 11500; rank 0: 500 ns, the rest of its 1.5 us moved data
        (1, 0): (2, 500, 1000), (1, 1): (2, 10_700, T), (1, 2): (2, 0, T),
    }
    # wait + transfer is each kernel's duration
    assert (rows["wait_ns"] + rows["transfer_ns"] == rows["end_ns"] - rows["start_ns"]).all()
    assert set(rows["inst_last"].to_list()) == {2}
    # a collective's rule (the shortest kernel) would have called rank 1 last in hop 0
    hop0 = rows.filter(pl.col("instance").str.ends_with("k0"))
    assert hop0.sort(pl.col("end_ns") - pl.col("start_ns"))["rank"][0] == 1


def test_all_the_rings_wait_is_rooted_at_the_late_rank() -> None:
    rows = _late_rank_two()
    b = blame.root_cause(members(rows), [0, 1, 2])
    root = dict(b.ranks.select("rank", "root_caused_wait_ns").iter_rows())
    # of rank 1's 10.7 us in hop 1, 200 ns are rank 2's longer transfer in hop 0 (1000 against rank 1's 800):
    # slower data movement is no rank's fault
    assert root == {0: 0.0, 1: 0.0, 2: pytest.approx(10_000 + 10_700 - 200 + 500)}
    assert b.transfer_caused_ns == pytest.approx(200)
    table = waits.rank_table(rows, [0, 1, 2])
    caused = dict(table.select("rank", "caused_wait_ns").iter_rows())
    assert caused == {0: 0, 1: 0, 2: 21_200}


def test_a_hop_with_two_late_ranks_splits_its_wait_between_them() -> None:
    # a ring of 5: rank 3 starts 5 us late, rank 4 9 us. Rank 0 (peers 1 and 4) and rank 3 (peers 4 and 2)
    # wait for rank 4; rank 2 (peers 3 and 1) for rank 3; rank 1's peers were both there at once
    rows = _ring_rows([{0: (0, 10_000), 1: (0, T), 2: (0, 6_000), 3: (5_000, 10_000), 4: (9_000, 10_000)}], n=5)
    got = {r: (g, w) for r, g, w in rows.select("rank", "last_rank", "wait_ns").iter_rows()}
    assert got == {0: (4, 9_000), 1: (1, 0), 2: (3, 5_000), 3: (4, 4_000), 4: (4, 0)}
    b = blame.root_cause(members(rows), list(range(5)))
    root = dict(b.ranks.select("rank", "root_caused_wait_ns").iter_rows())
    assert root == {0: 0.0, 1: 0.0, 2: 0.0, 3: pytest.approx(5_000), 4: pytest.approx(13_000)}
    # the hop splits by the rank waited for; each part counts that rank among its participants
    parts = dict(b.instances.select("instance", "n_ranks").iter_rows())
    assert parts == {"x|pg5|s1|k0@4": 3, "x|pg5|s1|k0@3": 2, "x|pg5|s1|k0@1": 1}
    caused = dict(waits.rank_table(rows, list(range(5))).select("rank", "caused_wait_ns").iter_rows())
    assert caused == {0: 0, 1: 0, 2: 0, 3: 5_000, 4: 13_000}


def test_a_ring_hop_is_no_release_point_so_a_carried_hold_passes_back() -> None:
    # hop 0: rank 0 waits 10 us for rank 2. hop 1: rank 0, held that long, is now the later peer of rank 1
    # (rank 2 starts right after its hop 0). Rank 1's wait in hop 1 is rank 0's carried hold: rank 2's.
    rows = _ring_rows([
        {0: (0, 10_000 + T), 1: (0, T), 2: (10_000, 10_000 + T)},
        {0: (10_000 + T, 10_000 + 2 * T), 1: (T, 10_000 + 2 * T), 2: (10_000 + T, 10_000 + 2 * T)},
    ])
    hop1 = {r: (g, w) for r, g, w in rows.filter(pl.col("instance").str.ends_with("k1"))
            .select("rank", "last_rank", "wait_ns").iter_rows()}
    assert hop1[1] == (0, 10_000)  # both its peers start at 11000: the tie goes to the lower rank
    b = blame.root_cause(members(rows), [0, 1, 2])
    root = dict(b.ranks.select("rank", "root_caused_wait_ns").iter_rows())
    assert root[0] == 0.0 and root[1] == 0.0 and root[2] == pytest.approx(20_000)


def test_a_batch_takes_the_peers_its_send_and_recv_records_name() -> None:
    # rank 5, thread 7, group 4,5,6,7: a batch (send to group rank 2, i.e. rank 6, only "Rank" recorded; recv
    # from 4), its kernel launched after both; a plain send to 7 enclosing its own launch (no batch's); a batch
    # like the first; a batch sending to two ranks (no single send peer)
    calls = conform(pl.DataFrame([
        (5, 7, 100, 110, "send", "5", "4,5,6,7", None, 2),
        (5, 7, 120, 130, "recv", "5", "4,5,6,7", 4, None),
        (5, 7, 1000, 1200, "send", "5", "4,5,6,7", 7, None),
        (5, 7, 2000, 2010, "send", "5", "4,5,6,7", 6, None),
        (5, 7, 2040, 2050, "recv", "5", "4,5,6,7", 4, None),
        (5, 7, 3000, 3010, "send", "5", "4,5,6,7", 6, None),
        (5, 7, 3020, 3030, "send", "5", "4,5,6,7", 7, None),
    ], schema=["rank", "tid", "start_ns", "end_ns", "op", "pg", "group_ranks", "peer", "peer_group_rank"],
        orient="row").with_columns(pl.lit(4).alias("group_size")), COMM_CALL_SCHEMA)
    launches = [(140, 11), (1100, 12), (2060, 13), (3060, 14)]
    cpu = conform(pl.DataFrame([(5, 7, t, t + 5, "cudaLaunchKernel", "runtime", c) for t, c in launches],
                               schema=["rank", "tid", "start_ns", "end_ns", "name", "kind", "correlation"],
                               orient="row"), CPU_SCHEMA)
    gpu = conform(pl.DataFrame([(5, 20, t + 100, t + 200, "ncclDevKernel_SendRecv", "comm", c) for t, c in launches],
                               schema=["rank", "stream", "start_ns", "end_ns", "name", "kind", "correlation"],
                               orient="row"), GPU_SCHEMA)
    table = collectives.build_table(gpu, cpu, calls, pl.DataFrame(schema=STEP_SCHEMA)).sort("start_ns")
    assert table.select("op", "peer", "send_peer", "recv_peer").rows() == [
        ("send_recv", None, 6, 4), ("send", 7, None, None), ("send_recv", None, 6, 4), ("send_recv", None, None, None)]


def test_the_graph_joins_each_kernel_to_its_own_gate() -> None:
    rows = _late_rank_two()
    gpu = conform(rows.select("rank", "stream", "start_ns", "end_ns", "name", pl.lit("comm").alias("kind")),
                  GPU_SCHEMA)
    steps = conform(pl.DataFrame({"rank": [0, 1, 2], "step": [1, 1, 1], "start_ns": [0] * 3,
                                  "end_ns": [13_000] * 3}), STEP_SCHEMA)
    g = graph.build(gpu, rows, steps)
    node = {(r, s): n for n, r, s in g.nodes.select("node", "rank", "start_ns").iter_rows()}
    coll = {(s, d) for s, d, k in g.edges.iter_rows() if k == "collective"}
    # hop 0: only rank 0 waited (for rank 2); rank 1's shortest kernel waited for nobody and gates nobody
    assert coll == {(node[(2, 10_000)], node[(0, 0)]),
                    (node[(2, 11_500)], node[(0, 11_000)]), (node[(2, 11_500)], node[(1, 800)])}


def _replayed(rows: pl.DataFrame, earlier: dict[tuple[int, int], int]) -> dict[tuple[int, int], tuple[int, int]]:
    """Replay the ring with the kernels keyed (rank, start) starting ``earlier`` ns sooner (their gap cut);
    returns each kernel's replayed (start, end)."""
    from analyzer.whatif import replay

    gpu = conform(rows.select("rank", "stream", "start_ns", "end_ns", "name", pl.lit("comm").alias("kind")),
                  GPU_SCHEMA)
    ranks = sorted(set(rows["rank"].to_list()))
    steps = conform(pl.DataFrame({"rank": ranks, "step": [1] * len(ranks), "start_ns": [0] * len(ranks),
                                  "end_ns": [20_000] * len(ranks)}), STEP_SCHEMA)
    g = graph.build(gpu, rows, steps)
    arr = replay.Arrays.of(g)
    mods = replay.Mods.zeros(1, g.n_nodes, g.instances.height)
    key = {(r, s): n for n, r, s in g.nodes.select("node", "rank", "start_ns").iter_rows()}
    for k, d in earlier.items():
        mods.dgap[0, key[k]] -= d
    sch = replay.schedule(arr)
    assert sch.forced == 0  # every group's arrivals are counted, so no end had to be forced through
    ds, de = replay.run(arr, sch, mods)
    return {k: (k[1] + round(ds[0, n]), e + round(de[0, n]))
            for k, n, e in ((k, n, e) for (k, n), e in zip(key.items(), g.nodes.sort("node")["end_ns"]))}


def test_the_replay_ends_each_ring_kernel_with_its_own_gate() -> None:
    # _late_rank_two with rank 2 on time: hop 0 ends at 1000 for ranks 0 and 2 (rank 1's eager kernel is
    # unchanged), hop 1 starts 10 us sooner on ranks 0 and 2, and every hop-1 kernel ends at rank 2's start
    # (1500) + the transfer, as a ring does: max(own start, later peer's start) + transfer
    got = _replayed(_late_rank_two(), {(2, 10_000): 10_000})
    assert got == {(0, 0): (0, 1_000), (1, 0): (0, 800), (2, 10_000): (0, 1_000),
                   (0, 11_000): (1_000, 2_500), (1, 800): (800, 2_500), (2, 11_500): (1_500, 2_500)}


def test_a_gate_that_waited_ends_with_its_own_gate_and_still_releases_its_waiters_at_its_arrival() -> None:
    # a ring of 4: rank 0 waits for rank 3's arrival (3 us), rank 3 for rank 2's (10 us); rank 1's kernel
    # needed neither. Rank 2 arriving 6 us sooner ends rank 3 at 5 us, and leaves rank 0 (which needed only
    # rank 3 there) as it was
    rows = _ring_rows([{0: (0, 4_000), 1: (0, T), 2: (10_000, 11_000), 3: (3_000, 11_000)}], n=4)
    gates = dict(rows.select("rank", "last_rank").iter_rows())
    assert gates == {0: 3, 1: 1, 2: 2, 3: 2}
    got = _replayed(rows, {(2, 10_000): 6_000})
    assert got == {(0, 0): (0, 4_000), (1, 0): (0, T), (2, 10_000): (4_000, 5_000), (3, 3_000): (3_000, 5_000)}


def test_batches_with_one_peer_pair_up_per_pair_like_a_send_and_its_recv() -> None:
    # a 3-stage pipeline (group 0,1,2): the middle stage alternates batches with its previous and next stage.
    # The k-th batch of a rank with a peer is that peer's k-th batch with it, whatever came between
    order = {0: [(1, None), (1, 1), (None, 1)], 1: [(None, 0), (2, None), (0, 0), (2, 2), (0, None)],
             2: [(None, 1), (1, 1)]}
    rows = [(r, "3", "send_recv", "0,1,2", 3, 20, 1000 * i, 1000 * i + 500, 1, True, "ncclDevKernel_SendRecv", s, v)
            for r, batches in order.items() for i, (s, v) in enumerate(batches)]
    coll = conform(pl.DataFrame(rows, schema=["rank", "pg", "op", "group_ranks", "group_size", "stream", "start_ns",
                                              "end_ns", "step", "has_meta", "name", "send_peer", "recv_peer"],
                                orient="row"), COLLECTIVE_SCHEMA)
    inst = match.instances(coll)
    got = {(r, t // 1000): (i, m) for r, t, i, m in inst.select("rank", "start_ns", "instance", "match_rule").iter_rows()}
    key = "p2p|{}<>{}|3|s1|k{}"
    assert got == {
        (0, 0): (key.format(0, 1, 0), "p2p_peer"), (0, 1): (key.format(0, 1, 1), "p2p_peer"),
        (0, 2): (key.format(0, 1, 2), "p2p_peer"),
        (1, 0): (key.format(0, 1, 0), "p2p_peer"), (1, 1): (key.format(1, 2, 0), "p2p_peer"),
        (1, 2): (key.format(0, 1, 1), "p2p_peer"), (1, 3): (key.format(1, 2, 1), "p2p_peer"),
        (1, 4): (key.format(0, 1, 2), "p2p_peer"),
        (2, 0): (key.format(1, 2, 0), "p2p_peer"), (2, 1): (key.format(1, 2, 1), "p2p_peer"),
    }


def test_an_eager_send_that_ended_before_its_receiver_started_pins_nothing_in_the_replay() -> None:
    # a pipeline's one-way pair: rank 0's send finished (0-100) long before rank 1's receive started (1000);
    # the receive found its data and took 400 ns. Rank 1 starting 500 ns sooner ends 500 ns sooner: the pair
    # is no rendezvous, though the collective rule calls the short send its last arrival
    df = pl.DataFrame([(0, 20, 0, 100, "ncclDevKernel_SendRecv", "p2p|0<>1|5|s1|k0", 1, None),
                       (1, 20, 1000, 1400, "ncclDevKernel_SendRecv", "p2p|0<>1|5|s1|k0", None, 0)],
                      schema=["rank", "stream", "start_ns", "end_ns", "name", "instance", "send_peer", "recv_peer"],
                      orient="row")
    df = df.with_columns(pl.col("rank", "send_peer", "recv_peer").cast(pl.Int32), pl.lit("send_recv").alias("op"),
                         pl.lit("5").alias("pg"), pl.lit("0,1").alias("group_ranks"), pl.lit(2).alias("group_size"),
                         pl.lit("p2p_peer").alias("match_rule"), pl.lit(1).alias("step"),
                         pl.lit(None, pl.Int64).alias("in_bytes"), pl.lit(None, pl.Int64).alias("out_bytes"),
                         pl.lit(2).alias("n_ranks"))
    rows = waits.per_row(df, df["start_ns"], df["end_ns"])
    assert rows.select("rank", "last_rank", "wait_ns").rows() == [(0, 0, 0), (1, 0, 300)]
    assert _replayed(rows, {(1, 1000): 500}) == {(0, 0): (0, 100), (1, 1000): (500, 900)}
