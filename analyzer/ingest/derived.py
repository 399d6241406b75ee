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
from .cachedir import cache_dir

DERIVED_DIR = "derived"  # beside the per-rank entries
_PKG = Path(__file__).resolve().parents[1]
# the code that turns the ranks' tables into the derived ones (hygiene, rank settling, checks, steps, collectives;
# test_derived_cache checks that what these import is listed too)
_SOURCES = ("ingest/loader.py", "ingest/sanity.py", "ingest/hygiene.py",
            "ingest/collectives.py", "timeline.py", "model.py", "rules.py", "ranklist.py")
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


def load(key: str) -> Derived | None:
    """The job's entry, or None where it is absent or damaged (then derived again, never trusted)."""
    background.wait()  # an entry this process is still writing
    folder = _folder(key)
    try:
        manifest = msgspec.json.decode((folder / "manifest.json").read_bytes())
        if manifest.get("key") != key or not isinstance(manifest.get("warnings"), list):
            return None
        gpu = None
        if manifest.get("gpu") == "stored":
            gpu = conform(pl.read_parquet(folder / "gpu.parquet"), GPU_SCHEMA, GPU_OPTIONAL)
        steps = conform(pl.read_parquet(folder / "steps.parquet"), STEP_SCHEMA)
        table = conform(pl.read_parquet(folder / "collectives.parquet"), COLLECTIVE_SCHEMA)
        if (steps.height, table.height) != tuple(manifest.get("rows", ())):
            return None
        return Derived(gpu, steps, table, [str(w) for w in manifest["warnings"]])
    except (OSError, ValueError, TypeError, AttributeError, msgspec.DecodeError, pl.exceptions.PolarsError):
        return None


def store(key: str, d: Derived) -> None:
    """Write the entry atomically; a read-only or full cache directory only costs the next load the work."""
    folder = _folder(key)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".tmp-"))
    except OSError:
        return
    try:
        if d.gpu is not None:
            d.gpu.write_parquet(tmp / "gpu.parquet", compression="lz4")
        d.steps.write_parquet(tmp / "steps.parquet", compression="lz4")
        d.collectives.write_parquet(tmp / "collectives.parquet", compression="lz4")
        (tmp / "manifest.json").write_bytes(msgspec.json.encode(
            {"key": key, "gpu": "stored" if d.gpu is not None else "ranks", "warnings": d.warnings,
             "rows": [d.steps.height, d.collectives.height]}))
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)  # concurrent readers see a whole entry or none
    except OSError:
        pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
