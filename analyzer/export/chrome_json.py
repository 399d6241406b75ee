"""Analysis -> the same trace in Chrome's JSON trace-event format (``--format json``), streamed per rank.

Same processes, tracks (threads), slices, flows, notes and counters as ``perfetto.py``. JSON numbers
are doubles, so times are microseconds from ``metadata["commscope.base_ns"]`` (the earliest time
written) with three decimals: exact to the nanosecond where absolute epoch nanoseconds would not be.
Flows use the v2 fields (``bind_id``, ``flow_out``, ``flow_in``) on the kernel slices themselves.
"""

from __future__ import annotations

from typing import IO

import msgspec

from ..analysis import Analysis
from ..rules import NS_PER_US
from .perfetto import meta_lines
from .tables import ARG, CHUNK, Plan, RankTables, rank_tables
from .text import metadata, process_name

RUN_PID = 0


def write(a: Analysis, p: Plan, f: IO[bytes]) -> dict:
    enc = msgspec.json.Encoder()
    base = p.base_ns
    f.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
    head = [{"ph": "M", "name": "process_name", "pid": RUN_PID, "tid": 0, "args": {"name": "commscope"}}]
    head += [{"ph": "i", "s": "g", "name": text, "cat": "note", "ts": 0.0, "pid": RUN_PID, "tid": 0}
             for text in meta_lines(a)]
    f.write(b",\n".join(enc.encode(e) for e in head))
    counts = {"ranks": 0, "slices": 0, "flow_slices": 0, "dropped": 0}
    for k in range(0, len(p.ranks), CHUNK):
        for t in rank_tables(a, p, p.ranks[k:k + CHUNK]):
            events = _rank(a, t, base)
            if events:
                f.write(b",\n" + b",\n".join(enc.encode(e) for e in events))
            counts["ranks"] += 1
            counts["slices"] += t.slices.height
            counts["flow_slices"] += int(t.slices["flow_id"].is_not_null().sum()) if "flow_id" in t.slices.columns else 0
            counts["dropped"] += t.dropped
    meta = {**metadata(a, p, 0), "commscope.base_ns": base}
    f.write(b'\n],"metadata":' + enc.encode(meta) + b"}\n")
    return counts


def _us(ns: int, base: int) -> float:
    return (ns - base) / NS_PER_US


def _rank(a: Analysis, t: RankTables, base: int) -> list[dict]:
    pid = t.rank + 1  # as in the protobuf trace
    name, description = process_name(a, t.rank, t.device)
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": t.rank}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": description.replace("\n", "; ")}},
    ]
    tids = {}
    for order, track, counter in t.tracks.select("order", "track", "counter").iter_rows():
        if counter:
            continue
        tids[track] = order + 1
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": order + 1, "args": {"name": track}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": order + 1, "args": {"sort_index": order}})
    s = t.slices.sort("start_ns", "track", "i", "pos")
    args = [c for c in s.columns if c.startswith(ARG)]
    has_flow = "flow_id" in s.columns
    cols = [s[c].to_list() for c in ("track", "start_ns", "end_ns", "name", "cat")]
    flow_id = s["flow_id"].to_list() if has_flow else [None] * s.height
    role = s["flow_role"].to_list() if has_flow else [None] * s.height
    arg_cols = [(c[len(ARG):], s[c].to_list()) for c in args]
    for j, (track, start, end, nm, cat) in enumerate(zip(*cols)):
        e = {"ph": "X", "name": nm, "cat": cat, "ts": _us(start, base), "dur": (end - start) / NS_PER_US,
             "pid": pid, "tid": tids[track]}
        a_ = {k: col[j] for k, col in arg_cols if col[j] is not None}
        if a_:
            e["args"] = a_
        if flow_id[j] is not None:
            e["bind_id"] = f"0x{flow_id[j]:x}"
            e["flow_out"] = role[j] != "in"
            e["flow_in"] = role[j] != "out"
        ev.append(e)
    inst_args = [c for c in t.instants.columns if c.startswith(ARG)]
    for row in t.instants.iter_rows(named=True):
        e = {"ph": "i", "s": "t", "name": row["name"], "cat": "note", "ts": _us(row["ts"], base), "pid": pid,
             "tid": tids[row["track"]]}
        a_ = {c[len(ARG):]: row[c] for c in inst_args if row[c] is not None}
        if a_:
            e["args"] = a_
        ev.append(e)
    c = t.counters.sort("ts", "track", "i", "pos")
    for track, ts, value in c.select("track", "ts", "value").iter_rows():
        ev.append({"ph": "C", "name": track, "pid": pid, "ts": _us(ts, base), "args": {"value": value}})
    return ev

