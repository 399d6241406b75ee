"""Reader for Nsight Systems exports (``nsys export --type sqlite``) and, through ``nsys``, reports.

One report holds one rank (``nsys profile`` per rank) or several processes (``nsys profile torchrun
...``): then each process with GPU activity is a rank, ordered by (lowest device, pid), unless
``--rank-map "<file>:<pid>=<rank>"`` says otherwise. Times stay on the report's own clock (ns).
"""

from __future__ import annotations

import shlex
import shutil
import sqlite3
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from ...comm_catalogue import gpu_kind
from ...errors import TraceError
from ...model import COMM_CALL_SCHEMA, CPU_SCHEMA, GPU_SCHEMA, STEP_SCHEMA, RankMeta, RankTrace, conform, empty
from ...rules import is_host_sync
from ..options import ReadOptions
from . import nvtx as nsys_nvtx
from .schema import (
    GPU_TABLES,
    MEM_KIND,
    MEMCPY_KIND,
    SYNC_KIND,
    Connection,
    Schema,
    check_file,
    col,
    connect,
    database_error,
    fetch,
    has_sqlite_magic,
    key_values,
    name_of,
    pid_of,
    string_lookup,
    tid_of,
)

FORMAT = "nsys"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
EXPORT_TIMEOUT_S = 600

_GPU_RAW: dict[str, pl.DataType] = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "device": pl.Int64,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "gpid": pl.Int64,
    "name": pl.Utf8,
    # table-specific: kernel name ids (demangled, short, mangled); copyKind, srcKind, dstKind;
    # memKind; syncType
    "a": pl.Int64,
    "b": pl.Int64,
    "c": pl.Int64,
    "bytes": pl.Int64,  # a copy's size (memcpy only)
}
_RUNTIME_RAW: dict[str, pl.DataType] = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "gtid": pl.Int64,
    "correlation": pl.Int64,
    "name_id": pl.Int64,
}


def looks_like(path: Path) -> bool:
    """SQLite file with Nsight tables, or an ``.nsys-rep`` report (its format is opaque: by suffix)."""
    path = Path(path)
    if path.suffix.lower() in REPORT_SUFFIXES:
        return path.is_file()
    if not has_sqlite_magic(path):
        return False
    try:
        conn = connect(path)
    except TraceError:
        return False
    try:
        return Schema(conn).is_nsight()
    except (sqlite3.Error, ValueError):  # ValueError: sqlite's message about a damaged schema is not UTF-8
        return False
    finally:
        conn.close()


def read(path: Path, options: ReadOptions) -> list[RankTrace]:
    path = Path(path)
    if path.suffix.lower() in REPORT_SUFFIXES and not has_sqlite_magic(path):
        return _read_report(path, options)
    return _read_export(path, path, options)


def _read_report(path: Path, options: ReadOptions) -> list[RankTrace]:
    """Export a ``.nsys-rep`` to SQLite in a private temp dir (never next to the user's file)."""
    if not path.is_file():
        raise TraceError(path, "file not found")
    nsys = shutil.which("nsys")
    suggested = path.with_suffix(".sqlite")
    command = f"nsys export --type sqlite --output {shlex.quote(str(suggested))} {shlex.quote(str(path))}"
    if nsys is None:
        raise TraceError(path, "reading an Nsight Systems report needs `nsys`, which is not on PATH",
                         f"run: {command}")
    with tempfile.TemporaryDirectory(prefix="commscope-nsys-") as tmp:
        out = Path(tmp) / "x.sqlite"
        try:
            proc = subprocess.run(
                [nsys, "export", "--type", "sqlite", "--output", str(out), str(path)],
                capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TraceError(path, f"nsys export failed: {exc}", f"run it yourself: {command}") from None
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
            raise TraceError(path, f"nsys export failed ({tail[0]})", f"run it yourself: {command}")
        return _read_export(out, path, options)


def _read_export(db: Path, source: Path, options: ReadOptions) -> list[RankTrace]:
    check_file(db)
    conn = connect(db)
    try:
        return _read(conn, source, options)
    except TraceError as exc:
        if exc.path != str(source):  # raised against the temp export: name the user's file
            raise TraceError(source, exc.problem, exc.hint) from None
        raise
    except sqlite3.Error as exc:
        raise database_error(source, exc) from None
    except UnicodeDecodeError as exc:
        # Python fails to decode SQLite's own message when it quotes damaged schema text.
        raise database_error(source, Exception(bytes(exc.object).decode("utf-8", "replace"))) from None
    except (pl.exceptions.PolarsError, ValueError, TypeError, OverflowError, MemoryError) as exc:
        # Damaged pages can decode into impossible values; report the file, not a traceback.
        raise TraceError(source, f"inconsistent data in Nsight export ({type(exc).__name__})",
                         "re-export the report") from None
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, source: Path, options: ReadOptions) -> list[RankTrace]:
    schema = Schema(conn)
    if not schema.is_nsight():
        raise TraceError(source, "SQLite database but not an Nsight Systems export (no CUPTI/NVTX tables)",
                         "export with: nsys export --type sqlite")
    warnings: list[str] = []
    if not schema.has("StringIds"):
        warnings.append("no StringIds table: kernel and API names unknown")
    # the host side (CUDA API calls, NVTX ranges) is read on a second connection beside the GPU tables:
    # SQLite and the Arrow import release the GIL, so on a large export the two take one read's time
    host_warnings: tuple[list[str], list[str]] = ([], [])
    with ThreadPoolExecutor(1) as pool:
        host = pool.submit(_host_side, conn, host_warnings, options.step_marker)
        gpu = _gpu(conn, schema, warnings)
        if gpu.filter(pl.col("kind") != "sync").height == 0:
            raise TraceError(source, "no GPU activity in this export (no kernels, memcpys or memsets)",
                             "profile with CUDA tracing on: nsys profile --trace=cuda,nvtx ...")
        runtime, ranges = host.result()
    warnings.extend(host_warnings[0])
    gpu = _fill_pid(gpu, runtime, "globalPid" in schema.cols("CUPTI_ACTIVITY_KIND_KERNEL"), warnings)
    # CUDA API calls a table reads: those of this process whose correlation is on its GPU rows, and the calls
    # that block the host on the GPU (the host-aware replay ends them when that work ends)
    linked = gpu.select(_pid_corr().alias("k"))["k"].drop_nulls().unique()
    runtime = runtime.filter(_pid_corr().is_in(linked.implode()) | is_host_sync(pl.col("name")))
    warnings.extend(host_warnings[1])
    calls = nsys_nvtx.comm_calls(ranges)
    steps = nsys_nvtx.steps(ranges, options.step_marker)
    if options.step_marker and steps.height == 0:
        warnings.append(f"step marker {options.step_marker!r} matched no NVTX range")
    base = _metadata(conn, schema, warnings)

    order = (
        gpu.filter(pl.col("kind") != "sync")
        .group_by("pid")
        .agg(pl.col("device").min().alias("dev"))
        .sort("dev", "pid", nulls_last=True)["pid"]
        .to_list()
    )
    ranks = _assign_ranks(order, source, options)
    if len({r for r, _ in ranks}) < len(ranks):
        warnings.append("several processes were given the same rank; check --rank-map")
    # World size: the processes in this report, or the largest NCCL communicator it saw (payloads).
    nranks = calls["group_size"].max() if calls.height else None
    world = max(len(order), int(nranks or 0)) if len(order) > 1 or nranks else None

    calls = nsys_nvtx.with_ranks(calls, {pid: r for pid, (r, _) in zip(order, ranks, strict=True)})
    parts = [_split(df) for df in (gpu, runtime, ranges, calls, steps)]
    traces = []
    for pid, (rank, rank_source) in zip(order, ranks, strict=True):
        g, rt, rg, cc, st = (p.get(pid) for p in parts)
        assert g is not None  # every ordered pid has GPU rows
        meta = RankMeta(
            rank=rank, source=str(source), format=FORMAT, world_size=world, rank_source=rank_source,
            host=base["host"], devices=tuple(_device_label(d, base["gpus"]) for d in _devices(g)),
            versions=base["versions"], clock_base_ns=base["clock"], warnings=tuple(warnings),
        )
        traces.append(_trace(meta, g, rt, rg, cc, st))
    return traces


def _host_side(conn: Connection, warnings: tuple[list[str], list[str]], step_marker: str | None
               ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """CUDA API calls and NVTX ranges, on a connection (and schema reader) of their own; the warnings of
    each kept apart, to be reported in order."""
    twin = conn.twin()
    try:
        schema = Schema(twin)
        return _runtime(twin, schema, warnings[0]), nsys_nvtx.read_ranges(twin, schema, warnings[1], step_marker)
    finally:
        twin.close()


def _pid_corr() -> pl.Expr:
    """(pid, correlation) as one integer key: a hash lookup is ~5x faster than a two-column join."""
    return pl.col("pid").cast(pl.Int64) * (1 << 32) + pl.col("correlation")


def _split(df: pl.DataFrame) -> dict[int, pl.DataFrame]:
    return {k[0]: v for k, v in df.partition_by("pid", as_dict=True, maintain_order=True).items()}


def _devices(gpu: pl.DataFrame) -> list[int]:
    # Not from sync records: CUPTI reports some of them on a device the process never used.
    work = gpu.filter(pl.col("kind") != "sync")["device"]
    return sorted(int(d) for d in work.drop_nulls().unique().to_list())


def _device_label(device: int, names: dict[int, str]) -> str:
    return f"cuda:{device} ({names[device]})" if device in names else f"cuda:{device}"


def _trace(meta: RankMeta, gpu: pl.DataFrame, runtime: pl.DataFrame | None, ranges: pl.DataFrame | None,
           calls: pl.DataFrame | None, steps: pl.DataFrame | None) -> RankTrace:
    rank = pl.lit(meta.rank, dtype=pl.Int32).alias("rank")
    cpu_parts = [
        df.with_columns(rank, pl.lit(kind).alias("kind"))
        for df, kind in ((runtime, "runtime"), (ranges, "annotation"))
        if df is not None
    ]
    cpu = pl.concat([conform(p, CPU_SCHEMA) for p in cpu_parts]) if cpu_parts else empty(CPU_SCHEMA)

    def fit(df: pl.DataFrame | None, schema: dict[str, pl.DataType]) -> pl.DataFrame:
        return conform(df.with_columns(rank), schema) if df is not None else empty(schema)

    # Fixed row order: numeric keys, then the export's own row order (a stable sort). Sorting on the
    # name too would row-encode every string (~10x slower on 500 k rows) for ties that do not occur.
    # Copy sizes only where the rank has peer copies (communication on the copy engine), as the Kineto reader.
    peer = gpu.select(pl.col("name").str.starts_with(_PEER_COPY).any()).item()
    gpu = conform(gpu.with_columns(rank), GPU_SCHEMA, {"bytes": pl.Int64} if peer else None)
    return RankTrace(
        meta=meta,
        gpu=gpu.sort("start_ns", "device", "stream", "end_ns", nulls_last=True, maintain_order=True),
        cpu=cpu.sort("start_ns", "tid", "end_ns", nulls_last=True, maintain_order=True),
        comm_calls=fit(calls, COMM_CALL_SCHEMA).sort("start_ns", "tid", maintain_order=True),
        steps=fit(steps, STEP_SCHEMA).sort("step"),
    )


# ----------------------------------------------------------------------------- GPU activity


def _gpu(conn: sqlite3.Connection, schema: Schema, warnings: list[str]) -> pl.DataFrame:
    frames = []
    for table in (*GPU_TABLES, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        cols = schema.cols(table)
        if not {"start", "end"} <= cols:
            if cols:
                warnings.append(f"{table} lacks start/end columns: ignored")
            continue
        if table == "CUPTI_ACTIVITY_KIND_KERNEL":  # name ids, best first; resolved below
            extra = ", ".join(col(schema, table, c, a, "t.") for c, a in (("demangledName", "a"),
                                                                           ("shortName", "b"),
                                                                           ("mangledName", "c")))
        elif table == "CUPTI_ACTIVITY_KIND_MEMCPY":
            extra = ", ".join(col(schema, table, c, a, "t.") for c, a in (("copyKind", "a"), ("srcKind", "b"),
                                                                           ("dstKind", "c")))
        elif table == "CUPTI_ACTIVITY_KIND_MEMSET":
            extra = f"{col(schema, table, 'memKind', 'a', 't.')}, NULL AS b, NULL AS c"
        else:
            extra = f"{col(schema, table, 'syncType', 'a', 't.')}, NULL AS b, NULL AS c"
        if "deviceId" not in cols and table != "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION":
            warnings.append(f"{table} has no deviceId: device 0 assumed")
        sql = (
            f'SELECT t.start, t."end", {col(schema, table, "deviceId", "device", "t.")}, '
            f'{col(schema, table, "streamId", "stream", "t.")}, '
            f'{col(schema, table, "correlationId", "correlation", "t.")}, '
            f'{col(schema, table, "globalPid", "gpid", "t.")}, NULL AS name, {extra}, '
            f'{col(schema, table, "bytes", "bytes", "t.") if table == "CUPTI_ACTIVITY_KIND_MEMCPY" else "NULL AS bytes"} '
            f'FROM "{table}" t WHERE t.start IS NOT NULL AND t."end" IS NOT NULL'
        )
        raw = fetch(conn, sql, _GPU_RAW)
        # name and kind depend only on the (a, b, c) ids: worked out once per distinct triple (a few dozen)
        # and joined back on the integers. Unique and join on a million kernel names' text took 0.5 GB.
        keys = raw.select("a", "b", "c", "name").unique(["a", "b", "c"], keep="first")
        if table == "CUPTI_ACTIVITY_KIND_KERNEL":
            strings = string_lookup(conn, schema, [keys["a"], keys["b"], keys["c"]])
            names = [name_of(pl.col(c), strings) for c in ("a", "b", "c")]
            keys = keys.with_columns(pl.coalesce(names).alias("name"))
        keys = _gpu_names(keys, table)
        keys = keys.with_columns(gpu_kind(pl.col("category"), pl.col("name")).alias("kind")).drop("category")
        frames.append(raw.drop("name").join(keys, on=["a", "b", "c"], how="left", nulls_equal=True,
                                            maintain_order="left"))
    if not frames:
        return pl.DataFrame(schema={**GPU_SCHEMA, "pid": pl.Int64}).drop("rank")
    gpu = pl.concat(frames).with_columns(pl.col("device").fill_null(0), pid_of(pl.col("gpid")).alias("pid"))
    return gpu.drop("gpid", "a", "b", "c")


_PEER_COPY = "Memcpy PtoP"  # copyKind 10 (schema.MEMCPY_KIND), named as Kineto names it


def _label(expr: pl.Expr, mapping: dict[int, str]) -> pl.Expr:
    return expr.replace_strict(mapping, default="Unknown", return_dtype=pl.Utf8)


def _gpu_names(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """Category (Kineto's raw names, for ``gpu_kind``) and Kineto-style names for copies/sets/syncs."""
    if table == "CUPTI_ACTIVITY_KIND_KERNEL":
        return df.with_columns(pl.col("name").fill_null("<unknown kernel>"), _category("kernel"))
    if table == "CUPTI_ACTIVITY_KIND_MEMCPY":
        kinds = pl.when(pl.col("b").is_not_null() & pl.col("c").is_not_null()).then(
            pl.format(" ({} -> {})", _label(pl.col("b"), MEM_KIND), _label(pl.col("c"), MEM_KIND))
        ).otherwise(pl.lit(""))
        name = pl.format("Memcpy {}{}", _label(pl.col("a"), MEMCPY_KIND), kinds)
        return df.with_columns(name.alias("name"), _category("gpu_memcpy"))
    if table == "CUPTI_ACTIVITY_KIND_MEMSET":
        memory = _label(pl.col("a"), MEM_KIND)
        name = pl.when(pl.col("a").is_not_null()).then(pl.format("Memset ({})", memory))
        name = name.otherwise(pl.lit("Memset"))
        return df.with_columns(name.alias("name"), _category("gpu_memset"))
    return df.with_columns(_label(pl.col("a"), SYNC_KIND).alias("name"), _category("cuda_sync"))


def _category(raw: str) -> pl.Expr:
    return pl.lit(raw).alias("category")


def _runtime(conn: sqlite3.Connection, schema: Schema, warnings: list[str]) -> pl.DataFrame:
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    cols = schema.cols(t)
    if not {"start", "end"} <= cols:
        warnings.append("no CUDA API table (CUPTI_ACTIVITY_KIND_RUNTIME): kernels not linked to launches")
        return pl.DataFrame(schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "correlation": pl.Int64,
                                    "name": pl.Utf8, "pid": pl.Int64, "tid": pl.Int64})
    sql = (
        f'SELECT r.start, r."end", {col(schema, t, "globalTid", "gtid", "r.")}, '
        f'{col(schema, t, "correlationId", "correlation", "r.")}, {col(schema, t, "nameId", "name_id", "r.")} '
        f'FROM {t} r WHERE r.start IS NOT NULL AND r."end" IS NOT NULL'
    )
    raw = fetch(conn, sql, _RUNTIME_RAW)
    # nsys versions its API names (cudaLaunchKernel_v7000); Kineto does not. Drop the suffix (once per
    # distinct name) so downstream rules ("cudaLaunchKernel*") see one spelling.
    strings = string_lookup(conn, schema, [raw["name_id"]]).with_columns(pl.col("value").str.replace(r"_v\d+$", ""))
    return raw.with_columns(
        name_of(pl.col("name_id"), strings).fill_null("<unknown API>").alias("name"),
        pid_of(pl.col("gtid")).alias("pid"),
        tid_of(pl.col("gtid")).alias("tid"),
    ).drop("gtid", "name_id")


def _fill_pid(gpu: pl.DataFrame, runtime: pl.DataFrame, has_column: bool, warnings: list[str]
              ) -> pl.DataFrame:
    """Owning process of GPU rows whose export dropped globalPid (reduced exports)."""
    if gpu["pid"].null_count() == 0:
        return gpu
    what = "no globalPid" if has_column else "no globalPid column"
    warnings.append(f"GPU activity has {what}: owning process inferred from CUDA API calls")
    rt_pids = runtime["pid"].drop_nulls().unique().sort().to_list()
    if len(rt_pids) > 1:
        # Correlation ids repeat across processes; use only those that name one process.
        by_corr = (
            runtime.drop_nulls(["correlation", "pid"])
            .group_by("correlation")
            .agg(pl.col("pid").first().alias("_p"), pl.col("pid").n_unique().alias("_n"))
            .filter(pl.col("_n") == 1)
            .drop("_n")
        )
        gpu = gpu.join(by_corr, on="correlation", how="left")
        gpu = gpu.with_columns(pl.col("pid").fill_null(pl.col("_p")))
        by_dev = (
            gpu.drop_nulls("pid").group_by("device", "pid").len()
            .sort("len", "pid", descending=[True, False]).unique("device", keep="first")
            .select("device", pl.col("pid").alias("_d"))
        )
        gpu = gpu.join(by_dev, on="device", how="left").with_columns(pl.col("pid").fill_null(pl.col("_d")))
        gpu = gpu.drop("_p", "_d")
    return gpu.with_columns(pl.col("pid").fill_null(rt_pids[0] if rt_pids else 0))


# ----------------------------------------------------------------------------- ranks and metadata


def _assign_ranks(pids: list[int], source: Path, options: ReadOptions) -> list[tuple[int, str]]:
    """Rank and where it came from, per process in order."""
    rmap = options.rank_map
    file_keys = (source.name, str(source))
    if len(pids) == 1:
        # An explicit --rank-map beats the guess from the file name.
        for key in (*file_keys, *(f"{k}:{pids[0]}" for k in file_keys)):
            if key in rmap:
                return [(int(rmap[key]), "rank-map")]
        if options.rank_hint is not None:
            return [(int(options.rank_hint), "filename")]
        return [(-1, "unknown")]  # like the Kineto reader: the loader assigns a free rank and says so
    out = []
    for i, pid in enumerate(pids):
        hit = next((rmap[f"{k}:{pid}"] for k in file_keys if f"{k}:{pid}" in rmap), None)
        out.append((int(hit), "rank-map") if hit is not None else (i, "process-order"))
    return out


def _metadata(conn: sqlite3.Connection, schema: Schema, warnings: list[str]) -> dict:
    meta_tables = [t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if schema.has(t)]
    kv = key_values(conn, schema, meta_tables)
    versions = [("nsys", kv[k]) for k in ("EXPORT_PRODUCT_VERSION", "NSYS_VERSION") if k in kv][:1]
    versions += [("nsys_export_schema", kv["EXPORT_SCHEMA_VERSION"])] if "EXPORT_SCHEMA_VERSION" in kv else []
    if not versions:
        warnings.append("no export metadata (META_DATA_EXPORT): Nsight Systems version unknown")
    env = {}
    if {"name", "value"} <= schema.cols("TARGET_INFO_SYSTEM_ENV"):
        env = key_values(conn, schema, ["TARGET_INFO_SYSTEM_ENV"])
    versions += [("cuda_driver", env["CudaDriverVersion"])] if "CudaDriverVersion" in env else []
    clock = None
    if "utcEpochNs" in schema.cols("TARGET_INFO_SESSION_START_TIME"):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        clock = int(row[0]) if row and isinstance(row[0], int) else None
    if clock is None:
        warnings.append("no session start time (TARGET_INFO_SESSION_START_TIME): wall-clock base unknown")
    gpus: dict[int, str] = {}
    if {"id", "name"} <= schema.cols("TARGET_INFO_GPU"):
        for dev, name in conn.execute("SELECT id, name FROM TARGET_INFO_GPU").fetchall():
            if isinstance(dev, int) and name:
                gpus.setdefault(dev, str(name))
    return {"versions": tuple(versions), "host": env.get("Hostname"), "clock": clock, "gpus": gpus}
