"""The dashboard at many ranks in headless Chromium: server start, first full draw, a click.

    python -m benchmarks.dashboard_ranks DIR [--runs 3] [--rank 5]

Loads and analyzes DIR in this process (cache on), then measures, each in a fresh server and page:
- ready: from the finished analysis to the first answered page request (``create_app`` + serving);
- drawn: from opening the page until every figure has data and no callback is pending;
- click: from a click on a rank in the KPI table until every view answered it.
Prints one JSON line per run and the medians. Needs playwright and /usr/bin/chromium (no download).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import threading
import time
import urllib.request
from pathlib import Path

READY_JS = """() => {
  const ids = ['#timeline', '#heatmap', '#breakdown', '#waits', '#busbw'];
  const drawn = ids.every(id => { const g = document.querySelector(id + ' .js-plotly-plot');
                                  return g && Array.isArray(g.data) && g.data.length; });
  return drawn && document.querySelectorAll('[data-dash-is-loading="true"]').length === 0;
}"""
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def one_run(a, browser, rank: int) -> dict:
    from werkzeug.serving import make_server

    from analyzer.cli.compose import dashboard_app  # as `commscope dashboard` serves it (with the export panel)

    t0 = time.perf_counter()
    server = make_server("127.0.0.1", 0, dashboard_app(a).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/"
    urllib.request.urlopen(url, timeout=60).read()
    ready = time.perf_counter() - t0
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(600_000)
    try:
        t1 = time.perf_counter()
        page.goto(url)
        page.wait_for_function(READY_JS, polling=50)
        drawn = time.perf_counter() - t1
        cell = page.locator('#kpi-table td[data-dash-column="rank"]').get_by_text(str(rank), exact=True).first
        cell.scroll_into_view_if_needed()
        t2 = time.perf_counter()
        cell.click()
        page.wait_for_function(f"() => document.querySelector('#selection-text').innerText.includes('rank {rank}')",
                               polling=20)
        page.wait_for_function(READY_JS, polling=20)
        click = time.perf_counter() - t2
    finally:
        page.close()
        server.shutdown()
    return {"ready_s": round(ready, 3), "drawn_s": round(drawn, 3), "click_s": round(click, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rank", type=int, default=5)
    args = ap.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log between the numbers
    from playwright.sync_api import sync_playwright

    from analyzer.analysis import analyze
    from analyzer.ingest.loader import LoadOptions, load

    t = time.perf_counter()
    a = analyze(load([args.path], LoadOptions()))
    print(json.dumps({"ranks": len(a.source["ranks"]), "analysis_s": round(time.perf_counter() - t, 3)}), flush=True)
    if args.rank not in a.ranks["rank"].to_list():  # the click would wait for a cell that is not there
        ap.error(f"--rank {args.rank} is not a rank of {args.path}")
    runs = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        for _ in range(args.runs):
            runs.append(one_run(a, browser, args.rank))
            print(json.dumps(runs[-1]), flush=True)
        browser.close()
    for key in ("ready_s", "drawn_s", "click_s"):
        vals = [r[key] for r in runs]
        print(f"{key}: median {statistics.median(vals):.2f} (min {min(vals):.2f}, max {max(vals):.2f}, n={len(vals)})")


if __name__ == "__main__":
    main()
