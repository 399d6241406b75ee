"""The replay's order (replay.py): which operations can be computed together, laid out once per graph.

An operation's start is known once everything it depends on is. Along a chain (a GPU stream, a host thread) an
operation follows its stream predecessor, and a run of operations of one chain whose other inputs are all
known can be computed in one vectorized scan (replay.run: a max-plus recurrence is a running maximum after a
prefix sum). So operations are grouped in *waves*: an operation's wave is the latest of its stream predecessor's
(the same wave: the scan carries it) and one more than each other input's (a binding predecessor on another
chain, a launch, a synchronize, a cross-stream wait, a collective's end). A matched kernel's end, (last arrival +
transfer), is computed after the wave of its group's last arrival, and is an input of the next one. A
host-bound GPU stream is one run per wave however many kernels it holds: the waves count the hops between
chains, not the operations (4 x 200 MB FSDP ranks: 46 k operations deep, ~1 k waves).

The waves come from a topological order of the events (Kahn's algorithm over the operations that are not plain
chain followers, one numpy pass per level of that order, ``_levels``), each event's wave taken as it is
released. Inconsistent matches (collectives whose order crosses between ranks, which no order completes) are
forced through as each rank's own order would: its earliest blocked end, with what had arrived; such an end
sees only the arrivals released before it (its *view* of the group), and is counted.
"""

from __future__ import annotations

import numpy as np

from . import native
from .events import Arrays, Schedule

LIST_WIDTH = 4  # successors / ends per key kept in a padded table; longer lists are read as ranges


class _Lists:
    """Lists of ids per key (successors of an event, ends of an instance), read for a few keys at a time.

    Keys with at most ``width`` items sit in a padded table (one gather); longer lists are read as CSR ranges.
    """

    def __init__(self, keys: np.ndarray, vals: np.ndarray, n_keys: int, width: int) -> None:
        o = np.argsort(keys, kind="stable")
        self._keys, self.vals = keys[o], vals[o]  # (CSR: vals[ptr[k]:ptr[k + 1]], what the compiled loop reads)
        self.ptr = np.searchsorted(self._keys, np.arange(n_keys + 1))
        self.big = np.diff(self.ptr) > width
        self.any_big = bool(self.big.any())
        self._shape = (n_keys, width)
        self._table: np.ndarray | None = None  # the padded table, built on the first read

    @property
    def table(self) -> np.ndarray:
        if self._table is None:
            keys = self._keys
            self._table = np.full(self._shape, -1, dtype=np.int64)
            small = ~self.big[keys]
            col = np.arange(keys.size) - self.ptr[keys]
            self._table[keys[small], col[small]] = self.vals[small]
        return self._table

    def of(self, keys: np.ndarray) -> np.ndarray:
        out = self.table[keys].ravel()
        out = out[out >= 0]
        if self.any_big:
            big = keys[self.big[keys]]
            if big.size:
                lo = self.ptr[big]
                cnt = self.ptr[big + 1] - lo
                ends = np.cumsum(cnt)
                out = np.concatenate([out, self.vals[np.repeat(lo - ends + cnt, cnt) + np.arange(ends[-1])]])
        return out


def _distinct(ids: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """``ids`` without repeats, in no set order; ``slot`` is scratch indexed by id. Two gathers, where np.unique
    sorts: 36 k calls on a few ids each cost 0.2 s in a 4-rank replay."""
    if ids.size < 2:
        return ids
    at = np.arange(ids.size)
    slot[ids] = at
    return ids[slot[ids] == at]


def _levels(a: Arrays, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Kahn's algorithm over the events (a start per operation that is not a plain chain follower, an end per
    matched kernel), level by level, each event's wave taken as it is released (the greatest of its inputs'
    waves, plus one for an input off its chain or a group's end). Returns each start event's wave, each end
    event's wave and level, the start events' levels, and the forced ends. ``compiled``: the compiled loop
    (native.py; None: where it is built), else one numpy pass per level; the same results."""
    n = a.rank.size
    matched = a.inst >= 0
    lead = a.lead
    ends = np.flatnonzero(matched)
    n_s, n_e = lead.size, ends.size
    fin = np.full(n, -1, dtype=np.int64)  # an operation's final event: its end event if matched, else its start
    fin[lead] = np.arange(n_s)
    fin[ends] = n_s + np.arange(n_e)
    bp, sp = a.bind_pred[lead], a.stream_pred[lead]
    d1 = np.where(bp >= 0, fin[a.root[np.maximum(bp, 0)]], -1)
    d2 = np.where(sp >= 0, fin[a.root[np.maximum(sp, 0)]], -1)
    w1 = np.where(bp == sp, 0, 1)  # the binding predecessor is the stream one: on the chain
    d2 = np.where(d2 == d1, -1, d2)
    indeg = (d1 >= 0).astype(np.int64) + (d2 >= 0)
    ids = np.arange(n_s)
    d3 = fin[a.root[a.dep_src]]
    i3 = np.searchsorted(lead, a.dep_dst)
    np.add.at(indeg, i3, 1)
    src = np.concatenate([d1[d1 >= 0], d2[d2 >= 0], d3])
    # a successor's wave: its input's, plus one off the chain or after an end (an end's successor is never in
    # the end's own wave); the weight rides in the value's low bit
    w = np.concatenate([w1[d1 >= 0], np.zeros(int((d2 >= 0).sum()), dtype=np.int64), np.ones(d3.size, dtype=np.int64)])
    w = np.where(src >= n_s, 1, w)
    succ = _Lists(src, np.concatenate([ids[d1 >= 0], ids[d2 >= 0], i3]) * 2 + w, n_s + n_e, LIST_WIDTH)
    n_inst = max(a.n_instances, 1)
    inst_ends = _Lists(a.inst[ends], n_s + np.arange(n_e), n_inst, LIST_WIDTH)
    arr_inst = np.where(matched[lead], a.inst[lead], -1)
    arr_also = a.also[lead]
    need = a.n_inst if a.n_instances else np.zeros(1, dtype=np.int64)
    own_start = np.searchsorted(lead, ends)  # the start event of each end's own kernel (matched ops lead)
    if native.available() if compiled is None else compiled:
        wave, lev, forced = native.levels(succ.ptr, succ.vals, indeg, arr_inst, arr_also, need, inst_ends.ptr,
                                          inst_ends.vals, a.inst[ends], own_start, a.rank[ends], a.end[ends], ends)
        return wave[:n_s], wave[n_s:], lev[n_s:], lev[:n_s], forced
    count = np.zeros(n_inst, dtype=np.int64)
    gwave = np.zeros(n_inst, dtype=np.int64)  # the latest wave of a group's arrivals so far
    lev = np.full(n_s + n_e, -1, dtype=np.int64)
    wave = np.zeros(n_s + n_e, dtype=np.int64)
    forced, k = 0, 0
    inst_slot, start_slot = np.empty(n_inst, dtype=np.int64), np.empty(max(n_s, 1), dtype=np.int64)
    fr = np.flatnonzero(indeg == 0)
    while True:
        while fr.size:
            lev[fr] = k
            ai = arr_inst[fr]
            got = ai >= 0
            rel = fr[~got]
            if got.any():
                a2 = arr_also[fr]
                m2 = a2 >= 0
                ai = np.concatenate([ai[got], a2[m2]])
                np.add.at(count, ai, 1)
                np.maximum.at(gwave, ai, np.concatenate([wave[fr[got]], wave[fr[m2]]]))
                done = ai[count[ai] == need[ai]]
                if done.size:
                    done = _distinct(done, inst_slot)
                    es = inst_ends.of(done)
                    es = es[lev[es] < 0]  # an end forced through earlier is not released twice
                    lev[es] = k
                    wave[es] = gwave[a.inst[ends[es - n_s]]]
                    rel = np.concatenate([rel, es])
            k += 1
            if not rel.size:
                fr = rel
                break
            fr = _release(succ, indeg, wave, rel, start_slot)
        if (lev >= 0).all():
            break
        # inconsistent matching (crossing orders): release each rank's earliest blocked end, with what has
        # arrived, as the ranks' own order would
        e_lev = lev[n_s:]
        blocked = np.flatnonzero((e_lev < 0) & (lev[own_start] >= 0))
        if blocked.size == 0:
            blocked = np.flatnonzero(e_lev < 0)
        if blocked.size == 0:
            raise ValueError("levels: the events wait for each other (a cycle)")
        r = a.rank[ends[blocked]]
        o = np.lexsort((ends[blocked], a.end[ends[blocked]], r))
        first = o[np.r_[True, r[o][1:] != r[o][:-1]]]
        es = n_s + blocked[first]
        forced += es.size
        lev[es] = k
        wave[es] = gwave[a.inst[ends[blocked[first]]]]
        k += 1
        fr = _release(succ, indeg, wave, es, start_slot)
    return wave[:n_s], wave[n_s:], lev[n_s:], lev[:n_s], forced


def _release(succ: _Lists, indeg: np.ndarray, wave: np.ndarray, done: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """The start events left with nothing to wait for once ``done`` events are final (each once); each successor's
    wave raised to its input's (plus the edge's weight)."""
    got = succ.of(done)
    if not got.size:
        return got
    nxt, w = got >> 1, got & 1
    np.maximum.at(wave, nxt, wave[_sources(succ, done)] + w)
    np.subtract.at(indeg, nxt, 1)
    return _distinct(nxt[indeg[nxt] == 0], slot)


def _sources(succ: _Lists, done: np.ndarray) -> np.ndarray:
    """For each item ``succ.of(done)`` returns, the key it came from (in the same order: the padded table's
    items key by key, then the long lists')."""
    cnt = succ.ptr[done + 1] - succ.ptr[done]
    small = ~succ.big[done]
    return np.concatenate([np.repeat(done[small], cnt[small]), np.repeat(done[~small], cnt[~small])])


def schedule(a: Arrays, compiled: bool | None = None) -> Schedule:
    """Each operation's wave and the layout :func:`replay.run` reads (structure only; shared by all scenarios).
    ``compiled``: the levels by the compiled loop (None: where it is built), else by numpy; the same schedule."""
    n = a.rank.size
    w_s, w_e, lev_e, lev_s, forced = _levels(a, compiled)
    matched = a.inst >= 0
    ends = np.flatnonzero(matched)
    # every operation's wave: a lead's from its start event; a plain chain follower's is its chain root's
    # availability on the chain (the root's wave, or one past its end's for a matched root)
    wave_of = np.zeros(n, dtype=np.int64)
    wave_of[a.lead] = w_s
    end_wave = np.zeros(n, dtype=np.int64)
    end_wave[ends] = w_e
    root_avail = np.where(matched, end_wave + 1, wave_of)
    wave_of = np.where(a.simple, root_avail[a.root], wave_of)
    nw = int(max(wave_of.max(initial=-1), w_e.max(initial=-1))) + 1
    # operations by (wave, chain, position on the chain): a run of one chain in one wave is contiguous
    order = np.lexsort((np.arange(n), a.chain, wave_of))
    x = order
    wx = wave_of[x]
    sp = a.stream_pred[x]
    sp_wave = np.where(sp >= 0, wave_of[np.maximum(sp, 0)], -1)
    sp_matched = np.where(sp >= 0, matched[np.maximum(sp, 0)], False)
    head = (sp < 0) | (sp_wave != wx) | sp_matched
    run_id = np.cumsum(head) - 1
    heads = np.flatnonzero(head)
    run_first = heads[run_id] if heads.size else heads
    bp = a.bind_pred[x]
    bis = (bp >= 0) & (bp == sp)
    brow = np.where(bis, n + 1, np.where(bp >= 0, bp, np.where(bp == -1, n, n + 1)))
    srow = np.where(head & (sp >= 0), sp, n + 1)
    # further dependencies by their operation's position in x
    pos = np.empty(n, dtype=np.int64)
    pos[x] = np.arange(n)
    dpos = pos[a.dep_dst]
    o = np.argsort(dpos, kind="stable")
    dpos, d_src, d_slack = dpos[o], a.dep_src[o], a.dep_slack[o]
    d_wave = wx[dpos] if dpos.size else dpos
    d_off = np.searchsorted(d_wave, np.arange(nw + 1))
    new = np.r_[True, dpos[1:] != dpos[:-1]] if dpos.size else np.zeros(0, dtype=bool)
    dg = np.flatnonzero(new)
    s_off = np.searchsorted(wx, np.arange(nw + 1))
    dg_off = np.searchsorted(d_wave[dg], np.arange(nw + 1)) if dg.size else np.zeros(nw + 1, dtype=np.int64)
    dg_wave = d_wave[dg]
    d_first = dg - d_off[dg_wave] if dg.size else dg
    d_posr = dpos[dg] - s_off[dg_wave] if dg.size else dg
    # group views: an end sees the arrivals released before it (all of its group's, unless it was forced)
    views = _views(a, ends, w_e, lev_e, lev_s)
    v_wave, v_group, v_lev, e_view = views
    vo = np.lexsort((v_lev, v_group, v_wave))
    rank_of = np.empty(vo.size, dtype=np.int64)
    rank_of[vo] = np.arange(vo.size)
    v_wave, v_group, v_lev = v_wave[vo], v_group[vo], v_lev[vo]
    e_view = rank_of[e_view]
    eo = np.argsort(e_view, kind="stable")
    e_node, e_view = ends[eo], e_view[eo]
    e_off = np.searchsorted(e_view, np.arange(vo.size + 1))
    arr_node, arr_group, arr_wait, arr_lev = _arrivals(a, lev_s)
    # each view's arrivals: its group's, released no later than the view's end
    ao = np.lexsort((arr_lev, arr_group))
    arr_node, arr_group, arr_wait, arr_lev = arr_node[ao], arr_group[ao], arr_wait[ao], arr_lev[ao]
    g_lo = np.searchsorted(arr_group, v_group, side="left")
    g_hi = np.searchsorted(arr_group, v_group, side="right")
    # arrivals within a group are sorted by level: those up to the view's level are a prefix
    key = arr_group * (int(arr_lev.max(initial=0)) + 2) + arr_lev
    cut = np.searchsorted(key, v_group * (int(arr_lev.max(initial=0)) + 2) + v_lev, side="right")
    cut = np.clip(cut, g_lo, g_hi)
    cnt = cut - g_lo
    v_arr_off = np.r_[0, np.cumsum(cnt)]
    take = np.repeat(g_lo - v_arr_off[:-1], cnt) + np.arange(v_arr_off[-1])
    v_off = np.searchsorted(v_wave, np.arange(nw + 1))
    ev_wave = v_wave[e_view] if e_view.size else e_view
    h_pos = np.flatnonzero(head)
    return Schedule(
        n_waves=nw, forced=forced, s_off=s_off, x=x, head=head, run_first=run_first, run_id=run_id, brow=brow,
        srow=srow, bind_is_stream=bis, d_off=d_off, d_src=d_src, d_slack=d_slack, d_first=d_first, d_pos=d_posr,
        dg_off=dg_off, v_off=v_off, v_arr_off=v_arr_off, v_arr=arr_node[take], v_wait=arr_wait[take],
        v_dtr=a.parent[v_group], e_off=e_off, e_node=e_node, e_view=e_view - v_off[ev_wave],
        h_off=np.searchsorted(wx[h_pos], np.arange(nw + 1)), h_pos=h_pos,
        scan=np.bincount(wx[~head], minlength=nw)[:nw] > 0)


def _arrivals(a: Arrays, lev_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every arrival: a matched kernel in its group (with its measured wait) and, for a ring hop's gate that
    waited, in its own group too (no wait); with the level its start was released at."""
    lvl = np.full(a.rank.size, -1, dtype=np.int64)
    lvl[a.lead] = lev_s
    m = np.flatnonzero(a.inst >= 0)
    x = np.flatnonzero(a.also >= 0)
    return (np.concatenate([m, x]), np.concatenate([a.inst[m], a.also[x]]),
            np.concatenate([a.wait[m].astype(np.float64), np.zeros(x.size)]), np.concatenate([lvl[m], lvl[x]]))


def _views(a: Arrays, ends: np.ndarray, w_e: np.ndarray, lev_e: np.ndarray, lev_s: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One view per (group, level its end was released at): its wave, group, level; and each end's view."""
    g = a.inst[ends]
    if not ends.size:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    # (group, level) as one int64 (np.unique along an axis sorts rows as structured records: 5x slower)
    span = int(lev_e.max()) + 1
    uniq, inv = np.unique(g * span + lev_e, return_inverse=True)
    v_wave = np.zeros(uniq.size, dtype=np.int64)
    np.maximum.at(v_wave, inv, w_e)
    return v_wave, uniq // span, uniq % span, inv
