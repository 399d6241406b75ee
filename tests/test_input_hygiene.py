"""Input hygiene, end to end through the CLI: special files refused at once, impossible GPU event times
dropped and counted (Kineto number path, Kineto text path, Nsight), a UTF-8 byte-order mark accepted."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLES
from tests.helpers import report

HYBRID = SAMPLES / "gpu_h200" / "hybrid_tp_dp"


def _cli(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    # a short timeout: the bug this guards against is a hang
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _one_line(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------ special files


def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    line = _one_line(_cli("analyze", fifo, "--no-cache", timeout=60))
    assert str(fifo) in line and "FIFO" in line


def test_fifo_in_a_folder_is_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank0.json")
    line = _one_line(_cli("analyze", tmp_path, "--no-cache", timeout=60))
    assert "no trace files found" in line


def test_socket_is_refused() -> None:
    folder = tempfile.mkdtemp(prefix="cs-sock-", dir="/tmp")  # AF_UNIX paths are short
    path = Path(folder) / "rank0.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        line = _one_line(_cli("analyze", path, "--no-cache", timeout=60))
        assert str(path) in line and "socket" in line
    finally:
        sock.close()
        shutil.rmtree(folder)


def test_character_device_is_refused() -> None:
    line = _one_line(_cli("analyze", "/dev/null", "--no-cache", timeout=60))
    assert "/dev/null" in line and "character device" in line


# ------------------------------------------------------------------------------------------ impossible times


def _kernel(ts: object, dur: object, name: str = "gemm_kernel") -> str:
    return (f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, '
            '"args": {"device": 0, "stream": 7, "correlation": 1}}')


def _doc(kernels: list[str]) -> str:
    return '{"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [' + ", ".join(kernels) + "]}"


GOOD = [_kernel(10, 5), _kernel(200, 10)]  # window 10..210 us, compute 15 us


def _check_dropped(path: Path, dropped: int, total: int) -> None:
    res = _cli("analyze", path, "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    (rank,) = rep["ranks"]
    # the bad kernels would stretch the window (ts -50, ends at 300+) if they were kept
    assert rank["span_ms"] == pytest.approx(0.200, abs=1e-9)
    assert rank["compute_ms"] == pytest.approx(0.015, abs=1e-9)
    assert [w for w in rep["warnings"] if "GPU events with" in w] == [
        f"{path.name} (rank 0): dropped {dropped} of {total} GPU events with negative, missing or non-finite ts/dur"]


def test_negative_and_out_of_range_times_dropped_and_counted(tmp_path: Path) -> None:
    # JSON numbers (the fast number path): negative ts, negative dur, dur out of float range, a string dur
    bad = [_kernel(-50, 5), _kernel(500, -450), _kernel(300, "1e999"), _kernel(400, '"NaN"')]
    path = tmp_path / "rank0.json"
    path.write_text(_doc(GOOD[:1] + bad + GOOD[1:]))
    _check_dropped(path, 4, 6)


@pytest.mark.parametrize("gz", [False, True])
def test_nan_and_infinity_literals_dropped_and_counted(tmp_path: Path, gz: bool) -> None:
    # what Python's json.dump writes for float('nan') / float('inf'): not JSON, read as null
    bad = [_kernel("NaN", 5), _kernel(300, "Infinity"), _kernel("-Infinity", 5)]
    data = _doc(GOOD + bad).encode()
    path = tmp_path / ("rank0.json.gz" if gz else "rank0.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    _check_dropped(path, 3, 5)


def test_a_rank_with_only_impossible_times_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_text(_doc([_kernel(-5, 5), _kernel(10, -20)]))
    line = _one_line(_cli("analyze", path, "--no-cache"))
    assert str(path) in line and "all 2 GPU events have negative, missing or non-finite ts/dur" in line


def test_nsight_negative_durations_dropped_and_counted(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from sample_traces.nsys_writer import NsysExport

    db = NsysExport("current")
    db.session_start(1_700_000_000_000_000_000)
    db.process(10)
    db.gpu(0, "NVIDIA H100")
    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"
    db.kernel(10, 1_000, 2_000, gemm)
    db.kernel(10, 3_000, 5_000, gemm)
    db.kernel(10, 9_000, 500, gemm)  # end before start: would not stretch the span, but would count negative compute
    db.kernel(10, -4_000, 1_500, gemm)  # negative start: would stretch the window to 9 us
    path = db.write(tmp_path / "job.sqlite")
    res = _cli("analyze", path, "--format", "json", "--no-cache")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    (rank,) = rep["ranks"]
    assert rank["span_ms"] == pytest.approx(0.004, abs=1e-12)
    assert rank["compute_ms"] == pytest.approx(0.003, abs=1e-12)
    assert any("dropped 2 of 4 GPU events with negative, missing or non-finite ts/dur" in w for w in rep["warnings"])


# ------------------------------------------------------------------------------------------ byte-order mark


def test_byte_order_mark_is_accepted_plain_and_gzipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    bom = b"\xef\xbb\xbf"
    sources = sorted(HYBRID.glob("rank*.json.gz"))
    assert len(sources) == 4  # a glob that finds nothing must not pass
    for src in sources:
        rank = src.name[:5]
        if rank == "rank0":  # plain JSON with a BOM: found in the folder by content, then read
            (run / src.name.removesuffix(".gz")).write_bytes(bom + gzip.decompress(src.read_bytes()))
        elif rank == "rank1":  # a BOM inside the gzip member
            (run / src.name).write_bytes(gzip.compress(bom + gzip.decompress(src.read_bytes()), compresslevel=1))
        else:
            shutil.copy(src, run / src.name)
    res = _cli("analyze", run, "--format", "json", "--no-cache", "--jobs", "1")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["source"]["ranks"] == [0, 1, 2, 3] and rep["source"]["skipped"] == []
    assert rep["ranks"] == report(HYBRID)["ranks"]  # the same numbers as without the mark
    assert rep["stragglers"]["verdict"]["rank"] == 3
