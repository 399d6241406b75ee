"""replay.run (and step_spans) compiled with numba: the same arithmetic as the numpy form, one scenario at a time.

The numpy form costs ~25 small numpy calls a wave (a real 4 x 500 MB FSDP job has 17 k waves a replay, 4-6
replays an analysis) and builds a dozen (scenarios x nodes) arrays around the loop (0.4 s a batch there).
Here a scenario is a few plain passes over its nodes and events, with scratch arrays of one row; where only
the step spans are wanted (:func:`spans`), no (scenarios x nodes) array of deltas is made at all.

The result is bit-identical to the numpy form (tests/test_replay_compiled.py): the same additions in the same
order (prefix sums left to right, as ``cumsum``), and every maximum taken as numpy's ``maximum(a, b)`` takes
it (``a`` when ``a > b`` or ``a`` is NaN, else ``b``: which of two equal zeros survives), reductions from the
first element on as ``maximum.reduceat`` does. Imported only for graphs with many waves (numba's import and
loading the cached machine code cost ~0.45 s of CPU, more than the numpy loop on a small graph); compiled on
first use and cached beside this file (or in numba's per-user cache where that is read-only).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(inline="always")
def _mx(a: float, b: float) -> float:
    return a if (a > b or a != a) else b


@njit(cache=True, nogil=True)
def _row(j: int, ddur: np.ndarray, dgap: np.ndarray, dtr: np.ndarray, hide: np.ndarray, co: np.ndarray,
         floor: np.ndarray, first: np.ndarray, pos: np.ndarray, slack: np.ndarray, dur: np.ndarray, parent: np.ndarray,
         lead: np.ndarray, chain_lead: np.ndarray, s_off: np.ndarray, x: np.ndarray, bpx: np.ndarray, spx: np.ndarray,
         rb: np.ndarray, rs: np.ndarray, x_off: np.ndarray, xg_off: np.ndarray, xg_first: np.ndarray,
         x_root: np.ndarray, x_cpos: np.ndarray, x_dpos: np.ndarray, x_slack: np.ndarray, a_off: np.ndarray,
         g_off: np.ndarray, gf: np.ndarray, gi: np.ndarray, ap: np.ndarray, wait: np.ndarray, e_off: np.ndarray,
         xe: np.ndarray, ei: np.ndarray, ep: np.ndarray, cs: np.ndarray, chain: np.ndarray, de: np.ndarray,
         dstart: np.ndarray, imax: np.ndarray, ds_row: np.ndarray, de_row: np.ndarray) -> None:  # pragma: no cover
    """Scenario ``j``: Δs and Δe of every node into ``ds_row`` and ``de_row`` (the rest is scratch)."""
    n = co.size
    # along a chain Δe grows by each member's (gap change, at least −gap) + duration change: a prefix sum in
    # chain order, from the chain's root (column n reads 0: no predecessor)
    acc = 0.0
    for p in range(n):
        v = _mx(dgap[j, co[p]], floor[p]) + ddur[j, co[p]]
        acc = v if p == 0 else acc + v
        cs[p] = acc
    for p in range(n):
        chain[p] = cs[p] - cs[first[p]]
    chain[n] = 0.0
    de[:n + 1] = 0.0
    de[n + 1] = -np.inf
    imax[:] = -np.inf
    for k in range(s_off.size - 1):
        lo, hi = s_off[k], s_off[k + 1]
        if hi > lo:
            for e in range(lo, hi):
                q = x[e]
                after_bind = chain[pos[min(bpx[e], n)]] + dgap[j, q]
                after_stream = chain[pos[min(spx[e], n)]] - slack[q]
                dstart[e] = _mx(de[rb[e]] + after_bind, de[rs[e]] + after_stream)
            xl, xh = x_off[k], x_off[k + 1]
            if xh > xl:  # and not before its further dependencies end
                gl, gh = xg_off[k], xg_off[k + 1]
                for g in range(gl, gh):
                    d0 = xl + xg_first[g]
                    d1 = xl + xg_first[g + 1] if g + 1 < gh else xh
                    m = de[x_root[d0]] + (chain[x_cpos[d0]] - x_slack[d0])
                    for d in range(d0 + 1, d1):
                        m = _mx(m, de[x_root[d]] + (chain[x_cpos[d]] - x_slack[d]))
                    p = x_dpos[d0]
                    dstart[p] = _mx(dstart[p], m)
            for e in range(lo, hi):
                q = x[e]
                de[q] = dstart[e] + ddur[j, q]  # a matched kernel's end is set again at its end event
            al, ah = a_off[k], a_off[k + 1]
            if ah > al:
                gl, gh = g_off[k], g_off[k + 1]
                for g in range(gl, gh):
                    a0 = al + gf[g]
                    a1 = al + gf[g + 1] if g + 1 < gh else ah
                    m = dstart[ap[a0]] - wait[a0]  # arrival − measured wait
                    for a in range(a0 + 1, a1):
                        m = _mx(m, dstart[ap[a]] - wait[a])
                    i = gi[g]
                    imax[i] = _mx(imax[i], m)
        for e in range(e_off[k], e_off[k + 1]):
            q = xe[e]
            de[q] = dstart[ep[e]] - dur[e] if hide[j, q] else imax[ei[e]] + dtr[j, parent[ei[e]]]
    # every operation ends where its chain's root does, plus its chain offset; a simple one starts its
    # duration before that, the others where the waves put them
    for p in range(n):
        q = co[p]
        de_row[q] = chain[p] + de[lead[chain_lead[p]]]
        ds_row[q] = de_row[q] - ddur[j, q]
    for e in range(x.size):
        ds_row[x[e]] = dstart[e]


@njit(cache=True, nogil=True)
def run(ddur: np.ndarray, dgap: np.ndarray, dtr: np.ndarray, hide: np.ndarray, co: np.ndarray, floor: np.ndarray,
        first: np.ndarray, pos: np.ndarray, slack: np.ndarray, dur: np.ndarray, parent: np.ndarray, lead: np.ndarray,
        chain_lead: np.ndarray, n_groups: int, s_off: np.ndarray, x: np.ndarray, bpx: np.ndarray, spx: np.ndarray,
        rb: np.ndarray, rs: np.ndarray, x_off: np.ndarray, xg_off: np.ndarray, xg_first: np.ndarray,
        x_root: np.ndarray, x_cpos: np.ndarray, x_dpos: np.ndarray, x_slack: np.ndarray, a_off: np.ndarray,
        g_off: np.ndarray, gf: np.ndarray, gi: np.ndarray, ap: np.ndarray, wait: np.ndarray, e_off: np.ndarray,
        xe: np.ndarray, ei: np.ndarray, ep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Δs, Δe (S, nodes): replay.run's result for the changes ``ddur``, ``dgap``, ``hide`` (S, nodes) and ``dtr``
    (S, instances); the other arguments are replay.Arrays' and replay.Schedule's fields."""
    s, n = ddur.shape
    ds, de_out = np.empty((s, n)), np.empty((s, n))
    cs, chain = np.empty(n), np.empty(n + 1)
    de, dstart, imax = np.empty(n + 2), np.empty(x.size), np.empty(max(n_groups, 1))
    for j in range(s):
        _row(j, ddur, dgap, dtr, hide, co, floor, first, pos, slack, dur, parent, lead, chain_lead, s_off, x, bpx, spx,
             rb, rs, x_off, xg_off, xg_first, x_root, x_cpos, x_dpos, x_slack, a_off, g_off, gf, gi, ap, wait, e_off,
             xe, ei, ep, cs, chain, de, dstart, imax, ds[j], de_out[j])
    return ds, de_out


@njit(cache=True, nogil=True)
def spans(ddur: np.ndarray, dgap: np.ndarray, dtr: np.ndarray, hide: np.ndarray, co: np.ndarray, floor: np.ndarray,
          first: np.ndarray, pos: np.ndarray, slack: np.ndarray, dur: np.ndarray, parent: np.ndarray, lead: np.ndarray,
          chain_lead: np.ndarray, n_groups: int, s_off: np.ndarray, x: np.ndarray, bpx: np.ndarray, spx: np.ndarray,
          rb: np.ndarray, rs: np.ndarray, x_off: np.ndarray, xg_off: np.ndarray, xg_first: np.ndarray,
          x_root: np.ndarray, x_cpos: np.ndarray, x_dpos: np.ndarray, x_slack: np.ndarray, a_off: np.ndarray,
          g_off: np.ndarray, gf: np.ndarray, gi: np.ndarray, ap: np.ndarray, wait: np.ndarray, e_off: np.ndarray,
          xe: np.ndarray, ei: np.ndarray, ep: np.ndarray, order: np.ndarray, bounds: np.ndarray, rel_start: np.ndarray,
          rel_end: np.ndarray, last_m: np.ndarray, span: np.ndarray, next_seg: np.ndarray
          ) -> np.ndarray:  # pragma: no cover
    """replay.step_spans of replay.run's result (S, segments), one scenario at a time: the first start and the
    last end of each segment's nodes (exact: a least or greatest value is one of the values), then the span as
    step_spans computes it."""
    s, n = ddur.shape
    m = bounds.size
    out = np.empty((s, m))
    cs, chain = np.empty(n), np.empty(n + 1)
    de, dstart, imax = np.empty(n + 2), np.empty(x.size), np.empty(max(n_groups, 1))
    ds_row, de_row = np.empty(n), np.empty(n)
    lo_v, hi_v = np.empty(m), np.empty(m)
    for j in range(s):
        _row(j, ddur, dgap, dtr, hide, co, floor, first, pos, slack, dur, parent, lead, chain_lead, s_off, x, bpx, spx,
             rb, rs, x_off, xg_off, xg_first, x_root, x_cpos, x_dpos, x_slack, a_off, g_off, gf, gi, ap, wait, e_off,
             xe, ei, ep, cs, chain, de, dstart, imax, ds_row, de_row)
        for g in range(m):
            b0 = bounds[g]
            b1 = bounds[g + 1] if g + 1 < m else order.size
            q = order[b0]
            f, la = ds_row[q] + rel_start[b0], de_row[q] + rel_end[b0]
            for p in range(b0 + 1, b1):
                q = order[p]
                v = ds_row[q] + rel_start[p]
                f = v if v < f else f
                v = de_row[q] + rel_end[p]
                la = v if v > la else la
            lo_v[g], hi_v[g] = f, la
        for g in range(m):
            # a window that ends where the next starts (tiled steps) ends where the next one starts in the replay
            shift = lo_v[next_seg[g]] if next_seg[g] >= 0 else hi_v[g] - last_m[g]
            out[j, g] = span[g] + shift - lo_v[g]
    return out


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
