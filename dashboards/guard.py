"""The dashboard's last line against malformed requests: a callback that still raises answers in the page.

Callbacks check what they are sent (inputs.py). Whatever gets past those checks must not become a 500 with
the server's internals: Dash's ``on_error`` turns it into an unchanged view plus a one-line message in the
page (``input-message``), and a request Dash itself cannot dispatch (missing keys, unknown outputs, not JSON)
is answered 400 with one line. The request body is capped (Flask ``MAX_CONTENT_LENGTH``: 413 from the
Content-Length header, before the body is read).
"""

from __future__ import annotations

import logging

import dash
from dash import html
from werkzeug.exceptions import HTTPException

MESSAGE_ID = "input-message"
log = logging.getLogger("commscope.dashboard")


def message_area() -> html.Div:
    return html.Div(id=MESSAGE_ID, role="status", style={"color": "#a33"})


def on_error(err: Exception) -> None:
    """Dash's callback error handler: log it, say so in the page, leave every output unchanged (None)."""
    log.warning("callback %s ignored a request: %s: %s", dash.ctx.triggered_id, type(err).__name__, err)
    dash.set_props(MESSAGE_ID, {"children": f"Ignored a request the dashboard could not use "
                                            f"({type(err).__name__}); the view is unchanged."})


def install(app: dash.Dash, max_request_bytes: int) -> None:
    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = max_request_bytes

    @server.errorhandler(Exception)
    def _malformed(err: Exception):
        if isinstance(err, HTTPException):  # 404, 405, 413 ...: Flask's own short answer
            return err
        from flask import request

        log.warning("%s %s: %s: %s", request.method, request.path, type(err).__name__, err)
        if request.path.endswith("_dash-update-component"):
            return {"error": f"malformed callback request ({type(err).__name__})"}, 400
        return {"error": "internal error"}, 500
