"""Issue #42: the cache proves what it holds. Each of the three caches (a rank's tables, a job's derived tables, a
job's analysis) is tampered with as a careless CI or a shared cache folder would: files swapped in from another
job's entry with the same row counts, a whole entry copied under another key, manifests damaged (out-of-range
table numbers, 1e400, 200,000-deep nesting). Every time the result equals the job analyzed without the cache
(the truth comes from ``cache=False``, not from the code under test), no traceback, and the entry is replaced:
the next run reads it again from the cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analyzer import analysis
from analyzer.analysis import cache as analysis_cache
from analyzer.ingest import background, derived
from analyzer.ingest import cache as rank_cache
from analyzer.ingest.loader import LoadOptions, load
from tests.helpers import ROOT
from tests.test_analysis_cache import _counting, same

SAMPLES = ROOT / "sample_traces" / "gpu_h200"
HOST, COMPUTE = SAMPLES / "host_straggler", SAMPLES / "compute_straggler"  # same shape, different roots


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def truth() -> dict[Path, analysis.Analysis]:
    return {p: analysis.analyze(load([p], LoadOptions(cache=False, jobs=1))) for p in (HOST, COMPUTE)}


def _run(path: Path) -> analysis.Analysis:
    a = analysis.analyze(load([path], LoadOptions(jobs=1)))
    background.wait()  # the entries it keeps are written on a thread: tamper with them once they are there
    return a


def _check(got: analysis.Analysis, want: analysis.Analysis) -> None:
    assert got.verdict is not None and want.verdict is not None
    assert (got.verdict.rank, got.verdict.kind) == (want.verdict.rank, want.verdict.kind)
    for name in ("ranks", "steps", "collectives", "clock"):
        same(getattr(want, name), getattr(got, name), name)


def _entries(cache: Path, sub: str) -> dict[str, Path]:
    return {p.name: p for p in (cache / sub).iterdir() if not p.name.startswith(".")}


def _job_entry(cache: Path, sub: str, path: Path) -> Path:
    ts = load([path], LoadOptions(jobs=1))
    return cache / sub / str(ts.job_key)


def _fill(cache: Path) -> tuple[Path, Path]:
    _run(HOST)
    _run(COMPUTE)
    return _job_entry(cache, analysis_cache.ANALYSIS_DIR, HOST), _job_entry(cache, analysis_cache.ANALYSIS_DIR, COMPUTE)


# ------------------------------------------------------------------------------------------------ the analysis cache


def test_a_table_swapped_in_from_another_job_is_not_read(cache: Path, truth: dict, monkeypatch) -> None:
    host, compute = _fill(cache)
    tables = {n: r for n, r in json.loads((host / "manifest.json").read_text())["tables"]}
    other = {n: r for n, r in json.loads((compute / "manifest.json").read_text())["tables"]}
    swapped = [n for n, r in tables.items() if other.get(n) == r and r > 0
               and (host / n).read_bytes() != (compute / n).read_bytes()]
    assert len(swapped) >= 5  # the per-rank tables among them: the probe's case
    for n in swapped:
        shutil.copy(compute / n, host / n)
    calls = _counting(monkeypatch)
    _check(_run(HOST), truth[HOST])
    assert calls == [1]
    _check(_run(HOST), truth[HOST])  # replaced: read back from the cache
    assert calls == [1]


@pytest.mark.parametrize("bad", ['{"df": 9999}', '{"df": -1}', '{"df": 1e400}', '{"df": true}', '{"np": "|O8", "v": 1}',
                                 "[" * 200_000 + "]" * 200_000])
def test_a_damaged_manifest_is_analyzed_again_and_replaced(bad: str, cache: Path, truth: dict, monkeypatch) -> None:
    host, _ = _fill(cache)
    manifest = json.loads((host / "manifest.json").read_text())
    manifest["fields"]["ranks"] = "@@"
    (host / "manifest.json").write_text(json.dumps(manifest).replace('"@@"', bad))
    calls = _counting(monkeypatch)
    _check(_run(HOST), truth[HOST])
    assert calls == [1]
    _check(_run(HOST), truth[HOST])
    assert calls == [1]


def test_an_analysis_entry_over_other_inputs_is_not_read(cache: Path, truth: dict, monkeypatch) -> None:
    """The analysis entry kept whole, the derived entry it was made from changed (its manifest holds one more
    warning): the analysis entry no longer proves its inputs and is analyzed again. (Derived again with the same
    content, the derived entry has the same digest: the analysis is then rightly read.)"""
    _fill(cache)
    d = _job_entry(cache, derived.DERIVED_DIR, HOST)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["warnings"].append("another job's derivation")
    (d / "manifest.json").write_text(json.dumps(manifest))
    calls = _counting(monkeypatch)
    _check(_run(HOST), truth[HOST])
    assert calls == [1]


# ------------------------------------------------------------------------------------------------ derived tables


def test_derived_tables_copied_from_another_job_are_derived_again(cache: Path, truth: dict, monkeypatch) -> None:
    _fill(cache)
    host, compute = (_job_entry(cache, derived.DERIVED_DIR, p) for p in (HOST, COMPUTE))
    for f in compute.glob("*.parquet"):  # the files only, under this job's manifest
        shutil.copy(f, host / f.name)
    shutil.rmtree(cache / analysis_cache.ANALYSIS_DIR)  # the derived tables themselves are what is read
    _check(_run(HOST), truth[HOST])
    shutil.rmtree(host)  # the whole entry, manifest and all, under this job's key
    shutil.copytree(compute, host)
    shutil.rmtree(cache / analysis_cache.ANALYSIS_DIR)
    _check(_run(HOST), truth[HOST])
    manifest = json.loads((host / "manifest.json").read_text())
    assert manifest["key"] == host.name  # replaced by this job's own


def test_a_deep_derived_manifest_is_derived_again(cache: Path, truth: dict) -> None:
    _fill(cache)
    host = _job_entry(cache, derived.DERIVED_DIR, HOST)
    (host / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    shutil.rmtree(cache / analysis_cache.ANALYSIS_DIR)
    _check(_run(HOST), truth[HOST])
    assert json.loads((host / "manifest.json").read_text())["key"] == host.name


# ------------------------------------------------------------------------------------------------ a rank's tables


def _rank_entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if (p / "manifest.json").is_file())


def _sources(entry: Path) -> list[str]:
    return [e["meta"]["source"] for e in json.loads((entry / "manifest.json").read_text())["entries"]]


def test_a_rank_entry_copied_under_another_key_is_parsed_again(cache: Path, truth: dict) -> None:
    _fill(cache)
    entries = {Path(_sources(e)[0]).parent.name + "/" + Path(_sources(e)[0]).name: e for e in _rank_entries(cache)}
    mine = next(e for k, e in entries.items() if k.startswith("host_straggler/rank1"))
    theirs = next(e for k, e in entries.items() if k.startswith("compute_straggler/rank1"))
    shutil.rmtree(mine)
    shutil.copytree(theirs, mine)  # manifest and tables: the other job's rank 1 under this job's key
    shutil.rmtree(cache / derived.DERIVED_DIR)
    shutil.rmtree(cache / analysis_cache.ANALYSIS_DIR)
    _check(_run(HOST), truth[HOST])
    assert "host_straggler" in _sources(mine)[0]  # replaced by this input's own


def test_a_rank_table_swapped_in_is_parsed_again(cache: Path, truth: dict) -> None:
    _fill(cache)
    entries = _rank_entries(cache)
    mine = next(e for e in entries if "host_straggler" in _sources(e)[0] and "rank2" in _sources(e)[0])
    theirs = next(e for e in entries if "compute_straggler" in _sources(e)[0] and "rank2" in _sources(e)[0])
    a, b = sorted(mine.rglob("gpu.parquet")), sorted(theirs.rglob("gpu.parquet"))
    assert a and b
    shutil.copy(b[0], a[0])
    _check(_run(HOST), truth[HOST])
    assert rank_cache.load_entry(mine) is not None  # the rebuilt entry proves itself


def test_a_deep_rank_manifest_is_parsed_again(cache: Path, truth: dict) -> None:
    _fill(cache)
    for e in _rank_entries(cache):
        (e / "manifest.json").write_text('{"key": "' + e.name + '", "files": {}, "entries": '
                                         + "[" * 200_000 + "]" * 200_000 + "}")
    shutil.rmtree(cache / derived.DERIVED_DIR)
    shutil.rmtree(cache / analysis_cache.ANALYSIS_DIR)
    _check(_run(HOST), truth[HOST])


def test_a_fifo_in_the_cache_is_a_miss_not_a_hang(cache: Path, truth: dict) -> None:
    import os

    _fill(cache)
    for e in _rank_entries(cache):
        (e / "manifest.json").unlink()
        os.mkfifo(e / "manifest.json")
    host = _job_entry(cache, derived.DERIVED_DIR, HOST)
    (host / "steps.parquet").unlink()
    os.mkfifo(host / "steps.parquet")
    _check(_run(HOST), truth[HOST])
