"""The contract every hostile input is held to (issue #32), shared by the Hypothesis tests and the fuzz campaign.

An input is analyzed in this process; the outcome is one of:

- refused: a ``CommscopeError`` of one line (the CLI prints it and exits 2);
- the same numbers as the unmutated input (``neutral`` mutations must give exactly these, with no new warning);
- different numbers with a new warning (or a skipped file) that says why.

Everything else breaks the contract: another exception (a traceback), a multi-line error, or numbers that
changed without a new warning (a silent change). A hang is caught by the callers' time limits.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Outcome:
    kind: str  # "error" | "ok" | "crash"
    message: str = ""
    numbers: tuple = ()
    warnings: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """SIGALRM after ``seconds`` (main thread only): a hang becomes an exception the caller reports."""
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def numbers(a: Any) -> tuple:
    rows = []
    for r in a.ranks.iter_rows(named=True):
        rows.append(tuple(round(v, 9) if isinstance(v, float) and not math.isnan(v) else v
                          for k, v in r.items() if k != "rank"))
    return tuple(rows)


def run(paths: list[Path], **options: Any) -> Outcome:
    from analyzer import analyze
    from analyzer.errors import CommscopeError

    try:
        a = analyze(*paths, jobs=1, cache=False, **options)
    except CommscopeError as exc:
        return Outcome("error", str(exc))
    except Hang:
        raise
    except Exception as exc:  # noqa: BLE001 - what the contract forbids, reported by the caller
        import traceback

        return Outcome("crash", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}")
    return Outcome("ok", numbers=numbers(a), warnings=tuple(a.warnings),
                   skipped=tuple(s["path"] for s in a.source.get("skipped", [])))


def violation(base: Outcome, got: Outcome, neutral: bool) -> str | None:
    """Why ``got`` breaks the contract against the unmutated ``base``; None when it keeps it."""
    if got.kind == "crash":
        return "traceback: " + got.message
    if got.kind == "error":
        if neutral:
            return "a neutral mutation was refused: " + got.message
        return "error of several lines: " + got.message if "\n" in got.message else None
    new = [w for w in got.warnings if w not in base.warnings]
    if neutral:
        if got.numbers != base.numbers or new or got.skipped:
            return f"a neutral mutation changed the result (new warnings {new})"
        return None
    if got.numbers != base.numbers and not new and not got.skipped:
        return "silent change: numbers differ and no new warning says why"
    return None
