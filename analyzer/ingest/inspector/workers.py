"""Where the streamed Inspector reader gets its blocks: read here, or decoded by ``jobs`` worker processes.

Decoding is most of the work (JSON -> columns), so with ``jobs > 1`` each worker owns a share of the files
(each file's reader keeps its state: position, headers seen) and returns, per request, the next block's raw
columns of each file asked for; the main process folds. The round after is asked for before the current one
is folded, so the workers decode while the main process folds.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from ...errors import TraceError
from .decode import Reading

# one block of one file: (file index, raw columns or None at its end, new headers, new metadata, end counters)
Block = tuple[int, "pl.DataFrame | None", list, list, "dict | None"]


def _counters(r: Reading) -> dict:
    return {"lines": r.lines, "bad": r.bad, "first_bad": r.first_bad, "truncated": r.truncated,
            "unknown": r.cols.unknown, "no_header": r.cols.no_header}


def _next(fi: int, r: Reading, gen: Iterator[pl.DataFrame], seen: dict[int, tuple[int, int]]) -> Block:
    try:
        raw = next(gen)
    except StopIteration:
        raw = None
    h, m = seen.get(fi, (0, 0))
    seen[fi] = (len(r.cols.headers), len(r.cols.metas))
    return fi, raw, r.cols.headers[h:], r.cols.metas[m:], _counters(r) if raw is None else None


class Local:
    """Blocks read in this process."""

    def __init__(self, files: list[Path], block_bytes: int) -> None:
        self.readers = [Reading(p, block_bytes=block_bytes) for p in files]
        self.gens = [r.batches() for r in self.readers]
        self.seen: dict[int, tuple[int, int]] = {}

    def ask(self, fis: list[int]) -> None:
        self.asked = fis

    def take(self) -> list[Block]:
        return [_next(fi, self.readers[fi], self.gens[fi], self.seen) for fi in self.asked]

    def close(self) -> None:
        pass


def _worker(conn, files: dict[int, str], block_bytes: int) -> None:  # noqa: ANN001 - a Connection
    gc.disable()  # as ``read_file``: many short-lived objects a block, no cycles
    readers = {fi: Reading(Path(p), block_bytes=block_bytes) for fi, p in files.items()}
    gens = {fi: r.batches() for fi, r in readers.items()}
    seen: dict[int, tuple[int, int]] = {}
    while True:
        fis = conn.recv()
        if fis is None:
            return
        try:
            conn.send([_next(fi, readers[fi], gens[fi], seen) for fi in fis])
        except TraceError as exc:
            conn.send(("error", exc.path, exc.problem, exc.hint))


class Workers:
    """Blocks decoded by ``jobs`` worker processes, each owning every ``jobs``-th file."""

    def __init__(self, files: list[Path], block_bytes: int, jobs: int) -> None:
        from ..workers import no_main_reimport, worker_context

        ctx = worker_context()
        self.jobs = jobs
        self.conns, self.procs = [], []
        with no_main_reimport():
            for w in range(jobs):
                a, b = ctx.Pipe()
                mine = {fi: str(f) for fi, f in enumerate(files) if fi % jobs == w}
                p = ctx.Process(target=_worker, args=(b, mine, block_bytes), daemon=True)
                p.start()
                b.close()
                self.conns.append(a)
                self.procs.append(p)
        self.asked: list[bool] = [False] * jobs
        self.first = [str(files[w]) for w in range(jobs)]

    def ask(self, fis: list[int]) -> None:
        for w, c in enumerate(self.conns):
            mine = [fi for fi in fis if fi % self.jobs == w]
            self.asked[w] = bool(mine)
            if mine:
                c.send(mine)

    def take(self) -> list[Block]:
        out: list[Block] = []
        for w, c in enumerate(self.conns):
            if not self.asked[w]:
                continue
            try:
                got = c.recv()
            except (EOFError, OSError):  # the worker died (killed, out of memory): one line, not a hang
                raise TraceError(self.first[w], "and the other files of its worker process could not be read: the "
                                 "worker stopped", "run again with -j 1 to see why") from None
            if isinstance(got, tuple):
                _, path, problem, hint = got
                raise TraceError(path, problem, hint)
            out.extend(got)
        return sorted(out, key=lambda b: b[0])

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
