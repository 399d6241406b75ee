"""Issue #32's corpus: 127 mutated inputs from a real rank, each alone and as rank 0 of its real folder, each with
the outcome it must have (``tests/hostile_corpus.py``): 0 hangs, 0 tracebacks, 0 silent changes, every skipped file
named. The whole corpus runs once (two worker processes, each run under a timeout); a sample goes through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import hostile_corpus as hc
from tests import hostile_mutations as hm
from tests.conftest import ROOT

CASES = hc.cases()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


@pytest.fixture(scope="module")
def corpus(scratch: Path) -> dict[tuple[str, str], dict]:
    results = hc.run_corpus(scratch, workers=2)
    return {(r["case"], r["mode"]): r for r in results}


def test_the_corpus_is_the_issues_cases() -> None:
    """Issue #32's 127 cases, issue #42's 5 (step-marker patterns, rank numbers past --max-ranks) and its Flight
    Recorder dump cases."""
    traces = [c for c in CASES if c.api == "analyze"]
    dumps = hc.flight_recorder_cases()
    assert len(traces) == 132 and len(CASES) == 132 + len(dumps) and len({c.name for c in CASES}) == len(CASES)
    assert len(dumps) >= 18


def test_no_hang_traceback_or_silent_change(corpus: dict) -> None:
    bad = [f"{k}: {r['outcome']} {r['detail'][:200]}" for k, r in corpus.items()
           if r["outcome"] in ("hang", "traceback", "silent", "unnamed-skip", "build")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("mode", ["single", "folder"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_outcome(corpus: dict, case: hc.Case, mode: str) -> None:
    r = corpus[(case.name, mode)]
    want = case.single if mode == "single" else case.folder
    assert r["ok"], f"expected {want} /{case.expect}/, got {r['outcome']}: {r['detail'][:500]}\n{r['trace']}"


# ------------------------------------------------------------------------------------------ through the CLI


def _cli(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _folder_with(tmp_path: Path, build) -> tuple[Path, Path]:
    folder = tmp_path / "job"
    folder.mkdir()
    bad = build(folder)
    for other in sorted(hm.HYBRID.glob("rank[123].*.pt.trace.json.gz")):
        (folder / other.name).symlink_to(other)
    return folder, bad


def test_cli_names_an_empty_rank_first_and_in_json(tmp_path: Path) -> None:
    folder, bad = _folder_with(tmp_path, hm.bytes_case(lambda: b""))
    res = _cli("analyze", folder, "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[:3]
    assert "3 rank(s) of 4" in first[0] and any("skipped" in line and bad.name in line and "is empty" in line
                                                for line in first), first
    doc = json.loads(_cli("analyze", folder, "--no-cache", "-j", "1", "--format", "json").stdout)
    src = doc["source"]
    assert src["ranks"] == [1, 2, 3] and src["world_size"] == 3 and src["declared_world_size"] == 4
    assert [s["path"] for s in src["skipped"]] == [str(bad)] and "is empty" in src["skipped"][0]["reason"]
    assert any(str(bad) in w for w in doc["warnings"])


@pytest.mark.parametrize("args, expect", [
    (["--max-events", "1000"], "--max-events"),
    (["--max-inflated-size", "1M"], "--max-inflated-size"),
    (["--max-json-depth", "5"], "--max-json-depth"),
])
def test_cli_limits_are_one_line(args: list[str], expect: str) -> None:
    res = _cli("analyze", hm.RANK0, "--no-cache", *args)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert str(hm.RANK0) in lines[0] and expect in lines[0]


def test_cli_gzip_bomb_is_refused(scratch: Path) -> None:
    bomb = hm.bomb_file(scratch, 2405 << 20)  # the corpus's (built once)
    assert bomb.stat().st_size < 3 << 20  # ~2.3 MB of gzip for 2.24 GiB of whitespace
    res = _cli("analyze", bomb, "--no-cache", timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "gzip bomb" in lines[0] and "--max-inflate-ratio" in lines[0]


def test_cli_huge_ts_is_one_warning(tmp_path: Path) -> None:
    path = hm.doc_case(hm.set_field(hm.compute_kernel, "ts", 1e30))(tmp_path)
    res = _cli("analyze", path, "--no-cache", "--format", "json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert any("dropped 1 of" in w for w in json.loads(res.stdout)["warnings"])


def test_cli_negative_rank_is_precise(tmp_path: Path) -> None:
    path = hm.doc_case(hm.info(rank=-3))(tmp_path)
    res = _cli("analyze", path, "--no-cache")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "distributedInfo.rank is -3" in lines[0], res.stderr


def test_cli_export_names_a_corrupt_rank(tmp_path: Path) -> None:
    folder, bad = _folder_with(tmp_path, hm.bytes_case(hm.truncate(0.5)))
    res = _cli("export", folder, "-o", tmp_path / "out.pftrace", "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    assert any(line.startswith("skipped") and bad.name in line for line in res.stderr.splitlines()), res.stderr


def test_cli_world_size_lie_in_a_folder_is_refused(tmp_path: Path) -> None:
    folder, bad = _folder_with(tmp_path, hm.doc_case(hm.info(world_size=8)))
    res = _cli("analyze", folder, "--no-cache", "-j", "1")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "world size" in lines[0] and bad.name in lines[0], res.stderr
