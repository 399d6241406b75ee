"""Everything the commands print or write goes out here, through the one redaction (``analyzer.redact``): the
report, the lines on stderr, the job summary, the error line. And the one error boundary: a user-fixable error
is one line and exit code 2; a bug still shows its traceback (exit 1), with any password in it masked."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from ..errors import CommscopeError
from ..redact import redact, redact_document


def say(text: str, err: bool = False, nl: bool = True) -> None:
    click.echo(redact(text), err=err, nl=nl)


def write_text(path: Path, text: str) -> None:
    path.write_text(redact_document(text), encoding="utf-8")


def emit(text: str, output: Path | None) -> None:
    """The report: to ``output``, else stdout."""
    if output:
        write_text(output, text)
        say(f"wrote {output}", err=True)
    else:
        click.echo(redact_document(text), nl=False)


def step_summary(markdown: str) -> None:
    """GitHub Actions: append the Markdown report to the job summary when $GITHUB_STEP_SUMMARY is set."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(redact_document(markdown) + "\n")


def guard(fn: Callable[[], None]) -> None:
    """The error boundary: ``CommscopeError`` and ``OSError`` are one line and exit 2; click's own usage
    errors keep their form, redacted; anything else is a bug, shown as a traceback (redacted) and exit 1."""
    try:
        fn()
    except CommscopeError as exc:
        say(f"commscope: error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:
        say(f"commscope: error: {exc.filename or ''}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.message = redact(exc.message)
        raise
    except Exception:  # noqa: BLE001 - a bug: its traceback, without a password it may carry
        click.echo(redact(traceback.format_exc()), err=True, nl=False)
        sys.exit(1)
