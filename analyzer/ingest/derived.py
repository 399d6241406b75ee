"""The tables the loader derives from a job's ranks, cached once per job: the checked GPU table
(``sanity.check_gpu``), the steps, the collectives table (``collectives.build_table``) and the warnings said
while deriving them.

A cached analysis otherwise redoes both on every load (0.6 s and ~440 MB at 4 x 500 MB). An entry is keyed by
the per-rank cache keys of every input file (path, size, mtime, parser version, read options), the load
options that change the tables, and a hash of the source of the code that derives them: editing that code or
changing an option makes a new key, and an old entry is never read. One entry per job, not per rank: the
checks' warnings name ranks across the job, and per-rank derivation would cost thousands of ranks one
Polars query each on the cold path. Where the checks fixed nothing (the usual case) the GPU table is not
stored again: the ranks' own cached GPU tables are it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import msgspec
import polars as pl

from ..model import COLLECTIVE_SCHEMA, GPU_OPTIONAL, GPU_SCHEMA, STEP_SCHEMA, conform
from . import background
from .cache import entry_digest
from .cachedir import cache_dir
from .digest import file_digest, files_digests, read_regular
from .kineto.json_depth import depth as json_depth

DERIVED_DIR = "derived"  # beside the per-rank entries
MAX_MANIFEST_BYTES = 16 << 20  # warnings and digests: a few kB
MAX_MANIFEST_DEPTH = 8  # the manifest nests 3 deep
_PKG = Path(__file__).resolve().parents[1]
# the code that turns the ranks' tables into the derived ones (hygiene, rank settling, checks, steps, collectives;
# test_derived_cache checks that what these import is listed too)
_SOURCES = ("ingest/loader.py", "ingest/sanity.py", "ingest/hygiene.py",
            "ingest/collectives.py", "ingest/launchers.py", "timeline.py", "model.py", "rules.py", "ranklist.py",
            "comm_catalogue.py", "comm_catalogue.toml", "patterns.py", "errors.py", "redact.py")
_code_hash: str | None = None


def code_hash() -> str:
    global _code_hash
    if _code_hash is None:
        h = hashlib.sha256()
        for rel in _SOURCES:
            h.update(rel.encode() + b"\0" + (_PKG / rel).read_bytes() + b"\0")
        _code_hash = h.hexdigest()[:32]
    return _code_hash


def job_key(rank_keys: list[str], options: list) -> str:
    """The entry's name: the ranks' cache keys in load order, the options, the deriving code."""
    ident = json.dumps([code_hash(), rank_keys, options], default=repr)
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Derived:
    gpu: pl.DataFrame | None  # None: the ranks' GPU tables as read (the checks changed nothing)
    steps: pl.DataFrame
    collectives: pl.DataFrame
    warnings: list[str]


def _folder(key: str) -> Path:
    return cache_dir() / DERIVED_DIR / key


_digests: dict[str, str] = {}  # job key -> digest of the manifest this process last read or wrote


def entry_digest_of(key: str) -> str | None:
    """The digest of the job's entry manifest (which holds its files' and its ranks' digests): what an analysis of
    the job records as made from; None where there is none."""
    known = _digests.get(key)
    if known is not None:
        return known
    try:
        return file_digest(_folder(key) / "manifest.json")
    except OSError:
        return None


def _made_from(rank_keys: list[str]) -> list[str | None]:
    """The digest of each rank's cache entry (its manifest, which holds the digests of its tables)."""
    root = cache_dir()
    return [entry_digest(root / k) for k in rank_keys]


_NAMES = ("gpu", "steps", "collectives")


def load(key: str, rank_keys: list[str]) -> Derived | None:
    """The job's entry, or None where it is absent, damaged, or not proven: its manifest must be this key's, its
    files must have the recorded digests and its ranks' entries the recorded ones (derived again otherwise,
    never trusted)."""
    background.wait()  # an entry this process is still writing
    folder = _folder(key)
    try:
        data = read_regular(folder / "manifest.json", MAX_MANIFEST_BYTES)
        if json_depth(data) > MAX_MANIFEST_DEPTH:
            return None
        manifest = msgspec.json.decode(data)
        if (not isinstance(manifest, dict) or manifest.get("key") != key or not isinstance(manifest.get("warnings"), list)
                or manifest.get("made_from") != _made_from(rank_keys)):
            return None
        files = manifest.get("files")
        stored = [n for n in _NAMES if n != "gpu" or manifest.get("gpu") == "stored"]
        if not isinstance(files, dict) or sorted(files) != sorted(f"{n}.parquet" for n in stored):
            return None
        names = sorted(files)
        if files_digests([folder / n for n in names]) != [files[n] for n in names]:
            return None
        gpu = None
        if manifest.get("gpu") == "stored":
            gpu = conform(pl.read_parquet(folder / "gpu.parquet"), GPU_SCHEMA, GPU_OPTIONAL)
        steps = conform(pl.read_parquet(folder / "steps.parquet"), STEP_SCHEMA)
        table = conform(pl.read_parquet(folder / "collectives.parquet"), COLLECTIVE_SCHEMA)
        if [steps.height, table.height] != manifest.get("rows"):
            return None
        _digests[key] = hashlib.sha256(data).hexdigest()
        return Derived(gpu, steps, table, [str(w) for w in manifest["warnings"]])
    except Exception:  # noqa: BLE001 - whatever a damaged entry raises (decoder, Polars, a bad schema): derived again
        return None


def store(key: str, rank_keys: list[str], d: Derived) -> None:
    """Write the entry atomically with the digests of its files and of the rank entries it was derived from; a
    read-only or full cache directory only costs the next load the work."""
    folder = _folder(key)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".tmp-"))
    except OSError:
        return
    try:
        tables = {"steps": d.steps, "collectives": d.collectives, **({"gpu": d.gpu} if d.gpu is not None else {})}
        files = {}
        for name, df in tables.items():
            df.write_parquet(tmp / f"{name}.parquet", compression="lz4")
            files[f"{name}.parquet"] = file_digest(tmp / f"{name}.parquet")
        data = msgspec.json.encode(
            {"key": key, "gpu": "stored" if d.gpu is not None else "ranks", "warnings": d.warnings,
             "rows": [d.steps.height, d.collectives.height], "files": files, "made_from": _made_from(rank_keys)})
        (tmp / "manifest.json").write_bytes(data)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)  # concurrent readers see a whole entry or none
        _digests[key] = hashlib.sha256(data).hexdigest()
    except OSError:
        pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
