"""``create_app(analysis)``: a Dash app over one finished Analysis; ``serve`` runs it (127.0.0.1 by default).

With a ``trace_writer`` (``analyzer.export.write_trace``; ``analyzer.cli.compose`` wires it, as ``commscope
dashboard`` serves it) the page offers the selection as a Perfetto download.
"""

from __future__ import annotations

import dash

from analyzer.analysis import Analysis

from . import callbacks, export, guard, layout
from .export import TraceWriter

DEFAULT_MAX_REQUEST_BYTES = guard.DEFAULT_MAX_REQUEST_BYTES


def create_app(analysis: Analysis, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
               trace_writer: TraceWriter | None = None) -> dash.Dash:
    """The app holds only this analysis: callbacks filter and present it, nothing is read per request.
    A request body over ``max_request_bytes`` is refused (413) before it is read."""
    app = dash.Dash(
        __name__,
        title="commscope",
        suppress_callback_exceptions=False,
        **guard.DASH_OPTIONS,  # no CDN (works offline); a callback that raises: a message in the page, never a 500
    )
    page = layout.build_layout(analysis, download=trace_writer is not None)
    page.children = [guard.message_area(), *page.children]
    app.layout = page
    callbacks.register(app, analysis)
    if trace_writer is not None:
        export.register(app, analysis, trace_writer)
    guard.install(app, max_request_bytes)
    return app


def serve(analysis: Analysis, host: str = "127.0.0.1", port: int = 8050, debug: bool = False,
          max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, trace_writer: TraceWriter | None = None) -> None:
    """Blocking: serve the dashboard. Debug (hot reload, dev tools, tracebacks) only when asked for."""
    app = create_app(analysis, max_request_bytes, trace_writer)
    app.run(host=host, port=port, debug=debug, use_reloader=False, dev_tools_ui=debug, dev_tools_props_check=debug)
