"""A finished report comes from the cache when the same command runs again on unchanged inputs and code
(``cli/report_cache.py``): the same bytes, without loading anything; anything that may change the report --
a file's size or time, an option, the code, the paths as given -- runs the analysis again; a damaged entry is
never printed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from analyzer.cli import report_cache
from analyzer.cli.app import main
from analyzer.ingest import loader
from tests.conftest import SAMPLES

SET = SAMPLES / "gpu_h200" / "hybrid_tp_dp"


@pytest.fixture()
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "job"
    shutil.copytree(SET, folder)
    return folder


def _loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often the command loads traces (the real loader, counted)."""
    calls: list[int] = []
    real = loader.load

    def counted(*args, **kwargs):  # noqa: ANN202
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loader, "load", counted)
    return calls


def _analyze(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "out"
    main(["analyze", *args, "-o", str(out)], standalone_mode=False)
    return out.read_text()


@pytest.mark.parametrize("fmt", ["json", "markdown"])
def test_the_same_command_prints_the_same_report_without_loading(job: Path, tmp_path: Path, fmt: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _loads(monkeypatch)
    first = _analyze(tmp_path, str(job), "--format", fmt)
    again = _analyze(tmp_path, str(job), "--format", fmt)
    assert again == first and calls == [1]
    main(["analyze", str(job), "--format", fmt, "-o", str(tmp_path / "fresh"), "--no-cache"], standalone_mode=False)
    assert (tmp_path / "fresh").read_text() == first and calls == [1, 1]  # what an analysis afresh prints


def test_what_may_change_the_report_runs_again(job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _loads(monkeypatch)
    base = _analyze(tmp_path, str(job), "--format", "json")
    assert _analyze(tmp_path, str(job), "--format", "json", "--ranks", "0-1") != base  # an option
    assert len(calls) == 2
    assert _analyze(tmp_path, str(job), "--format", "json") == base and len(calls) == 2  # both kept
    rank = next(job.glob("rank1*"))
    st = rank.stat()
    os.utime(rank, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a file touched
    assert _analyze(tmp_path, str(job), "--format", "json") == base and len(calls) == 3
    (job / "notes.txt").write_text("any new file under the paths")
    _analyze(tmp_path, str(job), "--format", "json")
    assert len(calls) == 4
    monkeypatch.setattr(report_cache, "_code", "other code")  # an upgrade
    _analyze(tmp_path, str(job), "--format", "json")
    assert len(calls) == 5
    (folder,) = (Path(os.environ["COMMSCOPE_CACHE_DIR"]) / report_cache.REPORTS_DIR).iterdir()
    assert len(list(folder.iterdir())) == 1  # the entries of older inputs and code are gone


def test_paths_as_given_are_their_own_entries(job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries are keyed by the paths as given and the working directory (whatever a report may print of them):
    another spelling of the same folder is analyzed on its own, and both are kept."""
    calls = _loads(monkeypatch)
    absolute = _analyze(tmp_path, str(job), "--format", "json")
    monkeypatch.chdir(job.parent)
    relative = _analyze(tmp_path, job.name, "--format", "json")
    assert calls == [1, 1] and relative == absolute
    assert _analyze(tmp_path, job.name, "--format", "json") == relative and calls == [1, 1]
    monkeypatch.chdir(tmp_path)
    assert _analyze(tmp_path, str(job), "--format", "json") == absolute and calls == [1, 1, 1]  # another cwd


def test_damaged_entry_is_not_printed(job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _loads(monkeypatch)
    first = _analyze(tmp_path, str(job), "--format", "json")
    (folder,) = (Path(os.environ["COMMSCOPE_CACHE_DIR"]) / report_cache.REPORTS_DIR).iterdir()
    (entry,) = folder.iterdir()
    entry.write_bytes(entry.read_bytes().replace(b'"rank": 3', b'"rank": 2', 1))
    assert _analyze(tmp_path, str(job), "--format", "json") == first and calls == [1, 1]
    entry.write_bytes(entry.read_bytes()[:1000])  # cut short
    assert _analyze(tmp_path, str(job), "--format", "json") == first and calls == [1, 1, 1]


@pytest.mark.parametrize("args", [("--format", "text"), ("--format", "html"), ("--format", "json", "--no-cache")])
def test_never_kept(job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]) -> None:
    """The text report follows the terminal (width, colour), the HTML one has random element ids; --no-cache
    keeps nothing."""
    calls = _loads(monkeypatch)
    _analyze(tmp_path, str(job), *args)
    _analyze(tmp_path, str(job), *args)
    assert calls == [1, 1]
    assert not (Path(os.environ["COMMSCOPE_CACHE_DIR"]) / report_cache.REPORTS_DIR).exists()
