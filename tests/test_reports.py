"""Markdown and HTML reports of `commscope analyze`, and the HTML in headless Chromium (no console errors)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sample_traces.generate import Scenario, build, write_kineto
from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "gpu_h200" / "hybrid_tp_dp"  # real 4-rank H200 run, rank 3 a host straggler
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("reports")
    late = out / "late"
    write_kineto(build(Scenario(ranks=4, steps=4, late_ranks={1: (300_000, "host")})), late)
    docs = {}
    for name, path in (("sample", SAMPLE), ("late", late)):
        for fmt in ("markdown", "html"):
            dest = out / f"{name}.{fmt}"
            res = cli("analyze", path, "--format", fmt, "-o", dest)
            assert res.returncode == 0, res.stderr
            docs[f"{name}.{fmt}"] = dest.read_text(encoding="utf-8")
            docs[f"{name}.{fmt}.path"] = str(dest)
    return docs


def test_markdown_has_verdict_rank_table_and_top_collectives(reports: dict[str, str]) -> None:
    md = reports["late.markdown"]
    assert md.startswith("## commscope: kineto, 4 rank(s) of 4")
    # the counterfactual leads (bold), the wait it caused follows
    assert "**Fixing rank 1 would cut the step by " in md and "\nStraggler: rank 1 is the root of" in md
    header = next(line for line in md.splitlines() if line.startswith("| rank |"))
    assert "exposed wait ms" in header and "caused wait ms" in header
    per_rank = md.split("### Per rank")[1].split("###")[0]
    rank_rows = [line for line in per_rank.splitlines() if re.match(r"\| [0-3] \| \d+ \|", line)]
    assert len(rank_rows) == 4
    assert "### Top" in md and "collectives by wait" in md and "| pg | seq | op |" in md
    assert "NaN" not in md and "nan" not in md.split("### Top")[0]


def test_markdown_on_real_traces(reports: dict[str, str]) -> None:
    md = reports["sample.markdown"]
    assert "Straggler: rank 3" in md and "all_to_all" in md


def test_html_is_self_contained(reports: dict[str, str]) -> None:
    html = reports["sample.html"]
    assert html.startswith("<!DOCTYPE html>")
    # plotly.js inline once, no script or stylesheet fetched from anywhere
    assert html.count("plotly.js v") >= 1 or "Plotly" in html
    assert not re.search(r"<script[^>]+src=", html) and not re.search(r"<link[^>]+href=\"http", html)
    assert html.count('class="plotly-graph-div"') >= 5
    assert "Straggler: rank 3" in html and "<table>" in html


def _browser_errors(path: str) -> tuple[list[str], int]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    errors: list[str] = []
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                                        args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page()
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
                page.goto(Path(path).as_uri(), wait_until="load")
                page.wait_for_function("() => window.Plotly !== undefined", timeout=30_000)
                drawn = page.evaluate("() => document.querySelectorAll('.plotly-graph-div .main-svg').length")
            finally:
                browser.close()
    except sync_api.Error as exc:  # the browser could not start here: not the report's fault
        if "Executable doesn't exist" in str(exc) or "Failed to launch" in str(exc):
            pytest.skip(f"chromium cannot start: {exc}")
        raise
    return errors, drawn


@pytest.mark.browser
@pytest.mark.parametrize("name", ["sample.html", "late.html"])
def test_html_opens_in_chromium_without_errors(reports: dict[str, str], name: str) -> None:
    errors, drawn = _browser_errors(reports[f"{name}.path"])
    assert errors == []
    assert drawn >= 5  # every figure rendered an svg


@pytest.mark.browser
def test_compare_html_opens_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "compare.html"
    res = cli("compare", SAMPLE, SAMPLE, "--format", "html", "-o", out)
    assert res.returncode == 0, res.stdout + res.stderr
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(out.as_uri(), wait_until="load")
            assert "PASS" in page.inner_text("body")
        finally:
            browser.close()
    assert errors == []


@pytest.mark.parametrize("doc", [
    {"a": [1, 2.5e-05, 1e-07, 0.1 + 0.2, -0.0, 1e16, 123456789012.5, None, True], "b": {"c": "x\ty\"z\\"}},
    {"name": "ncclKernel_µs", "nested": [{"k": "é"}], "n": 2**62},
])
def test_json_report_text_is_the_same_document_in_ascii(doc: dict) -> None:
    # msgspec writes the report; it must parse to exactly what json.dumps wrote (every float bit for bit),
    # stay ASCII (non-ASCII text goes through json.dumps' escapes) and be indented by 2
    import json

    from analyzer.report.json import dumps

    text = dumps(doc)
    assert text.isascii()
    assert json.loads(text) == json.loads(json.dumps(doc)) == doc
    # json.dumps(doc, indent=2) byte for byte, but for how a float is spelled (2.5e-05 / 0.000025): same value
    number = r"(-?\d[\d.eE+-]*)"
    ours, want = re.split(number, text), re.split(number, json.dumps(doc, indent=2, allow_nan=False))
    assert ours[0::2] == want[0::2]
    assert [float(x) for x in ours[1::2]] == [float(x) for x in want[1::2]]
    assert [x.lstrip("-").isdigit() for x in ours[1::2]] == [x.lstrip("-").isdigit() for x in want[1::2]]
