"""Worker processes for parsing ranks: forked from a server that imported the readers once.

Plain fork is unsafe (forking after polars has started its thread pool deadlocks the child) and
spawn re-imports polars, pyarrow and msgspec in every worker (~0.5-1 s each); a forkserver that has
only *imported* them forks cheap, clean workers. This module imports nothing heavy, so the CLI can
start that server first and let it import on the other core while the main process imports too.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import sys
from collections.abc import Iterator

# what a worker's first rank imports otherwise, each worker on its own: the cache writer, and pyarrow.compute
# (Arrow's UTF-8 check of the block path; 26 ms, with pydoc). Preloaded: a 50 MB rank's first read 0.28 -> 0.25 s
_PRELOAD = ["analyzer.ingest.loader", "analyzer.ingest.kineto", "analyzer.ingest.nsys", "analyzer.ingest.cache",
            "pyarrow.compute"]


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


@contextlib.contextmanager
def no_main_reimport() -> Iterator[None]:
    """Start workers without re-running the caller's script in each of them.

    A child process normally re-imports ``__main__`` from its file, so ``analyzer.analyze(...)`` called
    from a script without an ``if __name__ == "__main__":`` guard would run the whole script again in
    every worker (and fail to start them). The workers only run functions of this package, so the
    script is hidden from them while they start.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path
