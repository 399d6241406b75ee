"""Kineto events selected by ``kineto.py`` -> the canonical GPU, CPU, comm-call and step tables."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import msgspec
import polars as pl

from ...comm_catalogue import gpu_kind, launcher_op, op_from_collective_name
from ...model import COMM_CALL_SCHEMA, CPU_SCHEMA, GPU_OPTIONAL, GPU_SCHEMA, STEP_SCHEMA, conform
from ...rules import DIRECTED_P2P_OPS
from .timestamps import us_numbers_to_ns, us_text_to_ns


# The args fields the tables read; kineto.py's event structs decode ``args`` into this.
class _Args(msgspec.Struct, gc=False):
    device: Any = None
    stream: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_old: Any = msgspec.field(default=None, name="external id")
    collective: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    # p2p peer: "Dst Rank"/"Src Rank" are global ranks (PyTorch >= 2.4); "Rank" holds the peer's
    # group rank for send/recv in every version that records p2p (its own rank for collectives)
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")
    src_rank: Any = msgspec.field(default=None, name="Src Rank")
    rank_arg: Any = msgspec.field(default=None, name="Rank")
    in_split: Any = msgspec.field(default=None, name="In split size")
    out_split: Any = msgspec.field(default=None, name="Out split size")
    nbytes: Any = msgspec.field(default=None, name="bytes")  # a copy's size (gpu_memcpy)
    # the rank a merged multi-rank file gives each event (TraceLens TraceFusion writes args.rank)
    merged_rank: Any = msgspec.field(default=None, name="rank")


# Kineto categories (and the capitalised ones of very old traces) -> raw GPU category.
_GPU_CATS = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "Memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "Memset": "gpu_memset",
    "cuda_sync": "cuda_sync",
}
_CPU_CATS = {
    "cpu_op": "op",
    "Operator": "op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "Runtime": "runtime",
}
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4, "double": 8, "float64": 8, "long": 8,
    "int64": 8, "uint64": 8, "half": 2, "float16": 2, "bfloat16": 2, "short": 2, "int16": 2,
    "byte": 1, "char": 1, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}


def dtype_size(dtype: str | None) -> int | None:
    if not dtype:
        return None
    return _DTYPE_BYTES.get(str(dtype).lower().replace("torch.", ""))


class _NeedsText(Exception):
    """A timestamp the number path cannot convert exactly."""


_Times = Callable[..., tuple[pl.Series, pl.Series]]  # (ts, dur, fill_dur=True) -> (start_ns, end_ns)


def _int_series(values: list[Any]) -> pl.Series:
    return pl.Series(values, dtype=pl.Int64, strict=False)


def _text_times(ts: list[msgspec.Raw], dur: list[msgspec.Raw], fill_dur: bool = True) -> tuple[pl.Series, pl.Series]:
    start = us_text_to_ns(pl.Series([bytes(t) for t in ts], dtype=pl.Binary))
    length = us_text_to_ns(pl.Series([bytes(d) for d in dur], dtype=pl.Binary))
    return start, start + (length.fill_null(0) if fill_dur else length)


def _numbers(values: list[Any]) -> pl.Series:
    # a JSON string where a number belongs is null, as on the text path
    clean = [v if type(v) is not str else None for v in values]
    out = us_numbers_to_ns(clean)
    if out is None:
        raise _NeedsText
    return out


def _number_times(ts: list[Any], dur: list[Any], fill_dur: bool = True) -> tuple[pl.Series, pl.Series]:
    both = _numbers(ts + dur)  # one conversion for both
    start, length = both.head(len(ts)), both.tail(len(dur))
    return start, start + (length.fill_null(0) if fill_dur else length)


Span = tuple[pl.Series, pl.Series]  # (start_ns, end_ns) of a table's events; end null where dur is


def spans(times: _Times, *sels: list[Any]) -> list[Span]:
    """Each selection's (start_ns, end_ns), from one conversion over all of them: one Polars query a rank,
    not one a table (a small rank's fixed cost). End stays null where ``dur`` is not a number; tables that
    read a missing duration as 0 fill it while conforming (``_FILLED_END``)."""
    start, end = times([e.ts for sel in sels for e in sel], [e.dur for sel in sels for e in sel], False)
    out, at = [], 0
    for sel in sels:
        out.append((start.slice(at, len(sel)), end.slice(at, len(sel))))
        at += len(sel)
    return out


_FILLED_END = pl.col("end_ns").fill_null(pl.col("start_ns"))  # a missing duration read as 0: start + 0
# per table: its schema and the columns computed while conforming (besides ``rank``)
_TABLES: dict[str, tuple[dict[str, pl.DataType], dict[str, pl.Expr]]] = {
    "gpu": (GPU_SCHEMA, {"kind": gpu_kind(pl.col("cat"), pl.col("name"))}),
    "cpu": (CPU_SCHEMA, {"end_ns": _FILLED_END}),
    "comm": (COMM_CALL_SCHEMA, {"end_ns": _FILLED_END}),
    "steps": (STEP_SCHEMA, {}),
}
_EXPRS: dict[tuple[str, tuple[str, ...]], list[pl.Expr]] = {}


def _canonical(df: pl.DataFrame, table: str, rank: int) -> pl.DataFrame:
    """``model.conform(df.with_columns(rank, computed), schema).sort("start_ns")`` in two queries, not four,
    with the expressions built once per table: for thousands of small ranks Polars' fixed cost per query
    and per expression is most of a rank's parse (an eager select beat the same chain as one lazy query,
    whose planning cost more than it saved: 0.45 against 0.26 ms)."""
    key = (table, tuple(df.columns))
    cols = _EXPRS.get(key)
    if cols is None:
        schema, computed = _TABLES[table]
        cols = _EXPRS[key] = [
            (computed[n] if n in computed else pl.col(n)).cast(t, strict=False).alias(n)
            if n in computed or n in df.columns else pl.lit(None, dtype=t).alias(n)
            for n, t in schema.items()
        ] + [pl.col(n).cast(t, strict=False) for n, t in _OPTIONAL.get(table, {}).items() if n in df.columns]
    at = list(_TABLES[table][0]).index("rank")
    return df.select([*cols[:at], pl.lit(rank, dtype=pl.Int32).alias("rank"), *cols[at + 1 :]]).sort("start_ns")


_OPTIONAL = {"gpu": GPU_OPTIONAL}  # kept where the frame has them (a rank's copy sizes: ``_gpu_table``)
_PEER_COPY = "Memcpy PtoP"  # CUPTI's peer-to-peer copy kind, as Kineto names it: communication with a size


def _gpu_table(sel: list[Any], rank: int, span: Span) -> pl.DataFrame:
    if not sel:
        return conform(pl.DataFrame(), GPU_SCHEMA)
    # no valid ts/dur: null start/end, which the loader drops and counts (one rule for every format)
    start, end = span
    args = [e.args or _NO_ARGS for e in sel]
    # copy sizes only where the rank has peer copies: what the copy engine moved between GPUs (a job without
    # them carries no extra column)
    sized = any(type(e.name) is str and e.name.startswith(_PEER_COPY) for e in sel)
    df = pl.DataFrame(
        {
            "device": _int_series([a.device if a.device is not None else e.pid for a, e in zip(args, sel)]),
            "stream": _int_series([a.stream if a.stream is not None else e.tid for a, e in zip(args, sel)]),
            "start_ns": start,
            "end_ns": end,
            # a name that is not a non-empty string is null, never "None": counted by the loader, not guessed
            "name": pl.Series([e.name if type(e.name) is str and e.name else None for e in sel], dtype=pl.Utf8),
            "cat": pl.Series([_GPU_CATS[e.cat] for e in sel], dtype=pl.Utf8),
            "correlation": _int_series([a.correlation for a in args]),
            **({"bytes": _int_series([a.nbytes if type(a.nbytes) is int else None for a in args])} if sized else {}),
        }
    )
    return _canonical(df, "gpu", rank)


_NO_ARGS = _Args()


def _cpu_table(sel: list[Any], rank: int, span: Span) -> pl.DataFrame:
    if not sel:
        return conform(pl.DataFrame(), CPU_SCHEMA)
    start, end = span  # a missing duration is read as 0 (``_FILLED_END``)
    args = [e.args or _NO_ARGS for e in sel]
    df = pl.DataFrame(
        {
            "tid": _int_series([e.tid for e in sel]),
            "start_ns": start,
            "end_ns": end,
            "name": pl.Series([str(e.name) for e in sel], dtype=pl.Utf8),
            "kind": pl.Series([_CPU_CATS[e.cat] for e in sel], dtype=pl.Utf8),
            "correlation": _int_series([a.correlation for a in args]),
            "external_id": _int_series(
                [a.external_id if a.external_id is not None else a.external_id_old for a in args]
            ),
        }
    )
    if start.null_count():
        df = df.filter(pl.col("start_ns").is_not_null())
    return _canonical(df, "cpu", rank)


def _ranks_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        return ",".join(str(int(v)) for v in value)
    if type(value) is str:
        return _numbers_text(value)
    nums = re.findall(r"-?\d+", str(value))
    return ",".join(nums) if nums else None


@functools.lru_cache(maxsize=256)
def _numbers_text(value: str) -> str | None:
    """The numbers in a member-list text, comma-joined; remembered, since every collective call of a rank
    (and every rank a worker reads) repeats its groups' lists (16k members in 16k-rank jobs)."""
    nums = re.findall(r"-?\d+", value)
    return ",".join(nums) if nums else None


_op = functools.lru_cache(maxsize=256)(op_from_collective_name)  # a rank repeats a few collective names
_launcher_op = functools.lru_cache(maxsize=256)(launcher_op)


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _comm_calls(sel: list[Any], rank: int, span: Span) -> pl.DataFrame:
    if not sel:
        return conform(pl.DataFrame(), COMM_CALL_SCHEMA)
    start, end = span  # a missing duration is read as 0 (``_FILLED_END``)
    rows: dict[str, list[Any]] = {k: [] for k in ("op", "pg", "pg_desc", "dtype", "in_bytes", "out_bytes",
                                                  "group_size", "group_ranks", "peer", "peer_group_rank",
                                                  "in_splits", "out_splits", "launcher")}
    for e in sel:
        if e.name != "record_param_comms":  # a catalogue launcher (``events._Selection.feed``): its name and op
            for v in rows.values():
                v.append(None)
            rows["launcher"][-1] = str(e.name)
            rows["op"][-1] = _launcher_op(str(e.name))
            continue
        a = e.args
        rows["launcher"].append(None)
        size = dtype_size(a.dtype)
        n_in, n_out = _as_int(a.in_nelems), _as_int(a.out_nelems)
        rows["op"].append(_op(str(a.collective)) if a.collective else None)
        rows["pg"].append(str(a.pg_name) if a.pg_name is not None else None)
        rows["pg_desc"].append(str(a.pg_desc) if a.pg_desc is not None else None)
        rows["dtype"].append(str(a.dtype) if a.dtype is not None else None)
        rows["in_bytes"].append(n_in * size if size and n_in is not None else None)
        rows["out_bytes"].append(n_out * size if size and n_out is not None else None)
        rows["group_size"].append(_as_int(a.group_size))
        rows["group_ranks"].append(_ranks_text(a.pg_ranks))
        p2p = rows["op"][-1] in DIRECTED_P2P_OPS
        rows["peer"].append(_as_int(a.dst_rank if a.dst_rank is not None else a.src_rank) if p2p else None)
        rows["peer_group_rank"].append(_as_int(a.rank_arg) if p2p else None)
        rows["in_splits"].append(_ranks_text(a.in_split))
        rows["out_splits"].append(_ranks_text(a.out_split))
    # each column built at its type (the others are text or null): a frame built with overrides and
    # strict=False took Polars' slow fallback path, ~1/4 of a small rank's parse under the profiler
    cols = {k: pl.Series(k, v, dtype=_COMM_INTS.get(k, pl.Utf8), strict=False) for k, v in rows.items()}
    df = pl.DataFrame({"tid": _int_series([e.tid for e in sel]), "start_ns": start, "end_ns": end, **cols})
    return _canonical(df, "comm", rank)


_COMM_INTS = {"in_bytes": pl.Int64, "out_bytes": pl.Int64, "group_size": pl.Int32, "peer": pl.Int32,
              "peer_group_rank": pl.Int32}


def step_events(gpu_sel: list[Any], cpu_sel: list[Any]) -> tuple[list[Any], bool]:
    """The step markers a table reads: GPU-side annotations (gpu_user_annotation) when present."""
    return (gpu_sel, True) if gpu_sel else (cpu_sel, False)


def _steps(sel: list[Any], on_gpu: bool, rank: int, span: Span) -> tuple[pl.DataFrame, bool]:
    """Step windows from ``step_events``' markers."""
    if not sel:
        return conform(pl.DataFrame(), STEP_SCHEMA), False
    start, end = span
    df = pl.DataFrame(
        {"step": [_step_number(str(e.name), i) for i, e in enumerate(sel)], "start_ns": start, "end_ns": end}
    )
    windows = df.group_by("step").agg(pl.col("start_ns").min(), _FILLED_END.max())
    return _canonical(windows, "steps", rank), on_gpu


def _step_number(name: str, ordinal: int) -> int:
    m = re.search(r"(\d+)", name)
    return int(m.group(1)) if m else ordinal
