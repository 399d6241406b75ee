"""What part of a run to export, and the ``commscope export`` command that writes it.

The HTML report prints the command and the dashboard offers the selection as a download, so both live
in views rather than in the export presenter (presenters never import each other).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from ..analysis import Analysis


@dataclass(frozen=True)
class Selection:
    ranks: tuple[int, ...] | None = None  # None: every rank
    steps: tuple[int, ...] | None = None  # None: the whole captured window
    window_ms: tuple[float, float] | None = None  # ms on the aligned clock from the run's first GPU event
    host: bool = False  # host launches and annotations too


def command_line(a: Analysis, sel: Selection | None = None, output: str = "job.pftrace") -> str:
    """The ``commscope export`` command that writes this selection of this run."""
    sel = sel or Selection()
    paths = [Path(p) for p in a.source.get("paths", [])]
    if len(paths) > 1 and len({p.parent for p in paths}) == 1:
        paths = [paths[0].parent]  # the ranks of one folder: name the folder, not every file
    args = ["commscope", "export", *map(str, paths), "-o", output]
    if sel.ranks is not None:
        args += ["--ranks", ",".join(map(str, sel.ranks))]
    if sel.steps is not None:
        args += ["--steps", ",".join(map(str, sel.steps))]
    if sel.window_ms is not None:
        args += ["--window", f"{sel.window_ms[0]:g}:{sel.window_ms[1]:g}"]
    if sel.host:
        args.append("--host")
    return shlex.join(args)
