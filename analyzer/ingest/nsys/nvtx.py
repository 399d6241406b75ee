"""NVTX ranges of an Nsight Systems export: annotations, NCCL calls (``comm_calls``) and steps.

NCCL annotates its API in an NVTX domain named "NCCL" (``ncclAllReduce``, ``ncclSend``,
``ncclGroupStart``/``ncclGroupEnd`` ...). Exports often lack the domain-create row, so NCCL ranges
are recognised by text too. Grouped calls launch their kernel inside ``ncclGroupEnd``, so a group
becomes one call spanning ``ncclGroupStart`` .. ``ncclGroupEnd`` (the launch is then inside it).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import polars as pl

from ... import patterns
from ...comm_catalogue import op_from_collective_name
from ...model import COMM_CALL_SCHEMA, STEP_SCHEMA
from ...rules import DIRECTED_P2P_OPS, NVTX_STEP_MARKER, STEP_PREFIX
from .schema import NVTX_DOMAIN_CREATE, NVTX_RANGE_TYPES, Schema, col, fetch, pid_of, tid_of

DEFAULT_STEP_MARKER = NVTX_STEP_MARKER  # unanchored: see rules.py
_NCCL_API = r"^nccl[A-Z][A-Za-z0-9_]*$"
_TORCH_NCCL = r"^nccl:([A-Za-z_]+)"  # PyTorch's own record_function("nccl:all_reduce") ranges
_COMM_OPS = frozenset(
    {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", *DIRECTED_P2P_OPS,
     "gather", "scatter"}
)

_RAW_SCHEMA: dict[str, pl.DataType] = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "global_tid": pl.Int64,
    "domain": pl.Int64,
    "name": pl.Utf8,
    "payload": pl.Utf8,
}


def read_ranges(conn: sqlite3.Connection, schema: Schema, warnings: list[str], marker: str | None = None
                ) -> pl.DataFrame:
    """The closed NVTX ranges a table reads: pid, tid, start_ns, end_ns, name, domain, is_nccl, payload.

    Those are NCCL's (its domain, or ``nccl*`` text: the API and PyTorch's ``nccl:<op>``) and the
    step markers; SQLite filters them (with the default marker), so the bulk of a real export --
    millions of op ranges (``aten::copy_, op_id = ...``) -- is never read.
    """
    t = "NVTX_EVENTS"
    cols = schema.cols(t)
    if not schema.has(t):
        warnings.append("no NVTX_EVENTS table: no annotations, NCCL calls or step markers (trace nvtx)")
        return _empty()
    if not {"start", "end"} <= cols:
        warnings.append("NVTX_EVENTS lacks start/end columns: NVTX ignored")
        return _empty()
    strings = schema.has("StringIds")
    text = [f"n.{c}" for c in ("text",) if c in cols]
    if "textId" in cols and strings:
        text.append("s.value")
    payload = [f"n.{c}" for c in ("jsonText",) if c in cols]
    if "jsonTextId" in cols and strings:
        payload.append("js.value")
    joins = ""
    if "textId" in cols and strings:
        joins += " LEFT JOIN StringIds s ON s.id = n.textId"
    if "jsonTextId" in cols and strings:
        joins += " LEFT JOIN StringIds js ON js.id = n.jsonTextId"
    type_filter = f"n.eventType IN {NVTX_RANGE_TYPES} AND " if "eventType" in cols else ""
    nccl_domains = _domain_ids(conn, schema, "NCCL")
    sql = (
        f'SELECT n.start, n."end", {col(schema, t, "globalTid", "gtid", "n.")}, '
        f'{col(schema, t, "domainId", "domain", "n.")}, {_coalesce(text)}, {_coalesce(payload)} '
        f'FROM NVTX_EVENTS n{joins} WHERE {type_filter}n."end" IS NOT NULL AND n.start IS NOT NULL'
        f"{_wanted(cols, strings, nccl_domains, marker)}"
    )
    raw = fetch(conn, sql, _RAW_SCHEMA)
    if "globalTid" not in cols:
        warnings.append("NVTX_EVENTS has no globalTid: ranges assigned to process 0")
    ranges = raw.with_columns(
        pid_of(pl.col("global_tid")).fill_null(0).alias("pid"),
        tid_of(pl.col("global_tid")).fill_null(0).alias("tid"),
        pl.col("name").fill_null(""),
    ).with_columns(
        (pl.col("domain").is_in(nccl_domains) | pl.col("name").str.contains(_NCCL_API)).alias("is_nccl"),
    ).drop("global_tid")
    # the rule itself (the SQL above only narrows): NCCL ranges, PyTorch's nccl:<op>, step markers
    wanted = ranges.filter(~pl.col("is_nccl") & ~pl.col("name").str.contains(_TORCH_NCCL))
    markers, _ = _marker_hits(wanted, _compile(marker or DEFAULT_STEP_MARKER))
    return pl.concat([ranges.filter(pl.col("is_nccl") | pl.col("name").str.contains(_TORCH_NCCL)), markers]).sort(
        "start_ns", maintain_order=True)


def _wanted(cols: frozenset[str], strings: bool, nccl_domains: list[int], marker: str | None) -> str:
    """SQL that keeps NCCL ranges and default step markers (a superset); '' with a custom marker."""
    if marker:
        return ""  # any text may match a user's regex: read every range, filter after
    texts = "nccl*"
    conds = []
    if nccl_domains and "domainId" in cols:
        conds.append(f"n.domainId IN ({', '.join(str(int(d)) for d in nccl_domains)})")
    if "text" in cols:
        conds += [f"n.text GLOB '{texts}'", f"instr(n.text, '{STEP_PREFIX}') > 0"]
    if "textId" in cols and strings:
        conds.append(f"n.textId IN (SELECT id FROM StringIds WHERE value GLOB '{texts}' "
                     f"OR instr(value, '{STEP_PREFIX}') > 0)")
    return f" AND ({' OR '.join(conds)})" if conds else " AND 0"


def _compile(pattern: str) -> patterns.UserPattern:
    """The marker, checked once (analyzer/patterns.py: a linear-time engine; one line where it cannot run)."""
    return patterns.check(pattern, "--step-marker")


def _coalesce(exprs: list[str]) -> str:
    if not exprs:
        return "NULL"
    return exprs[0] if len(exprs) == 1 else f"COALESCE({', '.join(exprs)})"


def _empty() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "domain": pl.Int64, "name": pl.Utf8,
                "payload": pl.Utf8, "pid": pl.Int64, "tid": pl.Int64, "is_nccl": pl.Boolean}
    )


def _domain_ids(conn: sqlite3.Connection, schema: Schema, name: str) -> list[int]:
    """Domain ids created under ``name`` (the create row stores the domain name as its text)."""
    cols = schema.cols("NVTX_EVENTS")
    if not {"eventType", "domainId", "text"} <= cols:
        return []
    sql = "SELECT DISTINCT domainId FROM NVTX_EVENTS WHERE eventType = ? AND text = ?"
    rows = conn.execute(sql, (NVTX_DOMAIN_CREATE, name)).fetchall()
    return [int(r[0]) for r in rows if r[0] is not None]


# ----------------------------------------------------------------------------- NCCL calls


@functools.lru_cache(maxsize=1024)
def _api_op(name: str) -> str | None:
    """``ncclAllReduce`` -> all_reduce; None for non-communication APIs (ncclCommCount ...). Remembered: a
    report repeats a few API names (66 k calls of ~10 names in the replicated benchmark export)."""
    op = op_from_collective_name(name.replace("Bcast", "Broadcast"))
    return op if op in _COMM_OPS else None


_NO_FIELDS: Mapping[str, Any] = MappingProxyType({})


def _payload(text: str | None) -> Mapping[str, Any]:
    """Fields of an NCCL NVTX payload exported as JSON (``--include-json``); empty when absent.

    NCCL labels its payload entries "NCCL communicator ID", "Message size [bytes]", "No. of ranks",
    "Peer rank", "Root", "Reduction operation"; match them loosely, at any nesting depth. A run repeats
    a few payloads (one communicator, a few message sizes), so each text is parsed once and its fields
    shared, read-only.
    """
    return _payload_fields(text) if text else _NO_FIELDS


@functools.lru_cache(maxsize=4096)
def _payload_fields(text: str) -> Mapping[str, Any]:
    return MappingProxyType(_parse_payload(text))


def _parse_payload(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    flat: dict[str, Any] = {}
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if isinstance(v, (dict, list)):
                    stack.append(v)
                else:
                    flat.setdefault(str(k).lower(), v)
        elif isinstance(item, list):
            stack.extend(item)
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if "communicator" in key or key in ("comm", "commhash"):
            out.setdefault("comm", value)
        elif "message size" in key or key in ("bytes", "size"):
            out.setdefault("bytes", _int(value))
        elif "no. of ranks" in key or key in ("nranks", "ranks"):
            out.setdefault("nranks", _int(value))
        elif "data type" in key or key == "datatype":
            out.setdefault("dtype", str(value))
        elif "peer" in key:
            out.setdefault("peer", _int(value))  # ncclSend/ncclRecv: the peer's rank in the communicator
        elif key == "rank":
            out.setdefault("comm_rank", _int(value))  # ncclCommInitRank: this process's rank in it
    return out


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _pg(comm: Any) -> str | None:
    if comm is None:
        return None
    if isinstance(comm, int) and not isinstance(comm, bool):
        return f"{comm & 0xFFFFFFFFFFFFFFFF:#x}"
    return str(comm)


def _sizes(op: str, nbytes: int | None, nranks: int | None) -> tuple[int | None, int | None]:
    """(in_bytes, out_bytes) from NCCL's message size (send size for all_gather, recv for reduce_scatter)."""
    if nbytes is None:
        return None, None
    if op == "all_gather":
        return nbytes, nbytes * nranks if nranks else None
    if op == "reduce_scatter":
        return nbytes * nranks if nranks else None, nbytes
    return nbytes, nbytes


def _call(pid: int, tid: int, start: int, end: int, members: list[tuple[str, Mapping[str, Any]]],
          nranks_of: dict[str, int], pids_of: dict[str, dict[int, int]] | None = None) -> dict[str, Any]:
    ops = {op for op, _ in members}
    op = ops.pop() if len(ops) == 1 else ("send_recv" if ops == set(DIRECTED_P2P_OPS) else "coalesced")
    pgs = {_pg(p.get("comm")) for _, p in members}
    pg = pgs.pop() if len(pgs) == 1 else None
    size = nranks_of.get(pg) if pg else None
    size = size or next((p["nranks"] for _, p in members if p.get("nranks")), None)
    ins, outs = zip(*(_sizes(o, p.get("bytes"), size) for o, p in members), strict=True)
    dtypes = {p.get("dtype") for _, p in members}
    # a lone send/recv names its peer by communicator rank; the communicator's members (init payloads
    # of every process in the report) turn it, and the member list, into processes (ranks later)
    where = (pids_of or {}).get(pg or "", {})
    peer = members[0][1].get("peer") if len(members) == 1 and op in DIRECTED_P2P_OPS else None
    full = bool(size) and len(where) == size
    return {
        "pid": pid, "tid": tid, "start_ns": start, "end_ns": end, "op": op, "pg": pg,
        "dtype": dtypes.pop() if len(dtypes) == 1 else None,
        "in_bytes": None if None in ins else sum(ins), "out_bytes": None if None in outs else sum(outs),
        "group_size": size, "peer_group_rank": peer, "peer_pid": where.get(peer) if peer is not None else None,
        "member_pids": [where[k] for k in sorted(where)] if full else None,
    }


def comm_calls(ranges: pl.DataFrame) -> pl.DataFrame:
    """One row per NCCL call (or group of calls) as the host issued it, with ``pid``."""
    nccl = ranges.filter(pl.col("is_nccl")).sort("pid", "tid", "start_ns")
    # Communicator sizes from ncclCommInitRank* payloads, when the export kept them. A communicator
    # hash is the same on every member, so one process's init row serves all in the report.
    nranks_of: dict[str, int] = {}
    pids_of: dict[str, dict[int, int]] = {}  # communicator -> its rank -> process
    inits = nccl.filter(pl.col("name").str.starts_with("ncclCommInit") & pl.col("payload").is_not_null())
    for pid, payload in inits.select("pid", "payload").iter_rows():
        fields = _payload(payload)
        if fields.get("nranks") and fields.get("comm") is not None:
            nranks_of[_pg(fields["comm"]) or ""] = fields["nranks"]
        if fields.get("comm") is not None and fields.get("comm_rank") is not None:
            pids_of.setdefault(_pg(fields["comm"]) or "", {})[fields["comm_rank"]] = pid
    rows: list[dict[str, Any]] = []
    # A loop over NCCL API ranges only (a few per collective), not over kernels: group nesting
    # is a per-thread state machine that reads clearer here than as window functions.
    depth, key, g_start, members, last_end = 0, None, 0, [], 0
    for pid, tid, start, end, name, payload in nccl.select(
        "pid", "tid", "start_ns", "end_ns", "name", "payload"
    ).iter_rows():
        if (pid, tid) != key:
            if depth > 0 and members and key is not None:  # a group cut off by the capture end
                rows.append(_call(key[0], key[1], g_start, last_end, members, nranks_of, pids_of))
            depth, key, members = 0, (pid, tid), []
        if name == "ncclGroupStart":
            if depth == 0:
                g_start, members, last_end = start, [], start
            depth += 1
        elif name == "ncclGroupEnd":
            if depth == 0:
                continue  # its ncclGroupStart fell before the capture: members unknown
            depth -= 1
            if depth == 0 and members:
                rows.append(_call(pid, tid, g_start, end, members, nranks_of, pids_of))
        elif (op := _api_op(name)) is not None:
            fields = _payload(payload)
            if depth > 0:
                members.append((op, fields))
                last_end = max(last_end, end)
            else:
                rows.append(_call(pid, tid, start, end, [(op, fields)], nranks_of, pids_of))
    if depth > 0 and members and key is not None:
        rows.append(_call(key[0], key[1], g_start, last_end, members, nranks_of, pids_of))

    schema = {"pid": pl.Int64, **COMM_CALL_SCHEMA, "peer_pid": pl.Int64, "member_pids": pl.List(pl.Int64)}
    calls = pl.DataFrame(rows, schema=schema, strict=False) if rows else pl.DataFrame(schema=schema)
    return pl.concat([calls, _torch_calls(ranges, calls)], how="diagonal_relaxed").sort("pid", "start_ns")


def with_ranks(calls: pl.DataFrame, rank_of: dict[int, int]) -> pl.DataFrame:
    """Processes -> ranks in the NCCL payload fields: the p2p peer and the communicator's member list."""
    if "peer_pid" not in calls.columns or calls.height == 0:
        return calls
    table = {int(k): int(v) for k, v in rank_of.items()}
    as_rank = pl.element().replace_strict(table, default=None, return_dtype=pl.Int32)
    members = pl.col("member_pids").list.eval(as_rank)
    return calls.with_columns(
        pl.coalesce("peer", pl.col("peer_pid").replace_strict(table, default=None, return_dtype=pl.Int32)).alias("peer"),
        pl.coalesce("group_ranks", pl.when(members.list.eval(pl.element().is_null()).list.any().not_())
                    .then(members.cast(pl.List(pl.Utf8)).list.join(","))).alias("group_ranks"),
    ).drop("peer_pid", "member_pids")


def _torch_calls(ranges: pl.DataFrame, nccl_calls: pl.DataFrame) -> pl.DataFrame:
    """PyTorch ``nccl:<op>`` ranges, for processes whose NCCL NVTX was off (NCCL_NVTX_DISABLE=1)."""
    covered = nccl_calls["pid"].unique().to_list()
    torch = ranges.filter(~pl.col("pid").is_in(covered) & pl.col("name").str.contains(_TORCH_NCCL))
    if torch.height == 0:
        return pl.DataFrame(schema={"pid": pl.Int64, **COMM_CALL_SCHEMA})
    raw = torch["name"].str.extract(_TORCH_NCCL, 1)
    mapping = {n: op_from_collective_name(n) for n in raw.unique().drop_nulls().to_list()}
    return torch.with_columns(
        raw.replace_strict(mapping, default=None, return_dtype=pl.Utf8).alias("op")
    ).select("pid", "tid", "start_ns", "end_ns", "op")


# ----------------------------------------------------------------------------- steps


def steps(ranges: pl.DataFrame, marker: str | None) -> pl.DataFrame:
    """Step windows per pid from ranges matching ``marker`` (default: PyTorch ``ProfilerStep#N``).

    Step number: the marker's first capture group when it is a number, else the first integer
    in the text, else the ordinal of the range.
    """
    rx = _compile(marker or DEFAULT_STEP_MARKER)
    hit, group = _marker_hits(ranges.filter(~pl.col("is_nccl")), rx)
    if hit.height == 0:
        return pl.DataFrame(schema={"pid": pl.Int64, **STEP_SCHEMA})
    first_int = hit["name"].str.extract(r"(\d+)", 1).cast(pl.Int64, strict=False)
    number = group.cast(pl.Int64, strict=False).fill_null(first_int) if group is not None else first_int
    return (
        hit.with_columns(number.alias("_num"))
        .sort("pid", "start_ns")
        .with_columns(
            # All numbered, or none (ordinals in time order): mixing both would collide.
            pl.when(pl.col("_num").is_not_null().all().over("pid"))
            .then(pl.col("_num"))
            .otherwise(pl.int_range(pl.len(), dtype=pl.Int64).over("pid"))
            .alias("step")
        )
        .group_by("pid", "step")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort("pid", "step")
    )


def _marker_hits(cand: pl.DataFrame, rx: patterns.UserPattern) -> tuple[pl.DataFrame, pl.Series | None]:
    """Ranges whose text matches, and the first capture group's text (when the marker has one)."""
    hit = cand.filter(rx.contains("name"))
    return hit, (hit.select(rx.first_group("name")).to_series() if rx.groups else None)
