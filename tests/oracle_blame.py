"""Root cause straight from its definition (analyzer/metrics/blame.py), on the generator's exact truth.

Plain Python over InstanceTruth: true arrival times, waits and each rank's collectives in order, with no
Polars and nothing shared with the analyzer, so a test comparing the two checks the vectorized code.

Definition: at instance i with last arriver L, for each peer q find c, the latest collective before i that
L and q were both in (none: the capture's start). Since c, L was held H_L and moved data X_L, q likewise.
Of q's wait w_q, hold = min(w_q, max(0, H_L − H_q)) is passed back to the collective that held L longest
since c; then min(w_q − hold, max(0, X_L − X_q)) traces to slower transfers (no rank); the rest is L's own.
"""

from __future__ import annotations

from sample_traces.generate import Truth


def oracle_roots(truth: Truth, by_step: dict[tuple[int, int], float] | None = None
                 ) -> tuple[dict[int, float], dict[int, float]]:
    """Root-caused and propagated wait per rank (ns), straight from the definition, on the true clock.

    ``by_step``, if given, receives the root-caused wait per (rank, step of the instance where it was suffered)."""
    seq: dict[int, list] = {r: [] for r in truth.ranks}  # rank -> its instances in arrival order
    for i in sorted(truth.instances, key=lambda i: i.index):
        for r in i.ranks:
            seq[r].append(i)
    for r in seq:
        seq[r].sort(key=lambda i: (i.start_ns[r], i.index))
    pos = {(r, i.index): k for r, lst in seq.items() for k, i in enumerate(lst)}

    def wait(i, r) -> float:
        return float(i.wait_ns[r])

    def xfer(i, r) -> float:
        return float(max(0, i.end_ns - i.start_ns[r] - i.wait_ns[r]))

    def since(r: int, c, i) -> tuple[float, float]:
        """Hold and transfer time of rank r strictly between instance c (None: the start) and i."""
        lo = pos[(r, c.index)] + 1 if c is not None else 0
        between = seq[r][lo:pos[(r, i.index)]]
        return sum(wait(k, r) for k in between), sum(xfer(k, r) for k in between)

    dist: dict[int, dict[int, float]] = {}
    caused: dict[int, float] = {}
    root = {r: 0.0 for r in truth.ranks}
    prop = {r: 0.0 for r in truth.ranks}
    for i in sorted(truth.instances, key=lambda i: max(i.start_ns.values())):
        last = max(i.ranks, key=lambda r: i.start_ns[r])
        c_total = float(sum(i.wait_ns.values()))
        p = t = 0.0
        lo = None
        for q in i.ranks:
            if q == last:
                continue
            common = [k for k in seq[last][:pos[(last, i.index)]] if q in k.ranks]
            c = common[-1] if common else None
            hl, xl = since(last, c, i)
            hq, xq = since(q, c, i)
            hold = min(wait(i, q), max(0.0, hl - hq))
            p += hold
            t += min(wait(i, q) - hold, max(0.0, xl - xq))
            if hold > 0:
                at = pos[(last, c.index)] if c is not None else -1
                lo = at if lo is None else min(lo, at)
        parent = None
        if p > 0:
            held = [k for k in seq[last][lo + 1:pos[(last, i.index)]] if wait(k, last) > 0]
            if held:
                parent = max(held, key=lambda k: (wait(k, last), pos[(last, k.index)]))
        if parent is None:
            p = 0.0
        caused[i.index] = c_total
        prop[last] += p
        d = {last: max(0.0, c_total - p - t)}
        if p > 0 and caused.get(parent.index, 0) > 0:
            for r, v in dist[parent.index].items():
                d[r] = d.get(r, 0.0) + v * p / caused[parent.index]
        dist[i.index] = d
        for r, v in d.items():
            root[r] += v
            if by_step is not None and v > 0:
                by_step[(r, i.step)] = by_step.get((r, i.step), 0.0) + v
    return root, prop
