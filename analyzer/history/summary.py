"""Analysis -> the run's summary: long-format metric rows (pure: no I/O, no rounding).

One row per number: ``metric`` plus the key fields that say what it is about (``rank``, ``step``,
``dimension``, ``op``, ``size_bucket``, ``intra_node``, ``item``: a what-if scenario or a verdict kind),
null where a field does not apply, and ``value``. A new metric is new rows, never a new column, so the
store's schema does not change when the analysis grows.

Scopes (which key fields are set):
- run: no key. The overall value, as compare computes it: the median over steps of the per-step mean
  across ranks (without step windows: the mean over ranks of the whole-window value).
- rank: whole captured window per rank (``Analysis.ranks``); step time is the rank's mean step span.
- rank + step: every (rank, step) of the step metrics compare tests (``Analysis.steps``).
- step: per step, the mean across ranks.
- dimension (+ rank): per parallelism dimension per rank (``Analysis.dimensions``); without rank the
  mean over the dimension's ranks.
- op + size_bucket + intra_node: bus bandwidth per operation and power-of-two size bucket
  (``Analysis.bandwidth``); ``instance_busbw_gbps`` rows (step set) keep every matched instance's
  busbw so that compare's per-size Mann-Whitney test reads the same samples from the store.
- item: the what-if scenarios (``whatif_step_time_ms``, ``whatif_saving_pct``) and the verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ..analysis.units import ms_tables
from ..rules import NS_PER_MS

if TYPE_CHECKING:  # the store and trend import this module's schema without the analysis stages
    from ..analysis import Analysis

ROW_SCHEMA: dict[str, pl.DataType] = {
    "metric": pl.String, "rank": pl.Int64, "step": pl.Int64, "dimension": pl.String, "op": pl.String,
    "size_bucket": pl.Int64, "intra_node": pl.Int64, "item": pl.String, "value": pl.Float64,
}
KEYS = ("rank", "step", "dimension", "op", "size_bucket", "intra_node", "item")

# stored metric name -> column of Analysis.steps (the per-step metrics; compare's STEP_COLUMNS and more)
STEP_METRICS: dict[str, str] = {
    "step_time_ms": "span_ms", "compute_ms": "compute_ms", "exposed_comm_ms": "exposed_comm_ms",
    "exposed_wait_ms": "exposed_wait_ms", "exposed_transfer_ms": "exposed_transfer_ms", "overlap_pct": "overlap_pct",
    "idle_ms": "idle_ms", "wait_ms": "wait_ms", "caused_wait_ms": "caused_wait_ms",
    "root_caused_wait_ms": "root_caused_wait_ms",
}
# stored metric name -> column of Analysis.ranks (whole window)
RANK_METRICS: dict[str, str] = {
    "step_time_ms": "step_time_mean_ms", "span_ms": "span_ms", "steps": "steps", "compute_ms": "compute_ms",
    "comm_ms": "comm_ms", "exposed_comm_ms": "exposed_comm_ms", "exposed_wait_ms": "exposed_wait_ms",
    "exposed_transfer_ms": "exposed_transfer_ms", "overlap_pct": "overlap_pct", "idle_ms": "idle_ms",
    "wait_ms": "wait_ms", "caused_wait_ms": "caused_wait_ms", "root_caused_wait_ms": "root_caused_wait_ms",
    "propagated_wait_ms": "propagated_wait_ms",
}
DIMENSION_METRICS = ("comm_ms", "exposed_comm_ms", "exposed_wait_ms", "exposed_transfer_ms", "wait_ms",
                     "root_caused_wait_ms", "busbw_gbps_p50")
BANDWIDTH_METRICS = ("busbw_gbps_p50", "algbw_gbps_p50", "transfer_ms_p50", "count")


def _rows(df: pl.DataFrame, metrics: dict[str, str], keys: dict[str, pl.Expr]) -> pl.DataFrame:
    """Unpivot ``df``'s metric columns into long rows with the given key expressions."""
    present = {m: c for m, c in metrics.items() if c in df.columns}
    if df.height == 0 or not present:
        return pl.DataFrame(schema=ROW_SCHEMA)
    wide = df.select(*[e.alias(k) for k, e in keys.items()],
                     *[pl.col(c).cast(pl.Float64).alias(m) for m, c in present.items()])
    long = wide.unpivot(index=list(keys), on=list(present), variable_name="metric", value_name="value")
    return long.select(
        "metric", *[(pl.col(k) if k in keys else pl.lit(None)).cast(ROW_SCHEMA[k]).alias(k) for k in KEYS], "value")


def _run_level(a: Analysis) -> pl.DataFrame:
    """The overall value per metric (compare's 'overall' basis)."""
    t = ms_tables(a)
    cols = {m: c for m, c in STEP_METRICS.items() if c in t.steps.columns}
    if a.steps.height:
        per_step = t.steps.group_by("step").agg(*[pl.col(c).mean().alias(m) for m, c in cols.items()])
        one = per_step.select(*[pl.col(m).median() for m in cols])
    else:
        rc = {m: RANK_METRICS[m] for m in cols if RANK_METRICS.get(m) in t.ranks.columns}
        one = t.ranks.select(*[pl.col(c).mean().alias(m) for m, c in rc.items()])
    if one.height == 0 or not one.columns:
        return pl.DataFrame(schema=ROW_SCHEMA)
    return _rows(one, {m: m for m in one.columns}, {})


def _per_step(a: Analysis) -> pl.DataFrame:
    steps = ms_tables(a).steps
    cols = {m: c for m, c in STEP_METRICS.items() if c in steps.columns}
    if a.steps.height == 0:
        return pl.DataFrame(schema=ROW_SCHEMA)
    per_step = steps.group_by("step").agg(*[pl.col(c).mean().alias(m) for m, c in cols.items()]).sort("step")
    return _rows(per_step, {m: m for m in cols}, {"step": pl.col("step")})


def _dimensions(a: Analysis) -> pl.DataFrame:
    d = ms_tables(a).dimensions
    if d is None or d.height == 0:
        return pl.DataFrame(schema=ROW_SCHEMA)
    metrics = {m: m for m in DIMENSION_METRICS}
    per_rank = _rows(d, metrics, {"rank": pl.col("rank"), "dimension": pl.col("dimension")})
    mean = d.group_by("dimension").agg(*[pl.col(m).mean() for m in DIMENSION_METRICS if m in d.columns])
    return pl.concat([_rows(mean, metrics, {"dimension": pl.col("dimension")}), per_rank])


def _intra(df: pl.DataFrame) -> pl.Expr:
    return pl.col("intra_node").cast(pl.Int64) if "intra_node" in df.columns else pl.lit(None, dtype=pl.Int64)


def _bandwidth(a: Analysis) -> pl.DataFrame:
    t = ms_tables(a)
    bw, coll = t.bandwidth, t.collectives
    parts = []
    if bw.height:
        parts.append(_rows(bw, {m: m for m in BANDWIDTH_METRICS}, {
            "op": pl.col("op"), "size_bucket": pl.col("size_bucket"), "intra_node": _intra(bw)}))
    if coll.height and "busbw_gbps" in coll.columns:
        sized = coll.filter(pl.col("busbw_gbps").is_not_null() & (pl.col("bytes") > 0))
        if sized.height:
            # the same power-of-two buckets as Analysis.bandwidth and compare
            bucket = (2 ** pl.col("bytes").cast(pl.Float64).log(2).floor()).cast(pl.Int64)
            parts.append(_rows(sized, {"instance_busbw_gbps": "busbw_gbps"}, {
                "step": pl.col("step"), "op": pl.col("op"), "size_bucket": bucket, "intra_node": _intra(sized)}))
    return pl.concat(parts) if parts else pl.DataFrame(schema=ROW_SCHEMA)


def _scalar(metric: str, value: float | None, **keys: object) -> dict:
    return {"metric": metric, **{k: keys.get(k) for k in KEYS}, "value": None if value is None else float(value)}


def _whatif_and_verdict(a: Analysis) -> pl.DataFrame:
    rows: list[dict] = []
    w = a.whatif
    if w is not None:
        rows.append(_scalar("whatif_measured_step_time_ms", w.measured_step_time_ns / NS_PER_MS))
        rows.append(_scalar("whatif_replay_error_pct", w.replay_error_pct))
        if w.ideal_speedup is not None:
            rows.append(_scalar("ideal_speedup", w.ideal_speedup))
        for name, step_ns, pct in w.scenarios.select("name", "step_time_ns", "saving_pct").iter_rows():
            rows.append(_scalar("whatif_step_time_ms", None if step_ns is None else step_ns / NS_PER_MS, item=name))
            rows.append(_scalar("whatif_saving_pct", pct, item=name))
    for i, v in enumerate(a.roots):
        # item: the kind; step: the root's order (0 = the verdict)
        rows.append(_scalar("root_root_caused_wait_ms", v.root_caused_wait_ns / NS_PER_MS, rank=v.rank, step=i, item=v.kind))
        rows.append(_scalar("root_confidence", v.confidence, rank=v.rank, step=i, item=v.kind))
    rows.append(_scalar("straggler_found", 1.0 if a.verdict is not None else 0.0))
    return pl.DataFrame(rows, schema=ROW_SCHEMA) if rows else pl.DataFrame(schema=ROW_SCHEMA)


def metric_rows(a: Analysis) -> pl.DataFrame:
    """Every stored number of one analysis, in a fixed order (scope by scope)."""
    rank_keys = {"rank": pl.col("rank")}
    parts = [
        _run_level(a),
        _rows(ms_tables(a).ranks, RANK_METRICS, rank_keys),
        _per_step(a),
        _rows(ms_tables(a).steps, STEP_METRICS, {"rank": pl.col("rank"), "step": pl.col("step")}),
        _dimensions(a),
        _bandwidth(a),
        _whatif_and_verdict(a),
    ]
    return pl.concat([p for p in parts if p.height], how="vertical") if any(p.height for p in parts) else \
        pl.DataFrame(schema=ROW_SCHEMA)


def verdict(a: Analysis) -> dict | None:
    """The verdict as the run record keeps it (compare reads rank and kind)."""
    v = a.verdict
    if v is None:
        return None
    return {"rank": int(v.rank), "kind": v.kind, "root_caused_wait_ms": v.root_caused_wait_ns / NS_PER_MS,
            "confidence": float(v.confidence), "chain": [list(c.via) for c in v.chain]}


def layout(a: Analysis) -> list[list]:
    """The run's process groups as [dimension, sorted member ranks], sorted: what compare's layout check reads."""
    g = a.process_groups
    if g is None or g.height == 0:
        return []
    return sorted([str(d), sorted(int(r) for r in rs)] for d, rs in g.select("dimension", "ranks").iter_rows())
