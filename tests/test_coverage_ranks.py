"""Many ranks on one axis: every query equals the per-rank answer (brute force), and the kernel/window
pairs searched for the exposed split include every pair that overlaps."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.metrics.overlap import coverages
from analyzer.metrics.waits import _overlapping_pairs

# (rank, start, length, kind); ranks far apart on purpose, clocks with large and negative origins
rows = st.lists(st.tuples(st.sampled_from([0, 3, 7, 1000]), st.integers(-50, 250), st.integers(0, 60),
                          st.sampled_from(["comm", "compute", "memcpy"])), max_size=60)
queries = st.lists(st.tuples(st.sampled_from([0, 3, 7, 1000]), st.integers(-100, 320), st.integers(-10, 90)),
                   min_size=1, max_size=20)
ORIGIN = {0: 0, 3: 10**15, 7: -(10**12), 1000: 5}


def _bitmap(iv: list[tuple[int, int]]) -> np.ndarray:
    m = np.zeros(500, dtype=bool)
    for s, d in iv:
        m[s + 100 : s + 100 + d] = True
    return m


def _gpu(r: list) -> pl.DataFrame:
    return pl.DataFrame(
        {"rank": [x[0] for x in r], "start_ns": [ORIGIN[x[0]] + x[1] for x in r],
         "end_ns": [ORIGIN[x[0]] + x[1] + x[2] for x in r], "kind": [x[3] for x in r]},
        schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "kind": pl.Utf8},
    )


@settings(max_examples=200, deadline=None)
@given(rows, queries)
def test_ranked_coverage_matches_per_rank_bitmaps(r: list, q: list) -> None:
    covs = coverages(_gpu(r))
    present = sorted({x[0] for x in r})
    assert covs.axis.ranks.tolist() == present
    q = [x for x in q if x[0] in present]
    if not q:
        return
    idx = covs.index(np.array([x[0] for x in q]))
    a = np.array([ORIGIN[x[0]] + x[1] for x in q])
    b = a + np.array([x[2] for x in q])
    got = {k: getattr(covs, k).within(idx, a, b) for k in ("comm", "compute", "busy", "comm_or_compute")}
    kinds = {"comm": {"comm"}, "compute": {"compute"}, "busy": {"comm", "compute", "memcpy"},
             "comm_or_compute": {"comm", "compute"}}
    for i, (rank, w0, wl) in enumerate(q):
        for k, ks in kinds.items():
            m = _bitmap([(s, d) for rr, s, d, kk in r if rr == rank and kk in ks])
            lo, hi = w0 + 100, w0 + 100 + wl
            want = m[max(lo, 0):max(hi, 0)].sum() if wl >= 0 else -m[max(hi, 0):max(lo, 0)].sum()
            assert got[k][i] == want, (k, rank, w0, wl)
    totals = covs.compute.totals()
    for j, rank in enumerate(present):
        assert totals[j] == _bitmap([(s, d) for rr, s, d, kk in r if rr == rank and kk == "compute"]).sum()


windows = st.lists(st.tuples(st.sampled_from([0, 3, 7]), st.integers(-60, 260), st.integers(0, 120), st.booleans()),
                   max_size=12)


@settings(max_examples=200, deadline=None)
@given(rows, windows)
def test_pairs_include_every_overlap(r: list, w: list) -> None:
    r = [x for x in r if x[2] > 0 and x[0] != 1000]
    if not r:
        return
    covs = coverages(_gpu(r))
    w = [x for x in w if x[0] in {y[0] for y in r}]
    kidx = covs.index(np.array([x[0] for x in r]))
    s = np.array([ORIGIN[x[0]] + x[1] for x in r])
    e = s + np.array([x[2] for x in r])
    widx = covs.index(np.array([x[0] for x in w], dtype=np.int64))
    a = np.array([ORIGIN[x[0]] + x[1] for x in w], dtype=np.int64)
    b = a + np.array([x[2] for x in w], dtype=np.int64)
    whole = np.array([x[3] for x in w], dtype=bool)
    k, j = _overlapping_pairs(covs, kidx, s, e, widx, a, b, whole)
    got = set(zip(k.tolist(), j.tolist()))
    assert len(got) == k.size  # no pair twice
    want = {(i, jj) for i, x in enumerate(r) for jj, y in enumerate(w)
            if x[0] == y[0] and a[jj] < e[i] and b[jj] > s[i]}
    assert want <= got
    assert all(r[i][0] == w[jj][0] for i, jj in got)  # never across ranks
