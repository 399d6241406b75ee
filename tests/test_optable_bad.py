"""Bad op tables: one clear line and exit 2 where nothing can be analyzed, else a counted warning."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from analyzer.ingest.loader import LoadOptions, load
from sample_traces.optable_gen import Job, write
from tests.helpers import cli

JOB = Job(dp=2, pp=2, microbatches=2, steps=3)


def _table(tmp: Path) -> tuple[Path, pl.DataFrame]:
    path = write(JOB, tmp)
    return path, pl.read_parquet(path)


def _warnings(path: Path) -> list[str]:
    return list(load([path], LoadOptions(jobs=1, cache=False)).warnings)


def _fails(path: Path, *words: str) -> None:
    res = cli("analyze", path, "--no-cache", "-j", "1")
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commscope: error:") and "Traceback" not in res.stderr
    assert str(path) in lines[0]
    for w in words:
        assert w in lines[0], lines[0]


def test_missing_column(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    df.drop("optype").write_parquet(path)
    _fails(path, "no optype column")


def test_missing_time_columns(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    df.drop("duration").write_parquet(path)
    _fails(path, "no start and duration columns", "start_ts")


def test_some_negative_or_missing_durations_are_dropped_and_counted(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    i = pl.int_range(pl.len())
    df.with_columns(pl.when(i == 5).then(-0.001).when(i.is_in([7, 9])).then(None).otherwise(pl.col("duration"))
                    .alias("duration")).write_parquet(path)
    w = [x for x in _warnings(path) if "dropped 3 of" in x]
    assert len(w) == 1 and "2 with a missing or non-finite duration" in w[0] and "1 with a negative duration" in w[0]
    assert f"of {df.height} ops" in w[0]


def test_every_duration_negative(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    df.with_columns(pl.lit(-1.0).alias("duration")).write_parquet(path)
    _fails(path, "a negative duration")


def test_unknown_op_type_is_counted(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    df.with_columns(pl.when(pl.col("optype") == "gc").then(pl.lit("checkpoint-save")).otherwise(pl.col("optype"))
                    .alias("optype")).write_parquet(path)
    n = df.filter(pl.col("optype") == "gc").height
    w = [x for x in _warnings(path) if "unknown op type" in x]
    assert len(w) == 1 and f"{n} ops of 1 unknown op type(s)" in w[0] and f"checkpoint-save ({n})" in w[0]


def test_no_known_op_type(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    df.with_columns(pl.lit("matmul").alias("optype")).write_parquet(path)
    _fails(path, "no known op type", "matmul")


def test_step_on_some_ranks_only_is_dropped_and_counted(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    df.filter(~((pl.col("step") == JOB.first_step + 1) & (pl.col("rank") == 3))).write_parquet(path)
    ts = load([path], LoadOptions(jobs=1, cache=False))
    w = [x for x in ts.warnings if "steps recorded on only some" in x]
    assert len(w) == 1 and "dropped 1 of 3 steps" in w[0] and f"{JOB.first_step + 1} (3 ranks)" in w[0]
    assert sorted(ts.steps["step"].unique().to_list()) == [JOB.first_step, JOB.first_step + 2]
    res = cli("analyze", path, "--no-cache", "-j", "1", "--format", "json")
    assert res.returncode == 0 and any("dropped 1 of 3 steps" in x for x in json.loads(res.stdout)["warnings"])


def test_no_step_on_every_rank(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    df.filter(pl.col("rank") != (pl.col("step") - JOB.first_step)).write_parquet(path)
    _fails(path, "no step recorded on all 4 ranks")


def test_ranks_that_do_not_fit_the_meta_file(tmp_path: Path) -> None:
    path, _ = _table(tmp_path)
    meta = tmp_path / "meta-gen.yaml"
    meta.write_text(meta.read_text().replace("dp_size: 2", "dp_size: 1").replace("world_size: 4", "world_size: 2"))
    _fails(path, "does not fit the layout", "meta-gen.yaml")


def test_inconsistent_meta_file(tmp_path: Path) -> None:
    path, _ = _table(tmp_path)
    meta = tmp_path / "meta-gen.yaml"
    meta.write_text(meta.read_text().replace("world_size: 4", "world_size: 5"))
    _fails(path, "world_size 5", str(meta))


@pytest.mark.parametrize("content", [b"PAR1 not really parquet", b"rank,step,optype\n1,2"])
def test_unreadable_tables(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / ("trace-x.parquet" if content.startswith(b"PAR1") else "trace-x.csv")
    path.write_bytes(content)
    res = cli("analyze", path, "--no-cache", "-j", "1")
    assert res.returncode == 2 and "Traceback" not in res.stderr and str(path) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_folder_skips_parquet_that_is_no_op_table(tmp_path: Path) -> None:
    path, _ = _table(tmp_path)
    pl.DataFrame({"a": [1]}).write_parquet(tmp_path / "other.parquet")
    res = cli("analyze", tmp_path, "--no-cache", "-j", "1", "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["source"]["format"] == "optable" and doc["source"]["skipped"] == []


def test_missing_send_is_counted(tmp_path: Path) -> None:
    path, df = _table(tmp_path)
    i = pl.int_range(pl.len())
    first_send = df.with_row_index().filter((pl.col("optype") == "forward-send") & (pl.col("step") == JOB.first_step))
    drop = int(first_send["index"][0])
    df.filter(i != drop).write_parquet(path)
    w = [x for x in _warnings(path) if "unequal numbers of sends and recvs" in x]
    assert len(w) == 1 and w[0].startswith("1 (step, sender, receiver) channels") and "1 sends, 2 recvs" in w[0]
