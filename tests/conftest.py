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
# ../shared/traces beside the checkout (or beside the folder of worktrees a checkout sits in); a checkout
# elsewhere names it in $COMMSCOPE_SHARED_TRACES
SHARED = Path(os.environ["COMMSCOPE_SHARED_TRACES"]) if os.environ.get("COMMSCOPE_SHARED_TRACES") else next(
    (p / "shared" / "traces" for p in ROOT.parents[:2] if (p / "shared" / "traces").is_dir()),
    ROOT.parent / "shared" / "traces")


_CACHE_DIRS: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-docs", action="store_true",
                     help="tests/test_docs.py: write the outputs the examples print now into README.md and docs/")


def pytest_configure(config: pytest.Config) -> None:
    # tests never touch the user's cache directory, and each session starts with an empty one: set before
    # collection so module-scoped fixtures and CLI subprocesses see it too. Per session, not per import: a
    # mutation run (benchmarks/mutation.py) runs a session per mutant in one source tree, and a cache kept
    # across mutants would hand one mutant's tables and analysis to the next (their code hash is the same)
    _CACHE_DIRS.append(tempfile.mkdtemp(prefix="commscope-test-cache-"))
    os.environ["COMMSCOPE_CACHE_DIR"] = _CACHE_DIRS[-1]


def pytest_unconfigure(config: pytest.Config) -> None:
    # each session's cache went unremoved: 561 of them (14 GB with the rest of /tmp) piled up on one machine
    while _CACHE_DIRS:
        shutil.rmtree(_CACHE_DIRS.pop(), ignore_errors=True)


def shared(*parts: str) -> Path:
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent (shared traces not available)")
    return p
