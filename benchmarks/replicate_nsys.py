"""Scale an Nsight Systems SQLite export by replicating its window in time (real row composition).

Every row of the activity tables (kernels, copies, sets, syncs, CUDA API calls, NVTX ranges) is
copied ``copies - 1`` times, shifted by the window's span plus a gap; correlation ids are offset per
copy so each launch still names its own kernel. Strings, metadata and enums are shared.

    python -m benchmarks.replicate_nsys /work/shared/traces/nsys/mfu_2gpu_before.sqlite /tmp/nsys200.sqlite 200
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def replicate(src: Path, dst: Path, copies: int, gap_ns: int = 1_000_000) -> dict[str, int]:
    """Write ``dst`` with every activity row ``copies`` times; returns the rows per table."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst)
    try:
        present = [t for t in TABLES if conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)).fetchone()]
        lo, hi, corr = None, None, 0
        for t in present:
            a, b = conn.execute(f'SELECT MIN(start), MAX(COALESCE("end", start)) FROM "{t}"').fetchone()
            if a is not None:
                lo, hi = min(lo if lo is not None else a, a), max(hi if hi is not None else b, b)
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
            if "correlationId" in cols:
                corr = max(corr, conn.execute(f'SELECT MAX(correlationId) FROM "{t}"').fetchone()[0] or 0)
        period = (hi - lo) + gap_ns
        stride = 10 ** len(str(corr + 1))
        for t in present:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
            n0 = conn.execute(f'SELECT MAX(rowid) FROM "{t}"').fetchone()[0] or 0
            shifted = {"start": f"start + k.i * {period}", "end": f'"end" + k.i * {period}',
                       "correlationId": f"correlationId + k.i * {stride}"}
            select = ", ".join(shifted.get(c, f'"{c}"') for c in cols)
            names = ", ".join(f'"{c}"' for c in cols)
            conn.execute(
                f"WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < {copies - 1}) "
                f'INSERT INTO "{t}" ({names}) SELECT {select} FROM "{t}", k WHERE "{t}".rowid <= {n0}'
            )
        conn.commit()
        return {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in present}
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("copies", type=int)
    a = ap.parse_args()
    rows = replicate(a.src, a.dst, a.copies)
    print(a.dst, f"{a.dst.stat().st_size / 1e6:.0f} MB", rows)


if __name__ == "__main__":
    main()
