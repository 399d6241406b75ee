"""The straggler verdict's rules at their exact edges, on hand-built root-cause tables (no traces, fast).

DESIGN.md and ``analyzer/metrics/stragglers.py`` state each rule with its threshold: consistent when the step
p-value is <= 0.05 (3 steps or more), the instance p-value <= 0.01 (fewer than 3 steps) or the share of
root-caused wait >= 0.8;
dominant when its costliest late arrival per waiting peer is >= 1.5x the step's median one; visible when its
root-caused wait is >= 5% of the others' communication; compute when its extra compute is >= 25% of its
lateness, else host when its GPU idled >= 30% of it; chronic when it is the top root-causer of more than half
of the steps. Each case below sits exactly on one edge (values chosen so the float arithmetic is exact), and
the expected verdict is worked out by hand from those rules, so moving any comparison by one step fails.
"""

from __future__ import annotations

import polars as pl
import pytest

from analyzer.metrics import stragglers
from analyzer.metrics.blame import Blame

K = 1_000  # ns


def _blame(instances: list[tuple], n_ranks: int = 3) -> Blame:
    """``instances``: (step, last rank, caused ns[, group size]), all of it the last rank's own (nothing
    propagated), as ``blame.root_cause`` lays them out (per-step rows only for instances inside a step)."""
    sizes = [i[3] if len(i) > 3 else n_ranks for i in instances]
    inst = pl.DataFrame(
        {"instance": [f"i{k:02d}" for k in range(len(instances))], "step": [i[0] for i in instances],
         "pg": ["0"] * len(instances), "group_ranks": [",".join(str(r) for r in range(n)) for n in sizes],
         "n_ranks": sizes, "last_rank": [i[1] for i in instances],
         "caused_ns": [float(i[2]) for i in instances], "own_ns": [float(i[2]) for i in instances],
         "propagated_ns": [0.0] * len(instances), "parent": [None] * len(instances)},
        schema={"instance": pl.Utf8, "step": pl.Int64, "pg": pl.Utf8, "group_ranks": pl.Utf8, "n_ranks": pl.UInt32,
                "last_rank": pl.Int32, "caused_ns": pl.Float64, "own_ns": pl.Float64, "propagated_ns": pl.Float64,
                "parent": pl.Utf8},
    )
    flows = inst.select(pl.col("instance").alias("root"), pl.col("last_rank").alias("root_rank"), "instance", "step",
                        pl.col("caused_ns").alias("amount_ns"))
    steps = (flows.filter(pl.col("step").is_not_null())
             .group_by("root_rank", "step").agg(pl.col("amount_ns").sum().alias("root_caused_wait_ns"))
             .rename({"root_rank": "rank"}).sort("rank", "step"))
    ranks = flows.group_by("root_rank").agg(pl.col("amount_ns").sum().alias("root_caused_wait_ns")).rename(
        {"root_rank": "rank"}).with_columns(pl.lit(0.0).alias("propagated_wait_ns"))
    return Blame(instances=inst, ranks=ranks, steps=steps, flows=flows)


def _order(b: Blame, p_values: dict[int, float], ranks: int = 3) -> pl.DataFrame:
    """What ``ranking`` hands over: ranks by root-caused wait, with their instance p-values."""
    root = dict(b.ranks.select("rank", "root_caused_wait_ns").iter_rows())
    last = dict(b.instances.group_by("last_rank").len().iter_rows())
    rows = [{"rank": r, "caused_wait_ns": root.get(r, 0.0), "root_caused_wait_ns": root.get(r, 0.0),
             "propagated_wait_ns": 0.0, "last_count": last.get(r, 0), "instances": b.instances.height,
             "last_arrival_pct": 100.0 * last.get(r, 0) / b.instances.height, "p_value": p_values.get(r, 1.0)}
            for r in range(ranks)]
    return pl.DataFrame(rows).sort(["root_caused_wait_ns", "rank"], descending=[True, False])


def _roots(instances: list[tuple], comm: dict[int, float], p_values: dict[int, float] | None = None,
           cause: dict[str, float] | None = None) -> list[stragglers.Verdict]:
    b = _blame(instances)
    cause = cause or {"late_ns": 100.0 * K, "idle_ns": 100.0 * K, "excess_compute_ns": 0.0}
    return stragglers.roots(_order(b, p_values or {}), b, comm, lambda r: cause)


COMM = {0: 2_000.0 * K, 1: 2_000.0 * K, 2: 2_000.0 * K}


def test_a_share_of_exactly_80_percent_is_consistent() -> None:
    # rank 0 root-causes 400 of 500 us (0.8), rank 1 the rest; two steps (no step test), no instance test;
    # rank 0's late arrivals cost 200/2 = 100 us per peer against rank 1's 50/2 = 25 us: dominant
    inst = [(1, 0, 200 * K), (1, 1, 50 * K), (2, 0, 200 * K), (2, 1, 50 * K)]
    (v,) = _roots(inst, COMM)
    assert v.rank == 0 and v.root_caused_wait_ns == 400 * K and v.effect == 4.0
    # the share counts as evidence: p = min(p_steps, p_instances, 1 - share) = 1 - 0.8
    assert v.confidence == pytest.approx(0.8, abs=1e-12)
    assert (v.steps_last, v.steps_seen, v.chronic) == (2, 2, True)


def test_a_wait_of_exactly_5_percent_of_the_others_communication_is_visible() -> None:
    # only rank 0 is ever late (share 1, effect inf); 100 us against 2 x 1000 us of the others' comm = 5%
    inst = [(1, 0, 60 * K), (2, 0, 40 * K)]
    (v,) = _roots(inst, {0: 1.0, 1: 1_000.0 * K, 2: 1_000.0 * K})
    assert v.rank == 0 and v.effect == float("inf") and v.confidence == 1.0
    assert _roots(inst, {0: 1.0, 1: 1_000.0 * K, 2: 1_000.0 * K + 1}) == []  # just under 5%: none


def test_a_late_arrival_of_exactly_1_5_times_the_typical_one_is_dominant() -> None:
    # per step: rank 0's 300 us over 2 peers = 150 us against rank 1's 200 us / 2 = 100 us: 1.5;
    # consistent by its instance p-value of exactly 0.01 (share 0.6 < 0.8, two steps)
    inst = [(1, 0, 300 * K), (1, 1, 200 * K), (2, 0, 300 * K), (2, 1, 200 * K)]
    (v,) = _roots(inst, COMM, p_values={0: 0.01})
    assert v.rank == 0 and v.effect == 1.5
    assert v.confidence == pytest.approx(0.99, abs=1e-12)  # 1 - min(p_steps = 1, p_instances = 0.01)
    assert _roots(inst, COMM, p_values={0: 0.0100001}) == []  # no longer consistent


def test_three_steps_are_enough_for_the_step_test() -> None:
    # rank 0 is the top root-causer of all 3 steps among 3 causers: p = (1/3)^3 < 0.05; share 1200/1650 < 0.8
    inst = [(1, 0, 400 * K), (1, 1, 150 * K), (2, 0, 400 * K), (2, 1, 150 * K), (3, 0, 400 * K), (3, 2, 150 * K)]
    (v,) = _roots(inst, COMM)
    assert (v.rank, v.steps_last, v.steps_seen, v.chronic) == (0, 3, 3, True)
    assert v.confidence == pytest.approx(1 - (1 / 3) ** 3, abs=1e-12)


def test_top_of_exactly_half_the_steps_is_not_chronic() -> None:
    # 4 steps; rank 0 tops steps 1 and 2 (p_steps = P(X >= 2 | 4, 1/2) = 11/16), consistent by its share
    # 600 / 650 >= 0.8; rank 1 tops steps 3 and 4 but its 50 us are under 5% of the others' 4000 us
    inst = [(1, 0, 300 * K), (1, 1, 20 * K), (2, 0, 300 * K), (2, 1, 20 * K), (3, 1, 5 * K), (4, 1, 5 * K)]
    (v,) = _roots(inst, COMM, p_values={0: 0.01})
    assert (v.rank, v.steps_last, v.steps_seen, v.chronic) == (0, 2, 4, False)
    assert v.confidence == pytest.approx(1 - 50 / 650, abs=1e-12)  # 1 - min(11/16, 1 - share)


def test_with_three_steps_or_more_the_instance_test_does_not_count() -> None:
    # the same rank 0 on top of 2 of 4 steps with share 600 / 790 < 0.8: an instance p-value of 0.01 made it
    # consistent before, but a step's instances are not independent trials (one late arrival makes a rank
    # last in most of its step's instances: a balanced real FSDP capture got a verdict that way)
    inst = [(1, 0, 300 * K), (1, 1, 90 * K), (2, 0, 300 * K), (2, 1, 90 * K), (3, 1, 5 * K), (4, 1, 5 * K)]
    assert _roots(inst, COMM, p_values={0: 0.01}) == []
    assert _roots(inst, COMM, p_values={0: 1e-9}) == []


@pytest.mark.parametrize(("cause", "kind"), [
    ({"late_ns": 400.0 * K, "idle_ns": 0.0, "excess_compute_ns": 100.0 * K}, "compute"),  # exactly 25%
    ({"late_ns": 400.0 * K, "idle_ns": 400.0 * K, "excess_compute_ns": 100.0 * K - 1}, "host"),
    ({"late_ns": 1_000.0 * K, "idle_ns": 300.0 * K, "excess_compute_ns": 0.0}, "host"),  # exactly 30%
    ({"late_ns": 1_000.0 * K, "idle_ns": 300.0 * K - 1, "excess_compute_ns": 0.0}, "unknown"),
    ({"late_ns": 0.0, "idle_ns": 0.0, "excess_compute_ns": 0.0}, "unknown"),  # no lateness measured
    ({"late_ns": 1.0, "idle_ns": 0.0, "excess_compute_ns": 1.0}, "compute"),  # 1 ns of lateness is lateness
    ({"late_ns": 1.0, "idle_ns": 1.0, "excess_compute_ns": 0.0}, "host"),
    ({"late_ns": 0.0, "idle_ns": 10.0 * K, "excess_compute_ns": 10.0 * K}, "unknown"),
])
def test_kind_thresholds(cause: dict[str, float], kind: str) -> None:
    inst = [(1, 0, 60 * K), (2, 0, 40 * K)]
    (v,) = _roots(inst, {0: 1.0, 1: 500.0 * K, 2: 500.0 * K}, cause=cause)
    assert v.kind == kind
    assert (v.idle_before_ns, v.compute_before_ns) == (cause["idle_ns"], cause["excess_compute_ns"])


def test_chain_keeps_flows_of_exactly_half_the_wait_and_exactly_5_percent_of_the_largest() -> None:
    """The chain names the instances whose wait is mostly the root's (>= half of it) and not negligible next to
    its largest flow (>= 5%): on the edges both count, just under either they do not."""
    b = _blame([(1, 0, 400 * K), (1, 0, 20 * K), (1, 0, 20 * K - 1), (2, 1, 200 * K), (2, 1, 200 * K + 2)])
    # rank 1's two instances in step 2 were delayed by rank 0: half of the first one's wait traces back to rank
    # 0 (exactly 0.5), a hair under half of the second one's
    flows = pl.concat([
        b.flows.filter(pl.col("root_rank") == 0),
        pl.DataFrame({"root": ["i00", "i03", "i00", "i04"], "root_rank": [0, 1, 0, 1],
                      "instance": ["i03", "i03", "i04", "i04"], "step": [2, 2, 2, 2],
                      "amount_ns": [100.0 * K, 100.0 * K, 100.0 * K, 100.0 * K + 2]},
                     schema=b.flows.schema),
    ])
    b = Blame(instances=b.instances, ranks=b.ranks, steps=b.steps, flows=flows)
    own, hop = stragglers.chain(b, 0)
    assert (own.via, own.pg, own.groups, own.peers, own.wait_ns) == ((), ("0",), 1, 2, 420.0 * K)
    assert (hop.via, hop.pg, hop.groups, hop.peers, hop.wait_ns) == ((1,), ("0",), 1, 2, 100.0 * K)


def test_chain_of_a_single_late_arrival() -> None:
    (link,) = stragglers.chain(_blame([(1, 2, 90 * K)]), 2)
    assert link == stragglers.ChainLink(via=(), pg=("0",), groups=1, peers=2, wait_ns=90.0 * K)
    assert stragglers.chain(_blame([(1, 2, 90 * K)]), 1) == ()


def test_chain_when_the_roots_own_delay_is_negligible_next_to_what_it_set_off() -> None:
    """Rank 0 delayed one small group by 10 us (its own instance A); rank 1, held there, then delayed a large
    group by 400 us (B, all of it passed back to rank 0). A is under 5% of B, so only the hop is named."""
    b = _blame([(1, 0, 10 * K), (1, 1, 400 * K)])
    inst = b.instances.with_columns(
        pl.when(pl.col("instance") == "i01").then(0.0).otherwise(pl.col("own_ns")).alias("own_ns"),
        pl.when(pl.col("instance") == "i01").then(400.0 * K).otherwise(0.0).alias("propagated_ns"),
        pl.when(pl.col("instance") == "i01").then(pl.lit("i00")).otherwise(None).alias("parent"))
    flows = b.flows.with_columns(pl.lit("i00").alias("root"), pl.lit(0, dtype=pl.Int32).alias("root_rank"))
    (hop,) = stragglers.chain(Blame(instances=inst, ranks=b.ranks, steps=b.steps, flows=flows), 0)
    assert hop == stragglers.ChainLink(via=(1,), pg=("0",), groups=1, peers=2, wait_ns=400.0 * K)


def test_collectives_outside_every_step_are_compared_with_each_other() -> None:
    """Without step markers every instance is in one background: rank 0's 300 us over 2 peers against rank 1's
    200 us over 2 peers is an effect of 1.5, not 'nobody else late' (inf)."""
    inst = [(None, 0, 300 * K), (None, 1, 200 * K)]
    (v,) = _roots(inst, COMM, p_values={0: 0.01})
    assert (v.rank, v.effect, v.steps_seen, v.steps_last, v.chronic) == (0, 1.5, 0, 0, False)


def test_late_arrivals_are_compared_per_waiting_peer_across_group_sizes() -> None:
    """Rank 0 keeps 1 peer waiting 100 us (a pair); rank 1 keeps 4 peers waiting 200 us in all (a group of 5):
    per waiting peer 100 us against 50 us, an effect of 2."""
    inst = [(1, 0, 100 * K, 2), (1, 1, 200 * K, 5), (2, 0, 100 * K, 2), (2, 1, 200 * K, 5)]
    (v,) = _roots(inst, COMM, p_values={0: 0.001})
    assert (v.rank, v.effect) == (0, 2.0)


def test_collectives_outside_steps_are_not_mixed_with_a_step() -> None:
    """Rank 0 is late outside any step (300 us vs rank 1's 200 us there) and never in step 1, where rank 1 is
    late by 100 us: its effect is measured against the unstepped background only (1.5)."""
    inst = [(None, 0, 300 * K), (None, 1, 200 * K), (1, 1, 100 * K), (2, 1, 100 * K)]
    (v,) = _roots(inst, COMM, p_values={0: 0.001})
    assert (v.rank, v.effect) == (0, 1.5)


def test_the_background_is_the_instances_where_someone_waited() -> None:
    """Step 1: rank 0 keeps 2 peers waiting 300 us; rank 1 200 us in one instance and 1 ns in another; in a third
    nobody waited. The background is the median of the others' 100 us and 0.5 ns per peer (instances with wait,
    however small); the instance without wait is no part of it."""
    inst = [(1, 0, 300 * K), (1, 1, 200 * K), (1, 1, 1), (1, 2, 0)]
    (v,) = _roots(inst, COMM, p_values={0: 0.001})
    assert v.rank == 0 and v.effect == pytest.approx(150 * K / ((100 * K + 0.5) / 2), rel=1e-12)


def test_a_second_root_is_judged_among_the_ranks_not_yet_named() -> None:
    """Rank 0 (600 us, consistent by its p-value) is named first; among the rest rank 1 holds 400 of 500 us,
    exactly 80%: consistent too, though it holds only 400 of the 1100 us of all three."""
    inst = [(1, 0, 600 * K), (2, 1, 400 * K), (2, 2, 100 * K)]
    first, second = _roots(inst, COMM, p_values={0: 0.001})
    assert (first.rank, second.rank) == (0, 1)
    assert first.confidence == pytest.approx(0.999, abs=1e-12) and second.confidence == pytest.approx(0.8, abs=1e-12)
    assert (second.root_caused_wait_ns, second.effect) == (400.0 * K, 4.0)


def test_one_nanosecond_of_root_caused_wait_is_judged_like_any_other() -> None:
    """1 ns against 20 ns of the others' communication is 5%: visible, and it is the only lateness."""
    (v,) = _roots([(1, 0, 1)], {0: 1.0, 1: 10.0, 2: 10.0})
    assert (v.rank, v.root_caused_wait_ns) == (0, 1.0)


def test_a_second_roots_steps_are_counted_among_the_ranks_not_yet_named() -> None:
    """Rank 0 (named first) tops step 1; among the ranks left, rank 1 tops both steps: chronic."""
    inst = [(1, 0, 600 * K), (1, 1, 50 * K), (2, 1, 400 * K), (2, 2, 100 * K)]
    first, second = _roots(inst, COMM, p_values={0: 0.001})
    assert (first.rank, second.rank) == (0, 1)
    assert (second.steps_last, second.steps_seen, second.chronic) == (2, 2, True)


def test_a_tie_for_top_of_a_step_goes_to_the_lower_rank() -> None:
    inst = [(1, 0, 100 * K), (1, 1, 100 * K), (2, 0, 300 * K), (2, 2, 50 * K)]
    (v,) = _roots(inst, COMM, p_values={0: 0.001})
    assert (v.rank, v.steps_last, v.steps_seen, v.effect) == (0, 2, 2, 3.5)


def test_fewer_than_three_steps_get_no_step_test() -> None:
    """Rank 0 tops both steps among 5 causers (P = 1/25 < 0.05), but 2 steps are too few for the step test;
    with a share of 0.6 and no instance evidence it is not consistent: no verdict."""
    inst = [(1, 0, 300 * K), (1, 1, 100 * K), (1, 2, 100 * K), (2, 0, 300 * K), (2, 3, 100 * K), (2, 4, 100 * K)]
    assert _roots(inst, COMM) == []


def test_a_second_roots_step_test_counts_the_causers_not_yet_named() -> None:
    """Rank 0 (named first, by its share 10000 / 11200 >= 0.8) is late in step 4 only. Among the ranks left,
    rank 1 tops steps 1-3 of 4 against 5 causers (rank 5's 1 ns counts): P(X >= 3 | 4, 1/5), not 1/6 with
    rank 0 counted or 1/4 without rank 5."""
    inst = [(4, 0, 10_000 * K), (1, 1, 300 * K), (2, 1, 300 * K), (3, 1, 300 * K),
            (1, 2, 100 * K), (2, 3, 100 * K), (3, 4, 100 * K), (1, 5, 1)]
    comm = dict.fromkeys(range(6), 2_000.0 * K)
    b = _blame(inst)
    first, second = stragglers.roots(_order(b, {0: 0.001}, ranks=6), b, comm,
                                     lambda r: {"late_ns": 1.0, "idle_ns": 1.0, "excess_compute_ns": 0.0})
    assert (first.rank, second.rank, second.steps_last, second.steps_seen) == (0, 1, 3, 4)
    p = 4 * 0.2 ** 3 * 0.8 + 0.2 ** 4
    assert second.confidence == pytest.approx(1 - p, abs=1e-12)


def test_a_background_of_one_nanosecond_per_peer_is_still_a_background() -> None:
    (v,) = _roots([(1, 0, 300 * K), (1, 1, 2)], COMM)  # rank 1 keeps 2 peers waiting 1 ns each
    assert (v.rank, v.effect) == (0, 150_000.0)


def test_a_dominant_share_still_takes_the_strongest_evidence() -> None:
    """With a share of exactly 0.8 the confidence is 1 - the smallest of the step p-value, the instance p-value
    and 1 - share: here the step test ((1/3)^3, 3 steps, 3 causers), then the instance p-value (0.001)."""
    inst = [(1, 0, 300 * K), (2, 0, 300 * K), (3, 0, 300 * K), (1, 1, 75 * K), (2, 2, 75 * K), (3, 2, 75 * K)]
    (v,) = _roots(inst, COMM)
    assert v.rank == 0 and v.confidence == pytest.approx(1 - (1 / 3) ** 3, abs=1e-12)
    (v,) = _roots([(1, 0, 200 * K), (1, 1, 50 * K), (2, 0, 200 * K), (2, 1, 50 * K)], COMM, p_values={0: 0.001})
    assert v.rank == 0 and v.confidence == pytest.approx(0.999, abs=1e-12)


def test_others_communication_of_one_nanosecond_still_counts() -> None:
    (v,) = _roots([(1, 0, 1)], {0: 1.0, 1: 0.5, 2: 0.5})  # 1 ns of wait inside 1 ns of the others' comm
    assert v.rank == 0
