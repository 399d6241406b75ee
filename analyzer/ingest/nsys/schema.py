"""Low-level access to ``nsys export --type sqlite`` databases: read-only opening, file checks,
schema introspection and chunked queries into Polars frames.

Nsight Systems changes its export schema between releases (2023.4 -> 2026.x): tables appear
lazily, columns are added, renamed or dropped in reduced exports. Everything here asks the
database what it has instead of assuming a version.
"""

from __future__ import annotations

import os
import sqlite3
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from ...errors import TraceError
from ..source import SQLITE_MAGIC

# Tables whose presence says "this SQLite file is an Nsight Systems export".
NSIGHT_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "TARGET_INFO_SESSION_START_TIME",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
)
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")

# ENUM_NSYS_EVENT_TYPE ids (stable across releases): ranges we read and the domain-create row.
NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop, start/end, and their nvtxt twins
NVTX_DOMAIN_CREATE = 75

# CUPTI enums, spelled the way Kineto names the same events so both formats read alike.
MEMCPY_KIND = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD",
}
MEM_KIND = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}
SYNC_KIND = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}

BUSY_TIMEOUT_S = 2.0  # how long to wait on a lock held by a writer (nsys export still running)

_NOT_SQLITE_HINT = "export the report with: nsys export --type sqlite --output report.sqlite report.nsys-rep"


def has_sqlite_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def check_file(path: Path) -> None:
    """Fail early, with a clear message, on files SQLite would half-read or misreport."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            header = fh.read(100)
    except FileNotFoundError:
        raise TraceError(path, "file not found") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read file: {exc.strerror or exc}") from None
    if not header.startswith(SQLITE_MAGIC):
        raise TraceError(path, "not a SQLite database (nor an Nsight Systems report)", _NOT_SQLITE_HINT)
    if len(header) < 100:
        raise TraceError(path, "truncated SQLite database (header incomplete)", "re-export the report")
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise TraceError(path, "corrupt SQLite header (bad page size)", "re-export the report")
    # The in-header page count is valid when the change counter equals version-valid-for.
    pages = struct.unpack(">I", header[28:32])[0]
    if header[24:28] == header[92:96] and pages and size < pages * page_size:
        raise TraceError(
            path,
            f"truncated SQLite database ({size} of {pages * page_size} bytes)",
            "the copy or the export was cut short; copy or export it again",
        )


def connect(path: Path) -> sqlite3.Connection:
    """Open read-only; never creates journals or touches the user's file.

    ``immutable=1`` (no locking at all) only where nobody can be writing the file: it is
    read-only to us. Otherwise plain ``mode=ro`` so a concurrent writer's lock is respected.
    """
    uri = path.resolve().as_uri() + "?mode=ro"
    if not os.access(path, os.W_OK):
        uri += "&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False, factory=Connection)
    except sqlite3.Error as exc:
        raise TraceError(path, f"cannot open SQLite database: {exc}") from None
    conn.text_factory = _lenient  # small metadata queries; bulk ones take the fast path in fetch()
    conn.uri = conn.opened = uri
    return conn


class Connection(sqlite3.Connection):
    """A read-only export; bulk queries also go through an Arrow-native reader (ADBC) when installed.

    The low-level ADBC driver manager hands polars an Arrow C stream directly (no pyarrow import,
    no Python object per row).
    """

    uri: str | None = None  # for ADBC; None once the driver is found missing
    opened: str = ""  # the URI this connection was opened with
    _adbc: tuple[Any, Any] | None = None

    def arrow(self) -> Any | None:
        """The ADBC connection to the same file (opened once), or None when the driver is not installed."""
        if self._adbc is None and self.uri is not None:
            try:
                import adbc_driver_manager
                import adbc_driver_sqlite
            except ImportError:
                self.uri = None
                return None
            db = adbc_driver_manager.AdbcDatabase(driver=adbc_driver_sqlite._driver_path(), uri=self.uri)
            self._adbc = (db, adbc_driver_manager.AdbcConnection(db))
        return self._adbc[1] if self._adbc else None

    def twin(self) -> Connection:
        """A second connection to the same file, for reading beside this one in another thread."""
        conn = sqlite3.connect(self.opened, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False,
                               factory=Connection)
        conn.text_factory = self.text_factory
        conn.uri = conn.opened = self.opened
        return conn

    def close(self) -> None:
        if self._adbc is not None:
            for handle in reversed(self._adbc):
                try:
                    handle.close()
                except Exception:  # noqa: BLE001 - closing must not mask the reader's own error
                    pass
            self._adbc = None
        super().close()


def database_error(path: Path, exc: BaseException) -> TraceError:
    """Map an SQLite failure to the user-facing problem."""
    msg = str(exc)
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return TraceError(path, "database is locked by another process", "wait for nsys export to finish")
    if "not a database" in low or "malformed" in low or "corrupt" in low or "disk i/o" in low:
        return TraceError(path, f"corrupt or truncated SQLite database ({msg})", "re-export the report")
    return TraceError(path, f"unreadable Nsight Systems export ({msg})", "re-export the report")


class Schema:
    """Which tables and columns this export has (asked once, answered from memory)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        self.tables: frozenset[str] = frozenset(str(r[0]) for r in rows)
        self._cols: dict[str, frozenset[str]] = {}

    def has(self, table: str) -> bool:
        return table in self.tables

    def cols(self, table: str) -> frozenset[str]:
        if table not in self._cols:
            if table not in self.tables:
                self._cols[table] = frozenset()
            else:
                info = self._conn.execute(f'PRAGMA table_info("{table}")').fetchall()
                self._cols[table] = frozenset(str(r[1]) for r in info)
        return self._cols[table]

    def is_nsight(self) -> bool:
        if "CUPTI_ACTIVITY_KIND_KERNEL" in self.tables or "TARGET_INFO_SESSION_START_TIME" in self.tables:
            return True
        return "StringIds" in self.tables and any(t in self.tables for t in NSIGHT_TABLES)

    def row_count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        # EXISTS stops at the first row; COUNT(*) would scan a multi-GB table.
        return int(self._conn.execute(f'SELECT EXISTS (SELECT 1 FROM "{table}")').fetchone()[0])


def col(schema: Schema, table: str, name: str, alias: str = "", prefix: str = "") -> str:
    """``prefix.name AS alias`` when the column exists, else ``NULL AS alias``."""
    alias = alias or name
    if name in schema.cols(table):
        return f'{prefix}"{name}" AS {alias}'
    return f"NULL AS {alias}"


def _lenient(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def fetch(
    conn: sqlite3.Connection, sql: str, schema: dict[str, pl.DataType], chunk: int = 500_000
) -> pl.DataFrame:
    """Run ``sql`` into a frame with these column names and types.

    Arrow-native first (ADBC: columns straight from SQLite, no Python object per row: ~3x less CPU
    than rows through ``sqlite3`` on an 800 k-row kernel table); where the driver is missing or
    refuses the data (a column whose SQLite type changes mid-table, text that is not UTF-8), rows
    through ``sqlite3``, chunk by chunk.
    """
    got = _fetch_arrow(conn, sql, schema)
    if got is not None:
        return got
    conn.text_factory = str  # C-level decoding: no Python call per string
    try:
        return _fetch(conn, sql, schema, chunk)
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
    finally:
        conn.text_factory = _lenient
    # Corrupt or non-UTF-8 text: decode it leniently (slower, so only when needed).
    return _fetch(conn, sql, schema, chunk)


def _fetch_arrow(conn: sqlite3.Connection, sql: str, schema: dict[str, pl.DataType]) -> pl.DataFrame | None:
    arrow = conn.arrow() if isinstance(conn, Connection) else None
    if arrow is None:
        return None
    import adbc_driver_manager

    try:
        stmt = adbc_driver_manager.AdbcStatement(arrow)
        try:
            stmt.set_sql_query(sql)
            stream, _ = stmt.execute_query()
            df = pl.DataFrame(stream)  # the Arrow C stream, read by polars
        finally:
            stmt.close()
        for name, dtype in df.schema.items():  # SQLite does not check UTF-8 and neither does the import:
            if dtype == pl.Utf8:  # damaged text must fail here (ComputeError), not panic later
                df[name].cast(pl.Binary).cast(pl.Utf8)
        df.columns = list(schema)
        return df.cast(schema, strict=False)  # type: ignore[arg-type]
    except (Exception, pl.exceptions.PanicException):  # noqa: BLE001 - any refusal: the sqlite3 path reads
        return None  # it (and words real errors)


def _fetch(conn: sqlite3.Connection, sql: str, schema: dict[str, pl.DataType], chunk: int) -> pl.DataFrame:
    cur = conn.execute(sql)
    parts: list[pl.DataFrame] = []
    while True:
        rows = cur.fetchmany(chunk)
        if not rows:
            break
        parts.append(pl.DataFrame(rows, schema=schema, orient="row", strict=False))
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]


def string_lookup(conn: sqlite3.Connection, schema: Schema, ids: list[pl.Series]) -> pl.DataFrame:
    """``id, value`` of the StringIds rows these id columns reference.

    Resolving ids after the bulk query, not by SQL joins per row, halves the time on big kernel
    tables: each distinct name is fetched once.
    """
    out_schema = {"id": pl.Int64, "value": pl.Utf8}
    if not schema.has("StringIds") or not ids:
        return pl.DataFrame(schema=out_schema)
    want = pl.concat([s.cast(pl.Int64, strict=False) for s in ids]).drop_nulls().unique().sort().to_list()
    if len(want) > 100_000:  # most of the table anyway: one scan beats many lookups
        return fetch(conn, "SELECT id, value FROM StringIds", out_schema).unique("id", keep="first")
    rows: list[tuple] = []
    for i in range(0, len(want), 900):  # SQLite's historical limit on bound parameters is 999
        chunk = want[i : i + 900]
        sql = f"SELECT id, value FROM StringIds WHERE id IN ({', '.join('?' * len(chunk))})"
        rows += conn.execute(sql, chunk).fetchall()
    return pl.DataFrame(rows, schema=out_schema, orient="row", strict=False).unique("id", keep="first")


def name_of(ids: pl.Expr, strings: pl.DataFrame) -> pl.Expr:
    """String for an id column (null when unknown or empty)."""
    name = ids.replace_strict(strings["id"], strings["value"], default=None, return_dtype=pl.Utf8)
    return pl.when(name != "").then(name)


def key_values(conn: sqlite3.Connection, schema: Schema, tables: Iterable[str]) -> dict[str, str]:
    """``name -> value`` rows of the first metadata table present (META_DATA_EXPORT and kin)."""
    out: dict[str, str] = {}
    for table in tables:
        if {"name", "value"} <= schema.cols(table):
            for name, value in conn.execute(f'SELECT name, value FROM "{table}"').fetchall():
                if name is not None and value is not None:
                    out.setdefault(str(name), str(value))
    return out


def pid_of(global_id: pl.Expr) -> pl.Expr:
    """Process id from a serialized GlobalId (globalPid or globalTid)."""
    return ((global_id // (1 << 24)) % (1 << 24)).cast(pl.Int64)


def tid_of(global_tid: pl.Expr) -> pl.Expr:
    return (global_tid % (1 << 24)).cast(pl.Int64)
