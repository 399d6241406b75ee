"""The warnings that keep communication the catalogue does not know from going unsaid (metrics/unrecognized.py
finds the candidates; this words them, with the flag that would classify them)."""

from __future__ import annotations

import re

import polars as pl

from ..metrics import unrecognized
from ..model import TraceSet
from ..rules import NS_PER_MS


def comm_warnings(ts: TraceSet) -> list[str]:
    """Never silent: a multi-rank job without recognized communication, or long side-stream kernels named like
    communication beside compute, is said with its top candidates and the flag that would classify them."""
    if ts.gpu.height == 0 or ts.format in ("optable", "nccl_inspector"):  # those readers know their comm whole
        return []
    out = []
    world = max(ts.world_size or 0, len(ts.ranks))
    flag = "--comm-kernel 'REGEX=OP' (or a [[comm_kernel]] rule in --comm-config FILE)"
    if ts.collectives.height == 0 and world > 1:
        found = unrecognized.no_comm_candidates(ts.gpu, ts.collectives)
        top = _candidate_text(found)
        out.append(f"no communication recognized in a {world}-rank job: its communication may run in kernels the "
                   f"catalogue does not know" + (f" (top candidates: {top})" if top else "")
                   + f"; classify them with {flag}, e.g. --comm-kernel "
                   f"'{_example(found)}=all_to_all'")
    side = unrecognized.side_candidates(ts.gpu, ts.collectives) if not out else None
    if side is not None and side.height:
        out.append(f"kernels named like communication run on side streams beside compute and are counted as "
                   f"compute: {_candidate_text(side)}; if they communicate, classify them with {flag}, e.g. "
                   f"--comm-kernel '{_example(side)}=all_to_all'")
    return out


def _candidate_text(found: pl.DataFrame) -> str:
    """name (N ranks, x ms, y% beside compute), ... by total time over ranks."""
    if found.height == 0:
        return ""
    agg = found.group_by("name").agg(pl.col("rank").n_unique().alias("n"), pl.col("total_ns").sum().alias("t"),
                                     pl.col("overlap_ns").sum().alias("o")).sort("t", "name", descending=[True, False])
    parts = []
    for name, n, t, o in agg.head(unrecognized.TOP).iter_rows():
        beside = f", {100 * o / t:.0f}% beside compute" if t else ""
        parts.append(f"{name} ({n} rank{'s' if n > 1 else ''}, {t / NS_PER_MS:,.1f} ms{beside})")
    return "; ".join(parts)


def _example(found: pl.DataFrame) -> str:
    if found.height == 0:
        return "my_dispatch_kernel"
    name = found.sort("total_ns", descending=True)["name"][0]
    return re.escape(name).replace("'", "")
