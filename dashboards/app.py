"""``create_app(analysis)``: a Dash app over one finished Analysis; ``serve`` runs it (127.0.0.1 by default)."""

from __future__ import annotations

import dash

from analyzer.analysis import Analysis

from . import callbacks, export, layout


def create_app(analysis: Analysis) -> dash.Dash:
    """The app holds only this analysis: callbacks filter and present it, nothing is read per request."""
    app = dash.Dash(
        __name__,
        title="commscope",
        serve_locally=True,  # no CDN: works offline and on air-gapped clusters
        suppress_callback_exceptions=False,
        update_title=None,
    )
    app.layout = layout.build_layout(analysis)
    callbacks.register(app, analysis)
    export.register(app, analysis)
    return app


def serve(analysis: Analysis, host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    """Blocking: serve the dashboard. Debug (hot reload, dev tools, tracebacks) only when asked for."""
    app = create_app(analysis)
    app.run(host=host, port=port, debug=debug, use_reloader=False, dev_tools_ui=debug, dev_tools_props_check=debug)
