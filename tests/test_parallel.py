"""Worker processes and the Dask path give exactly the serial, uncached report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzer.analysis import analyze
from analyzer.ingest.loader import LoadOptions, load
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


def test_recycled_workers_equal_serial(traces: Path, monkeypatch: pytest.MonkeyPatch,
                                      tmp_path: Path) -> None:
    """Big tasks get a fresh worker each (Python >= 3.11); here every task counts as big."""
    import sys

    from analyzer.ingest import loader
    from analyzer.ingest.discover import discover

    monkeypatch.setattr(loader, "_RECYCLE_BYTES", 0)
    files = discover([traces])
    sizes = loader._sizes(files, list(range(len(files))))
    assert loader._recycled(sizes) == ({"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {})
    monkeypatch.setattr(loader, "_RECYCLE_BYTES", 1 << 40)
    assert loader._recycled(sizes) == {}
    monkeypatch.setattr(loader, "_RECYCLE_BYTES", 0)
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    ref = _report(traces, jobs=1, cache=False)
    assert _report(traces, jobs=2, cache=False) == ref
    assert _report(traces, jobs=2, cache=True) == ref  # written by recycled workers, read back


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
    from analyzer.errors import UsageError
    from analyzer.ingest import scaleout

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


def test_dask_local_cluster_of_processes_equals_serial(tmp_path_factory: pytest.TempPathFactory,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """64 ranks parsed by a real cluster of worker processes (each its own interpreter, sharing the
    cache directory with this one): the same report as the serial, uncached path."""
    distributed = pytest.importorskip("distributed")
    from sample_traces.generate import Scenario, build, write_kineto

    out = tmp_path_factory.mktemp("dask64")
    write_kineto(build(Scenario(ranks=64, steps=3, tp=8, late_ranks={9: (300_000, "host")})), out)
    ref = _report(out, jobs=1, cache=False)
    root = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", root)  # workers import this checkout, as this process does
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            pids = client.run(lambda: __import__("os").getpid())
            assert len(set(pids.values())) == 2 and __import__("os").getpid() not in pids.values()
            where = client.run(lambda: __import__("analyzer").__file__)
            assert all(w.startswith(root) for w in where.values())
        got = _report(out, scheduler=cluster.scheduler_address)
    assert got["ranks"] == ref["ranks"] and len(got["ranks"]) == 64
    assert got == ref


def test_small_inputs_parse_in_process_by_default(traces: Path, tmp_path: Path) -> None:
    """Below the pool's break-even the default (all cores) parses here; --jobs N still gets N workers."""
    from analyzer.ingest import loader
    from analyzer.ingest.discover import discover
    from analyzer.ingest.workers import POOL_BREAK_EVEN_BYTES, POOL_FILE_BYTES, pool_pays, pool_pays_for

    files = discover([traces])
    todo = list(range(len(files)))
    assert not pool_pays_for([traces], 2) and not pool_pays_for([traces], 64)
    assert not loader._pool(files, todo, None, 2)  # a few hundred kB: in process
    assert loader._pool(files, todo, 2, 2)  # asked for
    assert not loader._pool(files, todo, None, 1)
    # splitting S over J cores saves S/rate*(1-1/J): the break-even falls from 2x (2 cores) towards 1x
    mib = 1 << 20
    assert POOL_BREAK_EVEN_BYTES == 48 * mib
    assert not pool_pays(4 * 12 * mib, 2) and pool_pays(4 * 51 * mib, 2)  # measured: in process / pool faster
    assert not pool_pays(60 * mib, 4) and pool_pays(70 * mib, 4)  # 4/3 x 48 MiB = 64 MiB
    assert not pool_pays(1 << 40, 1)
    # many small files: each costs ~5.5 ms besides its bytes (POOL_FILE_BYTES), so 1,024 ranks of 90 KB (92 MB,
    # ~6 s of parse in one process) repay a pool, while 4 ranks of 12 MiB still do not
    assert POOL_FILE_BYTES == mib
    assert pool_pays(1024 * 90_000, 2, 1024) and not pool_pays(1024 * 90_000, 2)
    assert not pool_pays(4 * 12 * mib, 2, 4) and not pool_pays(40 * 100_000, 2, 40)
    # one worker per file at most: two 40 MiB files on 16 cores weigh against 2 workers (96 MiB), not 16
    for name in ("rank0.json", "rank1.json"):
        with open(tmp_path / name, "wb") as f:
            f.truncate(40 * mib)  # sparse: sizes only
    assert not pool_pays_for([tmp_path], 16) and not pool_pays_for([tmp_path], 1 << 10)  # 80 < 2 x 48 MiB
    with open(tmp_path / "rank2.json", "wb") as f:
        f.truncate(40 * mib)
    assert pool_pays_for([tmp_path], 16) and pool_pays_for([tmp_path], 2)  # 120 MiB > 3/2 x and 2 x 48 MiB
    assert _report(traces, cache=False) == _report(traces, jobs=1, cache=False)


def test_parse_bytes_of_gzip_is_inflated_size(tmp_path: Path) -> None:
    import gzip
    import os

    from analyzer.ingest.workers import parse_bytes

    raw = b'{"traceEvents": []}' + b" " * 100_000
    (tmp_path / "r.json.gz").write_bytes(gzip.compress(raw))
    assert parse_bytes(tmp_path / "r.json.gz") == len(raw)
    (tmp_path / "r.json").write_bytes(raw)
    assert parse_bytes(tmp_path / "r.json") == len(raw)
    assert parse_bytes(tmp_path / "missing.json") == 0
    (tmp_path / "tiny.gz").write_bytes(b"\x1f\x8b")  # too short for a trailer: its size
    assert parse_bytes(tmp_path / "tiny.gz") == 2
    assert os.path.getsize(tmp_path / "r.json.gz") < len(raw)
    os.mkfifo(tmp_path / "pipe.json.gz")  # never opened (it would block)
    assert parse_bytes(tmp_path / "pipe.json.gz") == 0
