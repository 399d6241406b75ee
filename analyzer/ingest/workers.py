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
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

# what a worker's first rank imports otherwise, each worker on its own: the readers and the cache writer (pyarrow,
# which the block path needs, is left to a file the native path declines: ~0.15 s the server need not spend)
_PRELOAD = ["analyzer.ingest.loader", "analyzer.ingest.kineto.reader", "analyzer.ingest.nsys.reader",
            "analyzer.ingest.cache"]


# Where a pool starts to pay, measured on fsdp_balanced ranks on 2 cores (benchmarks/README.md, "Cold start on
# small inputs"): one core parses ~180 MB/s, and a pool costs ~0.27 s before its first rank on a quiet machine
# (the server's imports, the resource tracker, a fork per worker, the read-back of what the workers cached).
# Interleaved cold runs at load 1.5: 4 x 12 MB 1.02 s in process against 1.18 s with 2 workers, 4 x 25 MB
# 1.34 against 1.37 s, 4 x 51 MB 2.05 against 1.82 s. Under heavy load the pool costs more (~0.7 s at load 5)
# and in process wins up to 4 x 200 MB, but a user's machine is mostly not shared with six benchmarks.
POOL_BREAK_EVEN_BYTES = 48 << 20  # ~180 MB/s x ~0.27 s
# what a file costs besides its bytes (its tables' Polars queries, its share of a cache pack), as bytes parsed in the
# same time: ~5.5 ms of CPU per small Kineto rank (1,024 ranks of 90 KB: 6 s of parse for 92 MB), ~1 MB at 180 MB/s
POOL_FILE_BYTES = 1 << 20


def pool_pays(nbytes: int, jobs: int, files: int = 0) -> bool:
    """Whether ``jobs`` workers beat parsing ``files`` files of ``nbytes`` in this process: splitting saves
    ``work / rate * (1 - 1 / jobs)`` of wall, which must exceed the pool's start-up (work: the bytes and each
    file's fixed cost)."""
    return jobs > 1 and (nbytes + files * POOL_FILE_BYTES) * (jobs - 1) > POOL_BREAK_EVEN_BYTES * jobs


def parse_bytes(path: Path) -> int:
    """What parsing a file reads: its size, or for a .gz its inflated size (the gzip trailer; 0 if unreadable)."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device is never opened here (discovery refuses it)
            return 0
        size = st.st_size
        if path.name.endswith(".gz") and size >= 18:
            with open(path, "rb") as f:
                f.seek(-4, os.SEEK_END)
                return max(size, int.from_bytes(f.read(4), "little"))  # mod 2**32: a floor for bigger ones
        return size
    except OSError:
        return 0


def pool_pays_for(paths: Iterable[Path], cores: int) -> bool:
    """``pool_pays`` for the files under ``paths`` (a guess before discovery: every file counts), one
    worker per file at most; the walk stops once the answer cannot change."""
    total = count = 0
    for p in paths:
        files = (Path(d, n) for d, _, names in os.walk(p) for n in names) if p.is_dir() else [p]
        for f in files:
            total += parse_bytes(f)
            count += 1
            if count >= cores and pool_pays(total, cores, count):
                return True
    return pool_pays(total, min(cores, count), count)


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
