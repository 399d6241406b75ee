"""A job's analysis kept in the cache beside its tables: a second ``analyze`` (another format, the dashboard, a
report) of unchanged traces with the same options reads it instead of analyzing again.

At 4 x 512 MB the analysis is several seconds of CPU, against 0.1 s to read it back. It is a pure
function of the job's tables (``TraceSet.job_key``: every file's path, size, mtime, parser version and the load
options), of the options that reach it (layout, bus-bandwidth targets) and of commscope's code; the entry's key
hashes all three, with the source of every module under ``analyzer/`` and the versions of the libraries that
compute. Editing any of them makes a new key, and an old entry is never read.

The format is commscope's own, never a pickle: tables are Arrow IPC files (types kept exactly), numpy arrays
``.npy`` read with ``allow_pickle=False``, everything else one JSON tree whose objects are tagged (tuples,
dicts with their key types, numpy scalars, commscope's own frozen dataclasses, rebuilt only from modules under
``analyzer.``). The job's own tables (the TraceSet's, which the graph carries) are referred to, not copied.
A damaged, foreign or unreadable entry is ignored (the job is analyzed again and the entry replaced), never
trusted; a read-only or full cache only costs the next run the work. An entry proves what it holds: its manifest
records the SHA-256 of each of its files and the digest of the job's derived-tables entry it was made from
(``ingest/derived.py``, which records its own files' and the ranks' entries' digests): a table swapped in from
another job's entry, or an entry over other inputs, does not match and is never read. The manifest's nesting is
checked before it is parsed, and every reference in it (table numbers, file names, classes) is checked.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import io
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from ..ingest import background, derived, digest
from ..ingest.cachedir import cache_dir
from ..ingest.digest import file_digest, read_regular
from ..ingest.kineto.json_depth import depth as json_depth
from ..model import TraceSet

ANALYSIS_DIR = "analysis"  # beside the per-rank entries and the derived tables
FORMAT = 2  # 2: digests of the entry's files and of the derived entry it was made from
MAX_MANIFEST_BYTES = 256 << 20
MAX_FILE_BYTES = 16 << 30  # a table file past this is damage
MAX_DEPTH = 64  # an Analysis tree nests ~10 deep: deeper is damage (and would be recursion a file controls)
_PKG = Path(__file__).resolve().parent
_LIBS = ("polars", "numpy", "scipy")
_code_hash: str | None = None
# the TraceSet's tables, as the graph carries them, by name
_JOB_TABLES = ("gpu", "cpu", "steps", "collectives")


class NotStorable(TypeError):
    """An object the format has no tag for: the analysis is not kept (it is still returned)."""


def code_hash() -> str:
    """Every module of the analyzer (and its C) and the versions of the libraries that do the arithmetic."""
    global _code_hash
    if _code_hash is None:
        _code_hash = digest.code(_PKG, _LIBS, str(FORMAT))[:32]
    return _code_hash


def key(ts: TraceSet, options: list) -> str | None:
    """The entry's name for this job and these analysis options; None where the job did not come through the
    cache (``job_key``) or the source cannot be read."""
    if ts.job_key is None:
        return None
    shape = [ts.rank_ids, *(getattr(ts, t).height for t in _JOB_TABLES)]  # a TraceSet edited after loading
    try:
        ident = json.dumps([code_hash(), ts.job_key, shape, options], default=repr)
    except OSError:
        return None
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


class _Writer:
    def __init__(self, folder: Path, ts: TraceSet) -> None:
        self.folder = folder
        self.job = {id(getattr(ts, t)): t for t in _JOB_TABLES}
        self.seen: dict[int, int] = {}  # a table met twice (Analysis.kernels is Graph.kernels) is written once
        self.tables: list[list] = []  # [file, rows] per table written, in the order ``seen`` numbers them
        self.files: dict[str, str] = {}  # every file written -> its digest
        self.n = 0

    def _file(self, suffix: str) -> str:
        self.n += 1
        return f"{self.n}.{suffix}"

    def enc(self, x: object) -> object:
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, (int, float)) and type(x) in (int, float):
            return x
        if isinstance(x, np.generic):
            return {"np": x.dtype.str, "v": x.item()}
        if isinstance(x, pl.DataFrame):
            if id(x) in self.job:
                return {"job": self.job[id(x)]}
            if id(x) not in self.seen:
                name = self._file("arrow")
                x.write_ipc(self.folder / name, compression="lz4")
                self.seen[id(x)] = len(self.seen)
                self.tables.append([name, x.height])
                self.files[name] = file_digest(self.folder / name)
            return {"df": self.seen[id(x)]}
        if isinstance(x, np.ndarray):
            if x.dtype.hasobject:
                raise NotStorable("numpy array of objects")
            name = self._file("npy")
            np.save(self.folder / name, x, allow_pickle=False)
            self.files[name] = file_digest(self.folder / name)
            return {"nd": name}
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return {"tuple": [self.enc(v) for v in x]}
        if isinstance(x, list):
            return [self.enc(v) for v in x]
        if isinstance(x, dict):
            return {"dict": [[self.enc(k), self.enc(v)] for k, v in x.items()]}
        if dataclasses.is_dataclass(x) and not isinstance(x, type) and type(x).__module__.startswith("analyzer."):
            cls = type(x)
            return {"dc": f"{cls.__module__}:{cls.__qualname__}",
                    "f": {f.name: self.enc(getattr(x, f.name)) for f in dataclasses.fields(x)}}
        raise NotStorable(f"no tag for {type(x).__module__}.{type(x).__qualname__}")


class _Deferred(pl.DataFrame):
    """A table of the entry, read on its first use: a presenter reads a few of an analysis's tables (the JSON
    report none of the graph's, 0.25 of 0.35 s at 4 x 512 MB). The first attribute looked up on it reads the
    file and turns this object into the plain ``pl.DataFrame`` it holds (same layout, so its class can change):
    from then on nothing distinguishes it. ``isinstance(x, pl.DataFrame)`` does not read it."""

    __slots__ = ()

    def __init__(self, read: Callable[[], pl.DataFrame]) -> None:  # noqa: D107 - no DataFrame.__init__: no data yet
        object.__getattribute__(self, "__dict__")["_read"] = read

    def __getattribute__(self, name: str) -> object:
        state = object.__getattribute__(self, "__dict__")
        if "_read" in state:
            with _READING:  # a dashboard's threads: one reads, the others wait for it
                read = state.pop("_read", None)
                if read is not None:
                    state["_df"] = read()._df
                    object.__setattr__(self, "__class__", pl.DataFrame)
        return object.__getattribute__(self, name)


_READING = threading.RLock()


class _Reader:
    def __init__(self, folder: Path, ts: TraceSet, tables: list, files: dict[str, str],
                 again: Callable[[], dict[str, object]] | None) -> None:
        self.folder = folder
        self.ts = ts
        self.tables = tables
        self.files = files  # file name -> the SHA-256 the entry recorded: checked as each file is read
        self.again = again  # the fields analyzed afresh, for a table found damaged once deferred
        self.fresh: dict[str, object] | None = None
        self.frames: dict[int, pl.DataFrame] = {}
        self.path: list[object] = []  # where ``dec`` is in the tree (field names, indexes, keys)

    def _bytes(self, name: str) -> bytes:
        """The file's bytes, which must have the digest the entry recorded (a file swapped in from another
        entry does not)."""
        data = read_regular(self.folder / Path(name).name, MAX_FILE_BYTES)
        if hashlib.sha256(data).hexdigest() != self.files.get(name):
            raise ValueError(f"{name}: not the file the entry recorded")
        return data

    def _read(self, i: int) -> pl.DataFrame:
        name, rows = self.tables[i]
        df = pl.read_ipc(self._bytes(name))  # bytes: no mapping left open
        if df.height != rows:
            raise ValueError(f"table {name}: {df.height} rows, {rows} written")
        return df

    def _table(self, i: object) -> pl.DataFrame:
        if type(i) is not int or not 0 <= i < len(self.tables):  # -1 would be the last table, 9999 none
            raise ValueError(f"no table {i!r}")
        if i not in self.frames:
            if not 0 <= i < len(self.tables):
                raise ValueError(f"table {i} is not in the entry")
            self.frames[i] = _Deferred(functools.partial(self._read_or_again, i, tuple(self.path)))
        return self.frames[i]

    def _read_or_again(self, i: int, path: tuple) -> pl.DataFrame:
        """The table; where its file is damaged or gone by now (the entry was found whole when loaded), the same
        table of the analysis run afresh (once for the entry), and the entry is removed. Once afresh, every later
        table comes from that analysis: the folder may by then hold the entry stored again from it (removing or
        reading that would mix two entries)."""
        if self.fresh is None:
            try:
                return self._read(i)
            except (OSError, ValueError, pl.exceptions.PolarsError):
                shutil.rmtree(self.folder, ignore_errors=True)
                if self.again is None:
                    raise
            self.fresh = self.again()  # type: ignore[misc]
        x: object = self.fresh
        for step in path:
            x = getattr(x, step) if isinstance(step, str) and dataclasses.is_dataclass(x) else x[step]  # type: ignore
        if not isinstance(x, pl.DataFrame):
            raise ValueError(f"the analysis afresh has no table at {path}")
        return x

    def dec(self, x: object) -> object:
        if isinstance(x, list):
            return [self._at(i, v) for i, v in enumerate(x)]
        if not isinstance(x, dict):
            return x
        if "df" in x:
            return self._table(x["df"])
        if "job" in x:
            if x["job"] not in _JOB_TABLES:
                raise ValueError(f"unknown job table {x['job']!r}")
            return getattr(self.ts, x["job"])
        if "np" in x:
            dtype = np.dtype(x["np"])
            if dtype.kind not in "biufc":  # numbers only: an object dtype would pass anything through
                raise ValueError(f"not a numeric dtype: {x['np']!r}")
            return dtype.type(x["v"])
        if "nd" in x:
            if x["nd"] not in self.files:
                raise ValueError(f"unknown array {x['nd']!r}")
            return np.load(io.BytesIO(self._bytes(x["nd"])), allow_pickle=False)
        if "tuple" in x:
            return tuple(self._at(i, v) for i, v in enumerate(x["tuple"]))
        if "dict" in x:
            out = {}
            for k, v in x["dict"]:
                key = self.dec(k)
                out[key] = self._at(key, v)
            return out
        if "dc" in x:
            return self._dataclass(x["dc"], x["f"])
        raise ValueError(f"unknown tag in {sorted(x)}")

    def _at(self, step: object, x: object) -> object:
        self.path.append(step)
        try:
            return self.dec(x)
        finally:
            self.path.pop()

    def _dataclass(self, name: str, values: dict) -> object:
        module, _, qual = name.partition(":")
        if not module.startswith("analyzer.") or "." in qual:
            raise ValueError(f"not commscope's class: {name}")
        cls = getattr(importlib.import_module(module), qual)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise ValueError(f"not a dataclass: {name}")
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        given = {k: self._at(k, v) for k, v in values.items()}
        obj = cls(**{k: v for k, v in given.items() if k in init})
        for k, v in given.items():
            if k not in init:
                object.__setattr__(obj, k, v)
        return obj


_IPC_MAGIC = b"ARROW1"


def _whole(path: Path) -> bool:
    """Does the Arrow IPC file end as one does (its footer's magic)? A cut-short file does not."""
    try:
        with open(path, "rb") as f:
            f.seek(-len(_IPC_MAGIC), os.SEEK_END)
            return f.read() == _IPC_MAGIC
    except OSError:
        return False


def _folder(ts: TraceSet) -> Path:
    """One entry per job: an analysis with other options or newer code replaces the job's last one, so entries
    (tens of MB at 4 x 512 MB) do not pile up as commscope is upgraded."""
    return cache_dir() / ANALYSIS_DIR / str(ts.job_key)


def store(k: str, fields: dict[str, object], ts: TraceSet) -> bool:
    """Write the entry atomically (concurrent readers see a whole entry or none); False where it was not kept
    (also where the job's derived entry is not there to be made from)."""
    made_from = derived.entry_digest_of(str(ts.job_key))
    if made_from is None:
        return False
    folder = _folder(ts)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".tmp-"))
    except OSError:
        return False
    try:
        w = _Writer(tmp, ts)
        tree = {name: w.enc(value) for name, value in fields.items()}
        (tmp / "manifest.json").write_text(json.dumps({"key": k, "format": FORMAT, "tables": w.tables,
                                                       "files": w.files, "made_from": made_from, "fields": tree}))
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
        return True
    except (OSError, NotStorable, ValueError, pl.exceptions.PolarsError):
        return False
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _proven(manifest: object, k: str, ts: TraceSet) -> bool:
    """This key's entry, made from the job's derived entry as it is now, its references well formed (each file's
    digest is checked as it is read: ``_Reader._bytes``)."""
    if not isinstance(manifest, dict) or manifest.get("key") != k or manifest.get("format") != FORMAT:
        return False
    files, tables = manifest.get("files"), manifest.get("tables")
    if not isinstance(files, dict) or not isinstance(tables, list) or not isinstance(manifest.get("fields"), dict):
        return False
    if any(not (isinstance(t, list) and len(t) == 2 and t[0] in files and type(t[1]) is int) for t in tables):
        return False
    if any(not isinstance(n, str) or Path(n).name != n or not isinstance(d, str) for n, d in files.items()):
        return False
    return manifest.get("made_from") == derived.entry_digest_of(str(ts.job_key))


def load(k: str, ts: TraceSet, again: Callable[[], dict[str, object]] | None = None) -> dict[str, object] | None:
    """The entry's fields, or None where it is absent, damaged, unproven or not this key's. Its tables are read
    when first used (``_Deferred``), each checked against its recorded digest then; ``again`` gives the fields
    analyzed afresh, for a table found damaged or swapped at that point."""
    background.wait()  # an entry this process is still writing
    folder = _folder(ts)
    try:
        data = read_regular(folder / "manifest.json", MAX_MANIFEST_BYTES)
        if json_depth(data) > MAX_DEPTH:
            return None
        manifest = json.loads(data)
        if not _proven(manifest, k, ts):
            return None
        r = _Reader(folder, ts, manifest["tables"], manifest["files"], again)
        for name, _rows in r.tables:  # every table there and whole at its end (the IPC footer), none read yet
            if not _whole(folder / name):
                return None
        return {name: r._at(name, value) for name, value in manifest["fields"].items()}
    except Exception:  # noqa: BLE001 - whatever a damaged entry raises (decoder, Polars, numpy, a class): analyzed again
        return None
