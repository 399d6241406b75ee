"""Write Nsight Systems-style SQLite exports, so one synthetic workload exists in both formats.

- :class:`NsysExport` builds an export row by row (tests use it for hand-made fixtures) in one of
  three layouts: ``"current"`` (2026.x: NCCL NVTX strings registered in StringIds, no domain-create
  row, ``META_DATA_EXPORT``), ``"2023.4"`` (older: fewer kernel columns, NVTX text inline with a
  domain-create row, ``jsonTextId`` but no ``jsonText``/``binaryData``, ``EXPORT_META_DATA``, no
  PROCESSES/TARGET_INFO_GPU tables) and ``"reduced"`` (a stripped export: no globalPid, no NVTX,
  no session start; like the ``healthy_1pct`` sample).
- :func:`kineto_to_nsys` converts PyTorch profiler (Kineto) JSON files, plain or gzipped, into
  such an export. It depends only on the Kineto file format. Times are parsed exactly (µs strings
  through Decimal, to integer ns).
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

VARIANTS = ("current", "2023.4", "reduced")
NSYS_VERSION = "2026.2.1.210"
_VM = 1 << 48  # the VM / hardware part of a serialized GlobalId, as in real exports

# Columns per table, widest layout first; variants drop some (see _DROP).
_TABLES: dict[str, list[str]] = {
    "StringIds": ["id INTEGER PRIMARY KEY", "value TEXT NOT NULL"],
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        "start INTEGER NOT NULL", '"end" INTEGER NOT NULL', "deviceId INTEGER NOT NULL", "contextId INTEGER",
        "greenContextId INTEGER", "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER",
        "demangledName INTEGER NOT NULL", "shortName INTEGER NOT NULL", "mangledName INTEGER",
        "gridX INTEGER", "gridY INTEGER", "gridZ INTEGER", "blockX INTEGER", "blockY INTEGER", "blockZ INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_MEMCPY": [
        "start INTEGER NOT NULL", '"end" INTEGER NOT NULL', "deviceId INTEGER NOT NULL", "contextId INTEGER",
        "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER", "bytes INTEGER NOT NULL",
        "copyKind INTEGER NOT NULL", "srcKind INTEGER", "dstKind INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_MEMSET": [
        "start INTEGER NOT NULL", '"end" INTEGER NOT NULL', "deviceId INTEGER NOT NULL", "contextId INTEGER",
        "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER", "value INTEGER",
        "bytes INTEGER NOT NULL", "memKind INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [
        "start INTEGER NOT NULL", '"end" INTEGER NOT NULL', "deviceId INTEGER NOT NULL", "contextId INTEGER",
        "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER", "syncType INTEGER NOT NULL",
    ],
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        "start INTEGER NOT NULL", '"end" INTEGER NOT NULL', "eventClass INTEGER", "globalTid INTEGER",
        "correlationId INTEGER", "nameId INTEGER NOT NULL", "returnValue INTEGER",
    ],
    "NVTX_EVENTS": [
        "start INTEGER NOT NULL", '"end" INTEGER', "eventType INTEGER NOT NULL", "rangeId INTEGER",
        "category INTEGER", "color INTEGER", "text TEXT", "globalTid INTEGER", "endGlobalTid INTEGER",
        "textId INTEGER", "domainId INTEGER", "uint64Value INTEGER", "jsonTextId INTEGER", "jsonText TEXT",
        "binaryData TEXT",
    ],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs INTEGER", "utcTime TEXT", "localTime TEXT"],
    "TARGET_INFO_GPU": ["vmId INTEGER", "id INTEGER NOT NULL", "name TEXT", "busLocation TEXT"],
    "TARGET_INFO_SYSTEM_ENV": ["globalVid INTEGER", "devStateName TEXT", "name TEXT", "nameEnum INTEGER",
                               "value TEXT"],
    "PROCESSES": ["globalPid INTEGER", "pid INTEGER", "name TEXT"],
    "META_DATA_EXPORT": ["name TEXT NOT NULL", "value TEXT"],
}
_DROP: dict[str, dict[str, set[str] | None]] = {  # variant -> table -> dropped columns (None: whole table)
    "current": {},
    "2023.4": {
        "CUPTI_ACTIVITY_KIND_KERNEL": {"greenContextId", "mangledName"},
        "NVTX_EVENTS": {"jsonText", "binaryData"},
        "PROCESSES": None, "TARGET_INFO_GPU": None, "TARGET_INFO_SYSTEM_ENV": None,
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": None,
    },
    "reduced": {
        "CUPTI_ACTIVITY_KIND_KERNEL": {"contextId", "greenContextId", "globalPid", "mangledName"},
        "CUPTI_ACTIVITY_KIND_MEMCPY": {"contextId", "globalPid", "srcKind", "dstKind"},
        "CUPTI_ACTIVITY_KIND_MEMSET": {"contextId", "globalPid"},
        "CUPTI_ACTIVITY_KIND_RUNTIME": {"eventClass", "returnValue"},
        "NVTX_EVENTS": None, "TARGET_INFO_SESSION_START_TIME": None, "PROCESSES": None,
        "TARGET_INFO_SYSTEM_ENV": None, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": None,
    },
}
_RENAME = {"2023.4": {"META_DATA_EXPORT": "EXPORT_META_DATA"}}

# CUPTI enums (ids as nsys exports them) from the names Kineto gives the same events.
COPY_KIND = {"HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7, "DtoD": 8, "HtoH": 9,
             "PtoP": 10}
MEM_KIND = {"Pageable": 0, "Pinned": 1, "Device": 2, "Array": 3, "Managed": 4, "Device Static": 5,
            "Managed Static": 6, "Unknown": 7}
SYNC_TYPE = {"Event Sync": 1, "Stream Wait Event": 2, "Stream Sync": 3, "Context Sync": 4}
NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 59, 60, 75
NCCL_DOMAIN = 1


def global_pid(pid: int) -> int:
    return _VM | (pid << 24)


def global_tid(pid: int, tid: int) -> int:
    return global_pid(pid) | tid


class NsysExport:
    """Rows of an Nsight Systems export; :meth:`write` lays them out in the chosen variant."""

    def __init__(self, variant: str = "current") -> None:
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}")
        self.variant = variant
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in _TABLES}
        self._strings: dict[str, int] = {}

    def string(self, value: str) -> int:
        if value not in self._strings:
            self._strings[value] = len(self._strings) + 1
            self.rows["StringIds"].append({"id": self._strings[value], "value": value})
        return self._strings[value]

    def process(self, pid: int, name: str = "python3") -> None:
        self.rows["PROCESSES"].append({"globalPid": global_pid(pid), "pid": pid, "name": name})

    def gpu(self, device: int, name: str) -> None:
        self.rows["TARGET_INFO_GPU"].append({"vmId": _VM, "id": device, "name": name, "busLocation": ""})

    def kernel(self, pid: int, start: int, end: int, name: str, device: int = 0, stream: int = 7,
               correlation: int | None = None, short_name: str | None = None) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_KERNEL"].append({
            "start": start, "end": end, "deviceId": device, "contextId": 1, "greenContextId": None,
            "streamId": stream, "correlationId": correlation, "globalPid": global_pid(pid),
            "demangledName": self.string(name), "shortName": self.string(short_name or kernel_short_name(name)),
            "mangledName": None, "gridX": 1, "gridY": 1, "gridZ": 1, "blockX": 128, "blockY": 1, "blockZ": 1,
        })

    def memcpy(self, pid: int, start: int, end: int, copy: str = "HtoD", src: str = "Pageable",
               dst: str = "Device", device: int = 0, stream: int = 7, nbytes: int = 0,
               correlation: int | None = None) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append({
            "start": start, "end": end, "deviceId": device, "contextId": 1, "streamId": stream,
            "correlationId": correlation, "globalPid": global_pid(pid), "bytes": nbytes,
            "copyKind": COPY_KIND[copy], "srcKind": MEM_KIND[src], "dstKind": MEM_KIND[dst],
        })

    def memset(self, pid: int, start: int, end: int, memory: str = "Device", device: int = 0, stream: int = 7,
               nbytes: int = 0, correlation: int | None = None) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append({
            "start": start, "end": end, "deviceId": device, "contextId": 1, "streamId": stream,
            "correlationId": correlation, "globalPid": global_pid(pid), "value": 0, "bytes": nbytes,
            "memKind": MEM_KIND[memory],
        })

    def sync(self, pid: int, start: int, end: int, kind: str = "Stream Sync", device: int = 0, stream: int = 7,
             correlation: int | None = None) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append({
            "start": start, "end": end, "deviceId": device, "contextId": 1, "streamId": stream,
            "correlationId": correlation, "globalPid": global_pid(pid), "syncType": SYNC_TYPE[kind],
        })

    def runtime(self, pid: int, tid: int, start: int, end: int, name: str, correlation: int | None = None) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append({
            "start": start, "end": end, "eventClass": 1, "globalTid": global_tid(pid, tid),
            "correlationId": correlation, "nameId": self.string(name), "returnValue": 0,
        })

    def nvtx(self, pid: int, tid: int, start: int, end: int | None, text: str, domain: int = 0,
             payload: dict[str, Any] | None = None, event_type: int = NVTX_PUSH_POP) -> None:
        """One NVTX range. Like nsys, the current layout stores NCCL's (registered) strings in
        StringIds; the older layout keeps every text inline."""
        registered = domain != 0 and self.variant == "current"
        js = json.dumps(payload) if payload is not None else None
        self.rows["NVTX_EVENTS"].append({
            "start": start, "end": end, "eventType": event_type, "globalTid": global_tid(pid, tid),
            "endGlobalTid": None, "domainId": domain, "text": None if registered else text,
            "textId": self.string(text) if registered else None,
            "jsonText": js if self.variant == "current" else None,
            "jsonTextId": self.string(js) if js is not None and self.variant != "current" else None,
        })

    def nvtx_domain(self, pid: int, tid: int, domain: int, name: str, at: int = 0) -> None:
        self.nvtx(pid, tid, at, None, name, domain=domain, event_type=NVTX_DOMAIN_CREATE)
        self.rows["NVTX_EVENTS"][-1].update(text=name, textId=None)  # create rows keep the name inline

    def session_start(self, utc_epoch_ns: int) -> None:
        self.rows["TARGET_INFO_SESSION_START_TIME"] = [{"utcEpochNs": utc_epoch_ns, "utcTime": "", "localTime": ""}]

    def system_env(self, name: str, value: str) -> None:
        self.rows["TARGET_INFO_SYSTEM_ENV"].append(
            {"globalVid": _VM, "devStateName": "Local (CLI)", "name": name, "nameEnum": 0, "value": value})

    def meta(self, name: str, value: str) -> None:
        self.rows["META_DATA_EXPORT"].append({"name": name, "value": value})

    def write(self, path: Path) -> Path:
        """Write a fresh SQLite file (tables exist even when empty, except those the variant drops)."""
        path = Path(path)
        path.unlink(missing_ok=True)
        drop, rename = _DROP[self.variant], _RENAME.get(self.variant, {})
        conn = sqlite3.connect(path)
        try:
            for table, cols in _TABLES.items():
                if table in drop and drop[table] is None:
                    continue
                gone = drop.get(table) or set()
                keep = [c for c in cols if c.split()[0].strip('"') not in gone]
                names = [c.split()[0] for c in keep]
                name = rename.get(table, table)
                conn.execute(f"CREATE TABLE {name} ({', '.join(keep)})")
                rows = [tuple(r.get(n.strip('"')) for n in names) for r in self.rows[table]]
                if rows:
                    marks = ", ".join("?" * len(names))
                    conn.executemany(f"INSERT INTO {name} ({', '.join(names)}) VALUES ({marks})", rows)
            conn.commit()
        finally:
            conn.close()
        return path


def kernel_short_name(name: str) -> str:
    """nsys ``shortName``: the bare function name (no return type, templates, args or namespaces)."""
    s = name[5:] if name.startswith("void ") else name
    s = s.split("(", 1)[0]
    while True:
        t = re.sub(r"<[^<>]*>", "", s)
        if t == s:
            break
        s = t
    return s.rsplit("::", 1)[-1].strip() or name


# ----------------------------------------------------------------------------- Kineto -> nsys


def load_kineto(path: Path) -> dict[str, Any]:
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)  # exact µs -> ns, no binary float rounding


def _ns(us: Any) -> int:
    return int((Decimal(us) * 1000).to_integral_value())


_NCCL_API = {
    "allreduce": "ncclAllReduce", "all_reduce": "ncclAllReduce", "barrier": "ncclAllReduce",
    "allgather": "ncclAllGather", "all_gather": "ncclAllGather", "_allgather_base": "ncclAllGather",
    "allgather_into_tensor_coalesced": "ncclAllGather", "reduce_scatter": "ncclReduceScatter",
    "_reduce_scatter_base": "ncclReduceScatter", "reduce_scatter_tensor_coalesced": "ncclReduceScatter",
    "all_to_all": "ncclAlltoAll", "alltoall": "ncclAlltoAll", "alltoall_base": "ncclAlltoAll",
    "all_to_allv": "ncclAlltoAll", "broadcast": "ncclBroadcast", "reduce": "ncclReduce",
    "send": "ncclSend", "recv": "ncclRecv", "gather": "ncclGather", "scatter": "ncclScatter",
}
_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
                "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "byte": 1, "char": 1, "bool": 1,
                "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}
_API_VERSION = {"cudaLaunchKernel": "_v7000", "cudaLaunchKernelExC": "_v11060", "cudaGraphLaunch": "_v10000"}


def _nsys_api_name(name: str) -> str:
    """nsys spells runtime APIs with their version (cudaLaunchKernel_v7000); driver APIs plainly."""
    if name.startswith("cuda") and not re.search(r"_v\d{4,}$", name):
        return name + _API_VERSION.get(name, "_v3020")
    return name


def _comm_id(args: dict[str, Any]) -> int:
    return zlib.crc32(str(args.get("Process Group Name", "0")).encode())


def _nccl_payload(args: dict[str, Any], api: str) -> dict[str, Any]:
    size = _DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
    nelems = args.get("Out msg nelems" if api == "ncclReduceScatter" else "In msg nelems")
    out: dict[str, Any] = {"NCCL communicator ID": _comm_id(args)}
    if size is not None and nelems is not None:
        out["Message size [bytes]"] = int(nelems) * size
    if api in ("ncclSend", "ncclRecv") and args.get("Rank") is not None:
        out["Peer rank"] = int(args["Rank"])  # the peer's rank in the communicator, as PyTorch's "Rank" for p2p
    return out


def _comm_rank(args: dict[str, Any], rank: int) -> int | None:
    """This process's rank in the call's communicator (its index in "Process Group Ranks")."""
    members = [int(x) for x in re.findall(r"-?\d+", str(args.get("Process Group Ranks", "")))]
    return members.index(rank) if rank in members else None


def _add_rank(db: NsysExport, trace: dict[str, Any], pid: int, device_of: dict[int, int],
              payload: bool) -> None:
    tids: dict[Any, int] = {}

    def tid(raw: Any) -> int:
        if raw not in tids:
            ok = isinstance(raw, int) and 0 < raw < (1 << 24) and raw not in tids.values()
            tids[raw] = raw if ok else 0xF00000 + len(tids)  # tids must fit the GlobalId's 24 bits
        return tids[raw]

    db.process(pid)
    comms: dict[int, tuple[int, int | None, int | None]] = {}  # communicator -> (thread, size, own rank in it)
    first = None
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") != "X" or "ts" not in ev:
            continue
        cat, name, args = ev.get("cat", ""), str(ev.get("name", "")), ev.get("args") or {}
        start = _ns(ev["ts"])
        end = start + _ns(ev.get("dur", 0))
        first = start if first is None else min(first, start)
        corr = args.get("correlation")
        dev = device_of.get(int(args.get("device", 0)), int(args.get("device", 0)))
        stream = int(args.get("stream", 0))
        if cat == "kernel":
            db.kernel(pid, start, end, name, device=dev, stream=stream, correlation=corr)
        elif cat == "gpu_memcpy":
            m = re.match(r"Memcpy (\w+)(?: \(([\w ]+) -> ([\w ]+)\))?", name)
            copy, src, dst = (m.groups() if m else ("HtoD", None, None))
            db.memcpy(pid, start, end, copy if copy in COPY_KIND else "HtoD", src or "Pageable", dst or "Device",
                      device=dev, stream=stream, nbytes=int(args.get("bytes", 0)), correlation=corr)
        elif cat == "gpu_memset":
            m = re.match(r"Memset \(([\w ]+)\)", name)
            memory = m.group(1) if m and m.group(1) in MEM_KIND else "Device"
            db.memset(pid, start, end, memory, device=dev, stream=stream, nbytes=int(args.get("bytes", 0)),
                      correlation=corr)
        elif cat == "cuda_sync" and name in SYNC_TYPE:
            db.sync(pid, start, end, name, device=dev, stream=stream, correlation=corr)
        elif cat in ("cuda_runtime", "cuda_driver"):
            db.runtime(pid, tid(ev.get("tid")), start, end, _nsys_api_name(name), correlation=corr)
        elif name == "record_param_comms":
            # NCCL's own NVTX range for the call; the kernel launch sits inside it on the same thread.
            api = _NCCL_API.get(str(args.get("Collective name", "")).lower())
            if api is not None:
                body = _nccl_payload(args, api) if payload else None
                db.nvtx(pid, tid(ev.get("tid")), start, end, api, domain=NCCL_DOMAIN, payload=body)
                size = args.get("Group size")
                comms.setdefault(_comm_id(args), (tid(ev.get("tid")), int(size) if size is not None else None,
                                                  _comm_rank(args, pid - 1000)))
        elif cat == "user_annotation":
            db.nvtx(pid, tid(ev.get("tid")), start, end, name)
    if payload and first is not None:
        # NCCL's init range carries the communicator size (all_gather / reduce_scatter totals need it).
        for comm, (thread, size, own) in comms.items():
            body = {"NCCL communicator ID": comm, "No. of ranks": size}
            if own is not None:
                body["Rank"] = own
            db.nvtx(pid, thread, first - 2_000, first - 1_000, "ncclCommInitRank", NCCL_DOMAIN, body)
    for prop in trace.get("deviceProperties", []) or []:
        if isinstance(prop, dict) and "id" in prop:
            dev = device_of.get(int(prop["id"]), int(prop["id"]))
            if dev not in {r["id"] for r in db.rows["TARGET_INFO_GPU"]}:
                db.gpu(dev, str(prop.get("name", "")))


def _start(db: NsysExport, traces: list[dict[str, Any]]) -> None:
    bases = [int(t["baseTimeNanoseconds"]) for t in traces if "baseTimeNanoseconds" in t]
    db.session_start(min(bases) if bases else 1_700_000_000_000_000_000)
    db.meta("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems")
    db.meta("EXPORT_PRODUCT_VERSION", NSYS_VERSION)
    db.meta("EXPORT_SCHEMA_VERSION", "3.25.0")
    db.meta("DERIVED_BY", "sample_traces/nsys_writer.py")
    if db.variant == "2023.4":
        db.nvtx_domain(0, 0, NCCL_DOMAIN, "NCCL")


def _rank_of(trace: dict[str, Any], index: int) -> int:
    info = trace.get("distributedInfo") or {}
    return int(info["rank"]) if isinstance(info, dict) and "rank" in info else index


def _devices(trace: dict[str, Any]) -> list[int]:
    return sorted({int((e.get("args") or {}).get("device", 0)) for e in trace.get("traceEvents", [])
                   if e.get("cat") == "kernel"})


def kineto_to_nsys(kineto_paths: list[Path], out: Path, single_report: bool = True, variant: str = "current",
                   nccl_payload: bool = False) -> list[Path]:
    """Convert Kineto traces (one per rank) into Nsight-style SQLite export(s).

    ``single_report``: one file ``out`` holding one process per rank (pid 1000 + rank), like
    ``nsys profile torchrun ...``. Devices are renumbered to the rank when the inputs' devices would
    not order the processes by rank (the reader orders processes by lowest device). Otherwise ``out``
    is a directory that receives ``rank<N>.sqlite`` per input (``nsys profile`` per rank).
    ``nccl_payload`` adds NCCL payloads as JSON (``nsys export --include-json``): message size and
    communicator. Returns the files written.
    """
    traces = sorted(((_rank_of(t, i), t) for i, t in enumerate(load_kineto(p) for p in kineto_paths)),
                    key=lambda rt: rt[0])
    if single_report:
        db = NsysExport(variant)
        _start(db, [t for _, t in traces])
        firsts = [(_devices(t) or [0])[0] for _, t in traces]
        keep = len(set(firsts)) == len(firsts) and firsts == sorted(firsts)
        for rank, trace in traces:
            device_of = {} if keep else {d: rank for d in _devices(trace) or [0]}
            _add_rank(db, trace, 1000 + rank, device_of, nccl_payload)
        return [db.write(Path(out))]
    Path(out).mkdir(parents=True, exist_ok=True)
    written = []
    for rank, trace in traces:
        db = NsysExport(variant)
        _start(db, [trace])
        _add_rank(db, trace, 1000 + rank, {}, nccl_payload)
        written.append(db.write(Path(out) / f"rank{rank}.sqlite"))
    return written


def kineto_to_nsys_old(kineto_paths: list[Path], out: Path, single_report: bool = True) -> list[Path]:
    """:func:`kineto_to_nsys` in the older (2023.4-style) layout."""
    return kineto_to_nsys(kineto_paths, out, single_report, variant="2023.4")
