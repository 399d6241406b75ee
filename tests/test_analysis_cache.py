"""A job's analysis comes from the cache on a second analysis of the same traces and options, equal field by
field to the one analyzed afresh; other options, other code or a damaged or foreign entry analyze again; the
format never loads a pickle nor builds a class from outside commscope."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analyzer import analysis
from analyzer.analysis import cache as analysis_cache
from analyzer.crossrank import groups as pgroups
from analyzer.ingest import background
from analyzer.ingest.cachedir import cache_dir
from analyzer.ingest.loader import LoadOptions, load
from analyzer.report import render
from tests.helpers import ROOT

SETS = [ROOT / "sample_traces" / "gpu_h200" / "hybrid_tp_dp",  # a host-bound root, DP replicas
        ROOT / "sample_traces" / "real_parallel" / "pp4_1f1b_mps_host_slow",  # pipeline stages
        ROOT / "sample_traces" / "real_parallel" / "cp_ring_mps_slow",  # ring hops
        ROOT / "sample_traces" / "real_parallel" / "moe_a2a_slow"]  # expert all-to-all


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often the analysis itself runs (the real function, counted)."""
    calls: list[int] = []
    real = analysis._analyze

    def counted(*args, **kwargs):  # noqa: ANN202
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis, "_analyze", counted)
    return calls


def same(x: object, y: object, where: str = "analysis", rows_in_order: bool = True) -> None:
    """Deep equality, written apart from the cache's format: tables by schema and content, arrays by dtype and
    bits, dataclasses field by field, NaN equal to NaN. ``rows_in_order`` False: a table's rows in any order
    (some tables come from a group-by, whose order differs from one analysis to the next)."""
    if isinstance(x, pl.DataFrame):
        assert isinstance(y, pl.DataFrame), where
        assert x.schema == y.schema, where
        if not rows_in_order and x.width:
            x, y = x.sort(x.columns, nulls_last=True), y.sort(y.columns, nulls_last=True)
        assert x.equals(y, null_equal=True), where
        return
    if isinstance(x, np.ndarray):
        assert isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape, where
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), where
        return
    assert type(x) is type(y), f"{where}: {type(x).__name__} != {type(y).__name__}"
    if dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            if f.compare:
                same(getattr(x, f.name), getattr(y, f.name), f"{where}.{f.name}", rows_in_order)
    elif isinstance(x, dict):
        assert list(x) == list(y) if rows_in_order else set(x) == set(y), where
        for k in x:
            same(x[k], y[k], f"{where}[{k!r}]", rows_in_order)
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (a, b) in enumerate(zip(x, y)):
            same(a, b, f"{where}[{i}]", rows_in_order)
    elif isinstance(x, float) and math.isnan(x):
        assert math.isnan(y), where
    else:
        assert x == y, f"{where}: {x!r} != {y!r}"


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.name)
def test_second_analysis_comes_from_the_cache_equal_to_a_fresh_one(path: Path, cache: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = analysis.analyze(load([path], LoadOptions(cache=False)))
    calls = _counting(monkeypatch)
    first = analysis.analyze(load([path], LoadOptions()))
    background.wait()  # the entry is written beside what follows the analysis
    assert calls == [1] and len(list((cache / analysis_cache.ANALYSIS_DIR).iterdir())) == 1  # analyzed and kept
    second = analysis.analyze(load([path], LoadOptions()))
    assert calls == [1]  # read back, not analyzed
    for f in dataclasses.fields(analysis.Analysis):
        if f.name != "traces":
            same(getattr(first, f.name), getattr(second, f.name), f.name)  # as kept, row for row
            same(getattr(fresh, f.name), getattr(second, f.name), f.name, rows_in_order=False)
    assert second.graph.gpu is second.traces.gpu and second.graph.cpu is second.traces.cpu  # referred, not copied
    assert second.kernels is second.graph.kernels
    for fmt in ("json", "text", "markdown"):
        assert render(second, fmt) == render(fresh, fmt)


def test_other_options_or_code_analyze_again_and_keep_one_entry(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = SETS[0]
    calls = _counting(monkeypatch)
    plain = analysis.analyze(load([path], LoadOptions()))
    targeted = analysis.analyze(load([path], LoadOptions()), busbw={"all_reduce": 400.0})
    assert calls == [1, 1]
    assert "busbw_all_reduce_400" not in plain.whatif.scenarios["name"].to_list()
    assert any(n.startswith("busbw") for n in targeted.whatif.scenarios["name"].to_list())
    layout = pgroups.Options(layout=pgroups.parse_layout("tp=2,dp=2"))
    analysis.analyze(load([path], LoadOptions()), dims=layout)
    assert len(calls) == 3
    monkeypatch.setattr(analysis_cache, "_code_hash", "other code")
    again = analysis.analyze(load([path], LoadOptions()))
    assert len(calls) == 4
    same(plain.counterfactual, again.counterfactual)
    background.wait()
    assert len(list((cache / analysis_cache.ANALYSIS_DIR).iterdir())) == 1  # one entry per job, the last one


def test_no_cache_keeps_nothing(cache: Path) -> None:
    analysis.analyze(load([SETS[0]], LoadOptions(cache=False)))
    background.wait()
    assert not (cache / analysis_cache.ANALYSIS_DIR).exists()


def _entry() -> Path:
    background.wait()  # the entry is written beside what follows the analysis
    (entry,) = (cache_dir() / analysis_cache.ANALYSIS_DIR).iterdir()
    return entry


@pytest.mark.parametrize("damage", ["truncated table", "table of other rows", "foreign class", "class outside",
                                    "pickled array", "unknown tag", "other key", "no manifest"])
def test_damaged_or_foreign_entry_is_analyzed_again(damage: str, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = SETS[0]
    fresh = analysis.analyze(load([path], LoadOptions()))
    entry = _entry()
    manifest = json.loads((entry / "manifest.json").read_text())
    tree = json.dumps(manifest["fields"])
    if damage == "truncated table":
        first = entry / manifest["tables"][0][0]
        first.write_bytes(first.read_bytes()[:100])
    elif damage == "table of other rows":
        manifest["tables"][0][1] += 1
    elif damage == "foreign class":
        manifest["fields"] = json.loads(tree.replace('"analyzer.crossrank.align:ClockFit"', '"os:system"'))
    elif damage == "class outside":
        manifest["fields"] = json.loads(tree.replace('"analyzer.crossrank.align:ClockFit"',
                                                     '"analyzer.crossrank.align:np.ndarray"'))
    elif damage == "pickled array":
        npy = next(entry.glob("*.npy"))
        np.save(npy, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif damage == "unknown tag":
        manifest["fields"]["clock"] = {"pickle": "gASV"}
    elif damage == "other key":
        manifest["key"] = "0" * 32
    if damage == "no manifest":
        (entry / "manifest.json").unlink()
    else:
        (entry / "manifest.json").write_text(json.dumps(manifest))
    calls = _counting(monkeypatch)
    again = analysis.analyze(load([path], LoadOptions()))
    # a table whose rows differ from the manifest's count is found when it is read, on first use: then
    assert calls == ([] if damage == "table of other rows" else [1])
    for name in ("ranks", "steps", "collectives", "whatif", "counterfactual", "clock", "roots"):
        same(getattr(fresh, name), getattr(again, name), name)
    same(fresh.graph, again.graph, "graph", rows_in_order=False)  # some tables come from a group-by
    assert calls == [1]


def test_tables_are_read_when_used(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached analysis reads a table on its first use: the JSON report reads none of the graph's. A table
    damaged or gone after its entry was loaded is the analysis's afresh (one re-analysis for the entry), equal to
    the stored one, and the entry is stored whole again for the next run."""
    path = SETS[0]
    fresh = analysis.analyze(load([path], LoadOptions()))
    text = render(fresh, "json")
    entry = _entry()
    manifest = json.loads((entry / "manifest.json").read_text())
    calls = _counting(monkeypatch)
    kept = analysis.analyze(load([path], LoadOptions()))
    assert render(kept, "json") == text and calls == []
    nodes = kept.graph.__dict__["nodes"]  # the graph's node table, not looked at yet
    assert type(nodes) is not pl.DataFrame and isinstance(nodes, pl.DataFrame)
    for name, _ in manifest["tables"]:  # the tables not read yet gone meanwhile (the graph's among them)
        (entry / name).unlink()
    for f in dataclasses.fields(kept):
        same(getattr(fresh, f.name), getattr(kept, f.name), f.name, rows_in_order=False)
    assert type(kept.graph.nodes) is pl.DataFrame and kept.graph.nodes is nodes  # the same object, now a plain frame
    assert calls == [1]
    background.wait()  # the fresh fields are kept again, whole: the next run reads them without analyzing
    again = analysis.analyze(load([path], LoadOptions()))
    assert render(again, "json") == text and calls == [1] and entry.exists()


def test_an_object_without_a_tag_is_not_kept(cache: Path) -> None:
    ts = load([SETS[0]], LoadOptions())
    assert not analysis_cache.store("k", {"f": object()}, ts)
    assert not analysis_cache.store("k", {"f": np.array([object()])}, ts)
    assert analysis_cache.load("k", ts) is None
    assert analysis_cache.store("k", {"f": (1, np.int32(2), {3: [4.5, float("nan")]}, None)}, ts)
    (back,) = analysis_cache.load("k", ts).values()
    same((1, np.int32(2), {3: [4.5, float("nan")]}, None), back)
