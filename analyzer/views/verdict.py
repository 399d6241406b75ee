"""The sentences a person reads first, shared by every presenter (text, Markdown, HTML, dashboard)."""

from __future__ import annotations

from ..analysis import Analysis
from ..metrics.stragglers import Verdict
from ..ranklist import compact
from ..rules import NS_PER_MS
from .counterfactual import lead as cf_lead
from .counterfactual import where as cf_where
from .inspector import headline as inspector_headline
from .units import duration, ms_tables

_DIM_NAMES = {"tp": "tensor-parallel", "dp": "data-parallel", "pp": "pipeline", "ep": "expert-parallel",
              "cp": "context-parallel", "fsdp": "FSDP", "world": "world"}


def _groups(pgs: tuple[str, ...], dims: dict[str, str]) -> str:
    """'its tensor-parallel group pg 3 and data-parallel group pg 10' style names, else the pg numbers."""
    named = {}
    for pg in pgs:
        named.setdefault(_DIM_NAMES.get(dims.get(pg, ""), ""), []).append(pg)
    parts = []
    for dim, members in named.items():
        shown = ", ".join(members[:6]) + (", ..." if len(members) > 6 else "")
        parts.append(f"{dim + ' ' if dim else ''}group{'s' if len(members) > 1 else ''} pg {shown}")
    return " and ".join(parts)


def chain_text(v: Verdict, dims: dict[str, str] | None = None) -> str:
    """How the root's delay spread, e.g. 'Rank 9 delayed 10 ranks directly (its tensor-parallel group pg 3 and
    data-parallel group pg 10); through ranks 8, 10-11, which it had held up, 21 more waited (3 data-parallel
    groups pg 9, 11, 12).' ``dims``: pg -> dimension, when known."""
    dims = dims or {}
    direct = [c for c in v.chain if not c.via]
    hops = [c for c in v.chain if c.via]
    if not direct or direct[0].peers <= 0:  # nothing to say: no sentence
        return ""
    d = direct[0]
    groups = _groups(d.pg, dims)
    text = f"Rank {v.rank} delayed {d.peers} rank{'s' if d.peers != 1 else ''} directly" + (f" (its {groups})"
                                                                                          if groups else "")
    if hops and hops[0].peers > 0:
        h = hops[0]
        text += (f"; through rank{'s' if len(h.via) > 1 else ''} {compact(h.via)}, which it had held up, "
                 f"{h.peers} more waited ({h.groups} {_groups(h.pg, dims)})")
    return text + "."


def _pg_dimensions(a: Analysis) -> dict[str, str]:
    pgs = a.process_groups
    if pgs is None or pgs.height == 0:
        return {}
    return {str(pg): str(dim) for pg, dim in pgs.select("pg", "dimension").iter_rows() if dim not in (None, "unknown")}


def headline(a: Analysis) -> list[str]:
    lines = []
    v = a.verdict
    if first := cf_lead(a):
        lines.append(first)
    if second := cf_where(a):
        lines.append(second)
    if v is not None:
        cause = {
            "host": f"host-bound: its GPU sat idle {duration(v.idle_before_ns / NS_PER_MS / max(v.steps_last, 1))} per "
                    "step while the others already waited",
            "compute": f"compute-bound: it ran {duration(v.compute_before_ns / NS_PER_MS / max(v.steps_seen, 1))} "
                       "more compute per step than its peers",
            "unknown": "cause unclear: its GPU was neither mostly idle nor mostly computing before the late collectives",
        }[v.kind]
        pattern = "chronic" if v.chronic else "transient"
        steps = f" over {v.steps_last} of {v.steps_seen} steps" if v.steps_seen else ""
        lines.append(f"Straggler: rank {v.rank} is the root of {duration(v.root_caused_wait_ns / NS_PER_MS)} of the "
                     f"others' wait{steps} ({cause}; {pattern}).")
        hops = chain_text(v, _pg_dimensions(a))
        if hops:
            lines.append(hops)
        for extra in a.roots[1:]:
            lines.append(f"Also a root: rank {extra.rank} ({extra.kind}), {duration(extra.root_caused_wait_ns / NS_PER_MS)} "
                         "of the others' wait.")
    elif a.matching.get("instances") and a.counterfactual is None:
        lines.append("No straggler: the wait the ranks cause each other is spread evenly.")
    lines.extend(inspector_headline(a))  # NCCL Inspector input: the kernel-time verdict, slow links
    r = ms_tables(a).ranks
    if r.height:
        comm = float(r["comm_ms"].sum())
        exposed = float(r["exposed_comm_ms"].sum())
        wait = float(r["exposed_wait_ms"].fill_null(0).sum())
        span = float(r["span_ms"].sum())
        if comm > 0:
            lines.append(
                f"Communication: {duration(exposed / r.height)} exposed per rank on average "
                f"({100 * exposed / span if span else 0:.1f}% of the window), {100 * (comm - exposed) / comm:.1f}% "
                f"hidden behind compute; {100 * wait / exposed if exposed else 0:.0f}% of the exposed time "
                "was waiting for a late peer."
            )
        else:
            lines.append("No communication kernels in the traces.")
    return lines
