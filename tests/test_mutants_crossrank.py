"""Cross-rank numbers pinned on hand-built tables where mutation testing found them loose (docs/mutation.md).

``stragglers.ranking``, ``blame._flows`` (through ``root_cause``) and ``dimensions``: every expected value
below is worked out by hand from the definition in the module's docstring (binomial tails by brute force
over the binomial terms with exact fractions), never copied from the analyzer's output.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

import polars as pl
import pytest

from analyzer.crossrank.members import members
from analyzer.metrics import stragglers
from analyzer.metrics.blame import Blame

# ----------------------------------------------------------------------------- stragglers.ranking


def _tail(k: int, n: int, p: Fraction) -> float:
    """P(X >= k), X ~ Binomial(n, p), summed term by term in exact arithmetic."""
    return float(sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)))


def _per_rank(rows: list[tuple[int, int, int, int, int, int, int]]) -> pl.DataFrame:
    """What ``waits.rank_table`` hands over: (rank, wait, caused, instances, last count, steps last, steps seen)."""
    return pl.DataFrame(
        rows, orient="row",
        schema={"rank": pl.Int32, "wait_ns": pl.Int64, "caused_wait_ns": pl.Int64, "instances": pl.UInt32,
                "last_count": pl.UInt32, "steps_last": pl.UInt32, "steps_seen": pl.UInt32},
    )


def _expected(rows: dict[int, float]) -> pl.DataFrame:
    """Σ 1/group size over each rank's instances (ranks in no instance have no row, as in analysis.py)."""
    return pl.DataFrame({"rank": list(rows), "expected": list(rows.values())},
                        schema={"rank": pl.Int32, "expected": pl.Float64})


def _blame_ranks(rows: dict[int, tuple[float, float]]) -> Blame:
    ranks = pl.DataFrame({"rank": list(rows), "root_caused_wait_ns": [v[0] for v in rows.values()],
                          "propagated_wait_ns": [v[1] for v in rows.values()]},
                         schema={"rank": pl.Int32, "root_caused_wait_ns": pl.Float64, "propagated_wait_ns": pl.Float64})
    empty = pl.DataFrame()
    return Blame(instances=empty, ranks=ranks, steps=empty, flows=empty)


# rank: (wait, caused, instances, last count, steps last, steps seen); expected: Σ 1/group size
RANKS = [
    (0, 10, 300, 4, 3, 2, 3),  # groups of 4: p = 1/4, 3 of 4 > 1 expected
    (1, 20, 100, 4, 1, 0, 3),  # last exactly as often as expected (1 of 4 at p = 1/4): no test, p-value 1
    (2, 30, 120, 6, 2, 1, 2),  # p = 1.5 / 6 = 1/4, 2 of 6 > 1.5
    (3, 40, 0, 0, 0, 0, 0),  # in no instance: no expected row, no share
    (4, 50, 100, 5, 1, 1, 2),  # p = 1 / 5: 1 of 5 is exactly the expectation again
    (5, 60, 10, 1, 1, 1, 1),  # one instance of 2 ranks, last in it: 1 > 1/2
]
EXPECTED = {0: 1.0, 1: 1.0, 2: 1.5, 4: 1.0, 5: 0.5}


def test_ranking_p_values_are_binomial_tails_above_expectation_only() -> None:
    b = _blame_ranks({0: (250.0, 50.0), 1: (100.0, 0.0), 2: (100.0, 20.0), 3: (0.0, 0.0), 4: (100.0, 0.0),
                      5: (10.0, 0.0)})
    got = stragglers.ranking(_per_rank(RANKS), _expected(EXPECTED), b)
    # by root-caused wait, then caused wait (2: 120 before 1 and 4: 100), then rank (1 before 4)
    assert got["rank"].to_list() == [0, 2, 1, 4, 5, 3]
    rows = {r["rank"]: r for r in got.to_dicts()}
    want_p = {0: _tail(3, 4, Fraction(1, 4)), 1: 1.0, 2: _tail(2, 6, Fraction(1, 4)), 3: 1.0, 4: 1.0, 5: 0.5}
    assert want_p[0] == 0.05078125 and want_p[2] == 0.466064453125  # 13/256; 1 - (3/4)^6 - 6 (1/4)(3/4)^5
    for r, wait, caused, n, k, last, seen in RANKS:
        row = rows[r]
        assert row["p_value"] == pytest.approx(want_p[r], rel=1e-12), r
        assert (row["wait_ns"], row["caused_wait_ns"], row["instances"], row["last_count"]) == (wait, caused, n, k)
        assert (row["steps_last"], row["steps_seen"]) == (last, seen)
        assert row["last_arrival_pct"] == (None if n == 0 else pytest.approx(100.0 * k / n, rel=1e-12)), r
    assert [(rows[r]["root_caused_wait_ns"], rows[r]["propagated_wait_ns"]) for r in range(6)] == [
        (250.0, 50.0), (100.0, 0.0), (100.0, 20.0), (0.0, 0.0), (100.0, 0.0), (10.0, 0.0)]
    assert got.schema["rank"] == pl.Int32 and got.schema["p_value"] == pl.Float64


def test_ranking_without_blame_ranks_by_caused_wait() -> None:
    """Without root cause, a rank's caused wait is its root-caused wait and nothing is propagated."""
    got = stragglers.ranking(_per_rank(RANKS), _expected(EXPECTED))
    assert got["rank"].to_list() == [0, 2, 1, 4, 5, 3]  # 300, 120, 100 (rank 1 before 4), 100, 10, 0
    assert got["root_caused_wait_ns"].to_list() == [300.0, 120.0, 100.0, 100.0, 10.0, 0.0]
    assert got["propagated_wait_ns"].to_list() == [0.0] * 6
    assert got["p_value"].to_list()[:2] == pytest.approx([_tail(3, 4, Fraction(1, 4)), _tail(2, 6, Fraction(1, 4))],
                                                         rel=1e-12)


# ----------------------------------------------------------------------------- blame._flows


def _kernels(kernels: list[tuple[int, str, int, int, int, int, int | None]]) -> pl.DataFrame:
    """Matched comm kernels: (rank, instance, start, end, wait, last rank, step); one group per instance."""
    members = {}
    for k in kernels:
        members.setdefault(k[1], []).append(k[0])
    return pl.DataFrame(
        {"rank": [k[0] for k in kernels], "instance": [k[1] for k in kernels], "start_ns": [k[2] for k in kernels],
         "end_ns": [k[3] for k in kernels], "wait_ns": [k[4] for k in kernels], "last_rank": [k[5] for k in kernels],
         "step": [k[6] for k in kernels], "pg": ["0"] * len(kernels),
         "group_ranks": [",".join(str(r) for r in sorted(members[k[1]])) for k in kernels]},
        schema={"rank": pl.Int32, "instance": pl.Utf8, "start_ns": pl.Int64, "end_ns": pl.Int64, "wait_ns": pl.Int64,
                "last_rank": pl.Int32, "step": pl.Int64, "pg": pl.Utf8, "group_ranks": pl.Utf8},
    )


def test_a_single_collective_roots_all_its_wait_in_its_last_arriver() -> None:
    """One all-reduce of ranks 0-2: rank 2 arrives last, rank 0 waited 30 ns and rank 1 20 ns. Nothing came
    before it, so nobody was held or moved data beforehand: all 50 ns are rank 2's own."""
    from analyzer.metrics.blame import root_cause

    rows = _kernels([(0, "A", 0, 100, 30, 2, 1), (1, "A", 10, 100, 20, 2, 1), (2, "A", 30, 100, 0, 2, 1)])
    b = root_cause(members(rows), [0, 1, 2])
    roots = {r: (root, prop) for r, root, prop in b.ranks.iter_rows()}
    assert roots == {0: (0.0, 0.0), 1: (0.0, 0.0), 2: (50.0, 0.0)}
    assert b.flows.select("root", "root_rank", "instance", "step", "amount_ns").rows() == [("A", 2, "A", 1, 50.0)]
    assert b.steps.rows() == [(2, 1, 50.0)] and b.transfer_caused_ns == 0.0


def test_no_matched_kernels_root_nothing() -> None:
    from analyzer.metrics.blame import root_cause

    b = root_cause(members(_kernels([])), [0, 1])
    assert b.ranks.rows() == [(0, 0.0, 0.0), (1, 0.0, 0.0)] and b.flows.height == 0 and b.transfer_caused_ns == 0.0


# ----------------------------------------------------------------------------- dimensions


def _no_rows() -> pl.DataFrame:
    return pl.DataFrame(schema={"pg": pl.Utf8, "group_ranks": pl.Utf8, "pg_desc": pl.Utf8, "rank": pl.Int32,
                                "op": pl.Utf8, "instance": pl.Utf8, "comm": pl.Utf8})


def _meta(groups: list[tuple[str, str | None, list[int]]]) -> pl.DataFrame:
    return pl.DataFrame({"pg": [g[0] for g in groups], "desc": [g[1] for g in groups], "ranks": [g[2] for g in groups]},
                        schema={"pg": pl.Utf8, "desc": pl.Utf8, "ranks": pl.List(pl.Int32)})


def test_layout_dimension_of_every_subset_of_axes() -> None:
    """tp=2, cp=2, dp=2 in Megatron order (tp fastest): every group of ranks that share all but some axes.
    Truth by the module's rule, on coordinates computed by hand: one varying axis names it, cp and dp
    together are data parallel, all three are the world, any other pair is unknown."""
    from itertools import combinations

    from analyzer.crossrank import groups as dm

    coord = {r: (r % 2, (r // 2) % 2, r // 4) for r in range(8)}  # (tp, cp, dp)
    names = ("tp", "cp", "dp")
    want: dict[str, str] = {}
    groups = []
    for k in (1, 2, 3):
        for vary in combinations(range(3), k):
            for r in range(8):
                members = [q for q in range(8) if all(coord[q][a] == coord[r][a] for a in range(3) if a not in vary)]
                pg = "+".join(names[a] for a in vary) + f"@{min(members)}"
                if pg not in want:
                    groups.append((pg, None, members))
                    want[pg] = {1: names[vary[0]] if k == 1 else "", 2: "dp" if vary == (1, 2) else "unknown",
                                3: "world"}[k]
    g = dm.groups(_meta(groups), _no_rows(), 8, None, dm.Options(layout=dm.parse_layout("tp=2,cp=2,dp=2")))
    got = {pg: (d, s) for pg, d, s in g.select("pg", "dimension", "dimension_source").iter_rows()}
    assert got == {pg: (d, "layout") for pg, d in want.items()}
    assert len(want) == 4 + 4 + 4 + 2 + 2 + 2 + 1


def test_with_only_cp_and_dp_above_one_the_group_of_all_ranks_is_data_parallel() -> None:
    """cp=2, dp=2 (cp fastest): the all-ranks group is the cp x dp group that reduces gradients: dp, not world
    (the rule "cp and dp together are data parallel" is the more specific one); cp and dp groups alone as usual."""
    from analyzer.crossrank import groups as dm

    groups = [("all", None, [0, 1, 2, 3]), ("cp0", None, [0, 1]), ("dp0", None, [0, 2])]
    g = dm.groups(_meta(groups), _no_rows(), 4, None, dm.Options(layout=dm.parse_layout("cp=2,dp=2")))
    got = {pg: d for pg, d in g.select("pg", "dimension").iter_rows()}
    assert got == {"all": "dp", "cp0": "cp", "dp0": "dp"}


def test_a_layout_without_any_axis_above_one_calls_every_group_the_world() -> None:
    from analyzer.crossrank import groups as dm

    g = dm.groups(_meta([("0", "mesh_tp", [0])]), _no_rows(), 1, None, dm.Options(layout=dm.parse_layout("tp=1")))
    assert g.select("dimension", "dimension_source", "guess").rows() == [("world", "layout", False)]


def test_hosts_named_by_every_trace_place_ranks_on_nodes() -> None:
    """Host names from the traces (not rank // gpus_per_host): ranks 0 and 3 share a host, 1 and 2 another;
    a group is intra-node exactly when its members share one."""
    from analyzer.crossrank import groups as dm
    from analyzer.model import RankMeta

    named = tuple(RankMeta(rank=r, source="", format="kineto", host=h) for r, h in enumerate(["a", "b", "b", "a"]))
    hosts = dm.hosts(named)
    assert hosts is not None and hosts.schema == {"rank": pl.Int32, "host": pl.Utf8}
    assert hosts.rows() == [(0, "a"), (1, "b"), (2, "b"), (3, "a")]
    assert dm.hosts(named[:3] + (RankMeta(rank=3, source="", format="kineto"),)) is None  # one rank unnamed
    assert dm.hosts(()) is None
    g = dm.groups(_meta([("x", None, [0, 3]), ("y", None, [1, 2]), ("z", None, [0, 1])]), _no_rows(), 4, hosts,
                  dm.Options(gpus_per_host=8))
    assert dict(g.select("pg", "intra_node").iter_rows()) == {"x": True, "y": True, "z": False}
    # a member without a known host (rank 4 traced nowhere): inside one host is unknown, so stride 1 is not tp
    g = dm.groups(_meta([("v", None, [3, 4])]), _no_rows(), 8, hosts, dm.Options(gpus_per_host=8))
    assert g.select("dimension", "intra_node").rows() == [("dp", None)]


def test_layout_warning_names_the_axes_above_one() -> None:
    from analyzer.crossrank import groups as dm

    lay = dm.parse_layout("tp=2,dp=4")
    assert dm.layout_warnings(lay, 8) == [] and dm.layout_warnings(None, 4) == [] and dm.layout_warnings(lay, None) == []
    assert dm.layout_warnings(lay, 4) == [
        "--layout tp=2,dp=4 describes 8 ranks but the job has 4: dimensions from it are unreliable"]


def test_a_send_recv_pair_takes_the_one_layout_axis_its_ranks_differ_along() -> None:
    """tp=2, dp=2, pp=2 (tp fastest): rank r has tp r % 2, dp (r // 2) % 2, pp r // 4."""
    from analyzer.crossrank import groups as dm

    pairs = pl.DataFrame({"rank": [0, 0, 0, 0, 3, 6, 2], "_peer_rank": [1, 2, 4, 3, 7, 4, 6]})
    want = ["tp", "dp", "pp", "unknown", "pp", "dp", "pp"]
    expr = dm.pair_dimension(dm.parse_layout("tp=2,dp=2,pp=2"))
    assert pairs.select(expr.alias("d"))["d"].to_list() == want
    # without a layout: pp; a layout of size-1 axes only: nothing to tell them apart
    assert pairs.with_columns(dm.pair_dimension(None).alias("d"))["d"].to_list() == ["pp"] * 7
    assert pairs.with_columns(dm.pair_dimension(dm.parse_layout("tp=1")).alias("d"))["d"].to_list() == ["unknown"] * 7


def test_stage_is_the_pp_coordinate() -> None:
    from analyzer.crossrank import groups as dm

    ranks = pl.DataFrame({"rank": list(range(8))})
    lay = dm.parse_layout("tp=2,dp=2,pp=2")  # pp slowest: stage = r // 4
    assert ranks.select(lay.stage(pl.col("rank")).alias("s"))["s"].to_list() == [0, 0, 0, 0, 1, 1, 1, 1]
    lay = dm.parse_layout("tp=2,dp=2,pp=2", "tp-pp-dp")  # pp second: stage = (r // 2) % 2
    assert ranks.select(lay.stage(pl.col("rank")).alias("s"))["s"].to_list() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert dm.parse_layout("tp=2,dp=4").stage(pl.col("rank")) is None
    assert dm.parse_layout("tp=2,dp=4,pp=1").stage(pl.col("rank")) is None


def test_layout_parsing_edges_and_messages() -> None:
    from analyzer.crossrank import groups as dm
    from analyzer.errors import UsageError

    axes = "cp, dp, ep, fsdp, pp, tp"
    assert dm.parse_layout("tp=1,dp=2").axes == (("tp", 1), ("cp", 1), ("ep", 1), ("dp", 2), ("pp", 1))
    assert dm.parse_layout("fsdp=4", "tp-cp-ep-dp-fsdp-pp").axes == (
        ("tp", 1), ("cp", 1), ("ep", 1), ("dp", 1), ("fsdp", 4), ("pp", 1))
    for text in ("world=2", "unknown=2", "x=2", "tp=x", "tp=2=3"):
        with pytest.raises(UsageError) as e:
            dm.parse_layout(text)
        assert str(e.value) == f"--layout {text!r}: expected AXIS=N pairs such as tp=8,dp=16,pp=4 (axes: {axes})"
    for order in ("tp-world", "tp-tp"):
        with pytest.raises(UsageError) as e:
            dm.parse_layout("tp=2", order)
        assert str(e.value) == (f"--layout-order {order!r}: expected distinct axes among {axes}, fastest-varying first "
                                "(e.g. tp-cp-ep-dp-pp)")
    with pytest.raises(UsageError) as e:
        dm.parse_layout("pp=2,cp=2,tp=2", "tp-dp")
    assert str(e.value) == "--layout names pp, cp, absent from the order tp-dp"


def test_replicas_are_the_other_members_of_data_parallel_groups_smaller_than_the_job() -> None:
    from analyzer.crossrank import groups as dm

    g = pl.DataFrame(
        [("dp", 2, [0, 2]), ("dp", 2, [1, 3]), ("fsdp", 3, [4, 5, 6]), ("tp", 2, [0, 1]), ("pp", 2, [2, 6]),
         ("dp", 8, list(range(8))), ("world", 8, list(range(8))), ("dp", 1, [7])],
        schema={"dimension": pl.Utf8, "size": pl.Int64, "ranks": pl.List(pl.Int32)}, orient="row")
    assert dm.replicas(g, 8) == {0: [2], 2: [0], 1: [3], 3: [1], 4: [5, 6], 5: [4, 6], 6: [4, 5]}


def _comm_rows(rows: list[tuple[str | None, str | None, str | None, int, str, str | None]]) -> pl.DataFrame:
    """Comm kernels as ``row_dimensions`` gets them: (pg, group ranks, comm, rank, instance, match rule)."""
    return pl.DataFrame(rows, orient="row", schema={"pg": pl.Utf8, "group_ranks": pl.Utf8, "comm": pl.Utf8,
                                                    "rank": pl.Int32, "instance": pl.Utf8, "match_rule": pl.Utf8})


def test_each_kernel_takes_its_groups_dimension_by_name_and_members() -> None:
    """Groups (pg, description, members) built by hand; each kernel's expected dimension follows the module doc:
    its group's (found by name and members, or by name alone where the name denotes one group), a
    send/recv pair's own axis unless its group's layout or description names one: without a layout pp between
    pipeline stages only (crossrank/stages.py); here the tp and dp groups join ranks 0-3 into one stage, so a pair
    takes the smallest collective group holding both ranks (issue #40: no pp in a job without a pipeline)."""
    from analyzer.crossrank import groups as dm

    grp = dm.groups(_meta([
        ("5", "mesh_tp", [0, 1]), ("5", "mesh_dp_replicate", [0, 2]),  # one name, two groups (two dimensions)
        ("7", "mesh_dp_replicate", [1, 3]), ("g", None, [2, 3]),  # "g": no description, tp by geometry
        ("m", "MODEL_PARALLEL_GROUP", [0, 1, 2, 3]), ("c1", None, [0, 1]),
        ("s", None, [0, 1]), ("s", None, [2, 3]),  # one name, two groups, tp by geometry
    ]), _no_rows(), 8, None, dm.Options(gpus_per_host=2))
    rows = _comm_rows([
        ("5", "0,1", None, 0, "a", "meta"), ("5", "0,2", None, 0, "b", "meta"),  # exact: tp, dp
        ("5", None, None, 0, "c", "meta"),  # name alone is ambiguous: unknown
        ("7", None, None, 1, "d", "meta"),  # name alone: dp
        (None, None, "c1", 0, "e", "meta"),  # no process group (Nsight): its communicator's name
        ("x", "0,5", None, 5, "f", "meta"),  # a group nobody described: unknown
        ("7", "1,3", None, 1, "p", "p2p_pair"), ("7", "1,3", None, 3, "p", "p2p_pair"),  # desc says dp
        ("g", None, None, 2, "q", "p2p_pair"), ("g", None, None, 3, "q", "p2p_pair"),  # one stage: g, tp
        ("m", "0,1,2,3", None, 0, "u", "p2p_peer"), ("m", "0,1,2,3", None, 2, "u", "p2p_peer"),  # dp [0, 2]
        ("s", "0,1", None, 0, "v", "p2p_pair"), ("s", "0,1", None, 1, "v", "p2p_pair"),  # tp [0, 1]
    ])
    out = dm.row_dimensions(rows, grp, None)
    assert out.columns[:len(rows.columns)] == rows.columns and not [c for c in out.columns if c.startswith("_")]
    got = [(i, r, d, n) for i, r, d, n in out.select("instance", "rank", "dimension", "intra_node").iter_rows()]
    assert got == [("a", 0, "tp", True), ("b", 0, "dp", False), ("c", 0, "unknown", None), ("d", 1, "dp", False),
                   ("e", 0, "tp", True), ("f", 5, "unknown", None), ("p", 1, "dp", False), ("p", 3, "dp", False),
                   ("q", 2, "tp", True), ("q", 3, "tp", True), ("u", 0, "dp", False), ("u", 2, "dp", False),
                   ("v", 0, "tp", True), ("v", 1, "tp", True)]


def test_a_pair_inside_a_layout_group_of_two_axes_keeps_the_groups_dimension() -> None:
    """tp=2, cp=2, dp=2 (tp fastest): ranks 0 and 2 differ in cp only, 0 and 1 in tp only. In the dp+cp group
    {0,2,4,6} the layout says dp; a pair in a group named nowhere takes the axis its ranks differ along."""
    from analyzer.crossrank import groups as dm

    lay = dm.parse_layout("tp=2,cp=2,dp=2")
    grp = dm.groups(_meta([("dc", None, [0, 2, 4, 6]), ("z", None, [0, 1, 2, 6])]), _no_rows(), 8, None,
                    dm.Options(layout=lay))
    z = "0,1,2,6"  # differs along tp, cp and dp, but not all axes: unknown by the layout
    rows = _comm_rows([("dc", "0,2,4,6", None, 0, "a", "p2p_pair"), ("dc", "0,2,4,6", None, 2, "a", "p2p_pair"),
                       ("z", z, None, 0, "b", "p2p_pair"), ("z", z, None, 1, "b", "p2p_pair"),
                       ("z", z, None, 0, "c", "p2p_pair"), ("z", z, None, 6, "c", "p2p_pair")])
    out = dm.row_dimensions(rows, grp, lay)
    assert out["dimension"].to_list() == ["dp", "dp", "tp", "tp", "unknown", "unknown"]  # 0 vs 6: cp and dp


def test_a_pair_whose_group_is_unknown_takes_its_own_axis() -> None:
    """tp=4, pp=2 (tp fastest): ranks 0 and 4 differ in pp only. A matched send/recv pair with no group name
    and no communicator (no row of the group table) is still a pp transfer, by its ranks."""
    from analyzer.crossrank import groups as dm

    lay = dm.parse_layout("tp=4,pp=2")
    grp = dm.groups(_meta([("t0", None, [0, 1, 2, 3])]), _no_rows(), 8, None, dm.Options(layout=lay))
    rows = _comm_rows([(None, None, None, 0, "p", "p2p_pair"), (None, None, None, 4, "p", "p2p_pair"),
                       (None, None, None, 1, "q", "p2p_pair"), (None, None, None, 2, "q", "p2p_pair")])
    assert dm.row_dimensions(rows, grp, lay)["dimension"].to_list() == ["pp", "pp", "tp", "tp"]


def test_per_dimension_scenarios_need_a_name_of_one_group_and_two_dimensions() -> None:
    from analyzer.crossrank import groups as dm

    grp = pl.DataFrame({"pg": ["0", "1", "2", "3", "3", "4"], "dimension": ["world", "tp", "dp", "tp", "dp", "unknown"]})
    assert dm.pg_dimensions(grp) == {"1": "tp", "2": "dp"}
    assert dm.pg_dimensions(grp.filter(pl.col("pg") != "2")) == {}  # one dimension left: nothing to split


_KERNEL_SCHEMA = {"rank": pl.Int32, "dimension": pl.Utf8, "start_ns": pl.Int64, "end_ns": pl.Int64, "wait_ns": pl.Int64,
                  "transfer_ns": pl.Int64, "instance": pl.Utf8, "in_bytes": pl.Int64, "out_bytes": pl.Int64,
                  "op": pl.Utf8, "group_size": pl.Int64, "n_ranks": pl.Int64}
# (rank, dimension, start, end, wait, transfer, instance, in bytes, out bytes, op, group size, matched ranks)
KERNELS = [
    (0, "tp", 50, 150, 40, 60, "i1", 1000, 2000, "all_reduce", 2, 2),
    (0, "tp", 120, 220, 10, 90, "i2", 900, 900, "all_gather", 4, 2),  # overlaps the first: union < sum
    (0, "dp", 300, 400, 150, 0, "i3", 500, 500, "all_reduce", None, 2),  # waited longer than it ran
    (0, "ep", 500, 501, 1, 0, "i4", 8, 8, "all_to_all", 2, 2),  # 1 ns, all of it wait
    (0, "fsdp", 610, 690, 20, 60, "i5", 600, 0, "all_gather", None, 2),  # entirely under compute; size unknown
    (0, "pp", 800, 800, None, None, None, 64, 64, "send", None, None),  # empty, unmatched
    (0, "pp", 900, 950, None, None, None, 64, 64, "send", None, None),  # unmatched: all transfer
    (1, "tp", 60, 150, 0, 90, "i1", 3000, 100, "all_reduce", 2, 2),
    (1, "ep", 700, 702, 1, 1, "i6", 0, 4, "all_to_all", 2, 2),  # 1 ns of transfer; the payload is what it sent
]
COMPUTE = [(0, 0, 100), (0, 350, 380), (0, 600, 700), (1, 0, 50)]


def _gpu() -> pl.DataFrame:
    kern = [(k[0], k[2], k[3], "comm") for k in KERNELS] + [(r, s, e, "compute") for r, s, e in COMPUTE]
    return pl.DataFrame(kern, orient="row", schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                                    "kind": pl.Utf8}).sort("rank", "start_ns")


def test_per_dimension_split_bandwidth_and_root_caused_wait_by_hand() -> None:
    """Worked by hand from ``per_rank``'s doc and DESIGN.md's split (each kernel's exposed part x min(wait, d)/d,
    scaled to the exposed union), busbw = the instance's largest payload / transfer x the op's bus factor
    (all_reduce 2(n-1)/n, all_gather and all_to_all (n-1)/n, send 1; n the group size, else matched ranks)."""
    from analyzer.metrics import dimensions as dm

    rows = pl.DataFrame(KERNELS, orient="row", schema=_KERNEL_SCHEMA)
    flows = pl.DataFrame({"root_rank": [1, 1, 0], "instance": ["i1", "i3", "i2"], "amount_ns": [40.0, 150.0, 10.0]},
                         schema={"root_rank": pl.Int32, "instance": pl.Utf8, "amount_ns": pl.Float64})
    got = dm.per_rank(rows, _gpu(), [0, 1], flows)
    assert got.select("rank", "dimension").rows() == [(0, "tp"), (0, "ep"), (0, "dp"), (0, "fsdp"), (0, "pp"),
                                                      (1, "tp"), (1, "ep"), (1, "dp")]
    ns = {(r["rank"], r["dimension"]): r for r in got.to_dicts()}
    want = {
        # tp: union [50, 220) = 170, compute covers 50 -> exposed 120; kernel parts 50 x 0.4 + 100 x 0.1 = 30 of
        # 150, scaled to 120: 24; waits 50; busbw 3000 / 60 x 1 = 50 and 900 / 90 x 3/4 = 7.5 -> median 28.75
        (0, "tp"): (170, 120, 24, 96, 50, 10, 28.75),
        (0, "ep"): (1, 1, 1, 0, 1, 0, None),  # transfer 0: no bandwidth
        (0, "dp"): (100, 70, 70, 0, 150, 0, None),  # [350, 380) under compute; wait >= d: all of it wait
        (0, "fsdp"): (80, 0, 0, 0, 20, 0, 5.0),  # hidden: nothing exposed to split; 600 / 60 x 1/2 (2 matched)
        (0, "pp"): (50, 50, 0, 50, 0, 0, None),  # the empty kernel adds nothing; no wait known: transfer
        (1, "tp"): (90, 90, 0, 90, 0, 40, 3000 / 90),
        (1, "ep"): (2, 2, 1, 1, 1, 0, 2.0),  # half of it wait; 4 / 1 x 1/2
    }
    for key, (comm, exp, ew, et, wait, root, bw) in want.items():
        row = ns[key]
        got_ns = [row[c] for c in ("comm_ns", "exposed_comm_ns", "exposed_wait_ns", "exposed_transfer_ns",
                                   "wait_ns", "root_caused_wait_ns")]
        assert got_ns == pytest.approx([comm, exp, ew, et, wait, root], abs=1e-6), key
        assert row["busbw_gbps_p50"] == (None if bw is None else pytest.approx(bw, rel=1e-12)), key
    # rank 1 root-caused wait suffered in a dp collective it has no kernel in: a row of its own
    assert ns[(1, "dp")]["root_caused_wait_ns"] == pytest.approx(150.0) and ns[(1, "dp")]["comm_ns"] is None


def test_per_dimension_without_blame_or_kernels() -> None:
    from analyzer.metrics import dimensions as dm

    cols = ["rank", "dimension", "comm_ns", "exposed_comm_ns", "exposed_wait_ns", "exposed_transfer_ns", "wait_ns",
            "root_caused_wait_ns", "busbw_gbps_p50"]
    rows = pl.DataFrame(KERNELS, orient="row", schema=_KERNEL_SCHEMA)
    got = dm.per_rank(rows, _gpu(), [0, 1])
    assert got.columns == cols and got["root_caused_wait_ns"].to_list() == [None] * 7
    one = dm.per_rank(rows.head(1), _gpu(), [0, 1], rows.head(0).select(
        pl.col("rank").alias("root_rank"), "instance", pl.col("wait_ns").cast(pl.Float64).alias("amount_ns")))
    assert one.select("rank", "dimension", "comm_ns", "root_caused_wait_ns").rows() == [(0, "tp", 100, 0.0)]
    empty = dm.per_rank(rows.head(0), _gpu(), [0, 1])
    assert empty.height == 0 and empty.columns == cols and empty.schema["rank"] == pl.Int32


def test_groups_from_kernels_and_tables_by_geometry_in_order() -> None:
    """8 ranks, 4 GPUs per host (host = rank // 4), no layout. Each group's expected dimension follows the
    module doc's geometry rules (the whole world; only send/recv: pp between stages, here inside the one stage
    the dp and ep groups make of 0-6: dp [0, 2, 4, 6], the smallest group holding 0 and 4; only all-to-all: ep;
    stride 1 inside one host: tp; another constant stride: dp; else unknown), a description before geometry; rows
    come out largest first, then by name, then by members."""
    from analyzer.crossrank import groups as dm

    def kern(pg, ranks, members, op, comm=None):
        return [(pg, members, None, r, op, f"{pg}{op}", comm) for r in ranks]

    rows = pl.DataFrame(
        kern("p", [0, 4], "0,4", "send") + kern("p", [0, 4], "0,4", "recv")
        + kern("e", [0, 1, 2, 3], "0,1,2,3", "all_to_all") + kern("t", [0, 1], "0,1", "all_reduce")
        + kern("d", [0, 2], "0,2,4,6", "all_reduce")
        + kern("m", [5, 7], None, "all_reduce") + kern(None, [2, 3], None, "all_reduce", comm="c9"),
        orient="row", schema=_no_rows().schema)
    meta = _meta([("w", None, list(range(8))), ("u", None, [0, 1, 3]), ("cp", "mesh_cp", [1, 0]), ("solo", None, [5]),
                  ("k", None, [12, 30]), ("k", None, [1, 23]), ("k", None, [0, 31])])
    g = dm.groups(meta, rows, 8, None, dm.Options(gpus_per_host=4))
    assert g.columns == ["pg", "desc", "ranks", "size", "dimension", "dimension_source", "guess", "intra_node"]
    geo = "geometry"
    assert [(r[0], r[2], r[4], r[5], r[6], r[7]) for r in g.iter_rows()] == [
        ("w", list(range(8)), "world", geo, True, False),
        ("d", [0, 2, 4, 6], "dp", geo, True, False), ("e", [0, 1, 2, 3], "ep", geo, True, True),
        ("u", [0, 1, 3], "unknown", geo, True, True),
        ("c9", [2, 3], "tp", geo, True, True), ("cp", [0, 1], "cp", "desc", False, True),
        ("k", [0, 31], "dp", geo, True, False), ("k", [1, 23], "dp", geo, True, False),
        ("k", [12, 30], "dp", geo, True, False),
        ("m", [5, 7], "dp", geo, True, True), ("p", [0, 4], "dp", geo, True, False), ("t", [0, 1], "tp", geo, True, True),
        ("solo", [5], "unknown", geo, True, True),
    ]
    assert g["size"].to_list() == [8, 4, 4, 3] + [2] * 8 + [1]


def test_a_device_mesh_name_is_read_without_its_mesh_prefix() -> None:
    from analyzer.crossrank import groups as dm

    assert [dm.from_description(d) for d in ("mesh_world", "mesh_global", "mesh_model_parallel_group")] == [
        "world", "world", "unknown"]
