"""Stored runs -> each metric over runs with its change points and drifts (what the trend presenters format).

A series is one metric at one key (run level, a dimension, an op x size bucket x intra/inter node, a
what-if scenario, a rank with ``per_rank``), its values in the order the runs were added.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..errors import UsageError
from ..rules import bucket_label
from . import changepoints
from .changepoints import Drift, Options, Shift
from .store import Store
from .summary import KEYS

# what a trend shows without --metric (bookkeeping rows such as counts are left out)
DEFAULT_METRICS = (
    "step_time_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "exposed_wait_ms", "exposed_transfer_ms",
    "overlap_pct", "idle_ms", "wait_ms", "root_caused_wait_ms", "busbw_gbps_p50", "whatif_step_time_ms",
    "whatif_saving_pct", "ideal_speedup",
)
HIGHER_IS_BETTER = {"overlap_pct", "busbw_gbps_p50", "algbw_gbps_p50", "instance_busbw_gbps", "compute_ms",
                    "whatif_saving_pct"}
_ORDER = {m: i for i, m in enumerate(DEFAULT_METRICS)}


def worse(metric: str, delta: float) -> bool:
    """Whether a change of this sign is bad news (compute time is work done: neither; call it not worse)."""
    if metric == "compute_ms":
        return False
    return delta < 0 if metric in HIGHER_IS_BETTER else delta > 0



def scope_label(key: dict) -> str:
    """'run', 'TP', 'rank 3', 'all_reduce 64 MiB inter-node', 'scenario no_straggler'."""
    parts = []
    if key.get("dimension") is not None:
        parts.append(str(key["dimension"]).upper())
    if key.get("rank") is not None:
        parts.append(f"rank {key['rank']}")
    if key.get("op") is not None:
        parts.append(str(key["op"]))
    if key.get("size_bucket") is not None:
        parts.append(bucket_label(int(key["size_bucket"])))
    if key.get("intra_node") is not None:
        parts.append("intra-node" if key["intra_node"] else "inter-node")
    if key.get("item") is not None:
        parts.append(str(key["item"]))
    return " ".join(parts) or "run"


@dataclass(frozen=True)
class Series:
    metric: str
    key: dict  # the key fields that are set
    run_ids: tuple[str, ...]
    values: tuple[float | None, ...]
    shifts: tuple[Shift, ...] = ()
    drifts: tuple[Drift, ...] = ()

    @property
    def scope(self) -> str:
        return scope_label(self.key)


@dataclass(frozen=True)
class Trend:
    store: str
    runs: pl.DataFrame  # seq, run_id, added_at (insertion order)
    labels: dict[str, dict[str, str]]
    series: tuple[Series, ...]
    options: Options = field(default_factory=Options)
    filters: dict = field(default_factory=dict)

    @property
    def positions(self) -> dict[str, int]:
        """run_id -> 1-based position in this trend (run #)."""
        return {r: i + 1 for i, r in enumerate(self.runs["run_id"].to_list())}

    def changes(self) -> list[tuple[Series, Shift]]:
        """Every reported shift, earliest first (then by size)."""
        out = [(s, sh) for s in self.series for sh in s.shifts]
        pos = self.positions
        return sorted(out, key=lambda x: (pos.get(x[0].run_ids[x[1].index], 0), -abs(x[1].delta_pct or 0)))

    def drifts(self) -> list[tuple[Series, Drift]]:
        return [(s, d) for s in self.series for d in s.drifts]


def build(store: Store, metrics: list[str] | None = None, since: str | None = None,
          labels: dict[str, str] | None = None, per_rank: bool = False, opts: Options = changepoints.DEFAULTS
          ) -> Trend:
    runs = store.runs(since, labels)
    wanted = list(metrics) if metrics else list(DEFAULT_METRICS)
    rows = store.metrics(metrics=wanted, since=since, labels=labels, scopes="trend+rank" if per_rank else "trend")
    if metrics:
        missing = sorted(set(metrics) - set(rows["metric"].unique().to_list()))
        if missing and runs.height:
            known = sorted(store.metrics(run_id=runs["run_id"][-1], scopes="trend")["metric"].unique().to_list())
            raise UsageError(f"--metric {', '.join(missing)}: not in the selected runs (known: {', '.join(known)})")
    series = _series(rows, opts)
    return Trend(store=store.target, runs=runs, labels=store.labels(runs["run_id"].to_list()), series=series,
                 options=opts, filters={"metrics": metrics or [], "since": since, "labels": labels or {},
                                        "per_rank": per_rank})


def _series(rows: pl.DataFrame, opts: Options) -> tuple[Series, ...]:
    if rows.height == 0:
        return ()
    keyed = rows.with_columns(pl.col("value").fill_null(float("nan"))).sort("seq", maintain_order=True)
    out = []
    for (metric, *key), part in keyed.partition_by(["metric", *KEYS], maintain_order=True, as_dict=True).items():
        vals = part["value"].to_numpy()
        shifts, drifts = changepoints.detect(vals, opts)
        out.append(Series(
            metric=metric, key={k: v for k, v in zip(KEYS, key) if v is not None},
            run_ids=tuple(part["run_id"].to_list()),
            values=tuple(None if not np.isfinite(v) else float(v) for v in vals),
            shifts=tuple(shifts), drifts=tuple(drifts)))

    def order(s: Series) -> tuple:
        k = s.key
        return (_ORDER.get(s.metric, len(_ORDER)), s.metric, k.get("dimension") or "", k.get("op") or "",
                k.get("size_bucket") or 0, -1 if k.get("intra_node") is None else k["intra_node"],
                k.get("item") or "", -1 if k.get("rank") is None else k["rank"])

    return tuple(sorted(out, key=order))
