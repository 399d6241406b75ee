"""User regular expressions (``--step-marker``; every option that takes a REGEX): checked once, here, and run in
a linear-time engine.

Python's ``re`` backtracks: ``--step-marker '(a+)+$'`` against one 41-character annotation name never finishes.
User patterns run in Rust's ``regex`` engine instead (through Polars, already a dependency), whose matching time
is linear in the text whatever the pattern. What that engine cannot run (look-around, backreferences: exactly
the constructs that need backtracking) is refused with one line, and so is a pattern that compiles past its size
limit (10 MB of automaton: ``a{1000}{1000}``) or is longer than ``MAX_CHARS``. The syntax is Python's for
everything else (classes, groups, ``(?P<name>...)``, ``(?i)``).

``UserPattern.search`` answers per name from a memo filled in batches (``search_all``): one engine call per batch
of new names, so a reader matching millions of events pays per distinct name, not per event.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from .errors import UsageError

MAX_CHARS = 4096
MEMO_NAMES = 1 << 20  # distinct names remembered per pattern (names repeat: a trace has a few thousand)


class UserPattern:
    """A checked user pattern (``check``)."""

    def __init__(self, pattern: str, groups: int) -> None:
        self.pattern = pattern
        self.groups = groups  # capture groups (the step number is the first)
        self._memo: dict[str, bool] = {}

    def search_all(self, names: Iterable[str]) -> None:
        """Match every name not matched before, in one engine call."""
        todo = list({n for n in names if n not in self._memo})
        if not todo:
            return
        if len(self._memo) + len(todo) > MEMO_NAMES:
            self._memo.clear()
        hits = pl.Series(todo, dtype=pl.String).str.contains(self.pattern).to_list()
        self._memo.update(zip(todo, (bool(h) for h in hits)))

    def search(self, name: str) -> bool:
        """Whether the pattern occurs in ``name`` (``re.search``'s question)."""
        hit = self._memo.get(name)
        if hit is None:
            self.search_all((name,))
            hit = self._memo[name]
        return hit

    def contains(self, col: str | pl.Expr) -> pl.Expr:
        """The same question as a Polars expression over a column of names."""
        return (pl.col(col) if isinstance(col, str) else col).str.contains(self.pattern)

    def first_group(self, col: str | pl.Expr) -> pl.Expr:
        """The first capture group's text (null where none matched); null throughout without a group."""
        e = pl.col(col) if isinstance(col, str) else col
        return e.str.extract(self.pattern, 1) if self.groups else pl.lit(None, dtype=pl.String)


def check(pattern: str, option: str) -> UserPattern:
    """The pattern, checked: one ``UsageError`` line naming ``option`` where it cannot be run in linear time."""
    if len(pattern) > MAX_CHARS:
        raise UsageError(f"{option}: the pattern is {len(pattern):,} characters long (at most {MAX_CHARS:,})")
    try:
        groups = len(pl.Series([""], dtype=pl.String).str.extract_groups(pattern).struct.fields)
    except pl.exceptions.PolarsError as exc:
        text = str(exc)
        if "look-around" in text or "backreferences" in text:
            why = ("uses look-around or backreferences, which only a backtracking engine runs (and it can take "
                   "exponential time); rewrite it without them")
        elif "size limit" in text:
            why = "compiles to more than the engine's 10 MB size limit; use a smaller pattern"
        else:
            lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:")]
            why = f"is not a valid regular expression ({lines[0] if lines else text.splitlines()[0][:120]})"
        raise UsageError(f"{option} {pattern[:200]!r} {why}") from None
    return UserPattern(pattern, groups)


__all__ = ["MAX_CHARS", "UserPattern", "check"]
