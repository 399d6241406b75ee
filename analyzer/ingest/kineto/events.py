"""Kineto events as msgspec structs, the decoders, and the rule for which events a table reads.

The structs keep only the fields the tables read; ``_Selection.feed`` is the one selection rule every
decode path (scan, chunks, exact) applies, so the paths can only differ in which events they *offer*.
"""

from __future__ import annotations

import mmap
import re
from typing import Any

import msgspec
import polars as pl

from ... import patterns
from ...comm_catalogue import launcher_of
from ...rules import STEP_MARKER, STEP_PREFIX, is_host_sync
from ..options import ReadOptions
from .tables import (
    _CPU_CATS,
    _GPU_CATS,
    _Args,
    _comm_calls,
    _cpu_table,
    _gpu_table,
    _NeedsText,
    _steps,
    _Times,
    spans,
    step_events,
)

_EMPTY = msgspec.Raw(b"")
Buffer = bytes | mmap.mmap  # a whole document: inflated bytes, or a plain file mapped read-only


class _EventBase(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    args: _Args | None = None


class _RawEvent(_EventBase, gc=False):
    """Exact path: timestamps as raw JSON text."""

    ts: msgspec.Raw = _EMPTY
    dur: msgspec.Raw = _EMPTY


class _Event(_EventBase, gc=False):
    """Fast paths: numbers decode ~30% faster than Raw; strings are mapped to null like the text path."""

    ts: int | float | str | None = None
    dur: int | float | str | None = None


class _Header(msgspec.Struct):
    traceEvents: msgspec.Raw  # noqa: N815 - Kineto's key; the scan and chunked paths read it raw
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    hip_runtime_version: Any = None
    host_name: Any = None


class _Trace(_Header):
    traceEvents: list[_RawEvent]  # type: ignore[assignment]  # noqa: N815


_DECODER = msgspec.json.Decoder(_Trace)
_HEADER = msgspec.json.Decoder(_Header)
_EVENT = msgspec.json.Decoder(_Event)
_CHUNK_EVENTS = msgspec.json.Decoder(list[_Event])
_STEP_RE = re.compile(STEP_MARKER)


def launches_of_gpu_work(cpu: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """The ``cpu`` table with only the runtime calls whose correlation is on a GPU event (the launches
    of kernels, copies and syncs) and the calls that block the host on the GPU (``rules.is_host_sync``: the
    replay ends them when the GPU work does). Other runtime calls (~90% of them in real captures: queries,
    event records, allocator calls) no table reads. One rule for every decode path; the scan path only
    decodes the runtime events this keeps (``kineto_scan``)."""
    linked = gpu["correlation"].drop_nulls().unique()
    return cpu.filter((pl.col("kind") != "runtime") | pl.col("correlation").is_in(linked.implode())
                      | is_host_sync(pl.col("name")))


_LAUNCHER_NAMES: dict[str, bool] = {}  # a trace repeats a few thousand op names: each is looked up once


def _is_launcher(name: Any) -> bool:
    hit = _LAUNCHER_NAMES.get(name) if type(name) is str else False
    if hit is None:
        if len(_LAUNCHER_NAMES) > 1 << 16:  # names built per call (rare): bounded
            _LAUNCHER_NAMES.clear()
        hit = _LAUNCHER_NAMES[name] = launcher_of(name) is not None
    return hit


def _merged_rank(e: Any) -> int | None:
    r = e.args.merged_rank if e.args is not None else None
    return r if type(r) is int else None


class TooManyEvents(Exception):
    """More events for the tables than ``Limits.max_events``: the reader words it with the file's name."""


_MARKER_CATS = frozenset(("gpu_user_annotation", "user_annotation", "cpu_op"))


class _Selection:
    """One pass over the events, keeping only those some table reads (file order preserved)."""

    def __init__(self, header: Any, options: ReadOptions, cpu_ops: bool) -> None:
        self.header = header
        self.cpu_cats = _CPU_CATS if cpu_ops else {k: v for k, v in _CPU_CATS.items() if v != "op"}
        # a user's marker runs in a linear-time engine, matched per distinct name (analyzer/patterns.py)
        self.pattern = patterns.check(options.step_marker, "--step-marker") if options.step_marker else _STEP_RE
        self.default_marker = not options.step_marker
        self.max_events = options.limits.max_events
        self.not_complete = 0  # GPU-category events that are not complete ("X") events: not read, counted
        self.gpu: list[Any] = []
        self.cpu: list[Any] = []
        self.comm: list[Any] = []
        self.gpu_steps: list[Any] = []
        self.cpu_steps: list[Any] = []

    def feed(self, events: list[Any]) -> None:
        gpu_cats, cpu_cats, pattern, plain = _GPU_CATS, self.cpu_cats, self.pattern, self.default_marker
        if not plain:  # the chunk's new annotation names in one call of the engine
            pattern.search_all(str(e.name) for e in events if e.ph == "X" and e.cat in _MARKER_CATS)
        gpu, cpu, comm, gsteps, csteps = self.gpu, self.cpu, self.comm, self.gpu_steps, self.cpu_steps
        for e in events:
            if e.ph != "X":
                if e.cat in gpu_cats and e.ph not in ("s", "f", "t"):  # flow arrows share no GPU category
                    self.not_complete += 1
                continue
            cat, name = e.cat, e.name
            if cat in gpu_cats:
                gpu.append(e)
            elif cat in cpu_cats:
                cpu.append(e)
            if name == "record_param_comms" and e.args is not None:
                comm.append(e)
            elif (cat == "cpu_op" or cat == "user_annotation") and _is_launcher(name):
                comm.append(e)  # a catalogue launcher (symm_mem::*, vllm::all_reduce, nccl:*): a comm call too
            if cat in _MARKER_CATS:
                # the default marker can only match names starting "ProfilerStep#": skip the regex otherwise
                if plain and not (type(name) is str and name.startswith(STEP_PREFIX)):
                    continue
                if pattern.search(str(name)):
                    (gsteps if cat == "gpu_user_annotation" else csteps).append(e)
        if len(gpu) + len(cpu) > self.max_events:
            raise TooManyEvents(len(gpu) + len(cpu))

    def merged_ranks(self) -> list[int]:
        """The ranks of a merged multi-rank file (TraceLens TraceFusion gives every event ``args.rank``), in
        order; [] for an ordinary one-rank file."""
        seen = {_merged_rank(e) for e in self.gpu}
        seen.discard(None)
        return sorted(seen) if len(seen) > 1 else []  # type: ignore[type-var]

    def split(self, ranks: list[int]) -> dict[int, _Selection]:
        """Each rank's events of a merged file (``merged_ranks``), in one pass over the events."""
        parts: dict[int, _Selection] = {}
        for r in ranks:
            part = parts[r] = _Selection.__new__(_Selection)
            part.__dict__.update(self.__dict__)
            for attr in ("gpu", "cpu", "comm", "gpu_steps", "cpu_steps"):
                setattr(part, attr, [])
        for attr in ("gpu", "cpu", "comm", "gpu_steps", "cpu_steps"):
            for e in getattr(self, attr):
                part = parts.get(_merged_rank(e))  # an event without a rank (a metadata-like leftover): dropped
                if part is not None:
                    getattr(part, attr).append(e)
        return parts

    def tables(self, times: _Times, rank: int = 0
               ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, tuple[pl.DataFrame, bool]] | None:
        """The four tables, ``rank`` in their ``rank`` column; None: a timestamp needs the text path."""
        markers, on_gpu = step_events(self.gpu_steps, self.cpu_steps)
        try:
            g, c, m, s = spans(times, self.gpu, self.cpu, self.comm, markers)
        except _NeedsText:
            return None
        gpu = _gpu_table(self.gpu, rank, g)
        cpu = launches_of_gpu_work(_cpu_table(self.cpu, rank, c), gpu)
        return gpu, cpu, _comm_calls(self.comm, rank, m), _steps(markers, on_gpu, rank, s)
