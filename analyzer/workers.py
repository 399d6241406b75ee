"""Worker processes for parsing ranks: forked from a server that imported the readers once.

Plain fork is unsafe (forking after polars has started its thread pool deadlocks the child) and
spawn re-imports polars, pyarrow and msgspec in every worker (~0.5-1 s each); a forkserver that has
only *imported* them forks cheap, clean workers. This module imports nothing heavy, so the CLI can
start that server first and let it import on the other core while the main process imports too.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context

_PRELOAD = ["analyzer.loader", "analyzer.ingest.kineto", "analyzer.ingest.nsys"]


def worker_context() -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def prestart() -> None:
    """Start the fork server now (it imports in the background); a no-op where there is none."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        worker_context()
        from multiprocessing import forkserver

        forkserver.ensure_running()
