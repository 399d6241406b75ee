"""Presenter dispatch for a Trend, the same shape as ``report.render`` for an Analysis."""

from __future__ import annotations

from ..history.trend import Trend

FORMATS = ("text", "markdown", "html", "json")


def render(t: Trend, fmt: str) -> str:
    if fmt == "text":
        from . import trend_text

        return trend_text.render(t)
    if fmt == "markdown":
        from . import trend_text

        return trend_text.render_markdown(t)
    if fmt == "html":
        from . import trend_html

        return trend_html.render(t)
    if fmt == "json":
        from . import trend_json

        return trend_json.render(t)
    raise ValueError(f"unknown format {fmt!r}")
