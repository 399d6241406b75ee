"""Two Analyses -> differences with significance and a pass/fail verdict (pure: no I/O, no printing).

Steps are repeated measurements, so every metric is compared as two samples: per-step values for the
step metrics (overall: each step's mean over the ranks; per rank: that rank's steps), per-instance
bus bandwidth for each operation and size. Significance is a two-sided Mann-Whitney U test (scipy; exact
for small samples without ties), robust to one odd step. A metric *regresses* when its median moves
the bad way by more than its threshold AND the move is significant AND (for times) it exceeds the
noise floor, a share of the base step time. Runs without step windows fall back to per-rank
whole-window values (overall: ranks are the samples; per rank: one value each, never significant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from ..analysis import Analysis
from ..analysis.units import ms_tables
from ..errors import IncomparableRuns
from ..rules import NS_PER_MS, bucket_label
from . import gate as compare_gate
from .thresholds import DEFAULTS, METRICS, Rule, Thresholds

# compare metric -> column in Analysis.steps (and in Analysis.ranks for the no-steps fallback)
STEP_COLUMNS: dict[str, str] = {
    "step_time_ms": "span_ms",
    "compute_ms": "compute_ms",
    "exposed_comm_ms": "exposed_comm_ms",
    "exposed_wait_ms": "exposed_wait_ms",
    "exposed_transfer_ms": "exposed_transfer_ms",
    "overlap_pct": "overlap_pct",
    "idle_ms": "idle_ms",
}
EXACT_MAX = 20  # exact U distribution up to this many samples per side


@dataclass(frozen=True)
class Delta:
    """One metric in one scope, base vs new."""

    metric: str
    scope: str  # "overall", "rank 3", "all_reduce 32 MiB"
    unit: str
    before: float | None  # median of the base samples
    after: float | None
    n_before: int
    n_after: int
    p_value: float | None  # None: too few samples to test
    significant: bool
    rule: Rule | None
    exceeded: bool  # beyond the threshold and above the noise floor
    regressed: bool

    @property
    def delta(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before

    @property
    def delta_pct(self) -> float | None:
        d = self.delta
        return None if d is None or not self.before else 100.0 * d / abs(self.before)

    @property
    def confidence(self) -> float | None:
        return None if self.p_value is None else 1.0 - self.p_value


@dataclass(frozen=True)
class Prediction:
    """What the base run's ``no_straggler`` replay predicted for a run without its straggler, and NEW."""

    rank: int | None  # the base straggler the replay removed
    base_step_ms: float  # base run, measured (mean span over ranks and steps)
    predicted_step_ms: float
    new_step_ms: float  # NEW, measured the same way

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.new_step_ms - self.predicted_step_ms) / self.predicted_step_ms


@dataclass(frozen=True)
class StragglerChange:
    base_rank: int | None
    base_kind: str | None
    new_rank: int | None
    new_kind: str | None
    caused_wait: Delta | None  # the NEW straggler's caused wait per step, base vs new
    prediction: Prediction | None = None  # base's no_straggler replay against NEW's step time

    @property
    def appeared(self) -> bool:
        return self.new_rank is not None and self.new_rank != self.base_rank

    @property
    def resolved(self) -> bool:
        return self.base_rank is not None and self.new_rank is None

    @property
    def regressed(self) -> bool:
        return self.appeared and self.caused_wait is not None and self.caused_wait.regressed


@dataclass(frozen=True)
class Comparison:
    base: dict  # Analysis.source of each run
    new: dict
    thresholds: Thresholds
    overall: tuple[Delta, ...]
    per_rank: tuple[Delta, ...]
    bandwidth: tuple[Delta, ...]
    straggler: StragglerChange
    notes: tuple[str, ...] = field(default_factory=tuple)
    dimensions: tuple[Delta, ...] = ()  # per parallelism dimension; scope "TP", "DP", ...
    mismatches: tuple[str, ...] = ()  # why the runs are not comparable, compared anyway (--allow-mismatch)

    @property
    def deltas(self) -> tuple[Delta, ...]:
        return self.overall + self.per_rank + self.bandwidth + self.dimensions

    @property
    def regressions(self) -> tuple[Delta, ...]:
        out = tuple(d for d in self.deltas if d.regressed)
        s = self.straggler
        if s.regressed and s.caused_wait is not None:
            out += (s.caused_wait,)
        return out

    @property
    def passed(self) -> bool:
        return not self.regressions


# ------------------------------------------------------------------------------------------ statistics


def mann_whitney_p(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float | None:
    """Two-sided Mann-Whitney U p-value; None when a side has fewer than 2 samples.

    Exact distribution for small samples without ties, else the normal approximation with tie and
    continuity corrections.
    """
    from scipy.stats import mannwhitneyu  # lazy: scipy.stats costs ~0.5 s to import, only compare needs it

    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return None
    both = np.concatenate([a, b])
    if both.min() == both.max():
        return 1.0  # every value identical: no evidence of a shift (older scipy answers NaN here)
    ties = len(np.unique(both)) < len(both)
    method = "exact" if not ties and len(a) <= EXACT_MAX and len(b) <= EXACT_MAX else "asymptotic"
    return float(mannwhitneyu(a, b, alternative="two-sided", method=method).pvalue)


# ------------------------------------------------------------------------------------------ deltas


def _median(v: list[float]) -> float | None:
    return float(np.median(v)) if v else None


def _delta(metric: str, scope: str, x: list[float], y: list[float], th: Thresholds, floor_ms: float) -> Delta:
    x = [float(v) for v in x if v is not None and not math.isnan(v)]
    y = [float(v) for v in y if v is not None and not math.isnan(v)]
    before, after = _median(x), _median(y)
    p = mann_whitney_p(x, y)
    significant = p is not None and p < th.alpha
    rule = th.rule(metric)
    exceeded = rule is not None and rule.exceeded(before, after)
    if exceeded and METRICS[metric] == "ms" and before is not None and after is not None:
        exceeded = abs(after - before) >= floor_ms  # below the floor: too small to matter
    return Delta(metric, scope, METRICS[metric], before, after, len(x), len(y), p, significant, rule, exceeded,
                 exceeded and significant)


def _has_steps(a: Analysis) -> bool:
    return a.steps.height > 0


def _overall_samples(a: Analysis, col: str, metric: str) -> list[float]:
    """One sample per step (mean over the ranks that have it); without steps, one per rank."""
    if _has_steps(a):
        per = ms_tables(a).steps.group_by("step").agg(pl.col(col).mean()).sort("step")
        return per[col].to_list()
    rcol, ranks = "span_ms" if metric == "step_time_ms" else col, ms_tables(a).ranks
    return ranks[rcol].to_list() if rcol in ranks.columns else []


def _rank_samples(a: Analysis, col: str, metric: str, rank: int) -> list[float]:
    if _has_steps(a):
        return ms_tables(a).steps.filter(pl.col("rank") == rank)[col].to_list()
    rcol, ranks = "span_ms" if metric == "step_time_ms" else col, ms_tables(a).ranks
    return ranks.filter(pl.col("rank") == rank)[rcol].to_list() if rcol in ranks.columns else []



def _busbw_groups(a: Analysis) -> dict[tuple[str, int], list[float]]:
    c = ms_tables(a).collectives
    if c.height == 0:
        return {}
    sized = c.filter(pl.col("busbw_gbps").is_not_null() & (pl.col("bytes") > 0))
    # the same power-of-two size buckets as Analysis.bandwidth
    sized = sized.with_columns(
        (2 ** pl.col("bytes").cast(pl.Float64).log(2).floor()).cast(pl.Int64).alias("size_bucket"))
    out: dict[tuple[str, int], list[float]] = {}
    for op, bucket, bw in sized.select("op", "size_bucket", "busbw_gbps").iter_rows():
        out.setdefault((op, int(bucket)), []).append(bw)
    return out


def _floor_ms(a: Analysis, th: Thresholds) -> float:
    step = _median([v for v in _overall_samples(a, "span_ms", "step_time_ms") if v is not None])
    return 0.0 if step is None else step * th.min_effect_pct_of_step / 100.0


def _straggler(base: Analysis, new: Analysis, th: Thresholds, floor_ms: float) -> StragglerChange:
    bv, nv = base.verdict, new.verdict
    caused = None
    if nv is not None:
        rank = int(nv.rank)
        x = _rank_samples(base, "caused_wait_ms", "caused_wait_ms", rank)
        y = _rank_samples(new, "caused_wait_ms", "caused_wait_ms", rank)
        d = _delta("caused_wait_ms", f"rank {rank}", x, y, th, floor_ms)
        if not th.straggler:
            d = replace(d, regressed=False)
        caused = d
    return StragglerChange(
        base_rank=None if bv is None else int(bv.rank), base_kind=None if bv is None else bv.kind,
        new_rank=None if nv is None else int(nv.rank), new_kind=None if nv is None else nv.kind, caused_wait=caused,
        prediction=_prediction(base, new),
    )


def _prediction(base: Analysis, new: Analysis) -> Prediction | None:
    """Checks a what-if: NEW's measured step time against the base run's ``no_straggler`` replay."""
    bw, nw = base.whatif, new.whatif
    if bw is None or nw is None:
        return None
    row = bw.scenarios.filter(pl.col("name") == "no_straggler")
    if row.height == 0 or not row["step_time_ns"][0]:
        return None
    return Prediction(rank=base.verdict.rank if base.verdict else None, base_step_ms=bw.measured_step_time_ns / NS_PER_MS,
                      predicted_step_ms=float(row["step_time_ns"][0]) / NS_PER_MS,
                      new_step_ms=nw.measured_step_time_ns / NS_PER_MS)


def compare(base: Analysis, new: Analysis, thresholds: Thresholds = DEFAULTS, allow_mismatch: bool = False,
            selected: tuple[int, ...] | None = None) -> Comparison:
    """Compare NEW against BASE; ``Comparison.passed`` is the gate.

    Raises IncomparableRuns when the runs cannot be compared (compare_gate), unless ``allow_mismatch``: then the
    reasons lead the notes and ``Comparison.mismatches``. ``selected``: the ranks the user chose (--ranks)."""
    th = thresholds
    wrong = compare_gate.mismatches(base, new, selected)
    if wrong and not allow_mismatch:
        more = f" (and {len(wrong) - 1} more reason(s))" if len(wrong) > 1 else ""
        raise IncomparableRuns(f"cannot compare: {wrong[0]}{more}; fix the run or pass --allow-mismatch to "
                               "compare anyway")
    notes: list[str] = [f"compared despite a mismatch (--allow-mismatch): {w}" for w in wrong]
    floor_ms = _floor_ms(base, th)
    if not (_has_steps(base) and _has_steps(new)):
        notes.append("no step windows in " + ("either run" if not (_has_steps(base) or _has_steps(new))
                                              else "one run")
                     + ": overall metrics use per-rank whole-window values as samples, per-rank rows cannot be "
                     "tested for significance")
    overall = tuple(
        _delta(m, "overall", _overall_samples(base, col, m), _overall_samples(new, col, m), th, floor_ms)
        for m, col in STEP_COLUMNS.items()
    )

    b_ranks, n_ranks = set(base.source["ranks"]), set(new.source["ranks"])
    common = sorted(b_ranks & n_ranks)
    if b_ranks != n_ranks:
        notes.append(f"rank sets differ (base {len(b_ranks)}, new {len(n_ranks)} ranks): per-rank rows only for "
                     f"ranks in both ({_fmt_ranks(common)}); overall values are per-step means over each run's ranks")
    per_rank = tuple(
        _delta(m, f"rank {r}", _rank_samples(base, col, m, r), _rank_samples(new, col, m, r), th, floor_ms)
        for r in common for m, col in STEP_COLUMNS.items()
    )

    bb, nb = _busbw_groups(base), _busbw_groups(new)
    keys = sorted(set(bb) & set(nb))
    only = sorted(set(bb) ^ set(nb))
    if only:
        notes.append("bus bandwidth not compared for operations in one run only: "
                     + ", ".join(f"{op} {bucket_label(b)} ({'base' if (op, b) in bb else 'new'})" for op, b in only))
    bandwidth = tuple(
        _delta("busbw_gbps", f"{op} {bucket_label(b)}", bb[(op, b)], nb[(op, b)], th, floor_ms) for op, b in keys
    )
    n1, n2 = overall[0].n_before, overall[0].n_after
    if n1 and n2 and 2.0 / math.comb(n1 + n2, n1) >= th.alpha:
        # the smallest p-value the exact test can reach with these sample sizes
        notes.append(f"only {n1} base and {n2} new samples (steps) per overall metric: too few for any change to be "
                     f"significant at {100 * th.confidence:g}% confidence (profile more steps)")
    return Comparison(
        base=base.source, new=new.source, thresholds=th, overall=overall, per_rank=per_rank, bandwidth=bandwidth,
        straggler=_straggler(base, new, th, floor_ms), notes=tuple(notes),
        dimensions=_dimension_deltas(base, new, th, floor_ms), mismatches=tuple(wrong),
    )


DIMENSION_METRICS = ("exposed_comm_ms", "exposed_wait_ms")


def _dimension_samples(a: Analysis) -> dict[str, pl.DataFrame]:
    """Per dimension: each participating rank's value per step (its whole-window total / its steps)."""
    if a.dimensions is None or a.dimensions.height == 0:
        return {}
    steps = ms_tables(a).ranks.select("rank", pl.col("steps").clip(lower_bound=1).alias("_n"))
    per = ms_tables(a).dimensions.join(steps, on="rank", how="left").with_columns(
        *[(pl.col(m) / pl.col("_n").fill_null(1)).alias(m) for m in DIMENSION_METRICS])
    return {str(d): part for (d,), part in per.partition_by("dimension", as_dict=True).items()}


def _dimension_deltas(base: Analysis, new: Analysis, th: Thresholds, floor_ms: float) -> tuple[Delta, ...]:
    """"TP exposed comm" and the like: ranks are the samples (whole window, per step)."""
    b, n = _dimension_samples(base), _dimension_samples(new)
    order = ("tp", "cp", "ep", "dp", "fsdp", "pp", "world", "unknown")
    dims = sorted(set(b) & set(n), key=lambda d: order.index(d) if d in order else len(order))
    return tuple(_delta(m, d.upper(), b[d][m].to_list(), n[d][m].to_list(), th, floor_ms)
                 for d in dims for m in DIMENSION_METRICS)


def _fmt_ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks) if len(ranks) <= 8 else f"{ranks[0]}-{ranks[-1]} ({len(ranks)})"
