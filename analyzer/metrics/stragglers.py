"""Straggler verdict: the rank that costs the others most, only when that is significant.

In a balanced run the last arriver is random (about 1/n of instances each) and caused wait is spread
out; a straggler is last far more often than chance (one-sided binomial test against its groups'
sizes) and causes most of the wait. Its kind comes from what its GPU did while the others already
waited: computing (compute straggler) or nothing (host/launch straggler).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

MIN_CAUSED_SHARE = 0.5  # of all wait caused by anyone
MAX_P_VALUE = 0.01
MAX_STEP_P_VALUE = 0.05
DOMINANT_SHARE = 0.8
COMPUTE_SHARE = 0.25  # extra compute vs peers, as a share of the lateness, that makes a compute straggler
IDLE_SHARE = 0.3  # GPU idle during the lateness windows that makes a host straggler
MIN_WAIT_SHARE_OF_COMM = 0.05  # the waiting must be a visible part of the others' communication time


@dataclass(frozen=True)
class Verdict:
    rank: int
    kind: str  # "host" | "compute" | "unknown"
    caused_wait_ns: float
    confidence: float
    chronic: bool
    last_arrival_pct: float
    steps_last: int
    steps_seen: int
    idle_before_ns: float  # GPU idle while the others already waited (union of its lateness windows)
    compute_before_ns: float  # compute it ran beyond its peers' median (whole window)
    instances_last: int


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if p <= 0:
        return 0.0
    total = 0.0
    for i in range(k, n + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                          + i * math.log(p) + (n - i) * math.log1p(-p))
    return min(1.0, total)


def ranking(per_rank: pl.DataFrame, expected_last: pl.DataFrame) -> pl.DataFrame:
    """Ranks by wait caused, with last-arrival share and the binomial p-value of being last that often.

    ``expected_last``: rank, expected (Σ over its instances of 1/group size).
    """
    rows = []
    for r in per_rank.join(expected_last, on="rank", how="left").iter_rows(named=True):
        n = int(r["instances"])
        k = int(r["last_count"])
        p = (r["expected"] or 0.0) / n if n else 0.0
        rows.append({
            "rank": r["rank"],
            "caused_wait_ns": float(r["caused_wait_ns"]),
            "wait_ns": float(r["wait_ns"]),
            "last_count": k,
            "instances": n,
            "last_arrival_pct": 100.0 * k / n if n else None,
            "steps_last": int(r["steps_last"]),
            "steps_seen": int(r["steps_seen"]),
            "p_value": binom_sf(k, n, p) if n else 1.0,
        })
    schema = {"rank": pl.Int32, "caused_wait_ns": pl.Float64, "wait_ns": pl.Float64, "last_count": pl.Int64,
              "instances": pl.Int64, "last_arrival_pct": pl.Float64, "steps_last": pl.Int64,
              "steps_seen": pl.Int64, "p_value": pl.Float64}
    return pl.DataFrame(rows, schema=schema).sort(["caused_wait_ns", "rank"], descending=[True, False])


def verdict(rank_order: pl.DataFrame, comm_ns: dict[int, float], causes: dict[int, dict[str, float]]) -> Verdict | None:
    """The top of the ranking, if significant; ``causes[rank]`` from waits.lateness_cause."""
    if rank_order.height == 0:
        return None
    total_caused = float(rank_order["caused_wait_ns"].sum())
    top = rank_order.row(0, named=True)
    if total_caused <= 0 or top["caused_wait_ns"] <= 0:
        return None
    share = top["caused_wait_ns"] / total_caused
    others_comm = sum(v for r, v in comm_ns.items() if r != top["rank"])
    others_wait = top["caused_wait_ns"]
    visible = others_comm > 0 and others_wait / others_comm >= MIN_WAIT_SHARE_OF_COMM
    # consistency: top causer of more steps than chance (steps are repeated measurements), or, without
    # steps, last arriver more often than chance; an overwhelming share of the caused wait also counts
    steps_seen = top["steps_seen"]
    if steps_seen >= 3:
        n_ranks = max(rank_order.height, 2)
        p_value = binom_sf(top["steps_last"], steps_seen, 1.0 / n_ranks)
        consistent = p_value <= MAX_STEP_P_VALUE
    else:
        p_value = top["p_value"]
        consistent = p_value <= MAX_P_VALUE or share >= DOMINANT_SHARE
    if share < MIN_CAUSED_SHARE or not consistent or not visible:
        return None
    cause = causes.get(top["rank"], {})
    late = cause.get("late_ns", 0.0)
    idle, excess = cause.get("idle_ns", 0.0), cause.get("excess_compute_ns", 0.0)
    # compute straggler: it ran markedly more compute than its peers, enough to explain a good part of
    # its lateness; host straggler: it computed no more, and its GPU sat idle while the others waited
    # (the GPU may run other collectives meanwhile, so idle need not cover all of the lateness)
    if late <= 0:
        kind = "unknown"
    elif excess >= COMPUTE_SHARE * late:
        kind = "compute"
    elif idle >= IDLE_SHARE * late:
        kind = "host"
    else:
        kind = "unknown"
    return Verdict(
        rank=int(top["rank"]),
        kind=kind,
        caused_wait_ns=float(top["caused_wait_ns"]),
        confidence=min(share, 1.0 - p_value),
        chronic=steps_seen > 0 and top["steps_last"] * 2 > steps_seen,
        last_arrival_pct=float(top["last_arrival_pct"] or 0.0),
        steps_last=int(top["steps_last"]),
        steps_seen=int(steps_seen),
        idle_before_ns=idle,
        compute_before_ns=excess,
        instances_last=int(top["last_count"]),
    )
