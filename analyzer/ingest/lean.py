"""Lean readers: each format's reader with the ``cpu`` table cut to what anything after loading reads.

``cpu_op`` rows are most of a trace and no metric uses them, so they are dropped per rank, before
caching. The loader (local workers) and the Dask scale-out both read through here, so neither
imports the other.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import polars as pl

from ..errors import TraceError
from ..model import RankTrace
from . import Reader, reader_for
from .options import ReadOptions

CPU_KEPT = ("runtime", "annotation")  # cpu kinds anything after loading reads


def read_lean(path: Path, opts: ReadOptions, fmt: str = "kineto") -> list[RankTrace]:
    """A reader's tables with the ``cpu`` table cut to ``CPU_KEPT`` (Kineto skips the rest while decoding)."""
    if fmt == "kineto":
        from .kineto.reader import read_tables

        traces = read_tables(path, opts, cpu_ops=False)
    else:
        traces = reader_for(fmt)(path, opts)
        n = sum(t.gpu.height + t.cpu.height for t in traces)
        if n > opts.limits.max_events:
            raise TraceError(path, f"has {n:,} events for the tables, more than {opts.limits.max_events:,} (the "
                             "events-per-rank limit)", "raise --max-events if the trace is real")
    return [replace(t, cpu=t.cpu.filter(pl.col("kind").is_in(CPU_KEPT))) for t in traces]


def lean_reader(fmt: str) -> Reader:
    return partial(_read_fmt, fmt=fmt)  # a partial of a module function pickles (Dask, workers)


def _read_fmt(path: Path, opts: ReadOptions, fmt: str) -> list[RankTrace]:
    return read_lean(path, opts, fmt)
