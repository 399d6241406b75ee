"""Per-file Parquet cache of a reader's tables.

Keyed by the file's absolute path, size and mtime, the parser version and the read options, in a
user cache directory (``COMMSCOPE_CACHE_DIR`` overrides) — never next to the user's traces. Long
process-group member lists are kept once for all entries (``groups/``, by content hash), so the
manifests of a job's ranks stay O(ranks) bytes in all, not O(ranks^2).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import typing
from collections.abc import Callable
from pathlib import Path

import msgspec
import polars as pl

from ..model import ProcessGroup, RankMeta, RankTrace
from . import Reader, reader_for
from .discover import TraceFile
from .options import ReadOptions

# bump when a reader's tables change: old entries are then ignored (7: p2p peers and split sizes, launches
# of GPU work only, Nsight NCCL/step ranges only, impossible GPU times left for the loader to count;
# 8: long process-group member lists stored once in the cache dir, manifests refer to them)
PARSER_VERSION = "8"
_TABLES = ("gpu", "cpu", "comm_calls", "steps")
GROUPS_DIR = "groups"  # beside the entries: member lists by content hash, shared by every rank that lists them
_INLINE_MEMBERS = 64  # shorter member lists stay in the manifest


def cache_dir() -> Path:
    env = os.environ.get("COMMSCOPE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "commscope"


def cache_key(tf: TraceFile, opts: ReadOptions) -> str:
    st = tf.path.stat()
    ident = json.dumps(
        [str(tf.path.resolve()), st.st_size, st.st_mtime_ns, PARSER_VERSION, tf.format,
         opts.rank_hint, sorted(opts.rank_map.items()), opts.step_marker],
    )
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


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
    """Many entries at once (None for an absent or damaged one): one Parquet read per table over all
    entries, sliced back per rank, instead of four small reads per rank (many small ranks)."""
    shared: dict[tuple[str, str, bytes], ProcessGroup] = {}
    return _with_tables(folders, [_manifest(f, shared) for f in folders])


def _with_tables(folders: list[Path], entries: list[list[dict] | None]) -> list[list[RankTrace] | None]:
    files = [(folder, i) for folder, e in zip(folders, entries) if e is not None for i in range(len(e))]
    tables = {}
    for name in _TABLES:
        parts = _read_tables([folder / f"{i}.{name}.parquet" for folder, i in files])
        if parts is None:  # a damaged entry: find which, read the others one by one
            if len(folders) == 1:
                return [None]
            return [_with_tables([f], [e])[0] for f, e in zip(folders, entries)]
        tables[name] = parts
    out: list[list[RankTrace] | None] = []
    k = 0
    for e in entries:
        if e is None:
            out.append(None)
            continue
        traces = []
        for entry in e:
            traces.append(RankTrace(meta=entry["meta"], steps_on_gpu=entry["steps_on_gpu"],
                                    **{name: tables[name][k] for name in _TABLES}))
            k += 1
        out.append(traces)
    return out


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
    entry = msgspec.defstruct("_RawEntry", [("meta", meta), ("steps_on_gpu", bool)])
    return msgspec.json.Decoder(list[entry])


_DECODE_MANIFEST = _manifest_decoder()
_META_FIELDS = tuple(f.name for f in dataclasses.fields(RankMeta))


def _manifest(folder: Path, shared: dict[tuple[str, str, bytes], ProcessGroup]) -> list[dict] | None:
    """The entry's metadata; each process group is decoded once and is the one object ``shared`` holds
    for it, so thousands of ranks listing the same world group cost one copy (memory flat in ranks)."""
    try:
        entries = []
        for raw in _DECODE_MANIFEST.decode((folder / "manifest.json").read_bytes()):
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
            entries.append({"meta": RankMeta(**fields), "steps_on_gpu": raw.steps_on_gpu})
        return entries
    except (OSError, ValueError, KeyError, TypeError, msgspec.DecodeError):
        return None  # absent, or a damaged cache entry: rebuilt, never trusted


def _members(root: Path, ref: str) -> bytes:
    """A stored member list, checked against its content hash; a damaged one is removed (so the entry's
    rebuild writes it again) and raises."""
    path = root / GROUPS_DIR / f"{ref}.json"
    data = path.read_bytes()
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
        if len(paths) > 1:
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
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".tmp-"))
    try:
        entries = []
        for i, t in enumerate(traces):
            for name in _TABLES:
                getattr(t, name).write_parquet(tmp / f"{i}.{name}.parquet", compression="lz4")
            meta = {f: getattr(t.meta, f) for f in _META_FIELDS}
            meta["process_groups"] = _stored_groups(folder.parent, t.meta.process_groups)
            entries.append({"meta": meta, "steps_on_gpu": t.steps_on_gpu})
        # msgspec writes the fields as asdict + json.dumps would, without deep-copying every member rank
        (tmp / "manifest.json").write_bytes(msgspec.json.encode(entries))
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)  # atomic: concurrent readers see a whole entry or none
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
