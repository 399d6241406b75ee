"""Decode an exported Perfetto trace with the ``perfetto`` package's protos, the way a viewer would.

Slices are rebuilt from begin/end packets with a stack per track, which also checks what Perfetto
needs to draw them right: every end closes the innermost open slice of its track, and each packet
sequence is in time order (so sorting by timestamp keeps each track's order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


@dataclass
class Decoded:
    processes: dict[int, tuple[int, str, str]] = field(default_factory=dict)  # uuid -> (pid, name, description)
    tracks: dict[int, tuple[int, str, bool]] = field(default_factory=dict)  # uuid -> (parent uuid, name, counter)
    metadata: dict[str, object] = field(default_factory=dict)
    slices: pl.DataFrame | None = None  # pid, track, name, cat, start_ns, end_ns, depth, flow_ids, args
    instants: list[dict] = field(default_factory=list)
    counters: list[dict] = field(default_factory=list)


def decode(src: Path | bytes) -> Decoded:
    trace = Trace()
    trace.ParseFromString(src if isinstance(src, bytes) else Path(src).read_bytes())
    out = Decoded()
    names: dict[int, dict[int, str]] = {}
    cats: dict[int, dict[int, str]] = {}
    anns: dict[int, dict[int, str]] = {}
    last_ts: dict[int, int] = {}
    stacks: dict[int, list[dict]] = {}
    rows: list[dict] = []
    for pk in trace.packet:
        for m in pk.chrome_events.metadata:
            out.metadata[m.name] = m.string_value if m.HasField("string_value") else (
                m.int_value if m.HasField("int_value") else m.bool_value)
        if pk.HasField("track_descriptor"):
            d = pk.track_descriptor
            if d.HasField("process"):
                out.processes[d.uuid] = (d.process.pid, d.process.process_name, d.description)
            else:
                out.tracks[d.uuid] = (d.parent_uuid, d.name, d.HasField("counter"))
        seq = pk.trusted_packet_sequence_id
        if pk.HasField("interned_data"):
            if pk.sequence_flags & pk.SEQ_INCREMENTAL_STATE_CLEARED:
                names[seq], cats[seq], anns[seq] = {}, {}, {}
            names[seq].update({e.iid: e.name for e in pk.interned_data.event_names})
            cats[seq].update({e.iid: e.name for e in pk.interned_data.event_categories})
            anns[seq].update({e.iid: e.name for e in pk.interned_data.debug_annotation_names})
        if not pk.HasField("track_event"):
            continue
        assert pk.timestamp >= last_ts.get(seq, 0), "packets of a sequence must be in time order"
        last_ts[seq] = pk.timestamp
        te = pk.track_event
        name = names[seq][te.name_iid] if te.name_iid else te.name
        cat = cats[seq].get(te.category_iids[0]) if len(te.category_iids) else None
        args = {}
        for a in te.debug_annotations:
            key = anns[seq][a.name_iid] if a.name_iid else a.name
            args[key] = getattr(a, a.WhichOneof("value"))
        stack = stacks.setdefault(te.track_uuid, [])
        if te.type == TrackEvent.TYPE_SLICE_BEGIN:
            stack.append({"track": te.track_uuid, "name": name, "cat": cat, "start_ns": pk.timestamp,
                          "depth": len(stack), "flow_ids": list(te.flow_ids) + list(te.terminating_flow_ids),
                          "args": args})
        elif te.type == TrackEvent.TYPE_SLICE_END:
            assert stack, f"end without begin on track {te.track_uuid} at {pk.timestamp}"
            s = stack.pop()
            assert pk.timestamp >= s["start_ns"]
            rows.append({**s, "end_ns": pk.timestamp})
        elif te.type == TrackEvent.TYPE_INSTANT:
            out.instants.append({"track": te.track_uuid, "ts": pk.timestamp, "name": name, "args": args})
        elif te.type == TrackEvent.TYPE_COUNTER:
            out.counters.append({"track": te.track_uuid, "ts": pk.timestamp, "value": te.double_counter_value})
    assert all(not s for s in stacks.values()), "slices left open"
    pid = {u: p[0] for u, p in out.processes.items()}
    df = pl.DataFrame(rows, schema={"track": pl.UInt64, "name": pl.Utf8, "cat": pl.Utf8, "start_ns": pl.Int64,
                                    "depth": pl.Int64, "flow_ids": pl.List(pl.UInt64), "args": pl.Object,
                                    "end_ns": pl.Int64})
    rank_of = {u: pid.get(t[0], 0) - 1 for u, t in out.tracks.items()}
    out.slices = df.with_columns(
        pl.col("track").replace_strict(rank_of, return_dtype=pl.Int64).alias("rank"),
        pl.col("track").replace_strict({u: t[1] for u, t in out.tracks.items()}, return_dtype=pl.Utf8)
        .alias("track_name"),
    )
    return out
