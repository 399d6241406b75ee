"""Many cache entries read together: the same tables and metadata as reading each entry alone, a
damaged entry costs only itself, and ranks that list the same process group share one copy of it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from polars.testing import assert_frame_equal

from analyzer.ingest import cache
from analyzer.ingest.discover import discover
from analyzer.ingest.loader import lean_reader
from analyzer.ingest.options import ReadOptions


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
    (folders[2] / "0" / "cpu.parquet").write_bytes(b"not parquet")  # damaged: rebuilt later, never trusted
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


def test_long_member_lists_are_stored_once(tmp_path: Path, monkeypatch) -> None:
    """Manifests refer to long member lists kept once in the cache dir (not O(ranks^2) bytes); a damaged
    list makes its entries misses, and the rebuild writes it again."""
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(cache, "_INLINE_MEMBERS", 2)  # the 6-rank world and 3-rank DP groups go to the store
    folders = _fill(tmp_path)
    store = tmp_path / "c" / cache.GROUPS_DIR
    lists = sorted(store.glob("*.json"))
    assert len(lists) == 3  # the world group and two DP groups, each once for the six ranks
    for folder in folders:
        assert b"[0,1,2,3,4,5]" not in (folder / "manifest.json").read_bytes()
    got = cache.load_entries(folders)
    assert all(g is not None for g in got)
    world = [next(p for p in t[0].meta.process_groups if len(p.ranks) == 6) for t in got if t]
    assert world[0].ranks == (0, 1, 2, 3, 4, 5) and all(w is world[0] for w in world)
    monkeypatch.setattr(cache, "_INLINE_MEMBERS", 64)
    inline = tmp_path / "inline"
    inline.mkdir()
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(inline))
    ref = [cache.load_entries([f])[0] for f in _fill(inline)]
    def meta(entries: list) -> list:
        return [replace(t[0].meta, source="") for t in entries if t]

    assert meta(got) == meta(ref)  # the same metadata as with every list inline
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(cache, "_INLINE_MEMBERS", 2)
    lists[0].write_bytes(b"[0,1]")
    damaged = cache.load_entries(folders)
    assert any(d is None for d in damaged)
    assert not lists[0].exists()  # removed, so the rebuild below writes it again
    _fill(tmp_path)
    assert lists[0].exists() and all(d is not None for d in cache.load_entries(folders))


def test_pack_of_many_entries_reads_as_single_entries(tmp_path: Path, monkeypatch) -> None:
    """Entries written together share one pack of tables; each reads back as its own entry would, and a
    damaged pack makes every entry that names it a miss."""
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path / "c"))
    folders = _fill(tmp_path)  # one entry each, tables in the entry's own folder
    alone = cache.load_entries(folders)
    traces = [cache.load_entry(f) for f in folders]
    packed_root = tmp_path / "p"
    packed = [packed_root / f.name for f in folders]
    cache.store_many([(f, t) for f, t in zip(packed, traces)])  # type: ignore[misc]
    packs = list((packed_root / cache.PACKS_DIR).iterdir())
    assert len(packs) == 1 and sorted(p.name for p in packs[0].iterdir()) == sorted(
        f"{n}.parquet" for n in ("gpu", "cpu", "comm_calls", "steps"))
    assert not list(packed[0].rglob("*.parquet"))  # the entry holds only its manifest
    got = cache.load_entries(packed)
    for a, b in zip(alone, got):
        assert a is not None and b is not None and a[0].meta == b[0].meta
        for name in ("gpu", "cpu", "comm_calls", "steps"):
            assert_frame_equal(getattr(a[0], name), getattr(b[0], name))
    (packs[0] / "gpu.parquet").write_bytes(b"damaged")
    assert cache.load_entries(packed) == [None] * len(packed)
