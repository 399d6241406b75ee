"""The words in an exported trace: process names, descriptions and the run's metadata (shared by both formats)."""

from __future__ import annotations

import polars as pl

from ..analysis import Analysis
from ..rules import NS_PER_MS, NS_PER_US
from ..views.units import ms_tables
from .tables import Plan

FORMAT_VERSION = "commscope.export/1"


def process_name(a: Analysis, rank: int, device: int | None) -> tuple[str, str]:
    """``rank N (host, GPU d model)`` and a description: source file, clock correction, root-caused wait."""
    meta = next((m for m in a.rank_meta if m.rank == rank), None)
    host = (meta.host if meta else None) or "host ?"
    gpu = "GPU ?" if device is None else f"GPU {device}"
    if meta and device is not None and 0 <= device < len(meta.devices):
        gpu += f" {meta.devices[device]}"
    off_us = round(a.clock.offsets_ns.get(rank, 0.0)) / NS_PER_US
    unc = a.clock.uncertainty_ns
    lines = [f"source: {meta.source if meta else '?'}",
             f"clock: {off_us:+,.3f} us subtracted ({a.clock.method}"
             + (f", uncertainty ±{unc / NS_PER_US:,.1f} us)" if unc is not None else ")")]
    ranks = ms_tables(a).ranks
    col = "root_caused_wait_ms" if "root_caused_wait_ms" in ranks.columns else "caused_wait_ms"
    row = ranks.filter(pl.col("rank") == rank)
    if row.height and row[col][0] is not None:
        lines.append(f"{col.removesuffix('_ms').replace('_', ' ')}: {row[col][0]:,.3f} ms; "
                     f"wait suffered: {row['wait_ms'][0]:,.3f} ms")
    if a.verdict is not None and a.verdict.rank == rank:
        lines.append(f"straggler verdict: {a.verdict.kind}, caused {a.verdict.caused_wait_ns / NS_PER_MS:,.3f} ms of wait")
    return f"rank {rank} ({host}, {gpu})", "\n".join(lines)


def metadata(a: Analysis, p: Plan, shift_ns: int) -> dict[str, object]:
    """Run-level facts, in a fixed order (trace metadata in both formats)."""
    fit = a.clock
    v = a.verdict
    sel = p.sel
    return {
        "commscope.format": FORMAT_VERSION,
        "commscope.clock_method": fit.method,
        "commscope.clock_reference_rank": -1 if fit.reference is None else fit.reference,
        "commscope.clock_uncertainty_us": "null" if fit.uncertainty_ns is None else f"{fit.uncertainty_ns / NS_PER_US:.3f}",
        "commscope.clock_offsets_us": ",".join(f"{r}:{p.offsets.get(r, 0) / NS_PER_US:g}" for r in p.ranks),
        "commscope.straggler": "none" if v is None else f"rank {v.rank} ({v.kind})",
        "commscope.straggler_caused_wait_ms": "null" if v is None else f"{v.caused_wait_ns / NS_PER_MS:.6f}",
        "commscope.ranks": ",".join(map(str, p.ranks)),
        "commscope.steps": "all" if sel.steps is None else ",".join(map(str, sel.steps)),
        "commscope.window_ms": "all" if sel.window_ms is None else f"{sel.window_ms[0]:g}:{sel.window_ms[1]:g}",
        "commscope.origin_ns": p.origin_ns,
        "commscope.timestamp_shift_ns": shift_ns,
        "commscope.host_activity": sel.host,
    }
