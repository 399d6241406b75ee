"""ns inside, ms only at the edge (issue #33, item 4).

The analysis (``analyzer/analysis/__init__.py``, ``metrics/``, ``crossrank/``, ``whatif/``) holds ns; presenters convert
through ``analyzer/analysis/units.py``. A reviewer's grep, done on the syntax tree so prose is left alone: no
``NS_PER_MS``, no name ending in ``_ms`` and no ``*_ms`` column or key name in a string. The conversion at the edge
is checked against hand-built frames.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import polars as pl
import pytest

from analyzer.analysis.units import ms_dict, ms_frame, ms_name

ROOT = Path(__file__).resolve().parents[1]
# the flow's package (analysis.py before the reorganization), not units.py: the edge conversion itself
INSIDE = sorted([*(p for p in (ROOT / "analyzer" / "analysis").glob("*.py") if p.name != "units.py"),
                 *(p for d in ("metrics", "crossrank", "whatif") for p in (ROOT / "analyzer" / d).rglob("*.py"))])
# a string that is a column or key name in ms: "bubble_ms", "transfer_ms_p50" (not a sentence that mentions ms)
_MS_KEY = re.compile(r"^\w*_ms(?:_\w+)?$")
_MS_NAME = re.compile(r"(?:^|_)ms(?:_|$)")
# justified exceptions, (file, what): a user-facing warning sentence written where the condition is found
# (Analysis.warnings is text, not a number a presenter formats)
ALLOWED = {("analyzer/crossrank/step_sync.py", "NS_PER_MS"), ("analyzer/analysis/communication.py", "NS_PER_MS"),
           ("analyzer/whatif/scenarios.py", "NS_PER_MS")}


def ms_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every ms conversion, ms-named variable or ms column/key name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.asname or node.name]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MS_KEY.match(node.value):
            found.append((node.lineno, node.value))
        found += [(node.lineno, n) for n in names if n == "NS_PER_MS" or _MS_NAME.search(n)]
    return found


def test_the_analysis_holds_no_ms() -> None:
    found = []
    for p in INSIDE:
        rel = str(p.relative_to(ROOT))
        found += [f"{rel}:{line}: {what}" for line, what in ms_uses(p.read_text()) if (rel, what) not in ALLOWED]
    assert found == [], "ms inside the analysis (convert at the edge, analyzer/analysis/units.py):\n" + "\n".join(found)


def test_the_grep_catches_the_old_lines() -> None:
    # lines the analysis held before the move: each must be caught, so the check above cannot pass vacuously
    old = [
        'per_step = NS_PER_MS * pl.col("steps")',
        '(pl.col("_compute") / per_step).mean().alias("compute_ms")',
        'top = table.sort("compute_ms", descending=True)',
        '(pl.col("transfer_ns").median() / NS_PER_MS).alias("transfer_ms_p50")',
        'from ..rules import NS_PER_MS',
        'base_step_ms = measured / 1e6',
        'r = {"rank": 1, "caused_wait_ms": x}',
        'f(wait_ms=3.0)',
    ]
    for line in old:
        assert ms_uses(line), line
    # prose and ns names are not ms columns
    for line in ['"""The bubble_ms of the report is in ms."""', 'x = "ms from the step start"',
                 'pl.col("transfer_ns_p50")', 'items = "instances"', 'f"{x:,.1f} ms on rank {r}"']:
        assert not ms_uses(line), line


def test_ms_frame_converts_ns_columns_in_place() -> None:
    df = pl.DataFrame({"stage": [0, 1], "bubble_ns": [1_500_000.0, 250.0], "bubble_pct": [10.0, 2.5],
                       "transfer_ns_p50": [3_000_000, 7], "instances": [4, 5], "n_ranks": [2, 2]})
    out = ms_frame(df)
    assert out.columns == ["stage", "bubble_ms", "bubble_pct", "transfer_ms_p50", "instances", "n_ranks"]
    assert out.rows() == [(0, 1.5, 10.0, 3.0, 4, 2), (1, 0.00025, 2.5, 0.000007, 5, 2)]
    assert ms_name("caused_wait_ns") == "caused_wait_ms" and ms_name("n_ranks") == "n_ranks"


def test_ms_dict_keeps_key_order() -> None:
    d = {"rank": 5, "caused_wait_ns": 799_751_500.0, "share_pct": 50.0, "z": 11.7, "max_wait_ns": None}
    out = ms_dict(d)
    assert list(out) == ["rank", "caused_wait_ms", "share_pct", "z", "max_wait_ms"]
    assert out == {"rank": 5, "caused_wait_ms": pytest.approx(799.7515, abs=1e-12), "share_pct": 50.0, "z": 11.7,
                   "max_wait_ms": None}
    assert ms_dict(None) is None
