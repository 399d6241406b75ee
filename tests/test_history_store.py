"""The run store on both backends (an SQLite file and a real PostgreSQL server): the 60-run trend with a known
shift and a drift, concurrent writers, migrations from a hand-made v1 store, refusal of foreign and corrupt files."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analyzer.errors import StoreError
from analyzer.history.store import Store
from analyzer.history.summary import KEYS, ROW_SCHEMA
from analyzer.history.trend import build
from analyzer.report import trend_formats
from tests import pg_server

ROOT = Path(__file__).resolve().parents[1]
N_RUNS, SHIFT_AT = 60, 35  # exposed_comm_ms on TP rises 8% from the 36th run (index 35)


@pytest.fixture(scope="module")
def pg_cluster():
    yield from pg_server.cluster()


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    return pg_server.fresh_database(request.getfixturevalue("pg_cluster"))


def _row(metric: str, value: float, **keys) -> dict:
    return {"metric": metric, **{k: keys.get(k) for k in KEYS}, "value": value}


def series_rows(i: int, rng: np.random.Generator) -> pl.DataFrame:
    """Run i of the generated history: 1-2% Gaussian noise on every metric; TP exposed comm steps up 8% at
    SHIFT_AT; all_reduce 64 MiB inter-node busbw drifts down 0.3% a run; everything else is stable."""
    def noisy(level: float, sd: float = 0.015) -> float:
        return float(level * (1.0 + sd * rng.standard_normal()))

    rows = [
        _row("step_time_ms", noisy(250.0)), _row("exposed_comm_ms", noisy(40.0)),
        _row("exposed_wait_ms", noisy(12.0, 0.02)), _row("overlap_pct", noisy(70.0, 0.01)),
        _row("idle_ms", noisy(5.0, 0.02)),
        _row("exposed_comm_ms", noisy(20.0, 0.015) * (1.08 if i >= SHIFT_AT else 1.0), dimension="tp"),
        _row("exposed_comm_ms", noisy(18.0), dimension="dp"),
        _row("busbw_gbps_p50", noisy(180.0, 0.01) * 0.997 ** i, op="all_reduce", size_bucket=1 << 26, intra_node=0),
        _row("busbw_gbps_p50", noisy(350.0, 0.01), op="all_gather", size_bucket=1 << 24, intra_node=1),
    ]
    rows += [_row("exposed_comm_ms", noisy(40.0), rank=r) for r in range(4)]
    rows += [_row("exposed_comm_ms", noisy(40.0), rank=r, step=s) for r in range(4) for s in range(3)]  # not trended
    return pl.DataFrame(rows, schema=ROW_SCHEMA)


def fill(target: str, n: int = N_RUNS, seed: int = 11) -> list[str]:
    rng = np.random.default_rng(seed)
    ids = []
    with Store.open(target) as store:
        for i in range(n):
            ids.append(store.add_run(series_rows(i, rng), {"paths": [], "ranks": [0, 1, 2, 3]}, run_id=f"run-{i:03d}",
                                     labels={"branch": "main" if i % 2 == 0 else "dev", "commit": f"c{i:03d}"}))
    return ids


def test_trend_flags_the_shift_at_its_run_and_nothing_stable(target):
    ids = fill(target)
    with Store.open(target, create=False) as store:
        t = build(store, per_rank=True)
    assert t.runs.height == N_RUNS
    changes = t.changes()
    assert [(s.metric, s.key, s.run_ids[sh.index]) for s, sh in changes] == [
        ("exposed_comm_ms", {"dimension": "tp"}, ids[SHIFT_AT])]
    sh = changes[0][1]
    assert 5.0 < sh.delta_pct < 11.0 and sh.confidence > 0.999
    drifts = t.drifts()
    assert [(s.metric, s.key) for s, _ in drifts] == [
        ("busbw_gbps_p50", {"op": "all_reduce", "size_bucket": 1 << 26, "intra_node": 0})]
    assert drifts[0][1].slope_pct == pytest.approx(-0.3, abs=0.1)
    doc = json.loads(trend_formats.render(t, "json"))  # the JSON contract carries the same finding
    assert [(c["metric"], c["scope"], c["run_id"], c["run"], c["worse"]) for c in doc["changes"]] == [
        ("exposed_comm_ms", "TP", ids[SHIFT_AT], SHIFT_AT + 1, True)]
    assert [d["scope"] for d in doc["drifts"]] == ["all_reduce 64 MiB inter-node"]
    for fmt in ("text", "markdown", "html"):
        assert f"from run {ids[SHIFT_AT]} (#{SHIFT_AT + 1}" in trend_formats.render(t, fmt)
    # 13 series (5 run-level, TP, DP, 2 busbw, 4 ranks): every one but those two is stable and unflagged
    assert len(t.series) == 13
    flagged = [(s.metric, s.scope) for s in t.series if s.shifts or s.drifts]
    assert flagged == [("exposed_comm_ms", "TP"), ("busbw_gbps_p50", "all_reduce 64 MiB inter-node")]


def test_trend_filters_by_label_since_and_metric(target):
    ids = fill(target, n=12)
    with Store.open(target, create=False) as store:
        t = build(store, metrics=["exposed_comm_ms"], labels={"branch": "main"})
        assert t.runs["run_id"].to_list() == ids[0::2]
        assert {s.metric for s in t.series} == {"exposed_comm_ms"}
        assert all(set(s.run_ids) <= set(ids[0::2]) for s in t.series)
        assert build(store, since=ids[9]).runs["run_id"].to_list() == ids[9:]
        assert build(store, since="2000-01-01").runs.height == 12
        assert build(store, since="2999-01-01").runs.height == 0


def test_run_ids_are_never_overwritten(target):
    rows = pl.DataFrame([_row("step_time_ms", 1.0)], schema=ROW_SCHEMA)
    with Store.open(target) as store:
        store.add_run(rows, {}, run_id="a")
        with pytest.raises(StoreError, match="already stored"):
            store.add_run(pl.DataFrame([_row("step_time_ms", 2.0)], schema=ROW_SCHEMA), {}, run_id="a")
        assert store.metrics(run_id="a")["value"].to_list() == [1.0]
        store.add_run(rows, {}, run_id="b")
        assert store.set_baseline("main", "a") is None
        assert store.set_baseline("main", "b") == "a"
        assert store.baseline("main") == "b"
        with pytest.raises(StoreError, match="no run 'zz'"):
            store.set_baseline("x", "zz")
        with pytest.raises(StoreError, match="no baseline 'nope'"):
            store.baseline("nope")
        assert store.runs()["run_id"].to_list() == ["a", "b"]


WRITER = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from analyzer.history.store import Store
from tests.test_history_store import series_rows
rng = np.random.default_rng(int(sys.argv[2]))
with Store.open(sys.argv[1]) as store:
    for i in range(15):
        store.add_run(series_rows(i, rng), {"paths": []}, run_id=f"w{sys.argv[2]}-{i}")
"""


WRITERS = (1, 2, 3, 4)  # issue #42: the guarantees hold for four writers at once


def test_four_processes_adding_at_once_lose_nothing(target):
    Store.open(target).close()  # concurrent creation is covered below on a fresh file
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, target, str(w), str(ROOT)], stderr=subprocess.PIPE)
             for w in WRITERS]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(WRITERS), errs
    with Store.open(target, create=False) as store:
        runs = store.runs()["run_id"].to_list()
        assert sorted(runs) == sorted(f"w{w}-{i}" for w in WRITERS for i in range(15))
        per_run = store.metrics().group_by("run_id").len()
    assert per_run["len"].to_list() == [series_rows(0, np.random.default_rng(0)).height] * 15 * len(WRITERS)


def test_four_processes_creating_a_new_store_at_once(target):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, target, str(w), str(ROOT)], stderr=subprocess.PIPE)
             for w in WRITERS]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(WRITERS), errs
    with Store.open(target, create=False) as store:
        assert store.version == 4 and store.runs().height == 15 * len(WRITERS)


# ---------------------------------------------------------------------------------------------- migrations

def _v1_sqlite(path: Path) -> None:
    """The v1 schema, typed here by hand (not taken from the code under test)."""
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE commscope_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO commscope_meta VALUES ('app', 'commscope.history'), ('schema_version', '1');
        CREATE TABLE commscope_runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE,
            added_at TEXT NOT NULL, source TEXT NOT NULL, verdict TEXT, labels TEXT NOT NULL DEFAULT '{}',
            tool_version TEXT);
        CREATE TABLE commscope_metrics (run_id TEXT NOT NULL, metric TEXT NOT NULL, rank INTEGER, step INTEGER,
            dimension TEXT, op TEXT, size_bucket BIGINT, intra_node INTEGER, value DOUBLE PRECISION);
        CREATE TABLE commscope_baselines (name TEXT PRIMARY KEY, run_id TEXT NOT NULL, set_at TEXT NOT NULL);
        INSERT INTO commscope_runs (run_id, added_at, source, verdict, labels) VALUES
            ('old1', '2026-01-01T00:00:00+00:00', '{"paths": ["/x/rank0.json"]}', '{"rank": 2, "kind": "host"}',
             '{"branch": "main", "commit": "abc"}'),
            ('old2', '2026-01-02T00:00:00+00:00', '{"paths": []}', NULL, '{}');
        INSERT INTO commscope_metrics VALUES ('old1', 'step_time_ms', NULL, NULL, NULL, NULL, NULL, NULL, 101.5),
            ('old1', 'exposed_comm_ms', 3, NULL, 'tp', NULL, NULL, NULL, 7.25),
            ('old2', 'busbw_gbps_p50', NULL, NULL, NULL, 'all_reduce', 67108864, 0, 180.0);
        INSERT INTO commscope_baselines VALUES ('main', 'old1', '2026-01-01T00:00:00+00:00');
    """)
    con.commit()
    con.close()


def test_v1_sqlite_store_is_migrated_with_its_data(tmp_path):
    path = tmp_path / "v1.sqlite"
    _v1_sqlite(path)
    with Store.open(str(path), create=False) as store:
        assert store.version == 4
        rec = store.run("old1")
        assert rec["labels"] == {"branch": "main", "commit": "abc"}
        assert rec["verdict"] == {"rank": 2, "kind": "host"} and rec["fingerprints"] == []
        m = store.metrics().sort("run_id", "metric")
        assert m.select("run_id", "metric", "rank", "dimension", "op", "size_bucket", "intra_node", "item",
                        "value").rows() == [
            ("old1", "exposed_comm_ms", 3, "tp", None, None, None, None, 7.25),
            ("old1", "step_time_ms", None, None, None, None, None, None, 101.5),
            ("old2", "busbw_gbps_p50", None, None, "all_reduce", 67108864, 0, None, 180.0)]
        assert store.baseline("main") == "old1"
        assert build(store, labels={"commit": "abc"}).runs["run_id"].to_list() == ["old1"]
        store.add_run(pl.DataFrame([_row("step_time_ms", 99.0, item="x")], schema=ROW_SCHEMA), {}, run_id="new")
    with Store.open(str(path), create=False) as store:  # reopening: already current, nothing re-run
        assert store.version == 4 and store.runs()["run_id"].to_list() == ["old1", "old2", "new"]
    con = sqlite3.connect(path)
    indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    con.close()
    assert "commscope_metrics_trend" in indexes  # v3


def test_v1_postgres_store_is_migrated_with_its_data(pg_cluster):
    import psycopg

    url = pg_server.fresh_database(pg_cluster)
    with psycopg.connect(url, autocommit=True) as con:
        for stmt in (
            "CREATE TABLE commscope_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "INSERT INTO commscope_meta VALUES ('app', 'commscope.history'), ('schema_version', '1')",
            "CREATE TABLE commscope_runs (seq BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, added_at TEXT NOT NULL,"
            " source TEXT NOT NULL, verdict TEXT, labels TEXT NOT NULL DEFAULT '{}', tool_version TEXT)",
            "CREATE TABLE commscope_metrics (run_id TEXT NOT NULL, metric TEXT NOT NULL, rank INTEGER, step INTEGER,"
            " dimension TEXT, op TEXT, size_bucket BIGINT, intra_node INTEGER, value DOUBLE PRECISION)",
            "CREATE TABLE commscope_baselines (name TEXT PRIMARY KEY, run_id TEXT NOT NULL, set_at TEXT NOT NULL)",
            "INSERT INTO commscope_runs (run_id, added_at, source, labels) VALUES ('old1', '2026-01-01T00:00:00+00:00',"
            " '{}', '{\"branch\": \"main\"}')",
            "INSERT INTO commscope_metrics VALUES ('old1', 'step_time_ms', NULL, NULL, NULL, NULL, NULL, NULL, 101.5)",
        ):
            con.execute(stmt)
    with Store.open(url, create=False) as store:
        assert store.version == 4
        assert store.run("old1")["labels"] == {"branch": "main"}
        assert store.metrics()["value"].to_list() == [101.5]


def test_newer_schema_is_refused_not_misread(tmp_path):
    path = tmp_path / "v9.sqlite"
    _v1_sqlite(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE commscope_meta SET value = '9' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer commscope"):
        Store.open(str(path))


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_foreign_and_corrupt_files_are_refused_and_left_alone(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    foreign = tmp_path / "other.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    for path, match in ((text, "not an SQLite database"), (foreign, "not a commscope history store"),
                        (corrupt, "not a usable history store")):
        before = _digest(path)
        with pytest.raises(StoreError, match=match):
            Store.open(str(path))
        assert _digest(path) == before
        assert not Path(str(path) + "-wal").exists()
    with pytest.raises(StoreError, match="no history store here"):
        Store.open(str(tmp_path / "absent.sqlite"), create=False)
    assert not (tmp_path / "absent.sqlite").exists()
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(str(tmp_path / "no" / "dir.sqlite"))


def test_unreachable_postgres_is_one_error_without_the_password():
    with pytest.raises(StoreError) as exc:
        Store.open("postgresql://me:secret@127.0.0.1:1/db")
    assert "secret" not in str(exc.value) and "cannot connect" in str(exc.value)


def test_labels_and_source_round_trip(target):
    with Store.open(target) as store:
        rid = store.add_run(pl.DataFrame(schema=ROW_SCHEMA), {"paths": ["/a"], "ranks": [0]}, labels={"k": "v=w"},
                            verdict={"rank": 1, "kind": "compute"}, fingerprints=[{"path": "/a", "size": 3}])
        rec = store.run(rid)
    assert (rec["labels"], rec["source"], rec["verdict"], rec["fingerprints"]) == (
        {"k": "v=w"}, {"paths": ["/a"], "ranks": [0]}, {"rank": 1, "kind": "compute"}, [{"path": "/a", "size": 3}])
    assert json.dumps(rec)  # plain JSON types


def test_database_errors_after_opening_are_store_errors(tmp_path):
    store = Store.open(str(tmp_path / "h.sqlite"))
    store.close()  # any later call fails in the driver
    with pytest.raises(StoreError, match="database error"):
        store.runs()


def test_per_rank_trend_names_the_rank_that_moved(tmp_path):
    """Rank 2's exposed comm rises 12% from the 21st run; the run-level mean of 4 ranks moves 3%, within noise
    of the stable ranks: --per-rank names rank 2 and its run."""
    rng = np.random.default_rng(5)
    target = str(tmp_path / "h.sqlite")
    with Store.open(target) as store:
        for i in range(40):
            rows = [_row("exposed_comm_ms", 40.0 * (1 + 0.01 * rng.standard_normal()) * (1.12 if r == 2 and i >= 20
                                                                                       else 1.0), rank=r)
                    for r in range(4)]
            store.add_run(pl.DataFrame(rows, schema=ROW_SCHEMA), {}, run_id=f"r{i:02d}")
        t = build(store, per_rank=True)
    assert [(s.scope, s.run_ids[sh.index]) for s, sh in t.changes()] == [("rank 2", "r20")]
    assert 8.0 < t.changes()[0][1].delta_pct < 16.0
