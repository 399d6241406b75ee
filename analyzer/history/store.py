"""The run store: an SQLite file (the default, no server) or a PostgreSQL database by URL; one SQL layer.

Opening checks that the target is a commscope store (or empty), migrates an older schema forward and
refuses a newer one. Writes are single transactions: a run is stored whole or not at all, and two
processes adding at once both land (SQLite: WAL and a busy timeout, writers queue; PostgreSQL: MVCC).
Nothing is ever deleted or overwritten: an existing run ID or baseline is refused unless replaced on
purpose (``set_baseline(..., replace=True)`` for a baseline that moves).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import StoreError
from ..ingest.kineto.json_depth import depth as json_depth
from ..redact import redact, remember, secrets_in_url
from . import schema
from .dialect import Dialect, Postgres, SQLite, is_url, sqlite_path
from .summary import KEYS, ROW_SCHEMA

DEFAULT_PATH = "commscope-history.sqlite"
MAX_JSON_DEPTH = 64  # a stored run's JSON columns nest ~4 deep
ENV = "COMMSCOPE_HISTORY"
METRIC_COLS = ("run_id", "metric", *KEYS, "value")


def default_target() -> str:
    """``$COMMSCOPE_HISTORY``, else ``commscope-history.sqlite`` in the current folder. Set but empty (a CI
    secret a fork's job does not get) is refused, not taken for unset: the runs would land in a file the job
    throws away."""
    value = os.environ.get(ENV)
    if value is None:
        return DEFAULT_PATH
    if not value.strip():
        raise StoreError(f"${ENV} is set but empty (an unset secret?): set it to a store, or unset it to use "
                         f"{DEFAULT_PATH}")
    remember(*secrets_in_url(value))
    return value


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _driver_errors(method: Callable) -> Callable:
    """A database error after opening (locked past the busy timeout, connection lost, disk full) is a
    StoreError: one line naming the store, never a traceback."""
    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except self.d.error as exc:
            raise StoreError(f"{self.target}: database error: {_first_line(exc)}") from None
    return wrapper


class Store:
    """``Store.open(target)``; use as a context manager (closes the connection)."""

    def __init__(self, conn: Any, dialect: Dialect, target: str) -> None:
        self.conn, self.d, self.target = conn, dialect, target

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, target: str | Path, create: bool = True) -> Store:
        """``create``: make a new store when there is none (``history add``); read commands pass False."""
        target = str(target)
        if is_url(target):
            remember(*secrets_in_url(target))
            d: Dialect = Postgres()
            conn = Postgres.connect(target)
            shown = redact(target)
        else:
            path = sqlite_path(target)
            d = SQLite()
            conn = SQLite.connect(path, create)
            shown = str(path)
        store = cls(conn, d, shown)
        try:
            store._check_and_migrate(create)
        except d.error as exc:
            conn.close()
            raise StoreError(f"{shown}: not a usable history store ({_first_line(exc)}); give another --store "
                             "or restore the file") from None
        except BaseException:
            conn.close()
            raise
        return store

    def _check_and_migrate(self, create: bool) -> None:
        """Read-only checks first (a commscope store, of a version this commscope reads), then the first write
        (WAL mode rewrites an SQLite header): nothing is written to a store that is not known to be ours."""
        d, conn = self.d, self.conn
        tables = d.tables(conn)
        if "commscope_meta" not in tables:
            if isinstance(d, SQLite) and tables:
                raise StoreError(f"{self.target}: an SQLite database but not a commscope history store (tables: "
                                 f"{', '.join(sorted(tables)[:5])}); give another --store path")
            if not create:
                raise StoreError(f"{self.target}: no history store here yet (add a run first: commscope history add)")
        elif schema.app(conn, d) != schema.APP:
            raise StoreError(f"{self.target}: not a commscope history store (its meta table belongs to another tool)")
        v = self._version()
        if v > schema.CURRENT:
            raise StoreError(f"{self.target}: written by a newer commscope (store schema v{v}, this one reads up to "
                             f"v{schema.CURRENT}); upgrade commscope")
        if isinstance(d, SQLite):
            SQLite.tune(conn)
        if v < schema.CURRENT:
            with d.write(conn):
                if isinstance(d, Postgres):
                    Postgres.lock(conn)
                v = schema.version(conn, d)  # another process may have migrated while we waited for the lock
                if v < schema.CURRENT:
                    schema.migrate(conn, d, v)

    def _version(self) -> int:
        try:
            return schema.version(self.conn, self.d)
        except ValueError as exc:
            raise StoreError(f"{self.target}: a damaged commscope history store ({exc}); restore it from a backup or "
                             "give another --store") from None

    @property
    def version(self) -> int:
        return self._version()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _q(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        return self.conn.execute(self.d.sql(sql), tuple(params)).fetchall()

    # ------------------------------------------------------------------ runs

    @_driver_errors
    def add_run(self, rows: pl.DataFrame, source: dict, run_id: str | None = None, labels: dict[str, str] | None = None,
                verdict: dict | None = None, fingerprints: list[dict] | None = None, tool_version: str | None = None,
                added_at: str | None = None, layout: list | None = None) -> str:
        """Store one run whole (one transaction); returns its ID. An existing ID is refused. ``layout``: the run's
        process groups as [dimension, member ranks] (``summary.layout``), for compare's comparability checks."""
        run_id = run_id or new_run_id()
        # the stored run goes through the same redaction as every printed text (a label may hold a URL)
        labels = {redact(str(k)): redact(str(v)) for k, v in (labels or {}).items()}
        rows = rows.select([pl.col(c).cast(t) for c, t in ROW_SCHEMA.items()])
        cols = rows.with_columns(pl.lit(run_id).alias("run_id")).select(METRIC_COLS)
        data = list(zip(*[cols[c].to_list() for c in METRIC_COLS]))  # per column: a third of DataFrame.rows()
        try:
            with self.d.write(self.conn):
                if self._q("SELECT 1 FROM commscope_runs WHERE run_id = ?", (run_id,)):
                    raise StoreError(f"{self.target}: run {run_id!r} is already stored (give another --run ID)")
                self.conn.execute(self.d.sql(
                    "INSERT INTO commscope_runs (run_id, added_at, source, verdict, labels, tool_version, fingerprints,"
                    " layout) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                    (run_id, added_at or _now(), redact(json.dumps(source, sort_keys=True)),
                     None if verdict is None else json.dumps(verdict, sort_keys=True),
                     redact(json.dumps(labels, sort_keys=True)), tool_version,
                     redact(json.dumps(fingerprints or [])), None if layout is None else json.dumps(layout)))
                if labels:
                    self.d.insert_many(self.conn, "commscope_labels", ("run_id", "key", "value"),
                                       [(run_id, k, v) for k, v in sorted(labels.items())])
                if data:
                    self.d.insert_many(self.conn, "commscope_metrics", METRIC_COLS, data)
        except self.d.integrity:
            raise StoreError(f"{self.target}: run {run_id!r} is already stored (give another --run ID)") from None
        return run_id

    @_driver_errors
    def runs(self, since: str | None = None, labels: dict[str, str] | None = None) -> pl.DataFrame:
        """seq, run_id, added_at, in insertion order; ``since``: an ISO date/time or a run ID (inclusive)."""
        where, params = self._run_filter(since, labels)
        rows = self._q(f"SELECT seq, run_id, added_at FROM commscope_runs r{where} ORDER BY seq", params)
        return pl.DataFrame(rows, schema={"seq": pl.Int64, "run_id": pl.String, "added_at": pl.String}, orient="row")

    def _run_filter(self, since: str | None, labels: dict[str, str] | None) -> tuple[str, list]:
        conds, params = [], []
        if since:
            hit = self._q("SELECT seq FROM commscope_runs WHERE run_id = ?", (since,))
            if hit:
                conds.append("r.seq >= ?")
                params.append(hit[0][0])
            else:
                conds.append("r.added_at >= ?")
                params.append(_since(since))
        for k, v in sorted((labels or {}).items()):
            conds.append("r.run_id IN (SELECT run_id FROM commscope_labels WHERE key = ? AND value = ?)")
            params += [k, v]
        return (" WHERE " + " AND ".join(conds) if conds else ""), params

    @_driver_errors
    def run(self, run_id: str) -> dict:
        rows = self._q("SELECT seq, run_id, added_at, source, verdict, fingerprints, tool_version, layout FROM "
                       "commscope_runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise StoreError(f"{self.target}: no run {run_id!r} in the store (commscope history trend lists them)")
        seq, rid, added, source, verdict, fps, version, layout = rows[0]
        labels = dict(self._q("SELECT key, value FROM commscope_labels WHERE run_id = ? ORDER BY key", (run_id,)))
        return {"seq": seq, "run_id": rid, "added_at": added, "source": self._json(source, dict, run_id, "source"),
                "verdict": self._json(verdict, dict, run_id, "verdict") if verdict else None,
                "fingerprints": self._json(fps or "[]", list, run_id, "fingerprints"),
                "tool_version": version, "labels": labels,
                "layout": self._json(layout, list, run_id, "layout") if layout is not None else None}

    def _json(self, text: object, kind: type, run_id: str, what: str) -> Any:
        """A JSON column of a stored run, parsed with its nesting bounded (a damaged store is one line, never a
        recursion a file controls)."""
        try:
            if not isinstance(text, str) or json_depth(text.encode()) > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH}")
            value = json.loads(text)
            if not isinstance(value, kind):
                raise ValueError(f"not a JSON {kind.__name__}")
            return value
        except ValueError as exc:
            raise StoreError(f"{self.target}: run {run_id!r} is damaged ({what}: {exc}); restore the store or add "
                             "the run again") from None

    @_driver_errors
    def labels(self, run_ids: list[str] | None = None) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for rid, k, v in self._q("SELECT run_id, key, value FROM commscope_labels ORDER BY run_id, key"):
            if run_ids is None or rid in run_ids:
                out.setdefault(rid, {})[k] = v
        return out

    @_driver_errors
    def metrics(self, run_id: str | None = None, metrics: list[str] | None = None, since: str | None = None,
                labels: dict[str, str] | None = None, scopes: str = "all") -> pl.DataFrame:
        """Metric rows joined with their run's seq. ``scopes``: "all", or "trend" (no per-step, per-instance
        or per-rank-per-dimension rows: what a trend plots), or "trend+rank" (also per rank)."""
        where, params = self._run_filter(since, labels)
        conds = [where[len(" WHERE "):]] if where else []
        if run_id is not None:
            conds.append("m.run_id = ?")
            params.append(run_id)
        if metrics:
            conds.append(f"m.metric IN ({', '.join('?' * len(metrics))})")
            params += list(metrics)
        if scopes == "trend":  # exactly the predicate of the v3 partial index, so the planner reads only it
            conds += ["m.step IS NULL AND m.rank IS NULL", "m.metric <> 'instance_busbw_gbps'"]
        elif scopes == "trend+rank":
            conds += ["m.step IS NULL", "(m.rank IS NULL OR m.dimension IS NULL)", "m.metric <> 'instance_busbw_gbps'"]
        sql = (f"SELECT r.seq, m.run_id, m.metric, {', '.join('m.' + k for k in KEYS)}, m.value FROM commscope_metrics m "
               "JOIN commscope_runs r ON r.run_id = m.run_id" + (" WHERE " + " AND ".join(conds) if conds else "")
               + " ORDER BY r.seq")
        cur = self.conn.execute(self.d.sql(sql), tuple(params))
        out_schema = {"seq": pl.Int64, "run_id": pl.String, **ROW_SCHEMA}
        return pl.DataFrame(cur.fetchall(), schema=out_schema, orient="row")

    # ------------------------------------------------------------------ baselines

    @_driver_errors
    def set_baseline(self, name: str, run_id: str, replace: bool = True) -> str | None:
        """Point ``name`` at ``run_id``; returns the run it pointed at before (None if new)."""
        with self.d.write(self.conn):
            if not self._q("SELECT 1 FROM commscope_runs WHERE run_id = ?", (run_id,)):
                raise StoreError(f"{self.target}: no run {run_id!r} in the store (commscope history trend lists them)")
            old = self._q("SELECT run_id FROM commscope_baselines WHERE name = ?", (name,))
            if old and not replace:
                raise StoreError(f"{self.target}: baseline {name!r} exists (run {old[0][0]})")
            if old:
                self.conn.execute(self.d.sql("UPDATE commscope_baselines SET run_id = ?, set_at = ? WHERE name = ?"),
                                  (run_id, _now(), name))
            else:
                self.conn.execute(self.d.sql("INSERT INTO commscope_baselines (name, run_id, set_at) VALUES (?, ?, ?)"),
                                  (name, run_id, _now()))
        return old[0][0] if old else None

    @_driver_errors
    def baselines(self) -> list[dict]:
        return [{"name": n, "run_id": r, "set_at": s}
                for n, r, s in self._q("SELECT name, run_id, set_at FROM commscope_baselines ORDER BY name")]

    @_driver_errors
    def baseline(self, name: str) -> str:
        rows = self._q("SELECT run_id FROM commscope_baselines WHERE name = ?", (name,))
        if not rows:
            known = ", ".join(b["name"] for b in self.baselines()) or "none yet"
            raise StoreError(f"{self.target}: no baseline {name!r} (known: {known}; set one with "
                             "commscope history baseline set NAME RUN)")
        return rows[0][0]


def _since(value: str) -> str:
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise StoreError(f"--since {value!r}: expected a run ID in the store or a date (2026-05-01 or "
                         "2026-05-01T12:00)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).isoformat(timespec="seconds")


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip()
    return s.splitlines()[0] if s else type(exc).__name__
