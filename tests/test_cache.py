"""Parquet cache: same report as the uncached path, invalidated by changes, self-healing, never beside traces."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from analyzer.analysis import analyze
from analyzer.ingest import cache
from analyzer.ingest.loader import LoadOptions, load
from analyzer.report.json import to_dict


@pytest.fixture()
def traces(tmp_path: Path) -> Path:
    from sample_traces.generate import Scenario, build, write_kineto

    out = tmp_path / "traces"
    write_kineto(build(Scenario(ranks=2, steps=3, late_ranks={1: (50_000, "host")})), out, gzip=True)
    return out


def _report(path: Path, **kw: object) -> dict:
    d = to_dict(analyze(load([path], LoadOptions(jobs=1, **kw))))  # type: ignore[arg-type]
    d.pop("source", None)  # paths differ between copies; everything else must not
    return d


def _entries() -> list[Path]:
    root = cache.cache_dir()
    return sorted(p for p in root.glob("*") if not p.name.startswith(".")) if root.exists() else []


def test_cached_report_equals_uncached(traces: Path) -> None:
    ref = _report(traces, cache=False)
    assert _report(traces) == ref  # cold: fills the cache
    n = len(_entries())
    assert n >= 2
    assert _report(traces) == ref  # warm: read from Parquet
    assert len(_entries()) == n


def test_cache_honours_env_dir_and_never_writes_beside_traces(traces: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "elsewhere"))
    before = sorted(p.name for p in traces.iterdir())
    _report(traces)
    assert sorted(p.name for p in traces.iterdir()) == before
    assert any((tmp_path / "elsewhere").iterdir())


def test_no_cache_writes_nothing(traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "c"))
    _report(traces, cache=False)
    assert not (tmp_path / "c").exists()


def test_cache_invalidates_on_change(traces: Path) -> None:
    from sample_traces.generate import Scenario, build, write_kineto

    _report(traces)
    keys = {p.name for p in _entries()}
    # same size, new mtime -> new key
    f = sorted(traces.iterdir())[0]
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    _report(traces)
    assert len({p.name for p in _entries()} - keys) == 1
    # different content (a later rank goes late) -> the report follows the new file, not the cache
    write_kineto(build(Scenario(ranks=2, steps=3, late_ranks={0: (80_000, "host")})), traces, gzip=True)
    assert _report(traces) == _report(traces, cache=False)


def test_corrupt_entry_is_rebuilt(traces: Path) -> None:
    ref = _report(traces, cache=False)
    _report(traces)
    parts = [part for entry in _entries() for part in entry.rglob("*.parquet")]
    assert parts  # the cache was written, so there is something to corrupt
    for part in parts:
        part.write_bytes(b"garbage")
    assert _report(traces) == ref
    for entry in _entries():
        (entry / "0" / "gpu.parquet").unlink(missing_ok=True)
    assert _report(traces) == ref
