"""analyzer.views.summary: the many-ranks views carry the JSON numbers and pick the right focus ranks."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.analysis import analyze
from analyzer.ingest.loader import LoadOptions, load
from analyzer.report.json import to_dict
from analyzer.views import figures, summary


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    from sample_traces.generate import Scenario, build, write_kineto

    out = tmp_path_factory.mktemp("ranks160")
    write_kineto(build(Scenario(ranks=160, steps=2, tp=8, late_ranks={101: (1_000_000, "host")})), out)
    return analyze(load([out], LoadOptions(cache=False)))


def test_breakdown_heatmap_cells_are_json_rank_numbers(many):
    fig = figures.breakdown_figure(many, selected_rank=7)
    hm = fig.data[0]
    assert hm.type == "heatmap" and [t.type for t in fig.data[1:]] == ["box"] * len(figures.BREAKDOWN_PARTS)
    by_rank = {r["rank"]: r for r in to_dict(many)["ranks"]}
    z = np.asarray(hm.z)
    assert list(hm.y) == [name for _, name, _ in figures.BREAKDOWN_PARTS]
    for j, rank in enumerate(hm.x):
        for i, (col, _, _) in enumerate(figures.BREAKDOWN_PARTS):
            assert z[i, j] == pytest.approx(by_rank[rank][col], abs=1e-6)
        assert z[:, j].sum() == pytest.approx(by_rank[rank]["span_ms"], rel=1e-9)
    assert [(s.x0, s.x1) for s in fig.layout.shapes] == [(6.5, 7.5)]


def test_focus_ranks_selected_first_then_most_wait_caused(many):
    top = many.ranks.sort("caused_wait_ns", descending=True)["rank"].to_list()
    assert top[0] == 101
    lanes = summary.focus_ranks(many)
    assert lanes == sorted(top[: summary.FOCUS_LANES])
    with_sel = summary.focus_ranks(many, selected=3)
    assert 3 in with_sel and 101 in with_sel and len(with_sel) == summary.FOCUS_LANES
    assert summary.focus_ranks(many, selected=99999) == lanes  # an unknown rank is ignored


def test_members_text_shortens_long_groups():
    assert summary.members_text((0, 1, 2)) == "0,1,2"
    text = summary.members_text(tuple(range(0, 1024, 8)))
    assert text.startswith("0,8,16,") and text.endswith(",1008,1016 (128 ranks)") and len(text) < 120


def _kpi_page(app, page, sort_by, changed):
    import json

    client = app.server.test_client()
    body = {"output": "..kpi-table.data...kpi-table.page_current..",
            "outputs": [{"id": "kpi-table", "property": "data"}, {"id": "kpi-table", "property": "page_current"}],
            "inputs": [{"id": "kpi-table", "property": "page_current", "value": page},
                       {"id": "kpi-table", "property": "sort_by", "value": sort_by}],
            "changedPropIds": [changed]}
    resp = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    return resp.status_code, (resp.get_json() or {}).get("response") if resp.status_code == 200 else None


def test_many_ranks_kpi_table_is_sorted_and_paged_on_the_server(many):
    from dashboards.app import create_app

    app = create_app(many)
    size = summary.kpi_page_size(many)
    # the page ships one page of rows, not 160
    found = []

    def walk(node):
        if getattr(node, "id", None) == "kpi-table":
            found.append(node)
        for child in getattr(node, "children", None) or []:
            if not isinstance(child, str):
                walk(child)
        ch = getattr(node, "children", None)
        if ch is not None and not isinstance(ch, (list, str)):
            walk(ch)

    walk(app.layout)
    assert len(found) == 1 and len(found[0].data) == size == 50 and found[0].page_count == 4
    assert [r["rank"] for r in found[0].data] == list(range(50))
    # sorted by wait caused, descending: the independent order from the ranks table (ties by rank)
    expected = many.ranks.sort(["caused_wait_ns", "rank"], descending=[True, False], nulls_last=True)["rank"].to_list()
    status, out = _kpi_page(app, 2, [{"column_id": "caused_wait_ms", "direction": "desc"}], "kpi-table.sort_by")
    assert status == 200
    assert [r["rank"] for r in out["kpi-table"]["data"]] == expected[:50]  # a new order starts at page 0
    assert out["kpi-table"]["page_current"] == 0
    status, out = _kpi_page(app, 1, [{"column_id": "caused_wait_ms", "direction": "desc"}], "kpi-table.page_current")
    assert [r["rank"] for r in out["kpi-table"]["data"]] == expected[50:100]
    assert out["kpi-table"]["page_current"] == 1
    # ascending: n/a would come last, equal values in rank order
    asc = many.ranks.sort(["caused_wait_ns", "rank"], nulls_last=True)["rank"].to_list()
    status, out = _kpi_page(app, 3, [{"column_id": "caused_wait_ms", "direction": "asc"}], "kpi-table.page_current")
    assert [r["rank"] for r in out["kpi-table"]["data"]] == asc[150:]
