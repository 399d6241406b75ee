"""Cache writes that need not hold up the run: each runs in a thread beside the work that follows it, and ``wait``
joins them before anything reads the cache again or the process ends.

Polars compresses and writes with the GIL released, so on a second core a write costs the run almost nothing: the
4 x 513 MB job's analysis entry (0.3 s of CPU) is written while its report is rendered, an Nsight export's tables
(0.45 s) while the job is analyzed. The threads are not daemons (an interpreter that exits normally joins them);
the CLI, which leaves with ``os._exit``, calls ``wait`` first. A write that fails only costs the next run the work,
as a synchronous one does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_PENDING: list[threading.Thread] = []
_LOCK = threading.Lock()


def later(write: Callable[..., object], *args: object) -> None:
    """Run ``write(*args)`` in a thread; its result and any exception are dropped (a cache write's failure is never
    the run's)."""

    def run() -> None:
        try:
            write(*args)
        except Exception:  # noqa: BLE001 - the cache is best effort; the writers word nothing
            pass

    t = threading.Thread(target=run, name="commscope-cache-write")
    with _LOCK:
        _PENDING.append(t)
    t.start()


def wait() -> None:
    """Every write started so far, finished."""
    while True:
        with _LOCK:
            if not _PENDING:
                return
            t = _PENDING.pop()
        t.join()


__all__ = ["later", "wait"]
