"""The hang triage page (Flight Recorder dumps) in headless Chromium: it loads clean, shows the answer
over the group x seq grid, and a click on the hung cell says who waits and who never entered.

Skips when playwright or a system Chromium is missing (never downloads a browser).
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from analyzer.hangs.analysis import analyze_dumps
from analyzer.ingest.discover import flight_recorder_files
from analyzer.ingest.flight_recorder import reader as fr
from analyzer.views.hang import headline
from dashboards.hang import create_hang_app

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

ROOT = Path(__file__).resolve().parents[1]
DUMPS = ROOT / "sample_traces" / "flight_recorder" / "skip" / "pickle"
CHROMIUM = os.environ.get("COMMSCOPE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
DRAWN_JS = "() => { const g = document.querySelector('#hang-grid .js-plotly-plot'); return !!(g && g.data); }"


def test_hang_page_loads_and_a_click_names_the_ranks():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from werkzeug.serving import make_server

    a = analyze_dumps(fr.load([(f.path, f.rank_hint) for f in flight_recorder_files([DUMPS])]))
    app = create_hang_app(a)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    errors: list[str] = []
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(90_000)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{server.server_port}/")
            page.wait_for_function(DRAWN_JS)
            assert page.locator("#hang-headline p").first.inner_text() == headline(a)[0]
            rows = page.evaluate("() => document.querySelector('#hang-grid .js-plotly-plot').data[0].y")
            assert rows == ["0 (world)", "1 (dp)", "2 (dp)", "3 (tp)", "4 (tp)"]
            # a click on pg 4's seq 7, as plotly reports it to Dash
            page.evaluate("""() => { const g = document.querySelector('#hang-grid .js-plotly-plot');
                g.emit('plotly_click', {points: [{x: '7', y: '4 (tp)', curveNumber: 0, pointNumber: [4, 6]}]}); }""")
            page.wait_for_function("() => document.querySelector('#hang-cell').innerText.includes('Waiting')")
            text = page.locator("#hang-cell").inner_text()
            assert "0 completed, 1 waiting, 1 never entered" in text
            assert "Waiting: rank 2. Never entered: rank 3." in text
            browser.close()
    finally:
        server.shutdown()
        thread.join(5)
    assert not errors, errors
