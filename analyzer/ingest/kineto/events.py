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


class TooManyEvents(Exception):
    """More events for the tables than ``Limits.max_events``: the reader words it with the file's name."""


class _Selection:
    """One pass over the events, keeping only those some table reads (file order preserved)."""

    def __init__(self, header: Any, options: ReadOptions, cpu_ops: bool) -> None:
        self.header = header
        self.cpu_cats = _CPU_CATS if cpu_ops else {k: v for k, v in _CPU_CATS.items() if v != "op"}
        self.pattern = re.compile(options.step_marker) if options.step_marker else _STEP_RE
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
            if cat == "gpu_user_annotation" or cat == "user_annotation" or cat == "cpu_op":
                # the default marker can only match names starting "ProfilerStep#": skip the regex otherwise
                if plain and not (type(name) is str and name.startswith(STEP_PREFIX)):
                    continue
                if pattern.search(str(name)):
                    (gsteps if cat == "gpu_user_annotation" else csteps).append(e)
        if len(gpu) + len(cpu) > self.max_events:
            raise TooManyEvents(len(gpu) + len(cpu))

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
