"""The command line: the click app (``app``), the input-limit flags every loading command shares (``limits``)
and where the stages and presenters are put together for a command (``compose``)."""

from .app import entry, main

__all__ = ["entry", "main"]
