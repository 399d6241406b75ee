"""Where the cache lives, and which inputs were loaded through it before (no heavy imports: the CLI asks
this before it imports polars)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

SEEN_DIR = "seen"


def cache_dir() -> Path:
    env = os.environ.get("COMMSCOPE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "commscope"


def _marker(path: Path) -> Path:
    return cache_dir() / SEEN_DIR / hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]


def seen(paths: list[Path] | tuple[Path, ...]) -> bool:
    """Whether every input path was loaded through the cache before: then its ranks are most likely cache
    hits, and no parse worker is needed (a guess only: a changed file still gets its worker, later)."""
    try:
        return bool(paths) and all(_marker(p).is_file() for p in paths)
    except OSError:
        return False


def mark_seen(paths: list[Path] | tuple[Path, ...]) -> None:
    try:
        for p in paths:
            m = _marker(p)
            m.parent.mkdir(parents=True, exist_ok=True)
            m.touch()
    except OSError:
        pass  # a read-only cache directory costs only the guess
