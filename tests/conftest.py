"""Shared test fixtures: paths to the project's sample traces and the shared real traces."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLES = ROOT / "sample_traces"
SHARED = ROOT.parent / "shared" / "traces"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # tests never touch the user's cache directory
    monkeypatch.setenv("COMMSCOPE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def shared(*parts: str) -> Path:
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent (shared traces not available)")
    return p
