"""Analysis -> one Perfetto protobuf trace (TrackEvent packets), streamed one rank at a time.

Layout: a run-level track ``commscope`` (clock and verdict) and, per rank, a process track
``rank N (host, GPU)`` holding its tracks: notes, steps, one per stream (a second lane only where
slices overlap), host threads with ``--host``, and counters. Each rank is its own packet sequence
with its names interned once. Packets go out in batches of a ``Trace`` message, the same bytes the
``perfetto`` package's ``StreamingTraceProtoBuilder`` writes packet by packet (a ``Trace`` is only a
repeated packet field), without copying each packet into its own message.
"""

from __future__ import annotations

from typing import IO

import polars as pl
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    ChromeMetadata,
    Trace,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from ..analysis import Analysis
from ..rules import NS_PER_US
from .tables import ARG, CHUNK, Plan, RankTables, rank_tables
from .text import metadata, process_name

BATCH = 20_000  # packets per write: bounded memory, few calls
RUN_SEQUENCE = 1
RUN_TRACK = 1
SLICE_BEGIN, SLICE_END = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END
INSTANT, COUNTER = TrackEvent.TYPE_INSTANT, TrackEvent.TYPE_COUNTER
CLEARED = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS_STATE = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def rank_uuid(rank: int) -> int:
    """The process track of a rank; its tracks are ``rank_uuid + 1 + order``."""
    return (rank + 1) << 24


class _Out:
    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.trace = Trace()

    def packet(self) -> TracePacket:
        if len(self.trace.packet) >= BATCH:
            self.flush()
        return self.trace.packet.add()

    def flush(self) -> None:
        if len(self.trace.packet):
            self.f.write(self.trace.SerializeToString())
            self.trace = Trace()


def write(a: Analysis, p: Plan, f: IO[bytes]) -> dict:
    """Write the trace; returns counts (ranks, slices, flows, dropped overlapping slices)."""
    out = _Out(f)
    shift = max(0, -p.base_ns)  # timestamps are unsigned: a run that starts before 0 moves, and says so
    meta = metadata(a, p, shift)
    pk = out.packet()
    for k, v in meta.items():
        pk.chrome_events.metadata.append(_meta(k, v))
    pk = out.packet()
    pk.track_descriptor.uuid = RUN_TRACK
    pk.track_descriptor.name = "commscope"
    pk.track_descriptor.description = "; ".join(f"{k}: {v}" for k, v in meta.items())
    ts0 = p.base_ns + shift
    for i, text in enumerate(meta_lines(a)):
        pk = out.packet()
        pk.timestamp = ts0
        pk.trusted_packet_sequence_id = RUN_SEQUENCE
        pk.track_event.type = INSTANT
        pk.track_event.track_uuid = RUN_TRACK
        pk.track_event.name = text
        if i == 0:
            pk.first_packet_on_sequence = True
    counts = {"ranks": 0, "slices": 0, "flow_slices": 0, "dropped": 0}
    for k in range(0, len(p.ranks), CHUNK):
        for t in rank_tables(a, p, p.ranks[k:k + CHUNK]):
            _rank(out, a, t, shift)
            counts["ranks"] += 1
            counts["slices"] += t.slices.height
            counts["flow_slices"] += int(t.slices["flow_id"].is_not_null().sum()) if "flow_id" in t.slices.columns else 0
            counts["dropped"] += t.dropped
            out.flush()  # one rank's packets at most in memory
    return counts


def meta_lines(a: Analysis) -> list[str]:
    from ..views.verdict import headline

    fit = a.clock
    unc = f", uncertainty ±{fit.uncertainty_ns / NS_PER_US:,.1f} us" if fit.uncertainty_ns is not None else ""
    return [f"clock: {fit.method}, reference rank {fit.reference}{unc}", *headline(a)]


def _meta(k: str, v: object) -> ChromeMetadata:
    return _set_value(ChromeMetadata(name=k), v)


def _set_value(msg, v: object):  # noqa: ANN001 - any proto with bool/int/string (and maybe double) value fields
    """Store ``v`` in the typed value field of a metadata entry or debug annotation; floats where the
    message has a double field, else as text (ChromeMetadata has none)."""
    if isinstance(v, bool):
        msg.bool_value = v
    elif isinstance(v, int):
        msg.int_value = v
    elif isinstance(v, float) and "double_value" in type(msg).DESCRIPTOR.fields_by_name:
        msg.double_value = v
    else:
        msg.string_value = str(v)
    return msg


def _rank(out: _Out, a: Analysis, t: RankTables, shift: int) -> None:
    rank = t.rank
    seq = RUN_SEQUENCE + 1 + rank
    puuid = rank_uuid(rank)
    name, description = process_name(a, rank, t.device)
    pk = out.packet()
    d = pk.track_descriptor
    d.uuid = puuid
    d.process.pid = rank + 1  # pid 0 is the idle task to Perfetto
    d.process.process_name = name
    d.description = description
    d.child_ordering = TrackDescriptor.EXPLICIT
    uuids = {}
    for order, track, counter in t.tracks.select("order", "track", "counter").iter_rows():
        uuids[track] = puuid + 1 + order
        pk = out.packet()
        d = pk.track_descriptor
        d.uuid = uuids[track]
        d.parent_uuid = puuid
        d.name = track
        d.sibling_order_rank = order
        if counter:
            d.counter.unit_name = "ms"
    events = _events(t, shift)
    names = events.filter(pl.col("name").is_not_null())["name"].unique().sort().to_list()
    cats = events.filter(pl.col("cat").is_not_null())["cat"].unique().sort().to_list()
    args = [c for c in events.columns if c.startswith(ARG)]
    name_iid = {n: i + 1 for i, n in enumerate(names)}
    cat_iid = {c: i + 1 for i, c in enumerate(cats)}
    pk = out.packet()
    pk.trusted_packet_sequence_id = seq
    pk.first_packet_on_sequence = True
    pk.sequence_flags = CLEARED
    if events.height:
        pk.timestamp = int(events["ts"][0])
    interned = pk.interned_data
    for n, i in name_iid.items():
        interned.event_names.add(iid=i, name=n)
    for c, i in cat_iid.items():
        interned.event_categories.add(iid=i, name=c)
    for i, c in enumerate(args):
        interned.debug_annotation_names.add(iid=i + 1, name=c[len(ARG):])
    arg_cols = [events[c].to_list() for c in args]
    cols = [events[c].to_list() for c in ("ts", "ph", "track", "name", "cat", "flow_id", "flow_role", "value")]
    for j, (ts, ph, track, nm, cat, flow, role, value) in enumerate(zip(*cols)):
        pk = out.packet()
        pk.timestamp = ts
        pk.trusted_packet_sequence_id = seq
        pk.sequence_flags = NEEDS_STATE
        te = pk.track_event
        te.track_uuid = uuids[track]
        if ph == "E":
            te.type = SLICE_END
            continue
        if ph == "C":
            te.type = COUNTER
            te.double_counter_value = value
            continue
        te.type = SLICE_BEGIN if ph == "B" else INSTANT
        te.name_iid = name_iid[nm]
        te.category_iids.append(cat_iid[cat])
        if flow is not None:
            (te.terminating_flow_ids if role == "in" else te.flow_ids).append(flow)
        for k, col in enumerate(arg_cols):
            v = col[j]
            if v is None:
                continue
            ann = te.debug_annotations.add()
            ann.name_iid = k + 1
            _set_value(ann, v)


def _events(t: RankTables, shift: int) -> pl.DataFrame:
    """Begin/end/instant/counter rows in an order valid on every track: (ts, track, i, pos)."""
    s = t.slices
    args = [c for c in s.columns if c.startswith(ARG)]
    flows = [c for c in ("flow_id", "flow_role") if c in s.columns]
    begin = s.select(pl.col("start_ns").alias("ts"), pl.lit("B").alias("ph"), "track", "i", "pos", "name", "cat",
                     *flows, *args)
    end = s.select(pl.col("end_ns").alias("ts"), pl.lit("E").alias("ph"), "track", "i",
                   (pl.col("pos") + pl.when(pl.col("pos") == 0).then(5).otherwise(1)).cast(pl.Int8).alias("pos"))
    inst = t.instants.select("ts", pl.lit("I").alias("ph"), "track", pl.lit(-1, dtype=pl.Int64).alias("i"),
                             pl.lit(0, dtype=pl.Int8).alias("pos"), "name", pl.lit("note").alias("cat"),
                             *[c for c in t.instants.columns if c.startswith(ARG)])
    ctr = t.counters.select("ts", pl.lit("C").alias("ph"), "track", "i", "pos", "value")
    ev = pl.concat([begin, end, inst, ctr], how="diagonal_relaxed")
    for c in ("flow_id", "flow_role", "value"):
        if c not in ev.columns:
            ev = ev.with_columns(pl.lit(None).alias(c))
    return ev.with_columns(pl.col("ts") + shift).sort("ts", "track", "i", "pos", maintain_order=True)
