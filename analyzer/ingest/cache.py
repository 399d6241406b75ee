"""Per-file Parquet cache of a reader's tables.

Keyed by the file's absolute path, size and mtime, the parser version and the read options, in a
user cache directory (``COMMSCOPE_CACHE_DIR`` overrides) — never next to the user's traces.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import polars as pl

from ..model import ProcessGroup, RankMeta, RankTrace
from . import Reader, reader_for
from .discover import TraceFile
from .options import ReadOptions

PARSER_VERSION = "5"  # bump when a reader's tables change: old entries are then ignored (4: taken on another branch)
_TABLES = ("gpu", "cpu", "comm_calls", "steps")


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
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        entries = json.loads(manifest.read_text())
        out = []
        for i, entry in enumerate(entries):
            tables = {name: pl.read_parquet(folder / f"{i}.{name}.parquet") for name in _TABLES}
            meta = entry["meta"]
            meta["process_groups"] = tuple(
                ProcessGroup(g["name"], g["desc"], tuple(g["ranks"])) for g in meta["process_groups"]
            )
            meta["devices"] = tuple(meta["devices"])
            meta["versions"] = tuple(tuple(v) for v in meta["versions"])
            meta["warnings"] = tuple(meta["warnings"])
            out.append(RankTrace(meta=RankMeta(**meta), steps_on_gpu=entry["steps_on_gpu"], **tables))
        return out
    except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError):
        return None  # a damaged cache entry is rebuilt, never trusted


def _store(folder: Path, traces: list[RankTrace]) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".tmp-"))
    try:
        entries = []
        for i, t in enumerate(traces):
            for name in _TABLES:
                getattr(t, name).write_parquet(tmp / f"{i}.{name}.parquet", compression="lz4")
            entries.append({"meta": asdict(t.meta), "steps_on_gpu": t.steps_on_gpu})
        (tmp / "manifest.json").write_text(json.dumps(entries))
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)  # atomic: concurrent readers see a whole entry or none
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
