"""Parse ranks on a Dask distributed cluster (``--scheduler ADDRESS``), reduce locally.

Each worker parses one rank file into the Parquet cache -- which must be on storage the workers and
this machine share, at the same path (``COMMSCOPE_CACHE_DIR``) -- and returns only the entry's folder.
This process then reads the compact per-rank tables back and does the cross-rank work. Worth it
when there are more ranks than local cores can parse in time (hundreds of ranks, traces already on a
shared filesystem); for a few ranks the local process pool is faster (no cluster start-up, no
Parquet round trip).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import CommscopeError, UsageError
from ..model import RankTrace, Skipped
from .discover import TraceFile
from .options import ReadOptions

CONNECT_TIMEOUT = "30s"


def parse_to_cache(tf: TraceFile, opts: ReadOptions) -> str | Skipped:
    """Worker side: the cache entry folder of ``tf`` (parsed now unless cached), or why it was skipped."""
    from .cache import ensure_entry
    from .lean import lean_reader

    try:
        return str(ensure_entry(tf, opts, lean_reader(tf.format)))
    except CommscopeError as exc:
        return Skipped(str(tf.path), str(exc))
    except Exception as exc:  # noqa: BLE001 - a broken rank must never sink the others
        return Skipped(str(tf.path), f"{tf.path}: unexpected error while reading ({type(exc).__name__}: {exc})")


def read_on_cluster(files: list[TraceFile], opts: list[ReadOptions], address: str,
                    done: Callable[[str], None] | None = None) -> list[list[RankTrace] | Skipped]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'dask[distributed]'") from None
    from .cache import load_entries

    try:
        client = Client(address, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    results: list[list[RankTrace] | Skipped | None] = [None] * len(files)
    folders: dict[int, str] = {}
    try:
        futures = client.map(parse_to_cache, files, opts, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for fut in as_completed(futures):
            i = index[fut.key]
            res = fut.result()
            if isinstance(res, Skipped):
                results[i] = res
            else:
                folders[i] = res
            if done:
                done(files[i].path.name)
    finally:
        client.close()
    # the entries are read here together: one Parquet read per table for all ranks
    for (i, folder), hit in zip(folders.items(), load_entries([Path(f) for f in folders.values()])):
        results[i] = hit if hit is not None else Skipped(
            str(files[i].path), f"{files[i].path}: the worker's cache entry {folder} is not readable here "
            "(COMMSCOPE_CACHE_DIR must be shared storage at the same path)")
    return [r for r in results if r is not None]
