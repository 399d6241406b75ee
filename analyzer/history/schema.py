"""The store's schema, as the ordered migrations that build it. A new store runs them all; an old one the rest.

``commscope_meta`` holds ``app`` (what tells a commscope store from any other database) and
``schema_version``. A store whose version is newer than ``CURRENT`` is refused, never misread. Tables
carry a ``commscope_`` prefix so that a team's shared PostgreSQL database can hold them beside others.

- v1: runs (labels as a JSON column), long-format metric rows, baselines.
- v2: labels in their own table (filterable in SQL: ``trend --label branch=main``), source
  fingerprints on each run, and the ``item`` key on metric rows (what-if scenario, verdict kind).
- v3: a covering partial index of the rows a trend reads (no rank, no step): a 1,000-run trend reads
  52 k rows out of 650 k from the index alone (SQLite: 0.25 s instead of 0.5-1.0 s).
- v4: each run's layout (its process groups as [dimension, member ranks]), so that ``compare --baseline`` checks
  the stored run's layout as comparing two traces does; runs stored before it have none (NULL) and are said so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .dialect import Dialect

APP = "commscope.history"
CURRENT = 4

V1 = (
    "CREATE TABLE commscope_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE commscope_runs ({serial}, run_id TEXT NOT NULL UNIQUE, added_at TEXT NOT NULL, source TEXT NOT NULL,"
    " verdict TEXT, labels TEXT NOT NULL DEFAULT '{}', tool_version TEXT)",
    "CREATE TABLE commscope_metrics (run_id TEXT NOT NULL REFERENCES commscope_runs (run_id), metric TEXT NOT NULL,"
    " rank INTEGER, step INTEGER, dimension TEXT, op TEXT, size_bucket BIGINT, intra_node INTEGER,"
    " value DOUBLE PRECISION)",
    "CREATE INDEX commscope_metrics_metric ON commscope_metrics (metric, run_id)",
    "CREATE INDEX commscope_metrics_run ON commscope_metrics (run_id)",
    "CREATE TABLE commscope_baselines (name TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES commscope_runs (run_id),"
    " set_at TEXT NOT NULL)",
    f"INSERT INTO commscope_meta (key, value) VALUES ('app', '{APP}')",
    "INSERT INTO commscope_meta (key, value) VALUES ('schema_version', '1')",
)

V2 = (
    "ALTER TABLE commscope_runs ADD COLUMN fingerprints TEXT",
    "ALTER TABLE commscope_metrics ADD COLUMN item TEXT",
    "CREATE TABLE commscope_labels (run_id TEXT NOT NULL REFERENCES commscope_runs (run_id), key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY (run_id, key))",
    "CREATE INDEX commscope_labels_kv ON commscope_labels (key, value)",
)


V3 = (
    "CREATE INDEX commscope_metrics_trend ON commscope_metrics (metric, run_id, rank, step, dimension, op, size_bucket,"
    " intra_node, item, value) WHERE step IS NULL AND rank IS NULL",
)


V4 = (
    "ALTER TABLE commscope_runs ADD COLUMN layout TEXT",
)


def _run(conn: Any, d: Dialect, statements: tuple[str, ...]) -> None:
    for s in statements:
        conn.execute(d.sql(s))


def _v1(conn: Any, d: Dialect) -> None:
    _run(conn, d, V1)


def _v2(conn: Any, d: Dialect) -> None:
    _run(conn, d, V2)
    # the labels JSON column's pairs move to rows (the column stays, unread: SQLite before 3.35 cannot drop it)
    rows = []
    for run_id, labels in conn.execute("SELECT run_id, labels FROM commscope_runs").fetchall():
        for k, v in sorted(json.loads(labels or "{}").items()):
            rows.append((run_id, str(k), str(v)))
    if rows:
        d.insert_many(conn, "commscope_labels", ("run_id", "key", "value"), rows)


def _v3(conn: Any, d: Dialect) -> None:
    _run(conn, d, V3)


def _v4(conn: Any, d: Dialect) -> None:
    _run(conn, d, V4)


MIGRATIONS: dict[int, Callable[[Any, Dialect], None]] = {1: _v1, 2: _v2, 3: _v3, 4: _v4}


def version(conn: Any, d: Dialect) -> int:
    """0 for an empty database (no commscope tables)."""
    if "commscope_meta" not in d.tables(conn):
        return 0
    row = conn.execute(d.sql("SELECT value FROM commscope_meta WHERE key = 'schema_version'")).fetchone()
    if not row:
        return 0
    text = str(row[0]).strip()
    # ASCII digits only, and a few of them: '1e400', '-1', '²' or a 10,000-digit number are damage, not versions
    if not (text.isascii() and text.isdigit() and len(text) <= 6) or int(text) < 1:
        raise ValueError(f"schema_version {text[:40]!r} is not a version")
    return int(text)


def app(conn: Any, d: Dialect) -> str | None:
    row = conn.execute(d.sql("SELECT value FROM commscope_meta WHERE key = 'app'")).fetchone()
    return row[0] if row else None


def migrate(conn: Any, d: Dialect, start: int) -> None:
    """From ``start`` to CURRENT, inside the caller's write transaction."""
    for v in range(start + 1, CURRENT + 1):
        MIGRATIONS[v](conn, d)
        conn.execute(d.sql("UPDATE commscope_meta SET value = ? WHERE key = 'schema_version'"), (str(v),))
