"""PyTorch profiler (Kineto) JSON -> canonical tables.

Profiler JSON is huge and mostly noise, so events are decoded with msgspec into small typed
structs that keep only the fields the analysis reads; timestamps are kept as raw JSON text and
converted to int64 nanoseconds exactly (float microseconds lose nanoseconds past ~2^43 µs).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ..errors import TraceError
from ..model import (
    COMM_CALL_SCHEMA,
    CPU_SCHEMA,
    GPU_SCHEMA,
    STEP_SCHEMA,
    ProcessGroup,
    RankMeta,
    RankTrace,
    conform,
)
from ..timeline import gpu_kind, op_from_collective_name
from .options import ReadOptions
from .source import read_bytes
from .timestamps import us_text_to_ns

_EMPTY = msgspec.Raw(b"")


class _Args(msgspec.Struct):
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


class _Event(msgspec.Struct):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = _EMPTY
    dur: msgspec.Raw = _EMPTY
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]  # noqa: N815 - Kineto's key
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    hip_runtime_version: Any = None
    host_name: Any = None


_DECODER = msgspec.json.Decoder(_Trace)

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
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
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


def decode(path: Path) -> _Trace:
    data = read_bytes(path)
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        if "traceEvents" in str(exc) and "missing required field" in str(exc):
            raise TraceError(
                path, "is JSON but not a profiler trace (no traceEvents)", "pass PyTorch profiler trace files"
            ) from None
        raise TraceError(path, f"is not a valid Kineto trace ({exc})", "re-export the trace") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise TraceError(
            path, f"is not valid JSON, possibly truncated ({exc})", "copy the file again or re-export it"
        ) from None


def looks_like(path: Path, head: bytes) -> bool:
    text = head.lstrip()
    return text[:1] in (b"{", b"[") or head[:2] == b"\x1f\x8b"


def read(path: Path, options: ReadOptions) -> list[RankTrace]:
    trace = decode(path)
    events = trace.traceEvents
    meta = _rank_meta(path, trace, options)
    gpu = _gpu_table(events, meta.rank)
    if gpu.height == 0:
        raise TraceError(path, "has no GPU activity (no kernels, memcpy or memset)", "profile with CUDA activities on")
    cpu = _cpu_table(events, meta.rank)
    comm_calls = _comm_calls(events, meta.rank)
    steps, on_gpu = _steps(events, meta.rank, options.step_marker)
    return [RankTrace(meta=meta, gpu=gpu, cpu=cpu, comm_calls=comm_calls, steps=steps, steps_on_gpu=on_gpu)]


# ----------------------------------------------------------------------------- tables


def _int_series(values: list[Any]) -> pl.Series:
    return pl.Series(values, dtype=pl.Int64, strict=False)


def _times(ts: list[msgspec.Raw], dur: list[msgspec.Raw]) -> tuple[pl.Series, pl.Series]:
    start = us_text_to_ns(pl.Series([bytes(t) for t in ts], dtype=pl.Binary))
    length = us_text_to_ns(pl.Series([bytes(d) for d in dur], dtype=pl.Binary)).fill_null(0)
    return start, start + length


def _gpu_table(events: list[_Event], rank: int) -> pl.DataFrame:
    sel = [e for e in events if e.cat in _GPU_CATS and e.ph == "X"]
    if not sel:
        return conform(pl.DataFrame(), GPU_SCHEMA)
    start, end = _times([e.ts for e in sel], [e.dur for e in sel])
    args = [e.args or _NO_ARGS for e in sel]
    df = pl.DataFrame(
        {
            "device": _int_series([a.device if a.device is not None else e.pid for a, e in zip(args, sel)]),
            "stream": _int_series([a.stream if a.stream is not None else e.tid for a, e in zip(args, sel)]),
            "start_ns": start,
            "end_ns": end,
            "name": pl.Series([str(e.name) for e in sel], dtype=pl.Utf8),
            "cat": pl.Series([_GPU_CATS[e.cat] for e in sel], dtype=pl.Utf8),
            "correlation": _int_series([a.correlation for a in args]),
        }
    )
    df = df.filter(pl.col("start_ns").is_not_null()).with_columns(
        pl.lit(rank).alias("rank"), gpu_kind(pl.col("cat"), pl.col("name")).alias("kind")
    )
    return conform(df, GPU_SCHEMA).sort("start_ns")


_NO_ARGS = _Args()


def _cpu_table(events: list[_Event], rank: int) -> pl.DataFrame:
    sel = [e for e in events if e.cat in _CPU_CATS and e.ph == "X"]
    if not sel:
        return conform(pl.DataFrame(), CPU_SCHEMA)
    start, end = _times([e.ts for e in sel], [e.dur for e in sel])
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
    df = df.filter(pl.col("start_ns").is_not_null()).with_columns(pl.lit(rank).alias("rank"))
    return conform(df, CPU_SCHEMA).sort("start_ns")


def _ranks_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        return ",".join(str(int(v)) for v in value)
    nums = re.findall(r"-?\d+", str(value))
    return ",".join(nums) if nums else None


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _comm_calls(events: list[_Event], rank: int) -> pl.DataFrame:
    sel = [e for e in events if e.name == "record_param_comms" and e.ph == "X" and e.args is not None]
    if not sel:
        return conform(pl.DataFrame(), COMM_CALL_SCHEMA)
    start, end = _times([e.ts for e in sel], [e.dur for e in sel])
    rows: dict[str, list[Any]] = {k: [] for k in ("op", "pg", "pg_desc", "dtype", "in_bytes", "out_bytes",
                                                  "group_size", "group_ranks")}
    for e in sel:
        a = e.args
        size = dtype_size(a.dtype)
        n_in, n_out = _as_int(a.in_nelems), _as_int(a.out_nelems)
        rows["op"].append(op_from_collective_name(str(a.collective)) if a.collective else None)
        rows["pg"].append(str(a.pg_name) if a.pg_name is not None else None)
        rows["pg_desc"].append(str(a.pg_desc) if a.pg_desc is not None else None)
        rows["dtype"].append(str(a.dtype) if a.dtype is not None else None)
        rows["in_bytes"].append(n_in * size if size and n_in is not None else None)
        rows["out_bytes"].append(n_out * size if size and n_out is not None else None)
        rows["group_size"].append(_as_int(a.group_size))
        rows["group_ranks"].append(_ranks_text(a.pg_ranks))
    df = pl.DataFrame(
        {"tid": _int_series([e.tid for e in sel]), "start_ns": start, "end_ns": end, **rows},
        schema_overrides={"in_bytes": pl.Int64, "out_bytes": pl.Int64, "group_size": pl.Int32},
        strict=False,
    ).with_columns(pl.lit(rank).alias("rank"))
    return conform(df, COMM_CALL_SCHEMA).sort("start_ns")


def _steps(events: list[_Event], rank: int, marker: str | None) -> tuple[pl.DataFrame, bool]:
    """Step windows; GPU-side annotations (gpu_user_annotation) are preferred when present."""
    pattern = re.compile(marker) if marker else _STEP_RE
    for cats, on_gpu in ((("gpu_user_annotation",), True), (("user_annotation", "cpu_op"), False)):
        sel = [e for e in events if e.cat in cats and e.ph == "X" and pattern.search(str(e.name))]
        if sel:
            start, end = _times([e.ts for e in sel], [e.dur for e in sel])
            df = pl.DataFrame(
                {"step": [_step_number(str(e.name), i) for i, e in enumerate(sel)], "start_ns": start, "end_ns": end}
            )
            df = (
                df.group_by("step")
                .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
                .with_columns(pl.lit(rank).alias("rank"))
            )
            return conform(df, STEP_SCHEMA).sort("start_ns"), on_gpu
    return conform(pl.DataFrame(), STEP_SCHEMA), False


def _step_number(name: str, ordinal: int) -> int:
    m = re.search(r"(\d+)", name)
    return int(m.group(1)) if m else ordinal


# ----------------------------------------------------------------------------- metadata


def _rank_meta(path: Path, trace: _Trace, options: ReadOptions) -> RankMeta:
    info = trace.distributedInfo if isinstance(trace.distributedInfo, dict) else {}
    warnings: list[str] = []
    mapped = options.rank_map.get(path.name, options.rank_map.get(str(path)))
    if mapped is not None:
        rank, source = mapped, "rank-map"
    elif _as_int(info.get("rank")) is not None:
        rank, source = int(info["rank"]), "distributedInfo"
    elif options.rank_hint is not None:
        rank, source = options.rank_hint, "filename"
        warnings.append(f"{path.name}: no rank in distributedInfo; rank {rank} taken from the file name")
    else:
        rank, source = -1, "unknown"  # discover.py assigns one and says so
    groups = []
    pg_config = info.get("pg_config")
    if isinstance(pg_config, dict):
        pg_config = list(pg_config.values())
    for pg in pg_config or []:
        if isinstance(pg, dict):
            ranks = tuple(int(r) for r in pg.get("ranks", []) if _as_int(r) is not None)
            groups.append(ProcessGroup(str(pg.get("pg_name", "")), str(pg.get("pg_desc", "")), ranks))
    devices = tuple(
        str(d.get("name", "")) for d in (trace.deviceProperties or []) if isinstance(d, dict)
    )
    versions = tuple(
        (k, str(v))
        for k, v in (
            ("nccl", info.get("nccl_version")),
            ("backend", info.get("backend")),
            ("cuda_runtime", trace.cuda_runtime_version),
            ("cuda_driver", trace.cuda_driver_version),
            ("hip_runtime", trace.hip_runtime_version),
            ("schema", trace.schemaVersion),
        )
        if v is not None
    )
    return RankMeta(
        rank=rank,
        source=str(path),
        format="kineto",
        world_size=_as_int(info.get("world_size")),
        rank_source=source,
        host=str(trace.host_name) if trace.host_name else None,
        devices=devices,
        process_groups=tuple(groups),
        versions=versions,
        clock_base_ns=_as_int(trace.baseTimeNanoseconds),
        warnings=tuple(warnings),
    )
