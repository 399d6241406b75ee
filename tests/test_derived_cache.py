"""The job's derived tables (checked GPU table, steps, collectives, their warnings) come from the cache on a
cached load, equal what the uncached load derives, and are derived again when an option or the code changes
or the entry is damaged."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from analyzer.ingest import derived, loader
from analyzer.ingest.cachedir import cache_dir
from analyzer.ingest.loader import LoadOptions, load
from analyzer.model import TraceSet


@pytest.fixture()
def traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two ranks, rank 0 with one GPU kernel written twice (the checks drop it: the GPU table is stored)."""
    from sample_traces.generate import Scenario, build, write_kineto

    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "traces"
    paths = write_kineto(build(Scenario(ranks=2, steps=3)), out)
    doc = json.loads(paths[0].read_text())
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    doc["traceEvents"].append(dict(kernel))
    paths[0].write_text(json.dumps(doc))
    return out


def _same(a: TraceSet, b: TraceSet) -> None:
    for name in ("gpu", "cpu", "steps", "collectives"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.schema == y.schema, name
        assert x.equals(y), name
    assert a.warnings == b.warnings


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often the loader runs the GPU checks (the real function, counted)."""
    calls: list[int] = []
    real = loader.check_gpu

    def counted(gpu: pl.DataFrame, cpu: pl.DataFrame):  # noqa: ANN202
        calls.append(1)
        return real(gpu, cpu)

    monkeypatch.setattr(loader, "check_gpu", counted)
    return calls


def _entries() -> list[Path]:
    root = cache_dir() / derived.DERIVED_DIR
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


def test_cached_load_reads_derived_tables_equal_to_uncached(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = load([traces], LoadOptions(jobs=1, cache=False))
    assert any("dropped 1 duplicate GPU events" in w for w in ref.warnings)
    calls = _counting(monkeypatch)
    _same(load([traces], LoadOptions(jobs=1)), ref)  # cold: derives and stores
    assert len(calls) == 1 and len(_entries()) == 1
    assert (_entries()[0] / "gpu.parquet").is_file()  # the checks changed the table: it is stored
    _same(load([traces], LoadOptions(jobs=1)), ref)  # cached: read, not derived
    assert len(calls) == 1


def test_unchanged_gpu_table_is_not_stored_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sample_traces.generate import Scenario, build, write_kineto

    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    write_kineto(build(Scenario(ranks=2, steps=3)), tmp_path / "t")
    ref = load([tmp_path / "t"], LoadOptions(jobs=1, cache=False))
    load([tmp_path / "t"], LoadOptions(jobs=1))
    assert not (_entries()[0] / "gpu.parquet").exists()
    _same(load([tmp_path / "t"], LoadOptions(jobs=1)), ref)


def test_option_or_code_change_derives_again(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load([traces], LoadOptions(jobs=1))
    calls = _counting(monkeypatch)
    ref = load([traces], LoadOptions(jobs=1, ranks=(1,), cache=False))
    assert len(calls) == 1
    _same(load([traces], LoadOptions(jobs=1, ranks=(1,))), ref)  # another rank selection: another entry
    assert len(calls) == 2 and len(_entries()) == 2
    monkeypatch.setattr(derived, "_code_hash", "edited")  # the deriving code changed
    load([traces], LoadOptions(jobs=1))
    assert len(calls) == 3 and len(_entries()) == 3


def test_damaged_entry_is_derived_again(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = load([traces], LoadOptions(jobs=1, cache=False))
    load([traces], LoadOptions(jobs=1))
    (entry,) = _entries()
    (entry / "collectives.parquet").write_bytes(b"not parquet")
    calls = _counting(monkeypatch)
    _same(load([traces], LoadOptions(jobs=1)), ref)
    assert len(calls) == 1
    _same(load([traces], LoadOptions(jobs=1)), ref)  # rewritten whole
    assert len(calls) == 1


def test_code_hash_covers_what_the_deriving_modules_import() -> None:
    """Each module whose source keys the entry names only analyzer modules that key it too (the loader itself
    imports the readers, which the ranks' own cache keys cover)."""
    import ast

    root = Path(derived.__file__).resolve().parents[1]
    listed = set(derived._SOURCES)
    for rel in {r for r in listed if r.endswith(".py")} - {"ingest/loader.py"}:
        path = root / rel
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                target = base.joinpath(*(node.module or "").split("."))
                mod = target.with_suffix(".py") if target.with_suffix(".py").is_file() else target / "__init__.py"
                assert str(mod.relative_to(root)) in listed, f"{rel} imports {mod.relative_to(root)}"
