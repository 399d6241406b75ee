"""Typed errors the library raises; the CLI turns each into one line and exit code 2."""

from __future__ import annotations

from .redact import redact


class CommscopeError(Exception):
    """Base for every error a user can fix (bad input, bad option). Its message is redacted (``redact.py``):
    no password reaches a user through an error, whoever words it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class TraceError(CommscopeError):
    """One input file cannot be read. The message names the file, the problem, and what to do."""

    def __init__(self, path: object, problem: str, hint: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.hint = hint
        msg = f"{self.path}: {problem}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class UsageError(CommscopeError):
    """Options or paths that make no sense together."""


class StoreError(CommscopeError):
    """The run-history store cannot be used: not a store, corrupt, newer schema, unreachable, unknown run."""


class IncomparableRuns(CommscopeError):
    """``compare`` refuses two runs it cannot compare (a skipped rank, another job); the message says why."""
