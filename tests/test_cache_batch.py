"""Many cache entries read together: the same tables and metadata as reading each entry alone, a
damaged entry costs only itself, and ranks that list the same process group share one copy of it."""

from __future__ import annotations

from pathlib import Path

from polars.testing import assert_frame_equal

from analyzer.ingest import cache
from analyzer.ingest.discover import discover
from analyzer.ingest.options import ReadOptions
from analyzer.loader import lean_reader


def _fill(tmp_path: Path) -> list[Path]:
    from sample_traces.generate import Scenario, build, write_kineto

    out = tmp_path / "traces"
    write_kineto(build(Scenario(ranks=6, steps=2, tp=2)), out)
    files = discover([out])
    assert len(files) == 6
    folders = []
    for tf in files:
        opts = ReadOptions(rank_hint=tf.rank_hint)
        folders.append(cache.ensure_entry(tf, opts, lean_reader(tf.format)))
    return folders


def test_batched_read_equals_one_by_one(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "c"))
    folders = _fill(tmp_path)
    (folders[2] / "0.cpu.parquet").write_bytes(b"not parquet")  # damaged: rebuilt later, never trusted
    batch = cache.load_entries(folders)
    assert batch[2] is None
    for folder, got in zip(folders, batch):
        if folder == folders[2]:
            continue
        alone = cache.load_entries([folder])[0]
        assert got is not None and alone is not None and len(got) == len(alone) == 1
        assert got[0].meta == alone[0].meta and got[0].steps_on_gpu == alone[0].steps_on_gpu
        for name in ("gpu", "cpu", "comm_calls", "steps"):
            a, b = getattr(got[0], name), getattr(alone[0], name)
            assert a.height > 0 or name == "comm_calls"
            assert_frame_equal(a, b)
        assert set(got[0].gpu["rank"].to_list()) == {got[0].meta.rank}  # slices did not slip across ranks
    ok = [b for b in batch if b is not None]
    world = [next(g for g in t[0].meta.process_groups if len(g.ranks) == 6) for t in ok]
    assert all(g is world[0] for g in world)  # one shared object, not one per rank
