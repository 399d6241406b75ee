"""Presenter dispatch for a Comparison, the same shape as ``report.render`` for an Analysis."""

from __future__ import annotations

from ..compare.diff import Comparison

FORMATS = ("text", "json", "markdown", "html")


def render(c: Comparison, fmt: str) -> str:
    if fmt == "text":
        from . import compare_text

        return compare_text.render(c)
    if fmt == "json":
        from . import compare_json

        return compare_json.render(c)
    if fmt == "markdown":
        from . import compare_markdown

        return compare_markdown.render(c)
    if fmt == "html":
        from . import compare_html

        return compare_html.render(c)
    raise ValueError(f"unknown format {fmt!r}")


def junit(c: Comparison) -> str:
    from . import compare_junit

    return compare_junit.render(c)
