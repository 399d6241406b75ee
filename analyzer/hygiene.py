"""GPU events whose times cannot be right: dropped after the readers, counted, and said; one rule for every format.

A reader hands over what the file says; an event with a missing or non-finite ``ts``/``dur`` arrives with a null
start or end, a negative duration as end < start. Left in, one such kernel stretches the window or the unions.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl

from .model import RankTrace, Skipped

PROBLEM = "negative, missing or non-finite ts/dur"


def invalid_times() -> pl.Expr:
    start, end = pl.col("start_ns"), pl.col("end_ns")
    return start.is_null() | end.is_null() | (start < 0) | (end < start)


def drop_invalid_gpu(traces: list[RankTrace]) -> tuple[list[RankTrace], list[Skipped], list[str]]:
    """Each rank without its invalid GPU events; a rank left with none becomes a Skipped entry."""
    kept: list[RankTrace] = []
    skipped: list[Skipped] = []
    warnings: list[str] = []
    for t in traces:  # one vectorized filter per rank, as the loader already does per rank
        bad = int(t.gpu.select(invalid_times().sum()).item() or 0)
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
