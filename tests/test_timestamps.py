"""Timestamps are exact int64 ns on both paths: numbers (fast) and raw JSON text (fallback)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl

from analyzer.ingest.kineto import reader as kineto
from analyzer.ingest.kineto.timestamps import FLOAT_EXACT_LIMIT_US, us_numbers_to_ns, us_text_to_ns
from analyzer.ingest.options import ReadOptions


def _texts(values: list[str]) -> list[int | None]:
    return us_text_to_ns(pl.Series(values)).to_list()


def test_text_path_is_exact_on_17_digit_floats_and_epoch_ints() -> None:
    assert _texts(["1712195495519695.8", "1695835542514261", "4799998654505.123", "-1.5", ""]) == [
        1712195495519695800, 1695835542514261000, 4799998654505123, -1500, None,
    ]


def test_number_path_is_exact_below_the_limit_and_defers_above() -> None:
    assert us_numbers_to_ns([1695835542514261, None, 4.0, 4799998654505.123]).to_list() == [
        1695835542514261000, None, 4000, 4799998654505123,
    ]
    assert us_numbers_to_ns([1712195495519695.8]) is None  # float past 2^43 µs: the text decides
    assert us_numbers_to_ns([2**53 + 2]) is None  # integer float64 cannot hold


def test_number_path_matches_text_path_on_random_3_decimal_values() -> None:
    rng = random.Random(7)
    ns = [rng.randrange(-(10**15), int(FLOAT_EXACT_LIMIT_US) * 1000) for _ in range(50_000)]
    ns += [int(FLOAT_EXACT_LIMIT_US) * 1000 - 1, 999, 0, 1]
    texts = [f"{'-' if n < 0 else ''}{abs(n) // 1000}.{abs(n) % 1000:03d}" for n in ns]
    assert us_numbers_to_ns([float(t) for t in texts]).to_list() == ns
    assert _texts(texts) == ns


def _trace(path: Path, ts: str, dur: str) -> Path:
    ev = (f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, '
          '"args": {"device": 0, "stream": 7, "correlation": 1}}')
    runtime = (f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": {ts}, '
               f'"dur": {dur}, "args": {{"correlation": 1}}}}')
    head = json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}})[:-1]
    path.write_text(head + f', "traceEvents": [{ev}, {runtime}]}}')
    return path


def test_reader_keeps_17_digit_float_timestamps_exact(tmp_path: Path) -> None:
    (t,) = kineto.read(_trace(tmp_path / "a.json", "1712195495519695.8", "12.5"), ReadOptions())
    assert t.gpu["start_ns"].to_list() == [1712195495519695800]
    assert t.gpu["end_ns"].to_list() == [1712195495519708300]


def test_reader_keeps_epoch_int_timestamps_exact(tmp_path: Path) -> None:
    (t,) = kineto.read(_trace(tmp_path / "a.json", "1695835542514261", "3"), ReadOptions())
    assert t.gpu["start_ns"].to_list() == [1695835542514261000]
    assert t.gpu["end_ns"].to_list() == [1695835542514264000]
