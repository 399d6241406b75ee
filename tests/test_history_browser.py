"""The history page in headless Chromium: a real mouse click on a run's point shows that run and its link opens
the run's analysis. Skips when playwright or a system Chromium is missing (never downloads a browser)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyzer.cli.compose import history_app as create_app  # as served: /run/<RUN> opens the full report
from analyzer.history.record import add
from tests.helpers import ROOT, run

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

CHROMIUM = os.environ.get("COMMSCOPE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
SAMPLES = ROOT / "sample_traces" / "gpu_h200"

# the pixel position of the first point of the first trace ("run"), from plotly's own axis mapping
POINT_JS = """(i) => {
  const gd = document.querySelector('#history-graph .js-plotly-plot');
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, t = gd.data[0];
  const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
  return [box.left + xa.l2p(t.x[i]), box.top + ya.l2p(t.y[i])];
}"""
DRAWN_JS = """() => { const gd = document.querySelector('#history-graph .js-plotly-plot');
  return !!(gd && gd.data && gd.data.length && gd._fullLayout && gd._fullLayout.xaxis); }"""


def settled_point(page, i: int, timeout_s: float = 60.0) -> tuple[float, float]:
    """The point's pixel position once the page stops moving. Dash loads the dropdown's code after the graph's,
    so on a slow machine the graph is drawn first and then pushed down (34 px here): a click at the position
    read right after the first draw lands beside the point, and no run is ever selected."""
    deadline = time.monotonic() + timeout_s
    last, same = None, 0
    while time.monotonic() < deadline:
        pos = tuple(page.evaluate(POINT_JS, i))
        loading = page.evaluate("() => document.querySelectorAll('[data-dash-is-loading]').length")
        same = same + 1 if pos == last and not loading else 0
        if same >= 3:
            return pos
        last = pos
        page.wait_for_timeout(250)
    raise AssertionError(f"the history plot kept moving for {timeout_s} s (last point at {last})")


@pytest.fixture(scope="module")
def page_url(tmp_path_factory) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from werkzeug.serving import make_server

    target = str(tmp_path_factory.mktemp("hist") / "h.sqlite")
    add(target, run(SAMPLES / "compute_straggler"), "first", {"branch": "main"})
    add(target, run(SAMPLES / "host_straggler"), "second", {"branch": "main"})
    server = make_server("127.0.0.1", 0, create_app(target).server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


def test_click_on_a_run_opens_its_analysis(page_url):
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_url)
        page.wait_for_function(DRAWN_JS, timeout=60_000)
        x, y = settled_point(page, 1)
        page.mouse.move(x, y)
        page.mouse.click(x, y)
        page.wait_for_selector("#run-summary", timeout=30_000)
        assert "run second" in page.inner_text("#run-summary")
        assert "host" in page.inner_text("#run-summary")  # the stored verdict of that run
        href = page.get_attribute("#open-run", "href")
        assert href == "/run/second"
        page.goto(page_url.rstrip("/") + href, timeout=120_000)
        assert "commscope: kineto, 4 rank(s)" in page.inner_text("h1")
        assert "host_straggler" in page.content()
        assert errors == []
        browser.close()
