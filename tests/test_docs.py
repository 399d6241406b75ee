"""Every shell and Python example of README.md and docs/ runs against sample_traces/, and prints what the page
shows (tests/docs_examples.py holds the conventions). After a change of behaviour, refresh the pages with

    python -m pytest tests/test_docs.py --update-docs

The README's shape is checked too: at most ~200 lines, one Quickstart block of exactly two commands, and the
links a newcomer needs (install, the straggler how-to, what exposed wait means, every flag of analyze) resolve.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.docs_examples import ROOT, blocks, pages, rewrite, run_page

README = ROOT / "README.md"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_print_what_the_page_shows(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    res = run_page(page, tmp_path / "work", os.environ.get("COMMSCOPE_CACHE_DIR"))
    if request.config.getoption("--update-docs"):
        rewrite(page, res.bodies)
        res.failures = [f for f in res.failures if "differs from the page" not in f]
    assert not res.failures, "\n\n".join(res.failures)


def test_a_stale_output_fails_and_is_refreshed(tmp_path: Path) -> None:
    # the harness itself: an output that no longer matches fails; --update-docs writes the fresh one, keeping
    # the head and tail the page showed around "..."; a failing command and a raising example fail
    page = tmp_path / "page.md"
    page.write_text("```console\n$ printf 'a\\nb\\nc\\nd\\n'\na\n...\nx\n$ echo ok\nok\n```\n\n"
                    "```bash\nfalse\n```\n\n```pycon\n>>> 1 + 1\n3\n```\n\n```python\nraise ValueError\n```\n")
    res = run_page(page, tmp_path / "work", None)
    assert len(res.failures) == 4, res.failures
    assert "differs" in res.failures[0] and "`false` failed" in res.failures[1]
    assert "differs" in res.failures[2] and "raised" in res.failures[3]
    rewrite(page, res.bodies)
    assert page.read_text().startswith("```console\n$ printf 'a\\nb\\nc\\nd\\n'\na\n...\nd\n$ echo ok\nok\n```")
    assert ">>> 1 + 1\n2\n" in page.read_text()
    again = run_page(page, tmp_path / "again", None)
    assert len(again.failures) == 2  # the failing command and the raising script stay failures


def test_the_pages_have_examples() -> None:
    # the glob must find the pages, and the pages must hold examples that run (no test that cannot fail)
    runnable = [b for p in pages() for b in blocks(p.read_text())
                if b.lang in {"console", "pycon", "bash", "python"} and b.mark != "skip"]
    assert len(pages()) >= 20 and len(runnable) >= 30, (len(pages()), len(runnable))


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(page: Path) -> set[str]:
    text = page.read_text()
    found = {_slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*(?:\{[^}]*\})?$", text, flags=re.M)}
    found |= set(re.findall(r"\{#([\w-]+)\}", text)) | set(re.findall(r'id="([\w-]+)"', text))
    return found


def test_readme_fits_a_screen_and_its_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200, "README.md: at most ~200 lines; move the rest into docs/"
    quick = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    fenced = [b for b in blocks(quick) if b.lang in {"bash", "console", "sh", "shell"}]
    assert len(fenced) == 1, "the Quickstart is exactly one fenced block"
    commands = [ln for ln in fenced[0].body if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(commands) == 2 and "pip install" in commands[0] and "commscope analyze sample_traces/" in commands[0]
    assert "pytest" in commands[1]
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    for link in links:
        if re.match(r"[a-z]+://|mailto:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (ROOT / target).resolve()
        assert path.exists(), f"README.md links to {link}, which does not exist"
        if anchor and path.suffix == ".md" and "::: mkdocs-click" not in path.read_text():
            assert anchor in _anchors(path), f"README.md links to {link}: no such heading there"
    # the four things a newcomer looks for, one click away
    assert any("how-to/find-the-straggler.md" in link for link in links)
    assert any("concepts/metrics.md#exposed-wait" in link for link in links)
    assert any("reference/cli.md" in link for link in links)
