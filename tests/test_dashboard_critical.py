"""The dashboard's critical-path and what-if view shows the JSON report's numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.report.json import to_dict
from dashboards import critical
from dashboards.app import create_app
from sample_traces.generate import Scenario, build, write_kineto
from tests.helpers import run


def _walk(node):
    yield node
    for child in getattr(node, "children", None) or []:
        if child is not None and not isinstance(child, str):
            yield from _walk(child)


def test_critical_view_shows_the_json_numbers(tmp_path: Path) -> None:
    write_kineto(build(Scenario(ranks=4, steps=3, late_ranks={1: (1_000_000, "host")})), tmp_path)
    a = run(tmp_path)
    doc = to_dict(a)
    section = critical.section(a)
    graphs = {n.id: n.figure for n in _walk(section) if getattr(n, "id", None) and hasattr(n, "figure")}
    assert set(graphs) == {"critical-path", "whatif-scenarios", "whatif-heatmap"}
    cp = graphs["critical-path"]
    idle = next(t for t in cp.data if t.name == "host/idle")
    assert list(idle.y) == pytest.approx([r["host_idle_ms"] for r in doc["critical_path"]], abs=1e-6)
    bars = graphs["whatif-scenarios"].data[0]
    assert list(bars.y) == ["replay"] + [s["name"] for s in doc["whatif"]["scenarios"]]
    assert list(bars.x)[1:] == pytest.approx([s["step_time_ms"] for s in doc["whatif"]["scenarios"]], abs=1e-6)
    heat = graphs["whatif-heatmap"].data[0]
    assert heat.y[0] == "0" and len(heat.z) == 4 and len(heat.z[0]) == 3
    table = next(n for n in _walk(section) if getattr(n, "id", None) == "whatif-ranks")
    assert [r["rank"] for r in table.data] == [r["rank"] for r in doc["whatif"]["ranks"]] and table.data[0]["rank"] == 1
    assert [r["saving_ms"] for r in table.data] == pytest.approx([r["saving_ms"] for r in doc["whatif"]["ranks"]], abs=1e-6)
    assert create_app(a).layout is not None  # registered in the page
