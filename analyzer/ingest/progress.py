"""Per-rank progress on stderr: a rich bar when stderr is a terminal, silence otherwise (logs, pipes, CI)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def rank_progress(total: int, label: str = "parsing ranks") -> Iterator[Callable[[str], None]]:
    """Yields ``advance(name)``, called once per finished rank file."""
    if total <= 1 or not sys.stderr.isatty():
        yield lambda name: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"), console=Console(stderr=True), transient=True,
    ) as bar:
        task = bar.add_task(label, total=total, last="")
        yield lambda name: bar.update(task, advance=1, last=name)
