"""GPU events whose times cannot be right: dropped after the readers, counted, and said; one rule for every format.

A reader hands over what the file says; an event with a missing or non-finite ``ts``/``dur`` arrives with a null
start or end, a negative duration as end < start. Left in, one such kernel stretches the window or the unions.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

from ..model import RankTrace, Skipped

PROBLEM = "negative, missing or non-finite ts/dur"


def invalid_times() -> pl.Expr:
    start, end = pl.col("start_ns"), pl.col("end_ns")
    return start.is_null() | end.is_null() | (start < 0) | (end < start)


def _invalid_counts(traces: list[RankTrace]) -> list[int]:
    """Each trace's number of invalid GPU events: one query over all of them (thousands of ranks)."""
    if not traces:
        return []
    frames = [t.gpu for t in traces]
    try:
        flags = pl.concat(frames, how="vertical", rechunk=False).select(
            invalid_times().fill_null(False).cast(pl.Int64))
    except (pl.exceptions.SchemaError, pl.exceptions.ShapeError):  # tables of different shapes: one at a time
        return [int(f.select(invalid_times().sum()).item() or 0) for f in frames]
    ends = np.cumsum([f.height for f in frames])
    cs = np.concatenate([[0], np.cumsum(flags.to_series().to_numpy())])
    return (cs[ends] - cs[ends - [f.height for f in frames]]).tolist()


def drop_invalid_gpu(traces: list[RankTrace]) -> tuple[list[RankTrace], list[Skipped], list[str]]:
    """Each rank without its invalid GPU events; a rank left with none becomes a Skipped entry."""
    kept: list[RankTrace] = []
    skipped: list[Skipped] = []
    warnings: list[str] = []
    for t, bad in zip(traces, _invalid_counts(traces)):
        if not bad:
            kept.append(t)
            continue
        where = Path(t.meta.source).name + (f" (rank {t.meta.rank})" if t.meta.rank >= 0 else "")
        gpu = t.gpu.filter(~invalid_times())
        if gpu.height == 0:
            skipped.append(Skipped(t.meta.source, f"{t.meta.source}: all {bad} GPU events have {PROBLEM} "
                                                  "(re-export the trace from the profiler)"))
            continue
        warnings.append(f"{where}: dropped {bad} of {t.gpu.height} GPU events with {PROBLEM}")
        kept.append(replace(t, gpu=gpu))
    return kept, skipped, warnings
