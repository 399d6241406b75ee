"""A stored run as the Analysis that compare reads: ``compare --baseline NAME`` against the store, not the traces.

compare reads per (rank, step) values, per-rank whole-window values, per (rank, dimension) values,
every matched instance's bus bandwidth with its op and size, the verdict's rank and kind, and the
``no_straggler`` replay; the summary stores all of them, so a baseline works after its traces are gone
(a CI runner keeps nothing between jobs). Bytes come back as the size bucket, which buckets the same.
The other Analysis fields (graph, traces, clock) are not stored and are None here: this object feeds
compare only, never a presenter of a full report.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..analysis import Analysis
from ..compare.gate import LAYOUT_STORED
from ..errors import StoreError
from ..rules import NS_PER_MS
from .store import Store
from .summary import DIMENSION_METRICS, RANK_METRICS, STEP_METRICS


@dataclass(frozen=True)
class StoredVerdict:
    rank: int
    kind: str


@dataclass(frozen=True)
class StoredWhatIf:
    measured_step_time_ns: float
    scenarios: pl.DataFrame  # name, step_time_ns


def _wide(rows: pl.DataFrame, metrics: dict[str, str], index: list[str]) -> pl.DataFrame:
    part = rows.filter(pl.col("metric").is_in(list(metrics)))
    if part.height == 0:
        return pl.DataFrame(schema={k: pl.Int64 for k in index})
    wide = part.pivot(on="metric", index=index, values="value", aggregate_function="first")
    return wide.rename({m: c for m, c in metrics.items() if m in wide.columns}).sort(index)


def load_analysis(store: Store, run_id: str) -> Analysis:
    rec = store.run(run_id)
    rows = store.metrics(run_id=run_id)
    if rows.height == 0:
        raise StoreError(f"{store.target}: run {run_id!r} has no stored metrics")
    at_rank_step = rows.filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null()
                               & pl.col("dimension").is_null() & pl.col("op").is_null() & pl.col("item").is_null())
    steps = _wide(at_rank_step, STEP_METRICS, ["rank", "step"])
    at_rank = rows.filter(pl.col("rank").is_not_null() & pl.col("step").is_null() & pl.col("dimension").is_null()
                          & pl.col("item").is_null())
    ranks = _wide(at_rank, {m: c for m, c in RANK_METRICS.items()}, ["rank"])
    if "steps" in ranks.columns:
        ranks = ranks.with_columns(pl.col("steps").cast(pl.Int64))
    dims = _wide(rows.filter(pl.col("rank").is_not_null() & pl.col("dimension").is_not_null()),
                 {m: m for m in DIMENSION_METRICS}, ["rank", "dimension"])
    inst = rows.filter(pl.col("metric") == "instance_busbw_gbps").select(
        "op", pl.col("size_bucket").alias("bytes"), pl.col("value").alias("busbw_gbps"), "step")
    verdict = _verdict(store, run_id, rec["verdict"])
    groups = None
    if rec["layout"] is not None:  # the process groups compare's layout check reads (schema v4 on)
        groups = pl.DataFrame({"dimension": [d for d, _ in rec["layout"]], "ranks": [r for _, r in rec["layout"]]},
                              schema={"dimension": pl.String, "ranks": pl.List(pl.Int64)})
    # a run stored before v4 has no layout: compare says so instead of skipping the check (compare/gate.py)
    source = {**rec["source"], LAYOUT_STORED: rec["layout"] is not None}
    return Analysis(
        source=source, ranks=ranks, steps=steps, collectives=inst, bandwidth=pl.DataFrame(),
        ranking=pl.DataFrame(), verdict=verdict, roots=(verdict,) if verdict else (), blame=None, clock=None,
        matching={}, warnings=(), traces=None, dimensions=dims if dims.height else None, whatif=_whatif(rows),
        process_groups=groups)


def _verdict(store: Store, run_id: str, v: object) -> StoredVerdict | None:
    if not v:
        return None
    try:
        return StoredVerdict(int(v["rank"]), str(v["kind"]))  # type: ignore[index]
    except (KeyError, TypeError, ValueError, OverflowError):
        raise StoreError(f"{store.target}: run {run_id!r} is damaged (its verdict is {str(v)[:80]}); add it again"
                         ) from None


def _whatif(rows: pl.DataFrame) -> StoredWhatIf | None:
    measured = rows.filter(pl.col("metric") == "whatif_measured_step_time_ms")
    if measured.height == 0:
        return None
    sc = rows.filter(pl.col("metric") == "whatif_step_time_ms").select(
        pl.col("item").alias("name"), (pl.col("value") * NS_PER_MS).alias("step_time_ns"))
    return StoredWhatIf(float(measured["value"][0]) * NS_PER_MS, sc)
