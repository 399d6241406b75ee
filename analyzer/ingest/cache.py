"""Per-file Parquet cache of a reader's tables.

Keyed by the file's absolute path, size and mtime, the parser version and the read options, in a
user cache directory (``COMMSCOPE_CACHE_DIR`` overrides) — never next to the user's traces. Long
process-group member lists are kept once for all entries (``groups/``, by content hash), so the
manifests of a job's ranks stay O(ranks) bytes in all, not O(ranks^2). Small files parsed in one worker
task share a pack (``packs/``: four Parquet files for all of them); each entry's manifest names its pack
and its rows there.

An entry proves what it holds (``digest.py``): its manifest records the key it was made for (the hash of the
input's path, size, mtime, parser version and read options) and the SHA-256 of every Parquet file it reads.
A manifest under another key's folder, or a file whose bytes are not the recorded ones, makes the entry a
miss: the file is parsed again and the entry replaced, never trusted by its name or its row counts. The
trace itself is not hashed on a cached run (that would cost what the cache saves): its identity is the key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import stat
import tempfile
import typing
from collections.abc import Callable
from pathlib import Path

import msgspec
import polars as pl

from ..comm_catalogue import catalogue
from ..model import ProcessGroup, RankMeta, RankTrace
from . import Reader, background, reader_for
from .cachedir import cache_dir
from .digest import file_digest, files_digests, read_regular
from .discover import TraceFile
from .options import ReadOptions

# bump when a reader's tables change: old entries are then ignored (7: p2p peers and split sizes, launches
# of GPU work only, Nsight NCCL/step ranges only, impossible GPU times left for the loader to count;
# 8: long process-group member lists stored once in the cache dir, manifests refer to them; packs;
# 9: manifests record their key and the digest of every file they read
# 10: the communication catalogue classifies (its data file's digest is in the key too), launcher calls, peer-copy
# sizes, merged multi-rank files read as their ranks;
# 11: the runtime calls that block the host on the GPU kept beside the launches)
PARSER_VERSION = "11"
_TABLES = ("gpu", "cpu", "comm_calls", "steps")
GROUPS_DIR = "groups"  # beside the entries: member lists by content hash, shared by every rank that lists them
_INLINE_MEMBERS = 64  # shorter member lists stay in the manifest
_JOINT_READ_BYTES = 1 << 20  # Parquet files of a table smaller than this on average are read in one go
MAX_MANIFEST_BYTES = 64 << 20  # a manifest (or a member list) past this is damage: long member lists are apart


def cache_key(tf: TraceFile, opts: ReadOptions) -> str:
    path, st = _resolved(tf.path)
    ident = json.dumps(
        [path, st.st_size, st.st_mtime_ns, PARSER_VERSION, catalogue().digest, tf.format,
         opts.rank_hint, sorted(opts.rank_map.items()), opts.step_marker],
    )
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=64)
def _real_dir(folder: str) -> str:
    return os.path.realpath(folder)


def _resolved(path: Path) -> tuple[str, os.stat_result]:
    """``str(path.resolve())`` and its stat; a file that is no link resolves through its folder, which thousands
    of ranks share (one lstat each, not a walk of every component). Strings, not Paths: building Path objects
    was most of a key's cost (1,024 ranks: ~0.1 s per pass over the keys)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return str(path.resolve()), path.stat()
    full = os.path.abspath(path)
    return os.path.join(_real_dir(os.path.dirname(full)), os.path.basename(full)), st


def entry_dir(tf: TraceFile, opts: ReadOptions) -> Path:
    return cache_dir() / cache_key(tf, opts)


def cached_read(tf: TraceFile, opts: ReadOptions, reader: Reader | None = None) -> list[RankTrace]:
    read: Callable[[Path, ReadOptions], list[RankTrace]] = reader or reader_for(tf.format)
    try:
        folder = entry_dir(tf, opts)
    except OSError:
        return read(tf.path, opts)
    hit = load_entry(folder)
    if hit is not None:
        return hit
    traces = read(tf.path, opts)
    try:
        _store(folder, traces)
    except OSError:
        pass  # a read-only or full cache directory must not fail the analysis
    return traces


def ensure_entry(tf: TraceFile, opts: ReadOptions, reader: Reader | None = None) -> Path:
    """Parse into the cache unless already there; returns the entry folder (for the Dask path)."""
    folder = entry_dir(tf, opts)
    if load_entry(folder) is None:  # absent or damaged
        _store(folder, (reader or reader_for(tf.format))(tf.path, opts))
    return folder


def load_entry(folder: Path) -> list[RankTrace] | None:
    return load_entries([folder])[0]


def load_entries(folders: list[Path]) -> list[list[RankTrace] | None]:
    """Many entries at once (None for an absent, damaged or unproven one): each pack's tables read once, in one
    Parquet read per table over all packs, and sliced back per rank (many small ranks). Every file an entry
    reads is hashed once and must match the entry's recorded digest."""
    background.wait()  # entries this process is still writing
    shared: dict[tuple[str, str, bytes], ProcessGroup] = {}
    entries = [_manifest(f, shared) for f in folders]
    root = folders[0].parent if folders else None
    wanted = sorted({name for es in entries if es for name in es[1]})
    base = str(root)
    found = dict(zip(wanted, files_digests([os.path.join(base, n) for n in wanted]))) if root is not None else {}
    proven: list[list[dict] | None] = [
        es[0] if es is not None and all(found.get(n) == d for n, d in es[1].items()) else None for es in entries]
    for folder, es, ok in zip(folders, entries, proven):
        if es is not None and ok is None:
            _digests.pop(str(folder), None)  # read but not proven: no derived entry may count on it
    packs = _read_packs(sorted({e["pack"] for es in proven if es for e in es}), root)
    out: list[list[RankTrace] | None] = []
    for es in proven:
        traces = []
        for e in es or ():
            tables = packs.get(e["pack"])
            if tables is None or any(o + n > tables[name].height for name, (o, n) in zip(_TABLES, e["rows"])):
                break  # damaged or gone: rebuilt, never trusted
            traces.append(RankTrace(meta=e["meta"], steps_on_gpu=e["steps_on_gpu"],
                                    **{name: tables[name].slice(o, n) for name, (o, n) in zip(_TABLES, e["rows"])}))
        else:
            out.append(traces if es is not None else None)
            continue
        out.append(None)
    return out


def _read_packs(packs: list[str], root: Path | None) -> dict[str, dict[str, pl.DataFrame]]:
    """Each readable pack's tables (a damaged pack is left out); one read per table over all packs."""
    if not packs or root is None:
        return {}
    tables: dict[str, list[pl.DataFrame]] = {}
    for name in _TABLES:
        parts = _read_tables([root / p / f"{name}.parquet" for p in packs])
        if parts is None:  # a damaged pack: find which, read the others one by one
            if len(packs) == 1:
                return {}
            return {k: v for p in packs for k, v in _read_packs([p], root).items()}
        tables[name] = parts
    return {p: {name: tables[name][i] for name in _TABLES} for i, p in enumerate(packs)}


class _RawGroup(msgspec.Struct):
    name: str
    desc: str
    ranks: msgspec.Raw  # left undecoded: thousands of ranks repeat the same member lists
    ref: str = ""  # set: the members are in GROUPS_DIR/<ref>.json (ranks is then [])


def _manifest_decoder() -> msgspec.json.Decoder:
    """Decodes a manifest into typed entries whose process groups keep their member lists as raw JSON."""
    hints = typing.get_type_hints(RankMeta)
    meta = msgspec.defstruct("_RawMeta", [(f.name, tuple[_RawGroup, ...] if f.name == "process_groups"
                                           else hints[f.name]) for f in dataclasses.fields(RankMeta)])
    entry = msgspec.defstruct("_RawEntry", [("meta", meta), ("steps_on_gpu", bool), ("pack", str),
                                            ("rows", tuple[tuple[int, int], ...])])
    manifest = msgspec.defstruct("_RawManifest", [("key", str), ("files", dict[str, str]),
                                                  ("entries", tuple[entry, ...])])
    return msgspec.json.Decoder(manifest)


_DECODE_MANIFEST = _manifest_decoder()
_META_FIELDS = tuple(f.name for f in dataclasses.fields(RankMeta))


_digests: dict[str, str] = {}  # entry folder -> digest of the manifest this process last read or wrote there


def entry_digest(folder: Path) -> str | None:
    """The digest of the entry's manifest (which holds the digests of its files): what the job's derived tables
    record as made from this rank. The one this process read or wrote, else the file's now; None: no entry."""
    known = _digests.get(str(folder))
    if known is not None:
        return known
    try:
        return file_digest(folder / "manifest.json")
    except OSError:
        return None


def _safe(name: str) -> bool:
    return not name.startswith(("/", ".")) and ".." not in name and "\\" not in name


def _manifest(folder: Path, shared: dict[tuple[str, str, bytes], ProcessGroup]
              ) -> tuple[list[dict], dict[str, str]] | None:
    """The entry's metadata and the digests of the files it reads; each process group is decoded once and is
    the one object ``shared`` holds for it, so thousands of ranks listing the same world group cost one copy
    (memory flat in ranks). None: absent, damaged, or made for another key."""
    try:
        data = read_regular(folder / "manifest.json", MAX_MANIFEST_BYTES)
        raw_manifest = _DECODE_MANIFEST.decode(data)
        if raw_manifest.key != folder.name or not all(_safe(n) for n in raw_manifest.files):
            return None  # copied from another key's folder: not this input's tables
        entries = []
        for raw in raw_manifest.entries:
            m = raw.meta
            groups = []
            for g in m.process_groups:
                key = (g.name, g.desc, g.ref.encode() if g.ref else bytes(g.ranks))
                pg = shared.get(key)
                if pg is None:
                    members = _members(folder.parent, g.ref) if g.ref else g.ranks
                    pg = shared[key] = ProcessGroup(g.name, g.desc, msgspec.json.decode(members, type=tuple[int, ...]))
                groups.append(pg)
            fields = {f: getattr(m, f) for f in _META_FIELDS}
            fields["process_groups"] = tuple(groups)
            if len(raw.rows) != len(_TABLES) or not _safe(raw.pack):
                return None
            if any(f"{raw.pack}/{name}.parquet" not in raw_manifest.files for name in _TABLES):
                return None  # a file without its digest is not proven
            entries.append({"meta": RankMeta(**fields), "steps_on_gpu": raw.steps_on_gpu, "pack": raw.pack,
                            "rows": raw.rows})
        _digests[str(folder)] = hashlib.sha256(data).hexdigest()
        return entries, dict(raw_manifest.files)
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError, msgspec.DecodeError):
        return None  # absent, or a damaged cache entry (nested past the recursion limit too): rebuilt, never trusted


def _members(root: Path, ref: str) -> bytes:
    """A stored member list, checked against its content hash; a damaged one is removed (so the entry's
    rebuild writes it again) and raises."""
    path = root / GROUPS_DIR / f"{ref}.json"
    data = read_regular(path, MAX_MANIFEST_BYTES)
    if _ref(data) != ref:
        path.unlink(missing_ok=True)
        raise ValueError(f"damaged member list {path}")
    return data


def _ref(members: bytes) -> str:
    return hashlib.sha256(members).hexdigest()[:32]


def _stored_groups(root: Path, groups: tuple[ProcessGroup, ...]) -> list[dict]:
    """The manifest's view of a rank's process groups: long member lists written once under ``root``
    (O(ranks) bytes per job, not O(ranks) per rank) and named by their hash."""
    out = []
    for g in groups:
        if len(g.ranks) <= _INLINE_MEMBERS:
            out.append({"name": g.name, "desc": g.desc, "ranks": g.ranks})
            continue
        data = msgspec.json.encode(g.ranks)
        ref = _ref(data)
        path = root / GROUPS_DIR / f"{ref}.json"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)  # atomic; writers of the same list write the same bytes
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        out.append({"name": g.name, "desc": g.desc, "ranks": [], "ref": ref})
    return out


def _read_tables(paths: list[Path]) -> list[pl.DataFrame] | None:
    """The Parquet files' tables, read in one go when their schemas agree (one by one otherwise)."""
    if not paths:
        return []
    try:
        # big files one by one: the joint read's file-name column and the copy into one chunk cost the 4 x 500 MB
        # FSDP job's gpu and cpu tables 0.22 s and 205 MB, against 0.08 s and 90 MB one by one
        if len(paths) > 1 and sum(p.stat().st_size for p in paths) < _JOINT_READ_BYTES * len(paths):
            try:
                both = pl.read_parquet(paths, include_file_paths="_file")
            except pl.exceptions.SchemaError:
                both = None
            if both is not None:
                counts = dict(both.group_by("_file").len().iter_rows())
                if sum(counts.get(str(p), 0) for p in paths) != both.height:
                    raise OSError("file names did not come back as given")
                both = both.drop("_file").rechunk()  # one chunk: each slice below is O(1)
                out, offset = [], 0
                for p in paths:
                    n = counts.get(str(p), 0)
                    out.append(both.slice(offset, n))
                    offset += n
                return out
        return [pl.read_parquet(p) for p in paths]
    except (OSError, pl.exceptions.PolarsError):
        return None


def _store(folder: Path, traces: list[RankTrace]) -> None:
    """One entry whose tables sit in its own folder."""
    store_many([(folder, traces)])


PACKS_DIR = "packs"


def store_many(items: list[tuple[Path, list[RankTrace]]]) -> None:
    """Entries for many files (all under one cache dir), their tables written together: one pack of four
    Parquet files for all of them, each entry a manifest naming its rows there (many small ranks: a few
    files per worker task, not four per rank). A single entry keeps its tables in its own folder."""
    if not items:
        return
    root = items[0][0].parent
    root.mkdir(parents=True, exist_ok=True)
    traces = [t for _, ts in items for t in ts]
    if len(traces) <= 1:
        for folder, ts in items:
            _write_entry(folder, ts, None, [0] * len(_TABLES), {})
        return
    try:
        tables = {name: pl.concat([getattr(t, name) for t in traces], how="vertical") for name in _TABLES}
    except (pl.exceptions.SchemaError, pl.exceptions.ShapeError, pl.exceptions.InvalidOperationError):
        for folder, ts in items:  # tables of different shapes: one entry each
            _write_entry(folder, ts, None, [0] * len(_TABLES), {})
        return
    (root / PACKS_DIR).mkdir(exist_ok=True)
    pack = Path(tempfile.mkdtemp(dir=root / PACKS_DIR, prefix="p-"))  # named by no manifest until whole
    try:
        files = {}
        for name in _TABLES:
            tables[name].write_parquet(pack / f"{name}.parquet", compression="lz4")
            files[f"{PACKS_DIR}/{pack.name}/{name}.parquet"] = file_digest(pack / f"{name}.parquet")
        offsets = [0] * len(_TABLES)
        for folder, ts in items:
            offsets = _write_entry(folder, ts, f"{PACKS_DIR}/{pack.name}", offsets, files)
    except BaseException:
        shutil.rmtree(pack, ignore_errors=True)  # entries already written that name it read as damaged
        raise


def _write_entry(folder: Path, traces: list[RankTrace], pack: str | None, offsets: list[int],
                 pack_files: dict[str, str]) -> list[int]:
    """Write ``folder``'s manifest (without ``pack``: each trace's tables in a subfolder of its own) with its key
    and the digest of every file it reads (``pack_files``: the pack's); the offsets after its rows in ``pack``."""
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".tmp-"))
    try:
        entries = []
        files = dict(pack_files)
        for i, t in enumerate(traces):
            if pack is None:
                (tmp / str(i)).mkdir()
                for name in _TABLES:
                    getattr(t, name).write_parquet(tmp / str(i) / f"{name}.parquet", compression="lz4")
                    files[f"{folder.name}/{i}/{name}.parquet"] = file_digest(tmp / str(i) / f"{name}.parquet")
                offsets = [0] * len(_TABLES)
            meta = {f: getattr(t.meta, f) for f in _META_FIELDS}
            meta["process_groups"] = _stored_groups(folder.parent, t.meta.process_groups)
            rows = [(o, getattr(t, name).height) for o, name in zip(offsets, _TABLES)]
            offsets = [o + n for o, n in rows]
            entries.append({"meta": meta, "steps_on_gpu": t.steps_on_gpu, "pack": pack or f"{folder.name}/{i}",
                            "rows": rows})
        # msgspec writes the fields as asdict + json.dumps would, without deep-copying every member rank
        data = msgspec.json.encode({"key": folder.name, "files": files, "entries": entries})
        (tmp / "manifest.json").write_bytes(data)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)  # atomic: concurrent readers see a whole entry or none
        _digests[str(folder)] = hashlib.sha256(data).hexdigest()
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return offsets
