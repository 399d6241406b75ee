"""Shared test fixtures: paths to the project's sample traces and the shared real traces."""

from __future__ import annotations

import os
import shutil
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
_CACHE_DIR = tempfile.mkdtemp(prefix="commscope-test-cache-")
os.environ["COMMSCOPE_CACHE_DIR"] = _CACHE_DIR


def pytest_unconfigure(config: pytest.Config) -> None:
    # each session's cache went unremoved: 561 of them (14 GB with the rest of /tmp) piled up on one machine
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


def shared(*parts: str) -> Path:
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent (shared traces not available)")
    return p
