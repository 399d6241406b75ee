"""replay.run (and step_spans) compiled with numba: the same arithmetic as the numpy form, ``BLOCK`` scenarios a pass.

The numpy form costs ~25 small numpy calls a wave (a real 4 x 500 MB FSDP job has 17 k waves a replay, 4-6
replays an analysis) and builds a dozen (scenarios x nodes) arrays around the loop (0.4 s a batch there).
Here a block of scenarios is two plain passes over the nodes in chain order (the chain offsets; then each node's
deltas, folded straight into its step window's first start and last end where only the step spans are wanted,
:func:`spans`) around the waves of the events; each scenario is a column of the scratch arrays, so a pass reads
the structure (chain order, offsets, windows) once for the whole block, and the waves keep deltas only for the
operations with events. On the 484 MB Nsight export (1.06 M operations, 13 k events) a scenario costs ~6.5 ms
in blocks of 8 against ~30 ms one at a time.

The result is bit-identical to the numpy form (tests/test_replay_compiled.py): the same additions in the same
order (prefix sums left to right, as ``cumsum``), and every maximum taken as numpy's ``maximum(a, b)`` takes
it (``a`` when ``a > b`` or ``a`` is NaN, else ``b``: which of two equal zeros survives), reductions from the
first element on as ``maximum.reduceat`` does. Imported only for graphs with many waves (numba's import and
loading the cached machine code cost ~0.45 s of CPU, more than the numpy loop on a small graph); compiled on
first use and cached beside this file (or in numba's per-user cache where that is read-only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numba import njit

# replay.Arrays, Schedule, Segments and Mods, whose fields these functions read: named in comments, not imported,
# so that replay (which imports this module lazily) and this module do not import each other
Arrays = Schedule = Segments = Mods = Any


@njit(inline="always")
def _mx(a: float, b: float) -> float:
    return a if (a > b or a != a) else b


@njit(cache=True, nogil=True)
def _chain(j0: int, ddur: np.ndarray, dgap: np.ndarray, co: np.ndarray, floor: np.ndarray, first: np.ndarray,
           chain: np.ndarray) -> None:  # pragma: no cover
    """Scenarios j0.. (one a column of ``chain``): along a chain Δe grows by each member's (gap change, at least
    −gap) + duration change: a prefix sum in chain order over every node (``cumsum``'s additions), less its value at
    the chain's root (chains are contiguous, root first); row n reads 0 (no predecessor)."""
    n, nb = co.size, chain.shape[1]
    acc, base = np.zeros(nb), np.zeros(nb)
    for p in range(n):
        q, f, root = co[p], floor[p], first[p] == p
        for b in range(nb):
            v = _mx(dgap[j0 + b, q], f) + ddur[j0 + b, q]
            acc[b] = v if p == 0 else acc[b] + v
            if root:
                base[b] = acc[b]
            chain[p, b] = acc[b] - base[b]
    chain[n, :] = 0.0


@njit(cache=True, nogil=True)
def _waves(j0: int, ddur: np.ndarray, dgap: np.ndarray, dtr: np.ndarray, hide: np.ndarray, pos: np.ndarray,
           slack: np.ndarray, dur: np.ndarray, parent: np.ndarray, s_off: np.ndarray, x: np.ndarray, xl: np.ndarray,
           bpx: np.ndarray, spx: np.ndarray, rb: np.ndarray, rs: np.ndarray, x_off: np.ndarray, xg_off: np.ndarray,
           xg_first: np.ndarray, x_root: np.ndarray, x_cpos: np.ndarray, x_dpos: np.ndarray, x_slack: np.ndarray,
           a_off: np.ndarray, g_off: np.ndarray, gf: np.ndarray, gi: np.ndarray, ap: np.ndarray, wait: np.ndarray,
           e_off: np.ndarray, xe: np.ndarray, xel: np.ndarray, ei: np.ndarray, ep: np.ndarray, chain: np.ndarray,
           de: np.ndarray, dstart: np.ndarray, imax: np.ndarray) -> None:  # pragma: no cover
    """The waves of scenarios j0.. (columns): Δs of every start event into ``dstart``, Δe of every operation with
    an event into ``de``, rows by position in ``lead`` (``xl``, ``xel``, ``rb``, ``rs``, ``x_root`` are such
    positions; rows L and L+1: no predecessor, reading 0 and -inf)."""
    n, nb, nl = pos.size - 1, chain.shape[1], de.shape[0] - 2
    de[:nl + 1, :] = 0.0
    de[nl + 1, :] = -np.inf
    imax[:, :] = -np.inf
    for k in range(s_off.size - 1):
        lo, hi = s_off[k], s_off[k + 1]
        if hi > lo:
            for e in range(lo, hi):
                q, cb, cs, r1, r2 = x[e], pos[min(bpx[e], n)], pos[min(spx[e], n)], rb[e], rs[e]
                for b in range(nb):
                    after_bind = chain[cb, b] + dgap[j0 + b, q]
                    after_stream = chain[cs, b] - slack[q]
                    dstart[e, b] = _mx(de[r1, b] + after_bind, de[r2, b] + after_stream)
            xlo, xhi = x_off[k], x_off[k + 1]
            if xhi > xlo:  # and not before its further dependencies end
                gl, gh = xg_off[k], xg_off[k + 1]
                for g in range(gl, gh):
                    d0 = xlo + xg_first[g]
                    d1 = xlo + xg_first[g + 1] if g + 1 < gh else xhi
                    p = x_dpos[d0]
                    for b in range(nb):
                        m = de[x_root[d0], b] + (chain[x_cpos[d0], b] - x_slack[d0])
                        for d in range(d0 + 1, d1):
                            m = _mx(m, de[x_root[d], b] + (chain[x_cpos[d], b] - x_slack[d]))
                        dstart[p, b] = _mx(dstart[p, b], m)
            for e in range(lo, hi):
                q, r = x[e], xl[e]
                for b in range(nb):
                    de[r, b] = dstart[e, b] + ddur[j0 + b, q]  # a matched kernel's end is set again at its end event
            al, ah = a_off[k], a_off[k + 1]
            if ah > al:
                gl, gh = g_off[k], g_off[k + 1]
                for g in range(gl, gh):
                    a0 = al + gf[g]
                    a1 = al + gf[g + 1] if g + 1 < gh else ah
                    i = gi[g]
                    for b in range(nb):
                        m = dstart[ap[a0], b] - wait[a0]  # arrival − measured wait
                        for a in range(a0 + 1, a1):
                            m = _mx(m, dstart[ap[a], b] - wait[a])
                        imax[i, b] = _mx(imax[i, b], m)
        for e in range(e_off[k], e_off[k + 1]):
            q, r, i, s = xe[e], xel[e], ei[e], ep[e]
            for b in range(nb):
                de[r, b] = dstart[s, b] - dur[e] if hide[j0 + b, q] else imax[i, b] + dtr[j0 + b, parent[i]]


@njit(cache=True, nogil=True)
def _rows(j0: int, ddur: np.ndarray, co: np.ndarray, chain_lead: np.ndarray, x: np.ndarray, chain: np.ndarray,
          de: np.ndarray, dstart: np.ndarray, ds: np.ndarray, de_out: np.ndarray) -> None:  # pragma: no cover
    """Δs, Δe of every operation of scenarios j0..: each ends where its chain's root does, plus its chain offset;
    a simple one starts its duration before that, the others where the waves put them."""
    for p in range(co.size):
        q, r = co[p], chain_lead[p]
        for b in range(chain.shape[1]):
            de_out[j0 + b, q] = chain[p, b] + de[r, b]
            ds[j0 + b, q] = de_out[j0 + b, q] - ddur[j0 + b, q]
    for e in range(x.size):
        for b in range(chain.shape[1]):
            ds[j0 + b, x[e]] = dstart[e, b]


@njit(cache=True, nogil=True)
def _spans(j0: int, ddur: np.ndarray, co: np.ndarray, chain_lead: np.ndarray, ev: np.ndarray, seg: np.ndarray,
           rel_start: np.ndarray, rel_end: np.ndarray, head: np.ndarray, chain: np.ndarray, de: np.ndarray,
           dstart: np.ndarray, last_m: np.ndarray, span: np.ndarray, next_seg: np.ndarray,
           out: np.ndarray) -> None:  # pragma: no cover
    """replay.step_spans of scenarios j0.. from the chain offsets and the waves' deltas, in one pass in chain order
    (``ev``, ``seg``, ``rel_*``, ``head``: each chain position's start event or -1, its segment or -1, its times
    relative to the segment's first start, whether it is first in its segment's order). The least start and greatest
    end of a segment are the same bits in any order (no value is -0.0: each adds a time >= +0.0 to a delta), NaN
    aside: a segment's first value in its order is kept where it is NaN, later NaNs are skipped, as a scan from the
    first element with ``<`` keeps them."""
    m, nb = span.size, chain.shape[1]
    lo_v, hi_v = np.full((m, nb), np.inf), np.full((m, nb), -np.inf)
    lo_head, hi_head = np.empty((m, nb)), np.empty((m, nb))
    for p in range(co.size):
        g = seg[p]
        if g < 0:
            continue
        q, r, e = co[p], chain_lead[p], ev[p]
        for b in range(nb):
            d_end = chain[p, b] + de[r, b]
            v = (dstart[e, b] if e >= 0 else d_end - ddur[j0 + b, q]) + rel_start[p]
            w = d_end + rel_end[p]
            if v < lo_v[g, b]:
                lo_v[g, b] = v
            if w > hi_v[g, b]:
                hi_v[g, b] = w
            if head[p]:
                lo_head[g, b], hi_head[g, b] = v, w
    for g in range(m):
        for b in range(nb):
            if lo_head[g, b] != lo_head[g, b]:  # that NaN itself (its bits)
                lo_v[g, b] = lo_head[g, b]
            if hi_head[g, b] != hi_head[g, b]:
                hi_v[g, b] = hi_head[g, b]
    for g in range(m):
        for b in range(nb):
            # a window that ends where the next starts (tiled steps) ends where the next one starts in the replay
            shift = lo_v[next_seg[g], b] if next_seg[g] >= 0 else hi_v[g, b] - last_m[g]
            out[j0 + b, g] = span[g] + shift - lo_v[g, b]


BLOCK = 8  # scenarios replayed together: a pass over the nodes reads the structure once for all of them


def run(a: Arrays, sch: Schedule, mods: Mods) -> tuple[np.ndarray, np.ndarray]:
    """replay.run's Δs, Δe (S, nodes) for the changes ``mods``."""
    s, n = mods.ddur.shape
    ds, de_out = np.empty((s, n)), np.empty((s, n))
    for j0, chain, de, dstart in _blocks(a, sch, mods):
        _rows(j0, mods.ddur, a.chain_order, a.chain_lead, sch.x_s, chain, de, dstart, ds, de_out)
    return ds, de_out


def spans(a: Arrays, sch: Schedule, seg: Segments, mods: Mods) -> np.ndarray:
    """replay.step_spans of replay.run's result (S, segments), without the (S, nodes) arrays of deltas."""
    key = ("waves", seg.token)  # the segments laid out in chain order, once per schedule and windows
    if key not in sch.memo:
        sch.memo[key] = _layout(a, sch, seg)
    t = seg.table
    last_m = (t["last_ns"] - t["first_ns"]).to_numpy().astype(np.float64)
    span = t["span_ns"].to_numpy().astype(np.float64)
    out = np.empty((mods.ddur.shape[0], span.size))
    for j0, chain, de, dstart in _blocks(a, sch, mods):
        _spans(j0, mods.ddur, a.chain_order, a.chain_lead, *sch.memo[key], chain, de, dstart, last_m, span,
               seg.next_seg, out)
    return out


def _layout(a: Arrays, sch: Schedule, seg: Segments) -> tuple[np.ndarray, ...]:
    """Per chain position: its start event (-1: none), its segment (-1: none), its start and end relative to the
    segment's first start, whether it is its segment's first in ``seg.order``."""
    n = a.rank.size
    at = a.chain_pos[seg.order]
    ev = np.full(n, -1, dtype=np.int64)
    ev[a.chain_pos[sch.x_s]] = np.arange(sch.x_s.size)
    in_seg = np.full(n, -1, dtype=np.int64)
    in_seg[at] = np.repeat(np.arange(seg.bounds.size), np.diff(np.r_[seg.bounds, seg.order.size]))
    rel_start, rel_end = np.zeros(n), np.zeros(n)
    rel_start[at], rel_end[at] = seg.rel_start, seg.rel_end
    head = np.zeros(n, dtype=bool)
    head[at[seg.bounds]] = True
    return ev, in_seg, rel_start, rel_end, head


def _lead_rows(a: Arrays, sch: Schedule) -> tuple[np.ndarray, ...]:
    """Δe is kept for the operations with events only, a row each by position in ``a.lead`` (rows L and L+1: no
    predecessor, reading 0 and -inf): the schedule's nodes as such rows, once per schedule; and the ends' durations."""
    n, lead = a.rank.size, a.lead
    rb = np.where(sch.rb < n, np.searchsorted(lead, sch.rb), np.where(sch.rb == n + 1, lead.size + 1, lead.size))
    rs = np.where(sch.rs < n, np.searchsorted(lead, sch.rs), lead.size + 1)
    return (rb, rs, *(np.searchsorted(lead, v) for v in (sch.x_s, sch.x_e, sch.x_root)),
            a.dur[sch.x_e].astype(np.float64))


def _blocks(a: Arrays, sch: Schedule, mods: Mods) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Up to ``BLOCK`` scenarios at a time, from j0: their chain offsets (chain positions x scenarios), the waves'
    deltas (Δe by position in ``a.lead``, Δs by start event); what the last pass reads."""
    s, n = mods.ddur.shape
    nl = a.lead.size
    if ("waves",) not in sch.memo:
        sch.memo[("waves",)] = _lead_rows(a, sch)
    rb, rs, xl, xel, x_root, dur = sch.memo[("waves",)]
    scratch: tuple[np.ndarray, ...] = ()
    size = -(-s // -(-s // BLOCK)) if s else 1  # blocks of even size (9 scenarios: 5 and 4, not 8 and 1)
    for j0 in range(0, s, size):
        nb = min(size, s - j0)
        if not scratch or scratch[0].shape[1] != nb:
            scratch = (np.empty((n + 1, nb)), np.empty((nl + 2, nb)), np.empty((sch.x_s.size, nb)),
                       np.empty((max(a.n_instances, 1), nb)))
        chain, de, dstart, imax = scratch
        _chain(j0, mods.ddur, mods.dgap, a.chain_order, a.chain_floor, a.chain_first, chain)
        _waves(j0, mods.ddur, mods.dgap, mods.dtr, mods.hide, a.chain_pos, a.slack, dur, a.parent, sch.s_off,
               sch.x_s, xl, sch.bpx, sch.spx, rb, rs, sch.x_off, sch.xg_off, sch.xg_first, x_root, sch.x_cpos,
               sch.x_dpos, sch.x_slack, sch.a_off, sch.g_off, sch.g_first, sch.g_inst, sch.a_pos, sch.a_wait,
               sch.e_off, sch.x_e, xel, sch.e_inst, sch.e_pos, chain, de, dstart, imax)
        yield j0, chain, de, dstart


@njit(inline="always")
def _release(rel: np.ndarray, nr: int, s_ptr: np.ndarray, s_vals: np.ndarray, indeg: np.ndarray,
             fr: np.ndarray) -> int:  # pragma: no cover
    """The successors of the ``nr`` released events whose last predecessor this was, into ``fr``; their count."""
    nf = 0
    for t in range(nr):
        e = rel[t]
        for p in range(s_ptr[e], s_ptr[e + 1]):
            v = s_vals[p]
            indeg[v] -= 1
            if indeg[v] == 0:
                fr[nf] = v
                nf += 1
    return nf


@njit(cache=True, nogil=True)
def levels(indeg: np.ndarray, s_ptr: np.ndarray, s_vals: np.ndarray, e_ptr: np.ndarray, e_vals: np.ndarray,
           arr_inst: np.ndarray, arr_also: np.ndarray, need: np.ndarray, own_start: np.ndarray, end_rank: np.ndarray,
           end_time: np.ndarray, end_node: np.ndarray, n_ranks: int, lev: np.ndarray, count: np.ndarray,
           frontier: np.ndarray, k: int, forced: int) -> int:  # pragma: no cover
    """replay._levels' loop (its numpy form's levels and forced ends, exactly), from where that one stands: the
    events of level ``k`` to release (``frontier``), ``lev`` (-1: none yet) and each group's arrivals so far
    (``count``), the forced ends so far; ``indeg`` of each start event left. Successors of each event and ends
    of each group as CSR (``*_ptr``, ``*_vals``), each start event's group and second group, each group's
    arrivals (``need``); for end events their start event, rank code (0 .. n_ranks-1), end time and node. Fills
    ``lev`` (start events first) and returns the forced ends."""
    n_s, n_e = indeg.size, own_start.size
    fr, rel = np.empty(max(n_s, 1), dtype=np.int64), np.empty(n_s + n_e + 1, dtype=np.int64)
    done = np.empty(need.size, dtype=np.int64)
    best = np.empty(max(n_ranks, 1), dtype=np.int64)
    nf = frontier.size
    fr[:nf] = frontier
    while True:
        while nf > 0:
            nr, nd, got = 0, 0, False
            for t in range(nf):
                e = fr[t]
                lev[e] = k
                i = arr_inst[e]
                if i < 0:
                    rel[nr] = e
                    nr += 1
                else:
                    got = True
                    count[i] += 1
                    if count[i] == need[i]:
                        done[nd] = i
                        nd += 1
            if got:  # a ring hop's gate that waited also arrives in its own group
                for t in range(nf):
                    i = arr_also[fr[t]]
                    if i >= 0:
                        count[i] += 1
                        if count[i] == need[i]:
                            done[nd] = i
                            nd += 1
                for t in range(nd):
                    i = done[t]
                    for p in range(e_ptr[i], e_ptr[i + 1]):
                        e = e_vals[p]
                        if lev[e] < 0:  # an end forced through earlier is not released twice
                            lev[e] = k
                            rel[nr] = e
                            nr += 1
            k += 1
            nf = _release(rel, nr, s_ptr, s_vals, indeg, fr)
        if (lev >= 0).all():
            break
        # inconsistent matching (crossing orders): release each rank's earliest blocked end (by end time, then
        # node), with what has arrived, as the ranks' own order would
        best[:] = -1
        some = False
        for j in range(n_e):
            if lev[n_s + j] < 0 and lev[own_start[j]] >= 0:
                some = True
                break
        for j in range(n_e):
            if lev[n_s + j] < 0 and (lev[own_start[j]] >= 0 or not some):
                r, b = end_rank[j], best[end_rank[j]]
                if b < 0 or end_time[j] < end_time[b] or (end_time[j] == end_time[b] and end_node[j] < end_node[b]):
                    best[r] = j
        nr = 0
        for r in range(best.size):
            if best[r] >= 0:
                e = n_s + best[r]
                lev[e] = k
                rel[nr] = e
                nr += 1
        forced += nr
        k += 1
        nf = _release(rel, nr, s_ptr, s_vals, indeg, fr)
    return forced
