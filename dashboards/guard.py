"""The one guard every web app commscope serves installs (the analysis page, the history page, the hang page).

Callbacks check what they are sent (inputs.py). Whatever gets past those checks must not become a 500 with
the server's internals:
- the request body is capped (Flask ``MAX_CONTENT_LENGTH``: 413 from the Content-Length header, before the body
  is read);
- a callback that still raises answers in the page: Dash's ``on_error`` (``DASH_OPTIONS``) leaves every output
  unchanged and puts one line in ``input-message`` (each app's layout holds ``message_area()``);
- a request Dash itself cannot dispatch (missing keys, unknown outputs, not JSON) is 400 with one line;
- a path no page answers is 404: the apps are single pages, so Dash's catch-all route (it serves the page for
  any path, for multi-page apps) answers only ``/``; an unknown component-suite file is 404, not Dash's 500;
- pages and layouts go through the redaction (``analyzer.redact``), and so does what the guard logs.
No traceback reaches a client or the log.
"""

from __future__ import annotations

import logging

import dash
from dash import html
from werkzeug.exceptions import HTTPException, NotFound

from analyzer.redact import redact, redact_document

MESSAGE_ID = "input-message"
DEFAULT_MAX_REQUEST_BYTES = 1 << 20  # callback requests carry ids, clicks, zoom ranges and lanes' ranks: a few kB
CATCH_ALL = "/<path:path>"  # Dash's route for every other path (multi-page apps)
log = logging.getLogger("commscope.dashboard")


class _Redacting(logging.Filter):
    """Log lines (the guard's, Flask's, the request log's) without a password."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = ()
        return True


def _line(err: Exception) -> str:
    """One short log line of an error (Dash's list every registered file)."""
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else ""


def message_area() -> html.Div:
    return html.Div(id=MESSAGE_ID, role="status", style={"color": "#a33"})


def on_error(err: Exception) -> None:
    """Dash's callback error handler: log it, say so in the page, leave every output unchanged (None)."""
    log.warning("callback %s ignored a request: %s: %s", dash.ctx.triggered_id, type(err).__name__, _line(err))
    dash.set_props(MESSAGE_ID, {"children": f"Ignored a request the dashboard could not use "
                                            f"({type(err).__name__}); the view is unchanged."})


DASH_OPTIONS = {"on_error": on_error, "serve_locally": True, "update_title": None}


def install(app: dash.Dash, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
    from flask import request

    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = max_request_bytes
    for name in ("commscope.dashboard", "werkzeug", server.logger.name):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Redacting) for f in logger.filters):
            logger.addFilter(_Redacting())

    @server.before_request
    def _single_page():  # noqa: ANN202 (a Flask hook)
        rule = request.url_rule
        if rule is not None and rule.rule == CATCH_ALL:
            raise NotFound()
        return None

    @server.after_request
    def _redacted(resp):  # noqa: ANN001, ANN202 (a Flask hook)
        # pages and layouts: the text a person reads (callback data such as a download is left as it is)
        if not resp.direct_passthrough and (resp.mimetype == "text/html" or request.path.endswith("_dash-layout")):
            text = resp.get_data(as_text=True)
            clean = redact_document(text)  # an HTML page's scripts (plotly.js) are left whole
            if clean != text:
                resp.set_data(clean)
        return resp

    @server.errorhandler(Exception)
    def _malformed(err: Exception):  # noqa: ANN202 (a Flask hook)
        if isinstance(err, HTTPException):  # 404, 405, 413 ...: Flask's own short answer
            return err
        log.warning("%s %s: %s: %s", request.method, request.path[:200], type(err).__name__, _line(err))
        if isinstance(err, dash.exceptions.DependencyException) or "_dash-component-suites" in request.path:
            return {"error": "no such file"}, 404
        if request.path.endswith("_dash-update-component"):
            return {"error": f"malformed callback request ({type(err).__name__})"}, 400
        return {"error": "internal error"}, 500
