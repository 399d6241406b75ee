"""End-to-end CLI: the real command in a subprocess, output formats, bad input, broken ranks."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from tests.helpers import cli

HYBRID = SAMPLES / "gpu_h200" / "hybrid_tp_dp"


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def test_analyze_json_contract_on_sample_traces() -> None:
    before = _digest(HYBRID)
    res = cli("analyze", str(HYBRID), "--format", "json")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["schema"] == "commscope.analysis/1"
    assert rep["source"]["ranks"] == [0, 1, 2, 3] and rep["source"]["world_size"] == 4
    assert rep["stragglers"]["verdict"]["rank"] == 3
    assert "NaN" not in res.stdout
    for r in rep["ranks"]:
        # the temporal breakdown adds up to the window
        parts = r["compute_only_ms"] + r["overlapped_comm_ms"] + r["exposed_comm_ms"] + r["memcpy_ms"] + r["idle_ms"]
        assert parts == pytest.approx(r["span_ms"], abs=1e-5)
        assert set(r["step_time_ms"]) == {"mean", "p50", "max"}
    assert _digest(HYBRID) == before  # nothing the user gave is modified
    assert sorted(p.name for p in HYBRID.iterdir()) == sorted(before)


def test_text_report_reads_verdict_first() -> None:
    res = cli("analyze", str(HYBRID), "--no-cache")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    # the counterfactual leads: what fixing the root saves; then who it is and why (the headline wraps)
    assert lines[1].startswith("Fixing rank 3 would cut the step by ")
    first = " ".join(lines[2:4])
    assert lines[2].startswith("Straggler: rank 3 is the root of") and "host-bound" in first


def test_output_file(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = cli("analyze", str(HYBRID), "--format", "json", "-o", str(out), "--ranks", "0-1")
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["source"]["ranks"] == [0, 1]


def _bad_files(tmp: Path) -> dict[str, Path]:
    good = next(HYBRID.glob("rank0*.json.gz")).read_bytes()
    raw = gzip.decompress(good)
    files = {
        "empty": b"",
        "truncated_json": raw[: len(raw) // 2],
        "truncated_gzip": good[: len(good) // 2],
        "corrupt_gzip": good[:20] + bytes(random.Random(1).randrange(256) for _ in range(200)) + good[220:],
        "not_a_trace": b'{"hello": [1, 2, 3]}',
        "no_gpu": json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1,
                                               "tid": 1, "ts": 1, "dur": 2}]}).encode(),
        "binary": bytes(range(256)) * 4,
    }
    out = {}
    for name, data in files.items():
        p = tmp / f"rank9_{name}.json"
        p.write_bytes(data)
        out[name] = p
    return out


@pytest.mark.parametrize("kind", ["empty", "truncated_json", "truncated_gzip", "corrupt_gzip", "not_a_trace",
                                  "no_gpu", "binary"])
def test_bad_file_is_one_line_and_exit_2(tmp_path: Path, kind: str) -> None:
    path = _bad_files(tmp_path)[kind]
    res = cli("analyze", str(path), "--no-cache")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in res.stderr


def test_missing_path_exit_2(tmp_path: Path) -> None:
    res = cli("analyze", str(tmp_path / "nope"))
    assert res.returncode == 2 and "does not exist" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_broken_rank_in_folder_is_skipped_and_named(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(HYBRID, folder)
    broken = next(folder.glob("rank2*.json.gz"))
    broken.write_bytes(broken.read_bytes()[:5000])
    res = cli("analyze", str(folder), "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["source"]["ranks"] == [0, 1, 3]
    assert any(broken.name in w for w in rep["warnings"])
    assert rep["source"]["skipped"][0]["path"].endswith(broken.name)


def test_duplicate_ranks_name_both_files(tmp_path: Path) -> None:
    src = next(HYBRID.glob("rank0*.json.gz"))
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copy(src, a)
    shutil.copy(src, b)
    res = cli("analyze", str(a), str(b), "--no-cache")
    assert res.returncode == 2 and "a.json.gz" in res.stderr and "b.json.gz" in res.stderr


def test_rank_map_overrides(tmp_path: Path) -> None:
    src = next(HYBRID.glob("rank0*.json.gz"))
    res = cli("analyze", str(src), "--rank-map", f"{src.name}=5", "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["source"]["ranks"] == [5]


def test_fuzzed_gzip_members_never_traceback(tmp_path: Path) -> None:
    good = next(HYBRID.glob("rank1*.json.gz")).read_bytes()
    rng = random.Random(7)
    from analyzer.errors import CommscopeError
    from analyzer.ingest import ReadOptions
    from analyzer.ingest.kineto.reader import read

    raw = gzip.decompress(good)
    for i in range(25):
        data = bytearray(raw)
        for _ in range(rng.randrange(1, 6)):
            pos = rng.randrange(len(data))
            data[pos] = rng.randrange(256)
        cut = bytes(data[: rng.randrange(len(data))]) if i % 2 else bytes(data)
        p = tmp_path / f"f{i}.json"
        p.write_bytes(cut)
        try:
            read(p, ReadOptions())
        except CommscopeError as exc:
            assert str(p) in str(exc)
