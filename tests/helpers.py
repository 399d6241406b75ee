"""Small helpers shared by tests: analyze paths the way the CLI does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from analyzer.analysis import Analysis, analyze
from analyzer.ingest.loader import LoadOptions, load
from analyzer.report.json import to_dict

ROOT = Path(__file__).resolve().parents[1]


def run(paths: list[Path] | Path, **opts) -> Analysis:
    if isinstance(paths, Path):
        paths = [paths]
    return analyze(load(list(paths), LoadOptions(jobs=1, cache=False, **opts)))


def report(paths: list[Path] | Path, **opts) -> dict:
    return to_dict(run(paths, **opts))


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    """The real command in a subprocess, from the repository root."""
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
