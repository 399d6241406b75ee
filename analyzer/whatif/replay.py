"""Replay the measured run on the dependency graph, host included, with chosen operations changed (what-if).

The replay places every event of the graph (``Graph.events``: GPU operations, then the host's runtime calls,
crossrank/host.py) from what it depends on, as a delta from the measured run: every event gets Δs, Δe (replayed −
measured start/end), which keeps it free of clock alignment.
- Along its chain (a GPU stream; a host thread) an event starts no earlier than its predecessor there ends; the
  measured slack between them may be used up: Δs ≥ Δe(stream) − slack.
- Its *binding* predecessor ends, plus the measured gap after it, which is an input (host time: Python, the
  framework, a sleep), kept or changed by the scenario (δgap): Δs ≥ Δe(binding) + δgap. A host call binds to the
  call that ended last before it on its rank (its thread's previous call, or another thread's that woke it); a
  rank's first event binds to the job's start (Δs ≥ δgap). A GPU operation its host launched has no gap of its
  own (``host.NO_BIND``): where it starts is decided by the rest.
- Further dependencies (``Graph.replay_deps``: a launch, a synchronize's return waiting for GPU work, a
  cross-stream wait; the op tables' declared order, ideal.declared) with their measured slack:
  Δs ≥ Δe(src) − slack. A launched kernel no longer starts "at its predecessor's end plus the measured gap"
  where the GPU waited for the host: it starts when its launch lets it, so a GPU that gets faster does not outrun
  the host that feeds it, and a synchronize returns when the GPU work it waits for ends (its blocked time is
  recomputed, never replayed as measured).
- A non-communication operation (and an unmatched communication kernel) ends after its duration:
  Δe = Δs + δdur.
- A matched instance ends at (last arrival + transfer) on every participant. With measured waits
  w_q = d_q − transfer (the last arriver's is 0), max_q arrival'_q = A + max_q(Δs_q − w_q), so every
  participant gets Δe = max_q(Δs_q − w_q) + δtransfer: the same on each, no clock alignment needed.
  A ring's hop is no barrier (each kernel waited for its own gate, ``waits.per_row``): it is replayed as
  one such group per gate: the gate's arrival (with no wait) and the kernels that waited for it, which end
  with it. A gate that itself waited for another ends with that one's group: its arrival joins two groups.
  A hidden instance (communication that costs nothing) ends where it started: Δe = Δs − d.
With no change the replay is the measured run only where these dependencies explain every start: an event
that started later than anything it waits for (a GPU time-shared with other processes, work the trace does not
show) starts earlier in the replay. That difference is the replay's error, measured against the measured step
(``scenarios.WhatIf.replay_error_pct``), never zero by construction.

Order (levels.py): events are computed in waves, each wave one vectorized pass over its events and every
scenario; a run of one chain within a wave is a max-plus recurrence, Δs_i = max(x_i, Δs_(i-1) + a_i), solved as a
running maximum after a prefix sum (a_i: the predecessor's duration change and this event's slack or gap; x_i:
its inputs off the chain). The schedule depends only on the graph, so it is built once and reused by every
scenario. All of it is numpy: no compiled code, nothing compiled on a first run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from . import native
from .events import Arrays, Mods, Schedule
from .levels import LIST_WIDTH, _Lists, schedule
from .windows import TOKENS, Segments, segments, shifts, step_spans, step_times, window_spans

__all__ = ["LIST_WIDTH", "TOKENS", "Arrays", "Keyed", "Mods", "Schedule", "Segments", "_Lists", "batched", "digest",
           "run", "schedule", "segments", "shifts", "spans", "step_spans", "step_times", "window_spans"]

CELLS = 5_000_000  # scenario x event cells per replay batch (memory bound: ~8 float arrays of this size)
_NEG = -1e300  # -inf in the running maximum (NumPy's complex accumulate mishandles an infinite part)


def run(a: Arrays, sch: Schedule, mods: Mods, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Δs, Δe (S, events) of every event under each scenario row of ``mods`` (see the module doc). ``compiled``:
    the compiled wave loop (native.py; None: where it is built), else numpy's; the same bits either way."""
    s, n = mods.ddur.shape
    if s and (native.available() if compiled is None else compiled):
        return native.run(a, sch, mods)
    ds, de = _run_numpy(a, sch, mods)
    # event-major to (S, events), +0.0 added: a zero is +0.0 whichever of two equal maxima a path kept (the sign of
    # a zero is all such a choice can change; np.maximum's choice is the platform's)
    out_s, out_e = np.empty((s, n)), np.empty((s, n))
    np.add(ds, 0.0, out=out_s)
    np.add(de, 0.0, out=out_e)
    return out_s, out_e


def _run_numpy(a: Arrays, sch: Schedule, mods: Mods) -> tuple[np.ndarray, np.ndarray]:
    """``run`` one numpy pass per wave: Δs, Δe as (S, events) views of event-major arrays."""
    s, n = mods.ddur.shape
    x = sch.x
    # the changes in wave order, event-major (rows = positions in x) so a wave reads whole rows
    ddur = np.ascontiguousarray(mods.ddur.T)[x]
    dgap = np.ascontiguousarray(mods.dgap.T)[x]
    slack = a.slack[x].astype(np.float64)[:, None]
    # what the chain adds to its predecessor's end: the gap change (at least -gap) where the binding
    # predecessor is the stream one, else -slack; along a run, plus the predecessor's duration change
    coef = np.where(sch.bind_is_stream[:, None], np.maximum(dgap, -slack), -slack)
    inc = coef.copy()
    inc[1:] += ddur[:-1]
    inc[sch.head] = 0.0
    de = np.zeros((n + 2, s))  # by event id; row n: the job's start (0), row n+1: none (-inf)
    de[n + 1] = -np.inf
    ds = np.empty((n, s))
    hide_e = np.ascontiguousarray(mods.hide.T)[sch.e_node]
    dur_e = a.dur[sch.e_node].astype(np.float64)[:, None]
    dtr_v = mods.dtr[:, sch.v_dtr].T if sch.v_dtr.size else np.zeros((0, s))
    # Python ints: indexing a numpy offset array per wave would cost more than the slices it bounds
    off, h_off = sch.s_off.tolist(), sch.h_off.tolist()
    d_off, dg_off, v_off, e_off = sch.d_off.tolist(), sch.dg_off.tolist(), sch.v_off.tolist(), sch.e_off.tolist()
    a_off, scan = sch.v_arr_off.tolist(), sch.scan.tolist()
    x, brow, srow, h_pos, rid, first = sch.x, sch.brow, sch.srow, sch.h_pos, sch.run_id, sch.run_first
    for k in range(sch.n_waves):
        lo, hi = off[k], off[k + 1]
        if hi > lo:
            xin = de[brow[lo:hi]]  # its binding predecessor on another chain (or the job's start, or none)
            xin += dgap[lo:hi]
            dl, dh = d_off[k], d_off[k + 1]
            if dh > dl:  # and not before its further dependencies end
                vals = de[sch.d_src[dl:dh]] - sch.d_slack[dl:dh, None]
                gl, gh = dg_off[k], dg_off[k + 1]
                if gh - gl < dh - dl:
                    vals = np.maximum.reduceat(vals, sch.d_first[gl:gh], axis=0)
                t = sch.d_pos[gl:gh]
                xin[t] = np.maximum(xin[t], vals)
            h = h_pos[h_off[k]:h_off[k + 1]]  # runs' heads: after their predecessor of an earlier wave
            xin[h - lo] = np.maximum(xin[h - lo], de[srow[h]] + coef[h])
            if scan[k]:  # a run of several: Δs_i = acc_i + running max of (x_j − acc_j), acc from the run's head
                acc = np.cumsum(inc[lo:hi], axis=0)
                acc -= acc[first[lo:hi] - lo]
                xin -= acc
                np.maximum(xin, _NEG, out=xin)
                z = np.empty(xin.shape, dtype=np.complex128)
                z.real = rid[lo:hi, None]
                z.imag = xin
                best = np.maximum.accumulate(z, axis=0).imag
                xin = np.where(best > _NEG / 2, acc + best, -np.inf)
            xs = x[lo:hi]
            ds[xs] = xin
            de[xs] = xin + ddur[lo:hi]  # a matched kernel's end is set again when its group ends
        vl, vh = v_off[k], v_off[k + 1]
        if vh > vl:  # groups whose last arrival was in this wave end now: last arrival + transfer
            al, ah = a_off[vl], a_off[vh]
            got = ds[sch.v_arr[al:ah]] - sch.v_wait[al:ah, None]  # arrival − measured wait
            cnt = np.diff(sch.v_arr_off[vl:vh + 1])
            if (cnt > 0).all():
                best = np.maximum.reduceat(got, sch.v_arr_off[vl:vh] - al, axis=0)
            else:  # a forced end before anything of its group arrived
                best = np.full((vh - vl, s), -np.inf)
                some = np.flatnonzero(cnt > 0)
                if some.size:
                    best[some] = np.maximum.reduceat(got, sch.v_arr_off[vl:vh][some] - al, axis=0)
            el, eh = e_off[vl], e_off[vh]
            e = sch.e_node[el:eh]
            end = best[sch.e_view[el:eh]] + dtr_v[vl:vh][sch.e_view[el:eh]]
            de[e] = np.where(hide_e[el:eh], ds[e] - dur_e[el:eh], end)
    return ds.T, de[:n].T


@dataclass(frozen=True)
class Keyed:
    """A scenario's ``fill`` with a key naming the changes it writes: two fills with one key write the same bits,
    so :func:`batched` replays one of them, once per schedule (the counterfactual's measured and ideal runs and
    its per-rank fixes are the scenarios' too; a put-back that changes nothing is the ideal run)."""

    fill: Callable[[Mods, int], None]
    key: Hashable

    def __call__(self, m: Mods, i: int) -> None:
        self.fill(m, i)


def digest(a: np.ndarray | None) -> bytes | None:
    """A set of node (or instance) positions as a key (None stays None)."""
    if a is None:
        return None
    a = np.ascontiguousarray(a)
    return hashlib.blake2b(a.dtype.str.encode() + a.tobytes(), digest_size=16).digest()


def spans(a: Arrays, sch: Schedule, seg: Segments, mods: Mods) -> np.ndarray:
    """Each scenario's shifts of every (rank, step) window, (S, 2, windows): windows.window_spans and
    windows.step_times read them."""
    return shifts(seg, *run(a, sch, mods))


def batched(a: Arrays, sch: Schedule, seg: Segments, fill: list[Callable[[Mods, int], None]],
            measure: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> list[np.ndarray]:
    """Each scenario's window shifts (``spans``; or ``measure(ds, de)`` of it); ``fill(mods, i)`` writes scenario
    i's changes. Scenarios run in batches that keep the (scenarios x events) arrays within ``CELLS``."""
    n = a.rank.size
    # a keyed scenario (Keyed) already replayed on this schedule and windows, or twice in ``fill``, runs once
    keys = [(seg.token, f.key) if measure is None and isinstance(f, Keyed) else None for f in fill]
    todo = [i for i, k in enumerate(keys) if k is None or (k not in sch.memo and keys.index(k) == i)]
    batch = max(1, min(len(todo), CELLS // max(n, 1)))
    got: dict[int, np.ndarray] = {}
    for lo in range(0, len(todo), batch):
        part = todo[lo:lo + batch]
        mods = Mods.zeros(len(part), n, a.n_graph_instances)
        for i, j in enumerate(part):
            fill[j](mods, i)
        ds, de = run(a, sch, mods)
        for j, r in zip(part, shifts(seg, ds, de) if measure is None else measure(ds, de)):
            got[j] = r
            if keys[j] is not None:
                r.flags.writeable = False  # shared by every scenario with its key
                sch.memo[keys[j]] = r
    return [got[i] if i in got else sch.memo[k] for i, k in enumerate(keys)]
