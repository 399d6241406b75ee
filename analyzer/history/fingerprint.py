"""Source fingerprints: which trace files a stored run came from, and whether they are still the same.

Absolute path (not resolved: its lstat calls cost 0.7 s at 1,024 ranks), size, mtime and the sha256 of
the first MiB: hashing whole traces (hundreds of MB per rank) would cost more than the analysis; the size
and the head catch a rewritten or truncated file. Read-only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

HEAD_BYTES = 1 << 20


def fingerprint(path: str | Path) -> dict:
    p = Path(path)
    try:
        st = p.stat()
        h = hashlib.sha256()
        with open(p, "rb") as f:
            h.update(f.read(HEAD_BYTES))
        return {"path": os.path.abspath(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                "sha256_head": h.hexdigest()}
    except OSError as exc:  # a source that vanished since the analysis: recorded, not fatal
        return {"path": os.path.abspath(p), "error": exc.strerror or str(exc)}


def fingerprints(paths: list[str]) -> list[dict]:
    return [fingerprint(p) for p in paths]


def unchanged(stored: dict) -> bool:
    """The file at the stored path still has the stored size and head (mtime is not compared: a copy keeps
    the content but not the time)."""
    if "error" in stored or not os.path.isfile(stored["path"]):
        return False
    now = fingerprint(stored["path"])
    return now.get("size") == stored.get("size") and now.get("sha256_head") == stored.get("sha256_head")
