"""The ground floor of rules every stage imports and none restates: the op taxonomy (p2p and
blocking sets), bus-bandwidth factors, the default step marker and units.

Nothing here imports from the project: this module sits below ingest, so any stage may read it.
``tests/test_rules.py`` greps the tree for restatements of these rules.
"""

from __future__ import annotations

import polars as pl

# ----------------------------------------------------------------------------- units
# Inside, times are int64 ns; ms (and us for clock offsets) appear only at the edge. The float
# constants keep every division exactly what the literal ``/ 1e6`` gave before.
NS_PER_US = 1e3
NS_PER_MS = 1e6
NS_PER_S = 1e9
NS_PER_UNIT = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}  # exact ints: unit name -> ns


def size_text(n: float | None, missing: str = "-") -> str:
    """Bytes for people: 4 MiB, 1.5 KiB (binary units, as NCCL and PyTorch print them)."""
    if n is None:
        return missing
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024:
            return f"{x:g} {unit}"
        x /= 1024
    return f"{x:g} TiB"


def bucket_label(nbytes: int) -> str:
    """A power-of-two size bucket's name in whole units (compare's and the history's keys): 64 MiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"

# ----------------------------------------------------------------------------- op taxonomy
DIRECTED_P2P_OPS = ("send", "recv")  # one direction, one peer
P2P_OPS = (*DIRECTED_P2P_OPS, "send_recv")  # send_recv: a batched exchange (batch_isend_irecv)
RECEIVING_P2P_OPS = ("recv", "send_recv")  # ops a pipeline stage waits on for its input
# Ops every member must enter and that end almost together on every rank: the clock fit's anchors.
BLOCKING_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
# Every op a report names (a user rule's OP, ``--comm-kernel REGEX=OP``): "copy" is a one-sided peer copy on the
# copy engine (comm_catalogue.toml's copy_engine family)
REPORT_OPS = (*BLOCKING_OPS, "broadcast", "reduce", "gather", "scatter", *P2P_OPS, "copy")

# ----------------------------------------------------------------------------- host calls
# CUDA/HIP runtime and driver calls that block the calling host thread until GPU work ends: device, stream,
# event and context synchronization, and synchronous copies (``.item()`` is a copy and a stream sync). The
# readers keep them beside the launches; the host-aware replay ends them when that work ends.
HOST_SYNC_NAME = b"Synchronize"  # in every synchronize call's name: what the Kineto scan looks for
# the same calls by the start of their names (the native scanner matches names by prefix), as HOST_SYNC_CALL spells them
HOST_SYNC_PREFIXES = tuple(f"{api}{what}Synchronize".encode() for api in ("cuda", "cu", "hip")
                           for what in ("Device", "Stream", "Event", "Ctx"))
HOST_SYNC_CALL = (r"^(cuda|cu|hip)(Device|Stream|Event|Ctx)Synchronize(_v\d+)?$"
                  r"|^(cuda|hip)Memcpy(2D|3D|Peer|ToSymbol|FromSymbol)?$|^cuMemcpy(HtoD|DtoH|DtoD|Peer|2D|3D)?(_v2)?$")


def is_host_sync(name: pl.Expr) -> pl.Expr:
    """Whether a runtime call (by name) blocks its thread until GPU work ends."""
    return name.str.contains(HOST_SYNC_CALL).fill_null(False)


# ----------------------------------------------------------------------------- bus bandwidth
# nccl-tests (doc/PERFORMANCE.md): busbw = algbw * factor(op, n); all_reduce 2(n-1)/n,
# all_gather / reduce_scatter / all_to_all (n-1)/n, every other op 1.
BUS_FACTOR_TWICE = ("all_reduce",)
BUS_FACTOR_ONCE = ("all_gather", "reduce_scatter", "all_to_all")  # bus_factor_expr below applies them


# ----------------------------------------------------------------------------- steps
# One rule: a step is a range named ``ProfilerStep#N`` (PyTorch's profiler), N its number.
# Kineto writes the name exactly, so the Kineto readers and host windows match it anchored.
# Nsight keeps it unanchored on purpose: NVTX ranges from ``emit_nvtx`` carry the same name with
# suffixes (", seq = N", sizes) and anchoring would drop them; the Nsight JSON reports stay as they were.
STEP_PREFIX = "ProfilerStep#"
STEP_MARKER = rf"^{STEP_PREFIX}(\d+)$"
NVTX_STEP_MARKER = rf"{STEP_PREFIX}(\d+)"


# nccl-tests bus-bandwidth factors (the table above): busbw = algbw * factor(op, n)
def bus_factor_expr(op: pl.Expr, n: pl.Expr) -> pl.Expr:
    nf = n.cast(pl.Float64)
    return (
        pl.when(op.is_in(BUS_FACTOR_TWICE))
        .then(2.0 * (nf - 1) / nf)
        .when(op.is_in(BUS_FACTOR_ONCE))
        .then((nf - 1) / nf)
        .otherwise(1.0)
    )
