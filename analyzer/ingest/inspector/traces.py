"""NCCL Inspector logs beside Kineto traces of the same job: the traces' process groups name the communicators.

NCCL logs a communicator's name as the job gave it (``ncclConfig_t.commName``), and PyTorch gives none: every
communicator is "unknown", and its dimension can only be guessed from its members. A Kineto trace lists the job's
process groups (``distributedInfo.pg_config``: name, description such as ``mesh_tp`` or ``default_pg``, member
ranks). A communicator whose members are exactly one such group's takes that group's description as its name, so
the cross-rank stage names its dimension from the description, as for traces. Ranks are the Inspector's (the world
communicator's, or a mesh's: torch's own numbering), which is what the traces' member lists use.
Only the traces' headers are read (``kineto.reader.read_meta``); their timelines are not joined to the logs'.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from ...errors import UsageError
from ...model import ProcessGroup, RankMeta, TraceSet


def _informative(desc: str | None) -> bool:
    return bool(desc) and desc.lower() not in ("undefined", "unknown", "none", "nan")


def with_trace_groups(ts: TraceSet, metas: list[RankMeta]) -> tuple[TraceSet, str]:
    """``ts`` (read from Inspector logs) with its unnamed communicators named after the traces' process groups of
    the same members; and a line saying what was done."""
    if ts.inspector is None:
        return ts, ""
    world = ts.world_size or len(ts.ranks)
    for m in metas:  # a trace of another job would name the communicators wrongly: refused
        declared = m.world_size or max((len(g.ranks) for g in m.process_groups), default=None)
        if declared is not None and declared != world or not 0 <= m.rank < world:
            raise UsageError(f"{m.source}: a Kineto trace of rank {m.rank} of {declared or '?'} ranks beside "
                             f"NCCL Inspector logs of {world} processes: a trace of another job? Put each job's "
                             "traces and logs in a folder of their own")
    descs: dict[frozenset[int], set[str]] = {}
    for m in metas:
        for g in m.process_groups:
            if g.ranks and _informative(g.desc):
                descs.setdefault(frozenset(g.ranks), set()).add(g.desc)
    comms = ts.inspector.comms
    names: dict[str, str] = {}
    ambiguous = 0
    for cid, name, ranks in comms.select("id", "name", "ranks").iter_rows():
        if _informative(name) or not ranks or "?" in ranks:
            continue
        found = descs.get(frozenset(int(r) for r in ranks.split(",")))
        if not found:
            continue
        if len(found) > 1:
            ambiguous += 1
            continue
        names[cid] = next(iter(found))
    n = comms.height
    if not names:
        return ts, (f"no process group of the {len(metas)} Kineto trace(s) beside the logs has the members of an "
                    f"unnamed communicator: the {n} communicators keep their names")
    name_of = pl.col("id").replace_strict(names, default=None, return_dtype=pl.Utf8)
    comms = comms.with_columns(name_of.fill_null(pl.col("name")).alias("name"))
    coll = ts.collectives.with_columns(
        pl.col("pg").replace_strict(names, default=None, return_dtype=pl.Utf8).fill_null(pl.col("pg_desc"))
        .alias("pg_desc"))
    ranks = tuple(replace(m, process_groups=tuple(ProcessGroup(g.name, names.get(g.name, g.desc), g.ranks)
                                                  for g in m.process_groups)) for m in ts.ranks)
    note = (f"{len(names)} of {n} NCCL communicators named after the process groups of the {len(metas)} Kineto "
            "trace(s) beside the logs (same members): "
            + ", ".join(f"{cid} = {d}" for cid, d in list(names.items())[:4]) + (" ..." if len(names) > 4 else "")
            + (f"; {ambiguous} matched groups of different descriptions and keep theirs" if ambiguous else "")
            + "; the traces' timelines are not analyzed with the logs (analyze them alone for compute and overlap)")
    return replace(ts, ranks=ranks, collectives=coll, inspector=replace(ts.inspector, comms=comms)), note


__all__ = ["with_trace_groups"]
