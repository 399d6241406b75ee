"""Shared test fixtures: paths to the project's sample traces and the shared real traces."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLES = ROOT / "sample_traces"
SHARED = ROOT.parent / "shared" / "traces"


# tests never touch the user's cache directory; set at import so module-scoped fixtures and CLI
# subprocesses see it too
os.environ["COMMSCOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="commscope-test-cache-")


def shared(*parts: str) -> Path:
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent (shared traces not available)")
    return p
