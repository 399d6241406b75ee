"""The dashboard in headless Chromium: it loads clean, shows the JSON numbers, and clicks filter the views.

Skips when playwright or a system Chromium is missing (never downloads a browser).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyzer.analysis import Analysis, analyze
from analyzer.ingest.loader import LoadOptions, load
from analyzer.report.json import to_dict
from analyzer.views.verdict import headline
from dashboards.app import create_app
from dashboards.layout import KPI_COLUMNS

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "gpu_h200" / "hybrid_tp_dp"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("COMMSCOPE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

READY_JS = """() => {
  const gd = document.querySelector('#timeline .js-plotly-plot');
  const drawn = ['#heatmap', '#breakdown', '#waits', '#busbw'].every(
      id => { const g = document.querySelector(id + ' .js-plotly-plot'); return g && Array.isArray(g.data); });
  return !!(gd && gd.data && gd.data.length && gd.layout.meta) && drawn
      && document.querySelectorAll('[data-dash-is-loading="true"]').length === 0;
}"""
TIMELINE_SIG_JS = """() => {
  const gd = document.querySelector('#timeline .js-plotly-plot');
  return JSON.stringify([gd.layout.meta, gd.data.map(t => [t.name, t.y ? t.y.length : 0])]);
}"""
KPI_JS = """() => Array.from(document.querySelectorAll('#kpi-table tr')).map(tr => {
  const row = {};
  tr.querySelectorAll('td.dash-cell').forEach(td => { row[td.getAttribute('data-dash-column')] = td.innerText.trim(); });
  return row;
}).filter(r => Object.keys(r).length)"""


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


def serve(a: Analysis) -> tuple[str, object, threading.Thread]:
    from werkzeug.serving import make_server

    app = create_app(a)
    # the error overlay (.dash-fe-error) appears only with the dev tools UI; production bundles stay
    app.enable_dev_tools(debug=True, dev_tools_ui=True, dev_tools_hot_reload=False, dev_tools_props_check=True,
                         dev_tools_serve_dev_bundles=False)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{server.server_port}/", server, thread


@pytest.fixture(scope="module")
def sample() -> Analysis:
    return analyze(load([SAMPLE], LoadOptions(cache=False)))


@pytest.fixture(scope="module")
def url(sample: Analysis) -> Iterator[str]:
    address, server, thread = serve(sample)
    yield address
    server.shutdown()
    thread.join(5)


class Watched:
    """A page plus everything that went wrong on it: console errors, page errors, failed callbacks."""

    def __init__(self, browser, address: str) -> None:
        self.page = browser.new_page(viewport={"width": 1500, "height": 1000})
        self.page.set_default_timeout(90_000)  # a loaded 2-core CI machine draws plotly figures slowly
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("response", lambda r: self.errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
        self.page.goto(address)
        self.ready()

    def ready(self, timeout_ms: int = 90_000) -> None:
        self.page.wait_for_function(READY_JS, timeout=timeout_ms)

    def timeline(self) -> str:
        return self.page.evaluate(TIMELINE_SIG_JS)

    def click_rank(self, rank: int) -> None:
        cell = self.page.locator('#kpi-table td[data-dash-column="rank"]').get_by_text(str(rank), exact=True)
        cell.first.click()

    def wait_change(self, before: str, timeout_ms: int = 90_000) -> None:
        self.page.wait_for_function(f"() => ({TIMELINE_SIG_JS})() !== {before!r}", timeout=timeout_ms)
        self.ready(timeout_ms)

    def assert_clean(self) -> None:
        assert self.page.locator(".dash-fe-error").count() == 0, self.page.locator(".dash-fe-error").all_inner_texts()
        assert self.page.locator(".dash-debug-alert, .dash-error-card").count() == 0
        assert not self.errors, self.errors


def test_page_loads_clean_and_shows_every_rank(browser, url, sample):
    w = Watched(browser, url)
    try:
        for sentence in headline(sample):
            assert sentence in w.page.locator("#verdict").inner_text()
        rows = w.page.evaluate(KPI_JS)
        assert sorted(int(r["rank"]) for r in rows) == sorted(sample.source["ranks"])
        lanes = w.page.evaluate("() => document.querySelector('#timeline .js-plotly-plot').layout.meta.lanes")
        assert [ln[0] for ln in lanes] == sorted(sample.source["ranks"])
        ticks = w.page.evaluate("() => Array.from(document.querySelectorAll('#heatmap .ytick text'))"
                                ".map(t => t.textContent)")
        assert {int(t) for t in ticks if t.strip()} == set(sample.source["ranks"])
        w.assert_clean()
    finally:
        w.page.close()


def _fmt(v: float | int | None, column: str) -> str:
    if v is None:
        return "n/a"
    return str(v) if column in ("rank", "steps") else f"{v:.3f}"


def test_kpi_table_equals_json_report(browser, url, sample):
    report = {r["rank"]: r for r in to_dict(sample)["ranks"]}
    w = Watched(browser, url)
    try:
        rows = w.page.evaluate(KPI_JS)
        assert len(rows) == len(report)
        for row in rows:
            rec = report[int(row["rank"])]
            for cid, _, _ in KPI_COLUMNS:
                key = cid.removeprefix("step_time_").removesuffix("_ms") if cid.startswith("step_time_") else None
                value = rec["step_time_ms"][key] if key else rec[cid]
                assert row[cid] == _fmt(value, cid), (row["rank"], cid)
        w.assert_clean()
    finally:
        w.page.close()


def test_clicking_a_rank_filters_the_views(browser, url, sample):
    ARTIFACTS.mkdir(exist_ok=True)
    w = Watched(browser, url)
    try:
        before = w.timeline()
        waits_before = w.page.evaluate("() => document.querySelector('#waits .js-plotly-plot').data.map(t => t.x.length)")
        w.click_rank(3)
        w.wait_change(before)
        lanes = w.page.evaluate("() => document.querySelector('#timeline .js-plotly-plot').layout.meta.lanes")
        assert len([ln for ln in lanes if ln[0] == 3]) > 1  # the selected rank opens into its streams
        assert "rank 3" in w.page.locator("#selection-text").inner_text()
        w.page.wait_for_function(
            "(b) => JSON.stringify(document.querySelector('#waits .js-plotly-plot').data.map(t => t.x.length))"
            " !== JSON.stringify(b)", arg=waits_before)
        # a step from the dropdown zooms the timeline to that step
        before = w.timeline()
        step = int(sample.steps["step"].min())
        w.page.locator("#step-select").click()
        w.page.get_by_role("option", name=f"step {step}", exact=True).click()
        w.wait_change(before)
        title = w.page.evaluate("() => document.querySelector('#timeline .js-plotly-plot').layout.title.text")
        assert "–" in title
        w.page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        w.assert_clean()
    finally:
        w.page.close()


def test_clicking_a_breakdown_bar_selects_its_rank(browser, url):
    w = Watched(browser, url)
    try:
        before = w.timeline()
        bars = w.page.locator("#breakdown .trace.bars").first.locator(".point")
        # plotly detects clicks through hover: move onto the bar's centre first, then click there
        box = bars.nth(2).bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        w.page.mouse.move(x, y)
        w.page.wait_for_timeout(300)
        w.page.mouse.click(x, y)
        w.wait_change(before)
        assert "rank 2" in w.page.locator("#selection-text").inner_text()
        w.page.locator("#clear-selection").click()
        w.page.wait_for_function("() => document.querySelector('#selection-text').innerText.startsWith('No selection')")
        w.assert_clean()
    finally:
        w.page.close()


def test_64_ranks_open_and_respond(browser, tmp_path_factory):
    from sample_traces.generate import Scenario, build, write_kineto

    out = tmp_path_factory.mktemp("ranks64")
    t0 = time.perf_counter()
    scenario = Scenario(ranks=64, steps=20, tp=8, compute_ns=tuple([60_000] * 30), late_ranks={37: (2_000_000, "host")})
    write_kineto(build(scenario), out)
    t1 = time.perf_counter()
    a = analyze(load([out], LoadOptions(cache=False)))
    t2 = time.perf_counter()
    address, server, thread = serve(a)
    w = None
    try:
        t3 = time.perf_counter()
        w = Watched(browser, address)
        t4 = time.perf_counter()
        assert len(w.page.evaluate(KPI_JS)) == 64
        before = w.timeline()
        t5 = time.perf_counter()
        w.click_rank(37)
        w.wait_change(before)
        t6 = time.perf_counter()
        before = w.timeline()
        w.page.locator("#timeline-opts input").check()
        w.wait_change(before)
        t7 = time.perf_counter()
        w.assert_clean()
        print(f"\n64 ranks, {a.traces.gpu.height} GPU events, {a.collectives.height} collective instances: "
              f"generate {t1 - t0:.2f} s, load+analyze {t2 - t1:.2f} s, page load {t4 - t3:.2f} s, "
              f"rank click -> timeline {t6 - t5:.2f} s, per-stream lanes {t7 - t6:.2f} s")
        assert t4 - t3 < 20 and t6 - t5 < 20 and t7 - t6 < 20
    finally:
        if w is not None:
            w.page.close()
        server.shutdown()
        thread.join(5)


def test_hundreds_of_ranks_are_summarized(browser, tmp_path_factory):
    """Above MANY_RANKS the page draws summaries: a rank × part heatmap with distributions, a paged KPI
    table and a timeline of a few focus ranks (the straggler among them); a click moves the markers."""
    from analyzer.views.summary import FOCUS_LANES, MANY_RANKS
    from sample_traces.generate import Scenario, build, write_kineto

    out = tmp_path_factory.mktemp("ranks192")
    write_kineto(build(Scenario(ranks=192, steps=3, tp=8, late_ranks={77: (2_000_000, "host")})), out)
    a = analyze(load([out], LoadOptions(cache=False)))
    assert a.ranks.height == 192 > MANY_RANKS
    top = int(a.ranks.sort("caused_wait_ns", descending=True)["rank"][0])
    assert top == 77  # the late rank caused the most wait
    address, server, thread = serve(a)
    w = None
    try:
        w = Watched(browser, address)
        kinds = w.page.evaluate("() => document.querySelector('#breakdown .js-plotly-plot').data.map(t => t.type)")
        assert kinds == ["heatmap"] + ["box"] * 6  # not six traces of 192 bars
        xs = w.page.evaluate("() => document.querySelector('#breakdown .js-plotly-plot').data[0].x")
        assert sorted(xs) == list(range(192))
        assert [int(r["rank"]) for r in w.page.evaluate(KPI_JS)] == list(range(50))  # paged: 50 rows, not 192
        first_rank = "() => document.querySelector('#kpi-table td[data-dash-column=\"rank\"]').innerText.trim()"
        w.page.locator("#kpi-table button.next-page").click()  # the server sends the next page
        w.page.wait_for_function(f"() => ({first_rank})() === '50'")
        assert [int(r["rank"]) for r in w.page.evaluate(KPI_JS)] == list(range(50, 100))
        w.page.locator("#kpi-table button.previous-page").click()
        w.page.wait_for_function(f"() => ({first_rank})() === '0'")
        lanes = w.page.evaluate("() => document.querySelector('#timeline .js-plotly-plot').layout.meta.lanes")
        ranks = sorted({ln[0] for ln in lanes})
        assert len(ranks) == FOCUS_LANES and top in ranks
        before = w.timeline()
        w.click_rank(5)
        w.wait_change(before)
        lanes = w.page.evaluate("() => document.querySelector('#timeline .js-plotly-plot').layout.meta.lanes")
        assert 5 in {ln[0] for ln in lanes} and len({ln[0] for ln in lanes}) == FOCUS_LANES
        for fig, key in (("breakdown", "x0"), ("heatmap", "y0")):
            w.page.wait_for_function(
                f"() => {{ const s = document.querySelector('#{fig} .js-plotly-plot').layout.shapes;"
                f" return s && s.length === 1 && s[0].{key} === 4.5; }}")
        w.assert_clean()
    finally:
        if w is not None:
            w.page.close()
        server.shutdown()
        thread.join(5)


@pytest.mark.parametrize("name", ["pp_1f1b_mps_slow", "moe_a2a_slow"])
def test_real_hybrid_captures_open_clean(browser, name):
    # a real 1F1B pipeline (batched send/recv, pipeline view) and a real expert all-to-all (experts view)
    a = analyze(load([ROOT / "sample_traces" / "real_parallel" / name], LoadOptions(cache=False)))
    address, server, thread = serve(a)
    try:
        w = Watched(browser, address)
        try:
            said = w.page.locator("#verdict").inner_text()
            for sentence in headline(a):
                assert sentence in said
            assert f"rank {a.verdict.rank}" in said
            rows = w.page.evaluate(KPI_JS)
            assert sorted(int(r["rank"]) for r in rows) == [0, 1, 2, 3]
            w.assert_clean()
        finally:
            w.page.close()
    finally:
        server.shutdown()
        thread.join(5)
