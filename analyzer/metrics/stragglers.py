"""Straggler verdict: the ranks whose own time (not a wait they passed on) costs the others most, when significant.

The verdict is decided on root-caused wait (``blame``), so a rank that arrived late only because a slow
peer held it earlier is never blamed. A candidate is named only when it stands out from the run's own
background, not against a fixed share:
- consistent: the top root-causer of more steps than chance (binomial, steps >= 3), or the last
  arriver of more instances than chance given its group sizes, or nearly all the root-caused wait;
- dominant: in a typical step its costliest late arrival (own wait per waiting peer) is >= 1.5x the
  median late arrival of the others in that step, so ring-position lateness, where several ranks take turns being last by
  similar small amounts, stays background;
- visible: its root-caused wait is >= 5% of the others' communication time.
Several independent roots are tested in order of root-caused wait. The kind comes from what the
rank's GPU did while the others already waited: computing (compute) or nothing (host/launch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from .blame import Blame

MAX_P_VALUE = 0.01  # instance-level binomial test
MAX_STEP_P_VALUE = 0.05  # step-level binomial test
DOMINANT_SHARE = 0.8  # of all root-caused wait: consistent without a test
MIN_EFFECT = 1.5  # its costliest late arrival of a step against the step's median instance
COMPUTE_SHARE = 0.25  # extra compute vs peers, as a share of the lateness, that makes a compute straggler
IDLE_SHARE = 0.3  # GPU idle during the lateness windows that makes a host straggler
MIN_WAIT_SHARE_OF_COMM = 0.05  # the waiting must be a visible part of the others' communication time
MAX_ROOTS = 5


@dataclass(frozen=True)
class ChainLink:
    """One hop of the delay: ``via`` (None: the root itself) delayed ``peers`` ranks of group ``pg``."""

    via: tuple[int, ...]
    pg: tuple[str, ...]
    groups: int
    peers: int  # distinct ranks that waited
    wait_ns: float


@dataclass(frozen=True)
class Verdict:
    """A root straggler: who, why, how sure, and what fixing it saves (the report's ``stragglers.roots[]``; times
    in ns).

    Attributes:
        rank: The rank.
        kind: ``host`` (its GPU sat idle while the others waited), ``compute`` (it ran more GPU work) or ``unknown``.
        root_caused_wait_ns: Wait, anywhere, that traces back to its own compute or host time.
        caused_wait_ns: The others' wait in the instances where it arrived last.
        confidence: 1 - the p-value of the test that named it.
        chronic: Late in most steps, not once.
        chain: How the delay spread: the groups it delayed, then through whom.
        saving_ns: What making it ideal saves per step (the ``no_straggler`` scenario).
        saving_pct: The same, in percent of the step.
        added_ns: What putting its measured durations back into the ideal run adds per step.
    """

    rank: int
    kind: str  # "host" | "compute" | "unknown"
    caused_wait_ns: float
    root_caused_wait_ns: float
    confidence: float
    chronic: bool
    last_arrival_pct: float
    steps_last: int  # steps where it was the top root-causer
    steps_seen: int
    idle_before_ns: float  # GPU idle while the others already waited (union of its lateness windows)
    compute_before_ns: float  # compute it ran beyond its peers' median (whole window)
    instances_last: int
    effect: float  # its costliest late arrival per step / the step's median instance (inf: nobody else late)
    chain: tuple[ChainLink, ...] = ()
    # decided by the counterfactual (analyzer/whatif/counterfactual.py): what making it ideal saves, what its put-back adds
    saving_ns: float | None = None
    saving_pct: float | None = None
    added_ns: float | None = None


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0 or n <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    # scipy.special's survival function is binomtest(k, n, p, "greater").pvalue; importing it costs ~0.2 s of
    # CPU against ~0.8 s for scipy.stats, and every analyze pays it
    from scipy.special import bdtrc

    return float(bdtrc(k - 1, n, p))


def ranking(per_rank: pl.DataFrame, expected_last: pl.DataFrame, blame: Blame | None = None) -> pl.DataFrame:
    """Ranks by root-caused (else caused) wait, with last-arrival share and the binomial p-value of being last.

    ``expected_last``: rank, expected (Σ over its instances of 1/group size).
    """
    df = per_rank.join(expected_last, on="rank", how="left")
    if blame is not None:
        df = df.join(blame.ranks, on="rank", how="left")
    else:
        df = df.with_columns(pl.col("caused_wait_ns").alias("root_caused_wait_ns"), pl.lit(0.0).alias("propagated_wait_ns"))
    n = pl.col("instances").cast(pl.Int64)
    k = pl.col("last_count").cast(pl.Int64)
    p = pl.when(n > 0).then(pl.col("expected").fill_null(0.0) / n).otherwise(0.0)
    out = df.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("caused_wait_ns").cast(pl.Float64),
        pl.col("root_caused_wait_ns").cast(pl.Float64).fill_null(0.0),
        pl.col("propagated_wait_ns").cast(pl.Float64).fill_null(0.0),
        pl.col("wait_ns").cast(pl.Float64),
        k.alias("last_count"), n.alias("instances"),
        pl.when(n > 0).then(100.0 * k / n).otherwise(None).alias("last_arrival_pct"),
        pl.col("steps_last").cast(pl.Int64), pl.col("steps_seen").cast(pl.Int64),
        p.alias("_p"),
    )
    # the binomial tail of being last that often, for every rank at once (only where above expectation)
    test = ((out["instances"] > 0) & (out["last_count"].cast(pl.Float64) > out["instances"] * out["_p"])).to_numpy()
    pv = np.ones(out.height)
    if test.any():
        from scipy.special import bdtrc  # see binom_sf

        pv[test] = bdtrc(out["last_count"].to_numpy()[test] - 1, out["instances"].to_numpy()[test],
                         out["_p"].to_numpy()[test])
    return out.drop("_p").with_columns(pl.Series("p_value", pv, dtype=pl.Float64)).sort(
        ["root_caused_wait_ns", "caused_wait_ns", "rank"], descending=[True, True, False]
    )


def roots(
    order: pl.DataFrame,
    blame: Blame,
    comm_ns: dict[int, float],
    cause_of: Callable[[int], dict[str, float]],
    replicas: Mapping[int, list[int]] | None = None,
) -> list[Verdict]:
    """Independent root stragglers, most costly first (empty: none significant).

    ``replicas``: each rank's ranks of the same role in the other data-parallel replicas. A root must
    also stand out among them (MIN_EFFECT times their median): lateness every replica's last pipeline
    stage shows alike is the schedule's structure, not a straggler.

    ``order`` from :func:`ranking`; ``cause_of(rank)`` from waits.lateness_cause.
    """
    accepted: list[Verdict] = []
    inst = blame.instances.filter(pl.col("caused_ns") > 0)  # instances where someone waited
    per_step = blame.steps
    n_steps = per_step["step"].n_unique() if per_step.height else 0
    for cand in order.head(MAX_ROOTS).iter_rows(named=True):
        rank, root = int(cand["rank"]), float(cand["root_caused_wait_ns"])
        if root <= 0:
            break
        done = [v.rank for v in accepted]
        rest = order.filter(~pl.col("rank").is_in(done))
        total = float(rest["root_caused_wait_ns"].sum())
        share = root / total if total > 0 else 0.0
        # consistency across steps (top root-causer among the ranks not yet named)
        top = (
            per_step.filter(~pl.col("rank").is_in(done))
            .sort(["root_caused_wait_ns", "rank"], descending=[True, False])
            .group_by("step", maintain_order=True).first()
        )
        steps_last = top.filter(pl.col("rank") == rank).height
        causers = max(per_step.filter(~pl.col("rank").is_in(done) & (pl.col("root_caused_wait_ns") > 0))["rank"]
                      .n_unique(), 2)
        p_steps = binom_sf(steps_last, n_steps, 1.0 / causers) if n_steps >= 3 else 1.0
        # the instances of one step are not independent trials (a rank late once is last in most of that
        # step's instances: a balanced FSDP capture had one host hiccup a step, by turns); with 3 steps or
        # more only the step test counts
        p_inst = float(cand["p_value"]) if n_steps < 3 else 1.0
        consistent = p_steps <= MAX_STEP_P_VALUE or p_inst <= MAX_P_VALUE or share >= DOMINANT_SHARE
        # its worst late arrival of each step against the step's typical one
        effect = _effect(inst, rank)
        dominant = effect >= MIN_EFFECT
        others_comm = sum(v for r, v in comm_ns.items() if r != rank)
        visible = others_comm > 0 and root / others_comm >= MIN_WAIT_SHARE_OF_COMM
        peers = (replicas or {}).get(rank, [])
        peer_root = order.filter(pl.col("rank").is_in(peers))["root_caused_wait_ns"].median() if peers else None
        stands_out = peer_root is None or root >= MIN_EFFECT * float(peer_root)
        if not (consistent and dominant and visible and stands_out):
            continue
        p_cons = min(p_steps, p_inst) if share < DOMINANT_SHARE else min(p_steps, p_inst, 1.0 - share)
        confidence = 1.0 - p_cons
        accepted.append(_verdict(cand, cause_of(rank), root, confidence, steps_last, n_steps, effect,
                                 chain(blame, rank)))
    return accepted


def _effect(inst: pl.DataFrame, rank: int) -> float:
    """Median over steps of: its costliest late arrival (own wait per peer) / the median of the others'.

    Ring-position lateness makes several ranks last by similar small amounts: ~1. A straggler's late
    arrivals cost far more than the step's typical instance. Inf when it is the only one late.
    """
    per_peer = inst.with_columns(
        pl.col("step").fill_null(-1),
        (pl.col("own_ns") / (pl.col("n_ranks").cast(pl.Float64) - 1).clip(1)).alias("ell"),
    )
    typical = per_peer.filter(pl.col("last_rank") != rank).group_by("step").agg(pl.col("ell").median().alias("typical"))
    peak = per_peer.filter(pl.col("last_rank") == rank).group_by("step").agg(pl.col("ell").max().alias("peak"))
    if peak.height == 0:
        return 0.0
    ratio = peak.join(typical, on="step", how="left").select(
        pl.when(pl.col("typical") > 0).then(pl.col("peak") / pl.col("typical")).otherwise(float("inf"))
    ).to_series()
    return float(ratio.median())


def _verdict(cand: dict, cause: dict[str, float], root: float, confidence: float, steps_last: int, n_steps: int,
             effect: float, links: tuple[ChainLink, ...]) -> Verdict:
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
        rank=int(cand["rank"]), kind=kind, caused_wait_ns=float(cand["caused_wait_ns"]), root_caused_wait_ns=root,
        confidence=max(0.0, min(confidence, 1.0)), chronic=n_steps > 0 and steps_last * 2 > n_steps,
        last_arrival_pct=float(cand["last_arrival_pct"] or 0.0), steps_last=steps_last, steps_seen=n_steps,
        idle_before_ns=idle, compute_before_ns=excess, instances_last=int(cand["last_count"]), effect=effect,
        chain=links,
    )


def chain(blame: Blame, rank: int) -> tuple[ChainLink, ...]:
    """How the root's delay spread: the groups it delayed itself, then those its delayed peers delayed."""
    # the instances whose wait is mostly this root's and not negligible next to its largest (microseconds
    # of release jitter relayed further are not a hop worth naming)
    flows = (
        blame.flows.filter(pl.col("root_rank") == rank)
        .join(blame.instances.select("instance", "pg", "group_ranks", "last_rank", "caused_ns"), on="instance")
        .filter((pl.col("amount_ns") >= 0.5 * pl.col("caused_ns"))
                & (pl.col("amount_ns") >= 0.05 * pl.col("amount_ns").max()))
    )
    if flows.height == 0:
        return ()
    flows = flows.with_columns((pl.col("last_rank") != rank).alias("_hop"),
                               pl.col("group_ranks").str.split(",").alias("_members"))
    links = []
    for hop in (False, True):
        part = flows.filter(pl.col("_hop") == hop)
        if part.height == 0:
            continue
        waiting = part.select("last_rank", "_members").explode("_members").select(
            "last_rank", pl.col("_members").cast(pl.Int32, strict=False).alias("r")
        )
        waiting = waiting.filter(pl.col("r") != pl.col("last_rank"))["r"].n_unique()
        links.append(ChainLink(
            via=tuple(sorted(int(x) for x in part["last_rank"].unique())) if hop else (),
            pg=tuple(sorted((str(x) for x in part["pg"].drop_nulls().unique()), key=lambda p: (len(p), p))),
            groups=part["group_ranks"].n_unique(),
            peers=int(waiting),
            wait_ns=float(part["amount_ns"].sum()),
        ))
    return tuple(links)


def from_counterfactual(rank: int, kind: str, confidence: float, order: pl.DataFrame, blame: Blame,
                        cause: dict[str, float], saving_ns: float, saving_pct: float, added_ns: float) -> Verdict:
    """The verdict for a root the counterfactual named: its kind (``unknown``: decided from what its GPU did
    while the others waited, as :func:`roots` does), its wait figures from ``order`` and ``blame``."""
    row = order.filter(pl.col("rank") == rank)
    cand = row.row(0, named=True) if row.height else {"rank": rank, "caused_wait_ns": 0.0, "last_arrival_pct": None,
                                                      "last_count": 0, "root_caused_wait_ns": 0.0}
    per_step = blame.steps
    n_steps = per_step["step"].n_unique() if per_step.height else 0
    top = per_step.sort(["root_caused_wait_ns", "rank"], descending=[True, False]).group_by(
        "step", maintain_order=True).first()
    steps_last = top.filter(pl.col("rank") == rank).height
    inst = blame.instances.filter(pl.col("caused_ns") > 0)
    v = _verdict(cand, cause, float(cand["root_caused_wait_ns"] or 0.0), confidence, steps_last, n_steps,
                 _effect(inst, rank), chain(blame, rank))
    return dataclasses.replace(v, kind=kind if kind != "unknown" else v.kind, saving_ns=saving_ns,
                               saving_pct=saving_pct, added_ns=added_ns)
