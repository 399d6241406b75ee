"""Presenters: each turns one Analysis into one format, with the same entry point shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # presenters of the run history (trend_*) need no analysis stages
    from ..analysis import Analysis
    from ..hangs.analysis import HangAnalysis


def render(a: Analysis | HangAnalysis, fmt: str, show_steps: bool = False, wide: bool = False) -> str:
    from ..hangs.analysis import HangAnalysis  # here: the trend presenters import this package without any stage

    if isinstance(a, HangAnalysis):  # Flight Recorder input: hang triage, not a timeline
        from . import hang, hang_json

        return hang_json.render(a) if fmt == "json" else getattr(hang, fmt)(a)
    if fmt == "json":
        from . import json

        return json.render(a)
    if fmt == "text":
        from . import text

        return text.render(a, show_steps=show_steps, wide=wide)
    if fmt == "markdown":
        from . import markdown

        return markdown.render(a)
    if fmt == "html":
        from . import html

        return html.render(a)
    raise ValueError(f"unknown format {fmt!r}")
