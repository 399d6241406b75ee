"""Root cause straight from its definition (analyzer/metrics/blame.py), on the generator's exact truth.

Plain Python over InstanceTruth: true arrival times, waits and each rank's previous collective, with no
Polars and nothing shared with the analyzer, so a test comparing the two checks the vectorized code.
"""

from __future__ import annotations

from sample_traces.generate import Truth


def oracle_roots(truth: Truth, by_step: dict[tuple[int, int], float] | None = None
                 ) -> tuple[dict[int, float], dict[int, float]]:
    """Root-caused and propagated wait per rank (ns), straight from the definition, on the true clock.

    ``by_step``, if given, receives the root-caused wait per (rank, step of the instance where it was suffered)."""
    insts = sorted(truth.instances, key=lambda i: i.end_ns)
    kernels = {r: [] for r in truth.ranks}  # rank -> (end, index, wait)
    for i in insts:
        for r in i.ranks:
            kernels[r].append((i.end_ns, i.index, i.wait_ns[r]))

    def previous(rank: int, t: int) -> tuple[int | None, float]:
        best = None
        for end, idx, w in kernels[rank]:
            if end <= t and (best is None or end > best[0]):
                best = (end, idx, w)
        return (best[1], float(best[2])) if best else (None, 0.0)

    dist: dict[int, dict[int, float]] = {}
    caused: dict[int, float] = {}
    root = {r: 0.0 for r in truth.ranks}
    prop = {r: 0.0 for r in truth.ranks}
    for i in insts:
        last = max(i.ranks, key=lambda r: i.start_ns[r])
        c = float(sum(i.wait_ns.values()))
        lp, lh = previous(last, i.start_ns[last])
        p = 0.0
        for q in i.ranks:
            if q == last:
                continue
            qp, qh = previous(q, i.start_ns[q])
            delta = 0.0 if qp == lp else max(0.0, lh - qh)
            p += min(float(i.wait_ns[q]), delta)
        caused[i.index] = c
        prop[last] += p
        d = {last: c - p}
        if p > 0 and lp is not None and caused.get(lp, 0) > 0:
            for r, v in dist[lp].items():
                d[r] = d.get(r, 0.0) + v * p / caused[lp]
        dist[i.index] = d
        for r, v in d.items():
            root[r] += v
            if by_step is not None and v > 0:
                by_step[(r, i.step)] = by_step.get((r, i.step), 0.0) + v
    return root, prop
