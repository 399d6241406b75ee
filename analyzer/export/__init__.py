"""Analysis -> one merged trace of every rank on the aligned clock (Perfetto protobuf or Chrome JSON).

``write_trace(analysis, selection, file, fmt)`` streams the trace into a binary file object one rank at
a time; ``command_line`` is the command that reproduces an export (for the HTML report).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import IO

from ..analysis import Analysis
from ..ingest.loader import LoadOptions
from .selection import Selection, parse_list, parse_window
from .tables import MAX_LANES, plan

FORMATS = ("pftrace", "json")

__all__ = ["FORMATS", "Selection", "command_line", "parse_list", "parse_window", "run_export", "write_trace"]


def write_trace(a: Analysis, sel: Selection, f: IO[bytes], fmt: str = "pftrace") -> dict:
    """Write the selection of ``a``; returns counts (ranks, slices, flow_slices, dropped)."""
    p = plan(a, sel)
    if fmt == "json":
        from .chrome_json import write
    else:
        from .perfetto import write
    return write(a, p, f)


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


def run_export(paths: list[Path], output: Path, fmt: str | None, opts: LoadOptions, ranks: str | None = None,
               steps: str | None = None, window: str | None = None, host: bool = False) -> dict:
    """The ``export`` command: parse the selection (before the slow loading), analyze every rank, write.

    ``fmt`` None: JSON for ``*.json``, else Perfetto protobuf. A failed write leaves no partial file behind.
    """
    fmt = fmt or ("json" if output.suffix == ".json" else "pftrace")
    from ..analysis import analyze
    from ..ingest.loader import load

    sel = Selection(ranks=parse_list(ranks, "ranks"), steps=parse_list(steps, "steps"), window_ms=parse_window(window),
                    host=host)
    a = analyze(load(paths, opts))
    tmp = output.with_name(output.name + ".part")
    try:
        with open(tmp, "wb") as f:
            counts = write_trace(a, sel, f, fmt)
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    return {**counts, "max_lanes": MAX_LANES, "skipped": [x["reason"] for x in a.source.get("skipped", [])]}
