"""Worker processes and the Dask path give exactly the serial, uncached report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzer.analysis import analyze
from analyzer.loader import LoadOptions, load
from analyzer.report.json import to_dict


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sample_traces.generate import Scenario, build, write_kineto

    out = tmp_path_factory.mktemp("par")
    write_kineto(build(Scenario(ranks=4, steps=3, python_noise=10, late_ranks={2: (40_000, "compute")})), out)
    return out


def _report(path: Path, **kw: object) -> dict:
    return to_dict(analyze(load([path], LoadOptions(**kw))))  # type: ignore[arg-type]


def test_workers_equal_serial(traces: Path) -> None:
    ref = _report(traces, jobs=1, cache=False)
    assert _report(traces, jobs=2, cache=False) == ref
    assert _report(traces, jobs=3, cache=True) == ref
    assert _report(traces, jobs=2, cache=True) == ref  # from the cache, in workers


def test_lean_cpu_table_keeps_launches_and_annotations(traces: Path) -> None:
    ts = load([traces], LoadOptions(jobs=1, cache=False))
    assert set(ts.cpu["kind"].unique()) <= {"runtime", "annotation"}
    assert ts.cpu.filter(ts.cpu["kind"] == "runtime").height > 0


def test_progress_callback_once_per_rank(traces: Path) -> None:
    seen: list[str] = []
    load([traces], LoadOptions(jobs=2, cache=False, progress=seen.append))
    assert sorted(seen) == sorted(p.name for p in traces.iterdir())


def test_dask_path_equals_serial(traces: Path) -> None:
    distributed = pytest.importorskip("distributed")
    ref = _report(traces, jobs=1, cache=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        assert _report(traces, scheduler=cluster.scheduler_address) == ref
        assert _report(traces, scheduler=cluster.scheduler_address) == ref  # entries already cached


def test_dask_unreachable_scheduler_is_a_usage_error(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    from analyzer import scaleout
    from analyzer.errors import UsageError

    monkeypatch.setattr(scaleout, "CONNECT_TIMEOUT", "2s")
    with pytest.raises(UsageError):
        load([traces], LoadOptions(scheduler="tcp://127.0.0.1:1"))


def test_workers_write_to_the_cache_dir_set_now(traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork server outlives environment changes; workers must still use the caller's cache dir."""
    load([traces], LoadOptions(jobs=2, cache=False))  # the fork server is running from here on
    first, second = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(first))
    load([traces], LoadOptions(jobs=2))
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(second))
    ref = _report(traces, jobs=1, cache=False)
    shutil.rmtree(first)
    assert _report(traces, jobs=2) == ref
    assert len(list(second.glob("*/manifest.json"))) == 4  # one entry per rank, in the dir set last
    assert not first.exists()
