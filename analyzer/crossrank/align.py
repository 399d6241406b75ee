"""Per-rank clock offsets from the ends of matched blocking collectives.

Blocking collectives end almost together on every rank, so each end is e[i, r] = T[i] + o[r] + noise.
Offsets are fitted by alternating medians (robust to outliers, and it chains through groups that do
not contain the reference rank, e.g. TP pairs linked by DP pairs). ``offsets[r]`` is subtracted from
rank r's timestamps to put it on the reference rank's clock; nothing is written back to the input. The
subtraction itself happens in one place, the graph's clock (``graph.Clock``), which everything downstream reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..rules import BLOCKING_OPS


@dataclass(frozen=True)
class ClockFit:
    method: str  # "collective-end" | "none"
    reference: int | None
    offsets_ns: dict[int, float]
    uncertainty_ns: float | None
    instances: int


def fit_offsets(inst: pl.DataFrame, ranks: list[int], iterations: int = 200) -> ClockFit:
    """``inst``: matched collective rows (rank, instance, op, end_ns)."""
    blocking = inst.filter(pl.col("instance").is_not_null() & pl.col("op").is_in(BLOCKING_OPS))
    # shift to a small origin so float medians keep nanoseconds
    e = blocking["end_ns"].cast(pl.Float64).to_numpy()
    if e.size == 0 or blocking["rank"].n_unique() < 2:
        return ClockFit("none", ranks[0] if ranks else None, {r: 0.0 for r in ranks}, None, 0)
    e = e - e.min()
    rank_ids, r_idx = np.unique(blocking["rank"].to_numpy(), return_inverse=True)
    _, i_idx = np.unique(blocking["instance"].cast(pl.Categorical).to_physical().to_numpy(), return_inverse=True)
    ref = int(rank_ids[0])
    o, spread = _alternating_medians(e, r_idx, i_idx, iterations)
    offs = pl.DataFrame({"rank": rank_ids, "o": o})
    inf = float("inf")
    # a clock that already satisfies causality needs no correction (ranks on one host): ends can
    # disagree by milliseconds there (GPU time-slicing) without the clocks disagreeing at all. A rank
    # that shares no collective with the reference has no such evidence: it keeps its estimate.
    fitted = (
        pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int64})
        .join(offs.select(pl.col("rank").cast(pl.Int64), "o"), on="rank", how="left")
        .join(_causal_bounds(blocking, ref), on="rank", how="left")
        .with_columns(pl.col("lo").is_not_null().alias("bounded"))
        .with_columns(pl.col("o").fill_null(0.0), pl.col("lo").fill_null(-inf), pl.col("hi").fill_null(inf))
        .with_columns(
            pl.when(pl.col("bounded") & (pl.col("lo") <= 0.0) & (pl.col("hi") >= 0.0)).then(0.0)
            .otherwise(pl.min_horizontal(pl.max_horizontal("o", "lo"), "hi")).alias("chosen")
        )
    )
    moved = float((fitted["o"] - fitted["chosen"]).abs().max() or 0.0) if fitted.height else 0.0
    offsets = dict(zip(ranks, fitted["chosen"].to_list()))
    return ClockFit(
        method="collective-end",
        reference=ref,
        offsets_ns=offsets,
        uncertainty_ns=max(float(spread.max()), moved),
        instances=int(i_idx.max()) + 1,
    )


def _alternating_medians(e: np.ndarray, r_idx: np.ndarray, i_idx: np.ndarray, iterations: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (rank index 0 is the reference, offset 0) and each rank's median residual, for ends ``e``
    of rank ``r_idx`` in instance ``i_idx``: instance times and offsets, each the median given the other.
    In numpy over integer indexes: the loop runs up to ``iterations`` times (92 on the 4 x 512 MB
    hybrid_tp_dp capture, 48 k instances), where two Polars group-bys and three joins a pass took 1.2 s."""
    per_inst, per_rank = _Medians(i_idx), _Medians(r_idx)
    o = np.zeros(int(r_idx.max()) + 1)
    for _ in range(iterations):
        last = o
        t = per_inst(e - o[r_idx])
        o = per_rank(e - t[i_idx])
        o = o - o[0]
        # pairwise groups chained through other ranks converge geometrically (by half per round): stop
        # when no offset moves by half a nanosecond, not after a fixed count that leaves a fraction
        if np.abs(o - last).max() < 0.5:
            break
    t = per_inst(e - o[r_idx])
    return o, per_rank(np.abs(e - t[i_idx] - o[r_idx]))


class _Medians:
    """Medians per group, over and over for values that change while the groups do not. Groups of one size
    are stacked into a matrix (one partition per size, not one per group); an even count takes Polars'
    formula, lo + (hi - lo) * 0.5, so the fit is the one a Polars group-by gave, number for number."""

    def __init__(self, group: np.ndarray) -> None:
        counts = np.bincount(group)
        order = np.argsort(group, kind="stable")
        starts = np.cumsum(counts) - counts
        self.n = counts.size
        self.parts = []
        for m in np.unique(counts[counts > 0]):
            gs = np.flatnonzero(counts == m)
            self.parts.append((gs, order[starts[gs][:, None] + np.arange(m)], int((m - 1) // 2), int(m // 2)))

    def __call__(self, v: np.ndarray) -> np.ndarray:
        out = np.full(self.n, np.nan)
        for gs, idx, lo, hi in self.parts:
            x = np.partition(v[idx], sorted({lo, hi}), axis=1)
            out[gs] = x[:, lo] + (x[:, hi] - x[:, lo]) * 0.5
        return out


def _causal_bounds(rows: pl.DataFrame, ref: int) -> pl.DataFrame:
    """rank, lo, hi: the interval for o[r] − o[ref] in which no rank leaves a shared collective before
    the other entered."""
    me = rows.filter(pl.col("rank") == ref).select("instance", pl.col("start_ns").alias("s0"),
                                                    pl.col("end_ns").alias("e0"))
    pairs = rows.filter(pl.col("rank") != ref).join(me, on="instance")
    return pairs.group_by("rank").agg(
        (pl.col("start_ns") - pl.col("e0")).max().cast(pl.Float64).alias("lo"),
        (pl.col("end_ns") - pl.col("s0")).min().cast(pl.Float64).alias("hi"),
    ).with_columns(pl.col("rank").cast(pl.Int64))

