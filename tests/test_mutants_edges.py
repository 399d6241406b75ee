"""Hand-built edge cases of root cause, the exposed split, the lateness and the effect (docs/mutation.md, "not killed").

Each expected number is worked out by hand from the definitions in the module docstrings (and, for root cause,
the plain-Python oracle in tests/oracle_blame.py: parent = the largest hold since c, the later one on a tie);
the tables are tiny and every frame is built inside the test.
"""

from __future__ import annotations


def _kernels(kernels: list[tuple[int, str, int, int, int, int, str]]):
    """Matched comm kernels: (rank, instance, start, end, wait, last rank, group ranks), all in step 1."""
    import polars as pl

    return pl.DataFrame(
        {"rank": [k[0] for k in kernels], "instance": [k[1] for k in kernels], "start_ns": [k[2] for k in kernels],
         "end_ns": [k[3] for k in kernels], "wait_ns": [k[4] for k in kernels], "last_rank": [k[5] for k in kernels],
         "step": [1] * len(kernels), "pg": ["0"] * len(kernels), "group_ranks": [k[6] for k in kernels]},
        schema={"rank": pl.Int32, "instance": pl.Utf8, "start_ns": pl.Int64, "end_ns": pl.Int64, "wait_ns": pl.Int64,
                "last_rank": pl.Int32, "step": pl.Int64, "pg": pl.Utf8, "group_ranks": pl.Utf8},
    )


def _blame(kernels, ranks):
    from analyzer.crossrank.members import members
    from analyzer.metrics.blame import root_cause

    b = root_cause(members(_kernels(kernels)), ranks)
    inst = {r["instance"]: r for r in b.instances.iter_rows(named=True)}
    roots = {r: (root, prop) for r, root, prop in b.ranks.sort("rank").iter_rows()}
    return b, inst, roots


def _part(row: dict) -> tuple:
    return row["caused_ns"], row["propagated_ns"], row["transfer_ns"], row["own_ns"], row["parent"]


def test_a_collective_without_transfer_time_adds_no_transfer() -> None:
    # Y {0,2}: rank 0 waits 50 ns for rank 2 and both kernels end at once, rank 2's lasting 0 ns: the
    # collective moved data for 0 ns (x = d - w = 0 on both ranks). At W {0,1} (c = W0) rank 1 waits 70 ns for
    # rank 0, which since W0 was held 50 ns (Y) and moved data 0 ns, rank 1 neither: 50 propagated (to Y),
    # min(20, 0 - 0) = 0 transfer, 20 its own (the 30 ns it computed after Y, less rank 1's 10 ns head start)
    b, inst, roots = _blame([
        (0, "W0", 0, 10, 0, 2, "0,1,2"), (1, "W0", 0, 10, 0, 2, "0,1,2"), (2, "W0", 0, 10, 0, 2, "0,1,2"),
        (0, "Y", 20, 70, 50, 2, "0,2"), (2, "Y", 70, 70, 0, 2, "0,2"),
        (1, "W", 30, 110, 70, 0, "0,1"), (0, "W", 100, 110, 0, 0, "0,1"),
    ], [0, 1, 2])
    assert _part(inst["W"]) == (70, 50, 0, 20, "Y")
    assert _part(inst["Y"]) == (50, 0, 0, 50, None)
    # rank 2: Y's own 50 and W's 50 passed back through Y (all of Y is rank 2's); rank 0: W's own 20, 50 passed on
    assert roots == {0: (20, 50), 1: (0, 0), 2: (100, 0)} and b.transfer_caused_ns == 0


def test_a_hold_of_one_nanosecond_is_passed_back_to_it() -> None:
    # rank 0 is held 5 ns in A {0,2} (before c), released with rank 1 together by W0 {0,1} (c), then held 1 ns
    # in B {0,3}; at W {0,1} rank 1 waits 1 ns for it. Since c rank 0 was held 1 ns beyond rank 1: the 1 ns is
    # propagated, to the hold since c (B), not to the larger hold before c (A). B's own 1 ns is rank 3's
    # (no collective shared with rank 3 before, and rank 3 was held nowhere), A's own 5 ns is rank 2's.
    b, inst, roots = _blame([
        (0, "A", 0, 15, 5, 2, "0,2"), (2, "A", 5, 15, 0, 2, "0,2"),
        (0, "W0", 20, 30, 0, 0, "0,1"), (1, "W0", 20, 30, 0, 0, "0,1"),
        (0, "B", 40, 51, 1, 3, "0,3"), (3, "B", 41, 51, 0, 3, "0,3"),
        (1, "W", 59, 70, 1, 0, "0,1"), (0, "W", 60, 70, 0, 0, "0,1"),
    ], [0, 1, 2, 3])
    assert _part(inst["W"]) == (1, 1, 0, 0, "B")
    assert _part(inst["B"]) == (1, 0, 0, 1, None)
    assert roots == {0: (0, 1), 1: (0, 0), 2: (5, 0), 3: (2, 0)} and b.transfer_caused_ns == 0


def test_the_parent_is_searched_since_the_peers_that_were_held() -> None:
    # At I {0,1,2} rank 0 is last; rank 2 waits 0 ns (it holds nothing back; c = C2 {0,2}, long ago), rank 1
    # waits 1 ns with c = C1 {0,1}: since C1 rank 0 was held 2 ns (B {0,4}), rank 1 nothing, so 1 ns is passed
    # back, to the hold since C1 (B), not to the larger one (A {0,3}, 5 ns) between C2 and C1
    b, inst, roots = _blame([
        (0, "C2", 0, 10, 0, 0, "0,2"), (2, "C2", 0, 10, 0, 0, "0,2"),
        (0, "A", 20, 35, 5, 3, "0,3"), (3, "A", 25, 35, 0, 3, "0,3"),
        (0, "C1", 40, 50, 0, 0, "0,1"), (1, "C1", 40, 50, 0, 0, "0,1"),
        (0, "B", 60, 72, 2, 4, "0,4"), (4, "B", 62, 72, 0, 4, "0,4"),
        (0, "I", 80, 90, 0, 0, "0,1,2"), (1, "I", 79, 90, 1, 0, "0,1,2"), (2, "I", 80, 90, 0, 0, "0,1,2"),
    ], [0, 1, 2, 3, 4])
    assert _part(inst["I"]) == (1, 1, 0, 0, "B")
    assert roots == {0: (0, 1), 1: (0, 0), 2: (0, 0), 3: (5, 0), 4: (3, 0)} and b.transfer_caused_ns == 0


def test_a_tie_between_equal_holds_goes_to_the_later_one() -> None:
    # since c = W0 {0,1} rank 0 is held 3 ns in each of A {0,2}, B {0,3}, D {0,4}, E {0,5} (one root each);
    # at W {0,1} rank 1 waits 4 ns for it: 4 of the 12 ns held are passed back, to the longest hold, and of
    # equal holds the latest (E), as the oracle's max over (wait, position) picks
    b, inst, roots = _blame([
        (0, "W0", 0, 10, 0, 0, "0,1"), (1, "W0", 0, 10, 0, 0, "0,1"),
        (0, "A", 20, 33, 3, 2, "0,2"), (2, "A", 23, 33, 0, 2, "0,2"),
        (0, "B", 40, 53, 3, 3, "0,3"), (3, "B", 43, 53, 0, 3, "0,3"),
        (0, "D", 60, 73, 3, 4, "0,4"), (4, "D", 63, 73, 0, 4, "0,4"),
        (0, "E", 80, 93, 3, 5, "0,5"), (5, "E", 83, 93, 0, 5, "0,5"),
        (1, "W", 96, 110, 4, 0, "0,1"), (0, "W", 100, 110, 0, 0, "0,1"),
    ], [0, 1, 2, 3, 4, 5])
    # X_0 - X_1 since W0 = 40 ns of transfers in A..E: none of the 4 ns is left for them or for rank 0
    assert _part(inst["W"]) == (4, 4, 0, 0, "E")
    assert roots == {0: (0, 4), 1: (0, 0), 2: (3, 0), 3: (3, 0), 4: (3, 0), 5: (7, 0)}


def test_a_tie_between_two_equal_holds_goes_to_the_later_one() -> None:
    # as above with two holds, the earlier one first in every order (B at 20, A at 40 by name)
    b, inst, roots = _blame([
        (0, "W0", 0, 10, 0, 0, "0,1"), (1, "W0", 0, 10, 0, 0, "0,1"),
        (0, "B", 20, 33, 3, 2, "0,2"), (2, "B", 23, 33, 0, 2, "0,2"),
        (0, "A", 40, 53, 3, 3, "0,3"), (3, "A", 43, 53, 0, 3, "0,3"),
        (1, "W", 58, 70, 2, 0, "0,1"), (0, "W", 60, 70, 0, 0, "0,1"),
    ], [0, 1, 2, 3])
    assert _part(inst["W"]) == (2, 2, 0, 0, "A")
    assert roots == {0: (0, 2), 1: (0, 0), 2: (3, 0), 3: (5, 0)}


def test_the_shared_collective_itself_is_no_parent() -> None:
    # rank 0 waits 9 ns for rank 1 in W0 {0,1} (c: it released both together, so its hold is not "since c");
    # then it is held 2 ns in B {0,3}; at W {0,1} rank 1 waits 1 ns for rank 0: 1 ns passed back to B (rank 3),
    # not to W0 (which would hand rank 1 its own wait back)
    b, inst, roots = _blame([
        (0, "W0", 0, 19, 9, 1, "0,1"), (1, "W0", 9, 19, 0, 1, "0,1"),
        (0, "B", 30, 42, 2, 3, "0,3"), (3, "B", 32, 42, 0, 3, "0,3"),
        (1, "W", 49, 60, 1, 0, "0,1"), (0, "W", 50, 60, 0, 0, "0,1"),
    ], [0, 1, 3])
    assert _part(inst["W"]) == (1, 1, 0, 0, "B")
    assert roots == {0: (0, 1), 1: (9, 0), 3: (3, 0)}


def _covs(events: list[tuple[int, int, int, str]]):
    import polars as pl

    from analyzer.metrics import overlap

    gpu = pl.DataFrame({"rank": [e[0] for e in events], "start_ns": [e[1] for e in events],
                        "end_ns": [e[2] for e in events], "kind": [e[3] for e in events]},
                       schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "kind": pl.Utf8})
    return overlap.coverages(gpu)


def test_exposed_split_of_a_one_nanosecond_comm_kernel() -> None:
    """A 1 ns comm kernel that only waited (wait 1 of d = 1) splits its exposed 1 ns as wait (wait/d = 1);
    a 1 ns kernel that waited 0 ns is transfer."""
    import polars as pl

    from analyzer.metrics import waits

    covs = _covs([(0, 100, 101, "comm"), (0, 300, 301, "comm"), (0, 0, 50, "compute")])
    rows = pl.DataFrame({"rank": [0, 0], "start_ns": [100, 300], "end_ns": [101, 301], "wait_ns": [1, 0]},
                        schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "wait_ns": pl.Int64})
    windows = pl.DataFrame({"rank": [0, 0, 0], "key": [-1, 0, 1], "start_ns": [0, 0, 200],
                            "end_ns": [400, 200, 400], "exposed_comm_ns": [2, 1, 1]},
                           schema={"rank": pl.Int32, "key": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                   "exposed_comm_ns": pl.Int64})
    got = {k: (w, t) for k, w, t in waits.exposed_split(rows, covs, windows)
           .select("key", "exposed_wait_ns", "exposed_transfer_ns").iter_rows()}
    assert got == {-1: (1.0, 1.0), 0: (1.0, 0.0), 1: (0.0, 1.0)}


def _lateness_case():
    import polars as pl

    # rank 1 is last in I1 (step 1, rank 0 waits 30 ns) and I2 (step 2, rank 0 waits 50 ns): lateness windows
    # [70, 100] and [450, 500], 80 ns together; rank 1 computes 60 ns inside them ([70, 100] and [450, 480]),
    # so its GPU is idle 20 ns there. Both ranks compute 60 ns in all: no extra compute.
    rows = pl.DataFrame(
        {"rank": [0, 1, 0, 1], "instance": ["I1", "I1", "I2", "I2"], "start_ns": [70, 100, 450, 500],
         "end_ns": [110, 110, 510, 510], "wait_ns": [30, 0, 50, 0], "last_rank": [1, 1, 1, 1], "step": [1, 1, 2, 2]},
        schema={"rank": pl.Int32, "instance": pl.Utf8, "start_ns": pl.Int64, "end_ns": pl.Int64, "wait_ns": pl.Int64,
                "last_rank": pl.Int32, "step": pl.Int64})
    covs = _covs([(0, 70, 110, "comm"), (1, 100, 110, "comm"), (0, 450, 510, "comm"), (1, 500, 510, "comm"),
                  (1, 70, 100, "compute"), (1, 450, 480, "compute"), (0, 0, 60, "compute")])
    return rows, covs


def test_lateness_is_summed_over_steps_of_each_steps_longest_wait() -> None:
    from analyzer.metrics import waits

    rows, covs = _lateness_case()
    cause = waits.lateness_cause(rows, covs, 1)
    # per step the longest wait it caused: 30 + 50
    assert cause == {"late_ns": 80.0, "compute_ns": 60.0, "idle_ns": 20.0, "excess_compute_ns": 0.0, "steps": 2.0}


def test_kind_of_a_straggler_late_in_two_steps() -> None:
    """Idle 20 ns of 80 ns late is under the host share (30%: 24 ns); no extra compute: kind unknown."""
    from analyzer.metrics import stragglers, waits

    rows, covs = _lateness_case()
    cand = {"rank": 1, "caused_wait_ns": 80.0, "last_arrival_pct": 100.0, "last_count": 2}
    v = stragglers._verdict(cand, waits.lateness_cause(rows, covs, 1), 80.0, 1.0, 2, 2, float("inf"), ())
    assert (v.kind, v.idle_before_ns, v.compute_before_ns) == ("unknown", 20.0, 0.0)


def test_effect_where_nobody_else_was_late_in_a_step() -> None:
    """In step 1 every instance's wait was passed on (own 0 for rank 1 and for the others): no late arrival of
    anyone else is typical there. ``Verdict.effect`` is documented as "inf: nobody else late"; whatever such a
    step counts as, it is a number, never NaN (a NaN effect would silently fail ``effect >= MIN_EFFECT`` and
    reach the JSON). In step 2 its 8 ns per peer (16 ns, 2 peers) against the others' median (1, 3): 4."""
    import math

    import polars as pl

    from analyzer.metrics import stragglers

    inst = pl.DataFrame(
        {"instance": ["a", "b", "c", "d", "e"], "step": [1, 1, 2, 2, 2], "n_ranks": [2, 2, 3, 2, 2],
         "last_rank": [1, 0, 1, 0, 2], "own_ns": [0.0, 0.0, 16.0, 1.0, 3.0], "caused_ns": [5.0, 5.0, 16.0, 1.0, 3.0]},
        schema={"instance": pl.Utf8, "step": pl.Int64, "n_ranks": pl.UInt32, "last_rank": pl.Int32,
                "own_ns": pl.Float64, "caused_ns": pl.Float64})
    assert stragglers._effect(inst.filter(pl.col("step") == 2), 1) == 4.0
    assert not math.isnan(stragglers._effect(inst.filter(pl.col("step") == 1), 1))
    assert not math.isnan(stragglers._effect(inst, 1))
