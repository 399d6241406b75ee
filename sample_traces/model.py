"""Trace events and clock constants shared by the scenario builder (generate) and the Kineto writer."""

from __future__ import annotations

from dataclasses import dataclass

# Real PyTorch 2.11 traces: ts ~ 4.8e12 us relative to a per-job baseTimeNanoseconds; old traces
# wrote integer epoch microseconds (~1.66e15).
BASE_TIME_NS = 1_790_857_026_000_000_000
T0_FLOAT_NS = 4_799_998_655_000_000
T0_INT_NS = 1_661_203_462_000_000_000


@dataclass
class Event:
    """One trace event on the TRUE clock (ns); the writer adds the rank's offset and formats it."""

    ph: str
    cat: str
    name: str
    pid: int | str
    tid: int | str
    ts: int
    dur: int = 0
    args: dict | None = None
    id: int | None = None  # flow id (ac2g: the kernel's correlation)
