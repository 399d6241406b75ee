"""Root cause on generated hybrid jobs: wait a messenger passed on goes to the rank that delayed it.

Expected values come from the generator's exact truth (true arrival times, waits) through an
independent plain-Python oracle of the definition in ``analyzer/metrics/blame.py``.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from analyzer.crossrank.members import members
from analyzer.metrics.blame import root_cause
from analyzer.report.json import to_dict
from sample_traces.generate import Collective, Scenario, build, default_groups, write_kineto
from tests.helpers import run
from tests.oracle_blame import oracle_roots


def _analyze(sc: Scenario, folder: Path):
    wl = build(sc)
    write_kineto(wl, folder)
    return wl.truth, run(folder)


def test_messenger_passes_the_wait_back_exactly(tmp_path: Path) -> None:
    # TP {0,1},{2,3}, DP {0,2},{1,3}: rank 1 is 2 ms late; rank 0 then arrives late at DP {0,2} only
    # because it waited for rank 1: rank 2's wait there is rank 1's, passed on by rank 0
    sc = Scenario(ranks=4, tp=2, steps=3, jitter_ns=0, late_ranks={1: (2_000_000, "host")})
    truth, a = _analyze(sc, tmp_path)
    ranks = {r["rank"]: r for r in to_dict(a)["ranks"]}
    all_wait = sum(sum(i.wait_ns.values()) for i in truth.instances)
    dp02 = sum(i.wait_ns[2] for i in truth.instances if set(i.ranks) == {0, 2})
    assert dp02 > 0
    assert ranks[1]["root_caused_wait_ms"] == pytest.approx(all_wait / 1e6, abs=1e-6)
    assert ranks[0]["root_caused_wait_ms"] == pytest.approx(0.0, abs=1e-6)
    assert ranks[0]["propagated_wait_ms"] == pytest.approx(dp02 / 1e6, abs=1e-6)
    assert ranks[0]["caused_wait_ms"] == pytest.approx(dp02 / 1e6, abs=1e-6)  # the old per-instance blame
    v = a.verdict
    assert v is not None and (v.rank, v.kind) == (1, "host")


@pytest.mark.parametrize("late", [(9, 3_000_000, "host"), (22, 1_000_000, "compute")])
def test_root_cause_equals_the_oracle_with_jitter(tmp_path: Path, late: tuple[int, int, str]) -> None:
    sc = Scenario(ranks=32, tp=4, steps=4, seed=3, late_ranks={late[0]: late[1:]})
    truth, a = _analyze(sc, tmp_path)
    root, prop = oracle_roots(truth)
    got = {r["rank"]: r for r in to_dict(a)["ranks"]}
    assert root[late[0]] > 0.9 * sum(root.values())
    for r in truth.ranks:
        # 6e-7 ms: the JSON keeps 1 ns (6 decimals), so a 1 ns error in either fails
        assert got[r]["root_caused_wait_ms"] == pytest.approx(root[r] / 1e6, abs=6e-7), r
        assert got[r]["propagated_wait_ms"] == pytest.approx(prop[r] / 1e6, abs=6e-7), r
    # root-caused wait is a partition of all the wait anyone caused
    total = sum(x["root_caused_wait_ms"] for x in got.values())
    assert total == pytest.approx(sum(x["caused_wait_ms"] for x in got.values()), abs=6e-7 * len(got))


CASES = [(ranks, tp, kind, seed) for ranks, tp in ((32, 4), (64, 8)) for kind in ("host", "compute") for seed in (0, 1)]


@pytest.mark.parametrize(("ranks", "tp", "kind", "seed"), CASES)
def test_verdict_names_the_root_in_hybrid_jobs(tmp_path: Path, ranks: int, tp: int, kind: str, seed: int) -> None:
    rng = random.Random(7 * ranks + seed + (kind == "host"))
    late, delay = rng.randrange(ranks), rng.randint(1, 5) * 1_000_000
    _, a = _analyze(Scenario(ranks=ranks, tp=tp, steps=5, seed=seed, late_ranks={late: (delay, kind)}), tmp_path)
    v = a.verdict
    assert v is not None and (v.rank, v.kind) == (late, kind)
    assert [r.rank for r in a.roots] == [late]
    # the chain: its own TP group and DP group waited directly; the rest of its TP group carried it on
    direct, hop = v.chain
    dp = ranks // tp
    assert direct.via == () and direct.peers == (tp - 1) + (dp - 1)
    block = set(range(late - late % tp, late - late % tp + tp)) - {late}
    assert set(hop.via) == block and hop.groups == tp - 1 and hop.peers == (tp - 1) * (dp - 1)
    from analyzer.views.verdict import headline

    said = " ".join(headline(a))
    assert f"Rank {late} delayed {direct.peers} ranks directly (its tensor-parallel group" in said
    assert f"{hop.peers} more waited ({tp - 1} data-parallel groups" in said
    # the messengers are not blamed: the old per-instance caused wait was theirs too
    top_messenger = max(block, key=lambda r: float(a.ranks.filter(a.ranks["rank"] == r)["caused_wait_ns"][0]))
    row = a.ranks.filter(a.ranks["rank"] == top_messenger).row(0, named=True)
    assert row["caused_wait_ns"] > 0.5 * delay * (dp - 1)
    assert row["root_caused_wait_ns"] < 0.01 * row["caused_wait_ns"]


@pytest.mark.parametrize("seed", range(4))
def test_balanced_hybrid_jobs_get_no_verdict(tmp_path: Path, seed: int) -> None:
    _, a = _analyze(Scenario(ranks=32, tp=4, steps=5, seed=seed, jitter_ns=20_000), tmp_path)
    assert a.verdict is None and a.roots == ()


def test_two_independent_roots_are_both_named(tmp_path: Path) -> None:
    late = {5: (3_000_000, "host"), 18: (2_000_000, "compute")}  # different TP and DP groups
    _, a = _analyze(Scenario(ranks=32, tp=4, steps=5, seed=2, late_ranks=late), tmp_path)
    assert [(r.rank, r.kind) for r in a.roots] == [(5, "host"), (18, "compute")]


def _ring(**kw) -> Scenario:
    cols = tuple(Collective("all_reduce", 8 << 20, 80_000, after=i) for i in range(4))
    return Scenario(ranks=8, steps=5, compute_ns=(300_000, 250_000, 200_000, 150_000, 100_000), collectives=cols,
                    position_late_ranks=(1, 3, 5, 7), position_late_ns=300_000, **kw)


@pytest.mark.parametrize("seed", range(3))
def test_ring_position_lateness_is_background(tmp_path: Path, seed: int) -> None:
    _, a = _analyze(_ring(seed=seed), tmp_path)
    assert a.verdict is None
    # ... although four ranks are each last on a quarter of the instances, and cause all the wait
    rep = to_dict(a)
    last = sorted(r["rank"] for r in rep["stragglers"]["ranking"] if r["last_arrival_pct"] and r["last_arrival_pct"] > 20)
    assert last == [1, 3, 5, 7]


@pytest.mark.parametrize("seed", range(3))
def test_a_real_straggler_stands_out_of_ring_position_lateness(tmp_path: Path, seed: int) -> None:
    _, a = _analyze(_ring(seed=seed, late_ranks={6: (1_000_000, "host")}), tmp_path)
    v = a.verdict
    assert v is not None and (v.rank, v.kind) == (6, "host")
    share = v.root_caused_wait_ns / float(a.ranking["root_caused_wait_ns"].sum())
    assert share < 0.8  # the background is a large part of all wait: a fixed-share rule would be fragile here


@pytest.mark.parametrize(("k", "n", "p"), [(5, 5, 0.5), (3, 20, 0.1), (1, 4, 0.25), (7, 9, 0.3), (0, 5, 0.2)])
def test_binomial_tail_is_scipys_binomtest(k: int, n: int, p: float) -> None:
    from scipy.stats import binomtest

    from analyzer.metrics.stragglers import binom_sf

    want = binomtest(k, n, p, alternative="greater").pvalue if k > 0 else 1.0
    assert binom_sf(k, n, p) == pytest.approx(want, rel=1e-12)


def _tp_chain(late: dict[int, tuple[int, str]], seed: int = 0) -> Scenario:
    # 16 ranks, TP 4: four TP all-reduces per step (a layer's forward and backward), then the DP all-reduce;
    # a late rank holds up its TP group only in the first, then the group runs in lockstep
    pgs = default_groups(16, 4)
    tp_names = tuple(pg.name for pg in pgs[1:5])
    dp_names = tuple(pg.name for pg in pgs[5:])
    cols = tuple(Collective("all_reduce", 2 << 20, 40_000, tp_names, after=k) for k in range(4))
    cols += (Collective("all_reduce", 32 << 20, 150_000, dp_names, after=4),)
    return Scenario(ranks=16, tp=4, steps=5, seed=seed, collectives=cols, late_ranks=late,
                    compute_ns=(300_000, 250_000, 200_000, 150_000, 100_000))


@pytest.mark.parametrize(("late", "kind", "seed"), [(5, "compute", 0), (10, "host", 1), (15, "compute", 2)])
def test_lateness_carried_through_a_tp_chain_goes_back_to_its_root(tmp_path: Path, late: int, kind: str,
                                                                    seed: int) -> None:
    # the messengers were held only in the first TP all-reduce of the step, not in the one just before the
    # DP all-reduce (a rule looking one collective back blamed them, as on the real tp_dp capture)
    truth, a = _analyze(_tp_chain({late: (2_000_000, kind)}, seed), tmp_path)
    root, prop = oracle_roots(truth)
    got = {r["rank"]: r for r in to_dict(a)["ranks"]}
    for r in truth.ranks:
        assert got[r]["root_caused_wait_ms"] == pytest.approx(root[r] / 1e6, abs=1e-5), r
        assert got[r]["propagated_wait_ms"] == pytest.approx(prop[r] / 1e6, abs=1e-5), r
    assert root[late] > 0.9 * sum(root.values())
    block = set(range(late - late % 4, late - late % 4 + 4)) - {late}
    for m in block:  # each messenger arrived last at its DP all-reduce, yet roots none of that wait
        assert got[m]["caused_wait_ms"] > 1.0 and got[m]["root_caused_wait_ms"] < 0.01 * got[m]["caused_wait_ms"]
    v = a.verdict
    assert v is not None and (v.rank, v.kind) == (late, kind)


def _rows(kernels: list[tuple[str, int, int, int, int]]):
    """Hand-built matched kernels (instance, rank, start, end, wait); the last rank is the one that waited 0."""
    import polars as pl

    last = {i: r for i, r, _, _, w in kernels if w == 0}
    groups = {i: ",".join(str(r) for ii, r, *_ in kernels if ii == i) for i, *_ in kernels}
    return pl.DataFrame(
        {"rank": [k[1] for k in kernels], "instance": [k[0] for k in kernels], "start_ns": [k[2] for k in kernels],
         "end_ns": [k[3] for k in kernels], "wait_ns": [k[4] for k in kernels],
         "last_rank": [last[k[0]] for k in kernels], "step": [1] * len(kernels), "pg": ["0"] * len(kernels),
         "group_ranks": [groups[k[0]] for k in kernels]},
        schema={"rank": pl.Int32, "instance": pl.Utf8, "start_ns": pl.Int64, "end_ns": pl.Int64, "wait_ns": pl.Int64,
                "last_rank": pl.Int32, "step": pl.Int64, "pg": pl.Utf8, "group_ranks": pl.Utf8},
    )


def test_a_last_arriver_held_nowhere_passes_nothing_back() -> None:
    """B is rank 2's first collective: it was held nowhere before, so none of B's 60 ns is propagated, even
    though its peer rank 1 was released from A (where rank 1 itself waited 0). Instances of 1 ns count too."""
    rows = _rows([("A", 0, 0, 100, 50), ("A", 1, 50, 100, 0),
                  ("B", 1, 200, 300, 60), ("B", 2, 260, 300, 0),
                  ("C", 0, 400, 450, 1), ("C", 1, 401, 450, 0),
                  ("D", 0, 500, 550, 1), ("D", 2, 501, 550, 0)])
    got = {r: (root, prop) for r, root, prop in root_cause(members(rows), [0, 1, 2]).ranks.sort("rank").iter_rows()}
    # A: rank 1's own 50. B: rank 2's own 60 (held nowhere). C: rank 1 (last) was held 60 in B, rank 0 50 in A:
    # min(w = 1, 60 - 50) = 1 ns propagated, to B's root (rank 2). D: rank 2 was held 0 in B, rank 0 1 in C:
    # nothing propagated, rank 2's own 1 ns.
    assert got == {0: (0.0, 0.0), 1: (50.0, 1.0), 2: (62.0, 0.0)}


def _kernels(kernels: list[tuple[int, str, int, int, int, int, str]]) -> pl.DataFrame:
    """Hand-built matched comm kernels: (rank, instance, start, end, wait, last rank, group ranks)."""
    return pl.DataFrame(
        {"rank": [k[0] for k in kernels], "instance": [k[1] for k in kernels], "start_ns": [k[2] for k in kernels],
         "end_ns": [k[3] for k in kernels], "wait_ns": [k[4] for k in kernels], "last_rank": [k[5] for k in kernels],
         "step": [1] * len(kernels), "pg": [k[1][0] for k in kernels], "group_ranks": [k[6] for k in kernels]},
        schema_overrides={"rank": pl.Int32},
    )


@pytest.mark.parametrize(("extra", "own"), [(0, 0), (20, 20)])
def test_lateness_from_a_longer_transfer_is_nobodys_root(extra: int, own: int) -> None:
    # W0 {0,1,2} syncs everyone at 0-10; rank 0 then spends 50 ns moving data with rank 2 (X, no waits)
    # while rank 1 computes nothing; at W1 {0,1} rank 1 waits for rank 0: 50 ns of that is X's transfer,
    # the rest (``extra`` ns of rank 0's own compute after X) is rank 0's own
    w1_start0 = 80 + extra
    rows = _kernels([
        (0, "W0", 0, 10, 0, 2, "0,1,2"), (1, "W0", 0, 10, 0, 2, "0,1,2"), (2, "W0", 0, 10, 0, 2, "0,1,2"),
        (0, "X1", 20, 70, 0, 2, "0,2"), (2, "X1", 20, 70, 0, 2, "0,2"),
        (1, "W1", 30, w1_start0 + 10, w1_start0 - 30, 0, "0,1"), (0, "W1", w1_start0, w1_start0 + 10, 0, 0, "0,1"),
    ])
    b = root_cause(members(rows), [0, 1, 2])
    w1 = b.instances.filter(b.instances["instance"] == "W1").row(0, named=True)
    assert (w1["caused_ns"], w1["transfer_ns"], w1["own_ns"], w1["propagated_ns"]) == (50 + extra, 50, own, 0)
    assert b.transfer_caused_ns == 50
    roots = dict(b.ranks.select("rank", "root_caused_wait_ns").iter_rows())
    assert roots == {0: own, 1: 0, 2: 0}


def test_a_hold_since_the_last_shared_collective_is_passed_back() -> None:
    # rank 0 is held 40 ns in Y {0,2} (rank 2 late), then runs Z {0,2} in lockstep; at W1 {0,1} rank 1 waits
    # 40 ns for rank 0: the hold two collectives back (not the one just before) is rank 2's
    rows = _kernels([
        (0, "W0", 0, 10, 0, 2, "0,1,2"), (1, "W0", 0, 10, 0, 2, "0,1,2"), (2, "W0", 0, 10, 0, 2, "0,1,2"),
        (0, "Y1", 20, 70, 40, 2, "0,2"), (2, "Y1", 60, 70, 0, 2, "0,2"),
        (0, "Z1", 80, 90, 0, 2, "0,2"), (2, "Z1", 80, 90, 0, 2, "0,2"),
        (1, "W1", 60, 110, 40, 0, "0,1"), (0, "W1", 100, 110, 0, 0, "0,1"),
    ])
    b = root_cause(members(rows), [0, 1, 2])
    w1 = b.instances.filter(b.instances["instance"] == "W1").row(0, named=True)
    assert (w1["propagated_ns"], w1["own_ns"], w1["transfer_ns"], w1["parent"]) == (40, 0, 0, "Y1")
    roots = dict(b.ranks.select("rank", "root_caused_wait_ns").iter_rows())
    assert roots == {0: 0, 1: 0, 2: 80}  # Y's own 40 and W1's 40 passed back
    assert b.transfer_caused_ns == 0


def test_kernels_without_member_lists_are_shared_by_their_participants(tmp_path: Path) -> None:
    # Nsight's p2p exchanges (and groups never described) carry no member list: "the last collective L and
    # q were both in" then reads the instance's participants, which is exactly the oracle's definition
    from analyzer.metrics import blame, waits

    truth, a = _analyze(Scenario(ranks=32, tp=4, steps=4, seed=3, late_ranks={5: (2_000_000, "host")}), tmp_path)
    root, prop = oracle_roots(truth)
    rows = waits.matched(a.kernels).with_columns(pl.lit(None, dtype=pl.Utf8).alias("group_ranks"))
    got = {r["rank"]: r for r in blame.root_cause(members(rows), a.source["ranks"]).ranks.iter_rows(named=True)}
    assert sum(prop.values()) > 1e6  # messengers passed wait on: the look-back matters here
    for r in truth.ranks:
        assert got[r]["root_caused_wait_ns"] == pytest.approx(root[r], abs=1.0), r
        assert got[r]["propagated_wait_ns"] == pytest.approx(prop[r], abs=1.0), r


@pytest.mark.parametrize("seed", range(6))
def test_the_parent_search_is_a_range_maximum(seed: int) -> None:
    # brute force: every hold of L strictly between lo and ord_i, the largest wait, the later one on a tie
    from analyzer.metrics.blame import _parents

    rng = random.Random(seed)
    held = [(L, o, float(rng.choice([1, 2, 3, rng.randint(1, 50)])), f"h{L}.{o}")
            for L in range(3) for o in sorted(rng.sample(range(200), rng.randint(0, 60)))]
    if seed == 0:  # one rank with a single hold
        held = [h for h in held if h[0] != 1] + [(1, 7, 4.0, "h1.7")]
    if seed == 1:  # one rank with every ordinal held: ranges up to 300 long (the table's top levels)
        held = [h for h in held if h[0] != 2] + [(2, o, float(rng.randint(1, 50)), f"h2.{o}") for o in range(300)]
    todo = [(f"i{k}", rng.randrange(4), rng.randint(-1, 200), rng.randint(0, 201)) for k in range(300)]
    todo += [("whole", 2, -1, 301), ("most", 2, 20, 290)]
    hdf = pl.DataFrame(held, schema={"L": pl.Int32, "ord": pl.Int64, "w": pl.Float64, "parent": pl.Utf8}, orient="row")
    tdf = pl.DataFrame(todo, schema={"instance": pl.Utf8, "L": pl.Int32, "lo": pl.Int64, "ord_i": pl.Int64},
                       orient="row")
    got = dict(_parents(hdf.sample(fraction=1.0, shuffle=True, seed=seed), tdf).iter_rows())
    want = {}
    for inst, L, lo, oi in todo:
        cands = [h for h in held if h[0] == L and lo < h[1] < oi]
        if cands:
            want[inst] = max(cands, key=lambda h: (h[2], h[1]))[3]
    assert got == want
    # a single hold in the whole job is found too
    one = _parents(hdf.head(0).vstack(pl.DataFrame([(0, 5, 3.0, "x")], schema=hdf.schema, orient="row")),
                   pl.DataFrame([("i", 0, -1, 10)], schema=tdf.schema, orient="row"))
    assert one.rows() == [("i", "x")]
