"""An op table's file (Parquet, Arrow IPC file or stream, CSV: told apart by content) -> one checked frame.

Columns (README "Op tables"): ``rank``, ``step``, ``optype``, a start and a duration (or end) whose unit is in
the name (``start_ns``/``dur_ns``/``end_ns``, ``_us``, ``_ms``, ``_s``), or the What-if artifact's ``start_ts``
and ``duration`` in seconds; optional ``dp_rank``, ``stage``, ``seq_id``, ``mc``, ``gmc``, ``mb_id`` (-1 or
null: not applicable). Times become int64 ns. Rows that cannot be right are dropped and counted; a step that
some ranks did not record is dropped and counted (its collectives could not be matched); a table with
nothing left is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ...errors import TraceError
from ...rules import NS_PER_UNIT
from ..source import head
from .ops import STREAM_COMPUTE, UNKNOWN_KIND, op_rules

REQUIRED = ("rank", "step", "optype")
OPTIONAL_INT = ("dp_rank", "stage", "seq_id", "mc", "gmc", "mb_id")
_UNITS = NS_PER_UNIT
WHATIF_TIMES = ("start_ts", "duration")  # the What-if dialect: seconds (its wia.py: EPS = 1e-2 is "10ms")
_HINT = "an op table needs rank, step, optype, start and duration columns (see the README's Op tables)"


@dataclass(frozen=True)
class Table:
    df: pl.DataFrame
    dialect: str  # "whatif" | "canonical"
    warnings: list[str] = field(default_factory=list)


def sniff(path: Path) -> str | None:
    """"parquet", "arrow", "arrow-stream" or "csv" by content; None when it is none of them."""
    start = head(path, 4096)
    if start[:4] == b"PAR1":
        return "parquet"
    if start[:6] == b"ARROW1":
        return "arrow"
    if start[:4] == b"\xff\xff\xff\xff":
        return "arrow-stream"
    first = start.split(b"\n", 1)[0].decode("utf-8", "replace").lower()
    cols = {c.strip().strip('"') for c in first.split(",")}
    return "csv" if {"rank", "step", "optype"} <= cols else None


def is_op_table(path: Path) -> bool:
    """A file of a known container whose columns include rank, step and optype (reads only the schema)."""
    kind = sniff(path)
    try:
        if kind == "parquet":
            cols = pl.read_parquet_schema(path)
        elif kind in ("arrow", "arrow-stream"):
            import pyarrow.ipc as ipc

            with open(path, "rb") as fh:
                cols = (ipc.open_file(fh) if kind == "arrow" else ipc.open_stream(fh)).schema.names
        else:
            return kind == "csv"
    except Exception:  # noqa: BLE001 - a damaged file in a folder is not an op table; named explicitly, the reader says why
        return False
    return {"rank", "step", "optype"} <= {c.strip().lower() for c in cols}


def _load(path: Path) -> pl.DataFrame:
    kind = sniff(path)
    try:
        if kind == "parquet":
            return pl.read_parquet(path)
        if kind == "arrow":
            return pl.read_ipc(path)
        if kind == "arrow-stream":
            return pl.read_ipc_stream(path)
        if kind == "csv":
            return pl.read_csv(path, infer_schema_length=10_000)
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise TraceError(path, f"cannot be read as an op table ({kind}: {str(exc).splitlines()[0]})",
                         "copy the file again or re-export it") from None
    raise TraceError(path, "is not an op table (neither Parquet, Arrow IPC nor CSV with rank, step, optype)", _HINT)


def _times(path: Path, df: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """start_ns and end_ns (Int64, null where missing or not finite) from the table's time columns."""
    cols = set(df.columns)
    if set(WHATIF_TIMES) <= cols:
        start, dur, end, factor, dialect = "start_ts", "duration", None, _UNITS["s"], "whatif"
    else:
        unit = next((u for u in _UNITS if f"start_{u}" in cols and ({f"dur_{u}", f"end_{u}"} & cols)), None)
        if unit is None:
            have = sorted(c for c in cols if c.startswith(("start", "dur", "end")))
            raise TraceError(path, f"has no start and duration columns (found {', '.join(have) or 'none'})",
                             "name them start_ns and dur_ns (or _us, _ms, _s), or start_ts and duration in seconds")
        start, factor, dialect = f"start_{unit}", _UNITS[unit], "canonical"
        dur = f"dur_{unit}" if f"dur_{unit}" in cols else None
        end = None if dur else f"end_{unit}"

    def ns(name: str) -> pl.Expr:
        c = pl.col(name)
        if df.schema[name].is_float():
            c = c.cast(pl.Float64)
            return pl.when(c.is_finite()).then((c * factor).round()).otherwise(None).cast(pl.Int64)
        if df.schema[name].is_integer():
            return c.cast(pl.Int64) * factor
        return (c.cast(pl.Float64, strict=False) * factor).round().cast(pl.Int64)

    if df.schema[start] == pl.Utf8 or (dur and df.schema[dur] == pl.Utf8):
        raise TraceError(path, "has non-numeric start or duration values", "write times as numbers")
    df = df.with_columns(ns(start).alias("start_ns"), ns(dur or end).alias("_d"))
    if end:
        df = df.with_columns((pl.col("_d") - pl.col("start_ns")).alias("_d"))
    return df, dialect


def read_table(path: Path) -> Table:
    df = _load(path)
    df = df.rename({c: c.strip().lower() for c in df.columns if c != c.strip().lower()})
    if df.height == 0:
        raise TraceError(path, "has no rows", _HINT)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TraceError(path, f"has no {', '.join(missing)} column{'s' if len(missing) > 1 else ''}", _HINT)
    df, dialect = _times(path, df)
    warnings: list[str] = []
    total = df.height
    df = df.with_columns(pl.col("optype").cast(pl.Utf8), pl.col("rank").cast(pl.Int32, strict=False),
                         pl.col("step").cast(pl.Int64, strict=False))
    bad = {
        "no rank, step or op type": pl.any_horizontal(pl.col("rank").is_null(), pl.col("step").is_null(),
                                                      pl.col("optype").is_null()),
        "a missing or non-finite start": pl.col("start_ns").is_null(),
        "a missing or non-finite duration": pl.col("_d").is_null(),
        "a negative duration": pl.col("_d") < 0,
    }
    flags = df.select(**{k: v.fill_null(False) for k, v in bad.items()})
    drop = flags.select(pl.any_horizontal(pl.all())).to_series()
    if drop.all():
        worst = max(bad, key=lambda k: flags[k].sum())
        raise TraceError(path, f"every one of its {total} ops has {worst}", "re-export the op table")
    if drop.any():
        counts = ", ".join(f"{int(flags[k].sum())} with {k}" for k in bad if flags[k].any())
        warnings.append(f"{path.name}: dropped {int(drop.sum())} of {total} ops ({counts})")
        df = df.filter(~drop)
    df = df.with_columns((pl.col("start_ns") + pl.col("_d")).alias("end_ns")).drop("_d")
    df, more = _kinds(path, df)
    warnings += more
    df, more = _whole_steps(path, df)
    warnings += more
    return Table(_optional(df), dialect, warnings)


def _kinds(path: Path, df: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    rules = op_rules().select("optype", "kind", "stream")
    df = df.join(rules, on="optype", how="left")
    unknown = df.filter(pl.col("kind").is_null())
    if unknown.height == df.height:
        names = unknown["optype"].unique().sort().head(5).to_list()
        raise TraceError(path, f"has no known op type (found {', '.join(names)})",
                         "op types are the What-if artifact's (forward-compute, params-all-gather, forward-send, ...)")
    warnings = []
    if unknown.height:
        counts = unknown.group_by("optype").len().sort("len", "optype", descending=[True, False])
        listed = ", ".join(f"{o} ({n})" for o, n in counts.head(5).rows())
        warnings.append(f"{path.name}: {unknown.height} ops of {counts.height} unknown op type(s) kept as other work "
                        f"on the compute stream: {listed}")
        df = df.with_columns(pl.col("kind").fill_null(UNKNOWN_KIND), pl.col("stream").fill_null(STREAM_COMPUTE))
    return df, warnings


def _whole_steps(path: Path, df: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Drop steps that some ranks did not record: their collectives would have absent participants."""
    n_ranks = df["rank"].n_unique()
    per_step = df.group_by("step").agg(pl.col("rank").n_unique().alias("n"))
    partial = per_step.filter(pl.col("n") < n_ranks).sort("step")
    if partial.height == 0:
        return df, []
    if partial.height == per_step.height:
        raise TraceError(path, f"has no step recorded on all {n_ranks} ranks", "export whole steps of every rank")
    shown = ", ".join(f"{s} ({n} ranks)" for s, n in partial.head(5).rows())
    more = f" and {partial.height - 5} more" if partial.height > 5 else ""
    return df.join(partial.select("step"), on="step", how="anti"), [
        f"{path.name}: dropped {partial.height} of {per_step.height} steps recorded on only some of the {n_ranks} "
        f"ranks: {shown}{more}"]


def _optional(df: pl.DataFrame) -> pl.DataFrame:
    """Optional integer columns as Int32 with null for "not applicable" (the artifact writes -1); seq_id derived
    where absent: the ordinal of the op among its type's ops in the step on its rank, by start."""
    cols = []
    for c in OPTIONAL_INT:
        if c in df.columns:
            x = pl.col(c).cast(pl.Int32, strict=False)
            cols.append(x if c in ("dp_rank", "stage", "seq_id") else pl.when(x >= 0).then(x).alias(c))
        elif c not in ("dp_rank", "stage"):
            cols.append(pl.lit(None, dtype=pl.Int32).alias(c))
    df = df.with_columns(cols)
    if df["seq_id"].null_count() == df.height:
        df = df.sort("rank", "step", "start_ns").with_columns(
            pl.int_range(pl.len(), dtype=pl.Int32).over("rank", "step", "optype").alias("seq_id"))
    keep = ["rank", "dp_rank", "stage", "step", "optype", "kind", "stream", "start_ns", "end_ns", *OPTIONAL_INT[2:]]
    return df.select([c for c in keep if c in df.columns])
