"""A finished report kept in the cache: ``analyze`` of unchanged inputs with the same options and code prints it again
without loading a rank or importing polars (~0.1 s where loading the analysis back and rendering it took ~0.8 s).

A report is a pure function of the input files, the command's options and commscope's code, so the entry's name
hashes all three, computed from the file system alone (no parsing, no heavy import): every file under the given
paths with its size and modification time (the per-rank cache's own identity of a file; any file, not only
those that turn out to be traces), the paths as given with the working directory (the report names them as given),
every option of the command, and the source of every module under ``analyzer/`` with the versions of the libraries
that compute or print. Only formats that depend on nothing else are kept: JSON and Markdown (the text report
follows the terminal's width and colours; the HTML report's figures get random element ids). A ``--history`` run,
``--no-cache`` and ``--scheduler`` always run through.

An entry starts with a line giving its body's SHA-256, checked when read: a cut-short or damaged entry is ignored
and written again. Entries of one set of paths live in one folder; storing one removes those of other inputs or
code, so changed traces or an upgrade leave no garbage behind. A read-only or full cache only costs the next run
the work.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from ..ingest import digest
from ..ingest.cachedir import cache_dir

REPORTS_DIR = "reports"  # beside the per-rank entries, the derived tables and the analyses
FORMATS = ("json", "markdown")
_HEAD = b"commscope-report/1 "
_PKG = Path(__file__).resolve().parents[1]
_LIBS = ("polars", "numpy", "scipy", "msgspec", "pyarrow", "plotly", "adbc-driver-sqlite")
_code: str | None = None


def _code_hash() -> str:
    """Every module of commscope and its C source, and the versions of the libraries that compute or print."""
    global _code
    if _code is None:
        _code = digest.code(_PKG, _LIBS)
    return _code


def _files(paths: list[Path]) -> list[list[object]]:
    """Each path as given with what lies under it: (relative name, size, mtime in ns) per file, sorted."""
    out: list[list[object]] = []
    for p in paths:
        st = os.stat(p)
        if not os.path.isdir(p):
            out.append([str(p), st.st_size, st.st_mtime_ns])
            continue
        found = []
        for folder, dirs, names in os.walk(p):
            dirs.sort()
            for n in names:
                full = os.path.join(folder, n)
                try:
                    s = os.stat(full)
                except OSError:
                    s = None  # gone meanwhile or a dangling link: its name still counts
                found.append([os.path.relpath(full, p), s.st_size if s else -1, s.st_mtime_ns if s else -1])
        out.append([str(p), sorted(found)])
    return out


def key(paths: list[Path], options: dict[str, object]) -> tuple[Path, str] | None:
    """(the folder of these paths' entries, the entry's name); None where the inputs cannot be listed (the run then
    says why)."""
    try:
        inputs = json.dumps([os.getcwd(), _files(paths), _code_hash()], default=repr).encode()
        opts = json.dumps(options, sort_keys=True, default=repr).encode()
    except (OSError, ValueError):
        return None
    where = hashlib.sha256(json.dumps([os.getcwd(), [str(p) for p in paths]]).encode()).hexdigest()[:32]
    name = hashlib.sha256(inputs).hexdigest()[:32] + "-" + hashlib.sha256(opts).hexdigest()[:16]
    return cache_dir() / REPORTS_DIR / where, name


def load(k: tuple[Path, str]) -> str | None:
    """The report, or None where there is none or it is damaged."""
    folder, name = k
    try:
        data = (folder / name).read_bytes()
    except OSError:
        return None
    head, _, body = data.partition(b"\n")
    if head != _HEAD + hashlib.sha256(body).hexdigest().encode():
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def store(k: tuple[Path, str], text: str) -> None:
    """Keep the report (atomically) and drop this folder's entries of other inputs or code."""
    folder, name = k
    body = text.encode("utf-8")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_HEAD + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
            os.replace(tmp, folder / name)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        inputs = name.split("-")[0]
        for old in folder.iterdir():
            if not old.name.startswith((inputs, ".tmp-")):
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink(missing_ok=True)
    except OSError:
        pass


__all__ = ["FORMATS", "key", "load", "store"]
