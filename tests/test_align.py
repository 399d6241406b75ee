"""The clock fit's alternating medians, against the same fit written as Polars group-bys (the form it had)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analyzer.crossrank import align


def _polars_fit(rows: pl.DataFrame, iterations: int = 200) -> tuple[dict[int, float], float]:
    """Offsets and the largest per-rank median residual, by group-bys (the reference)."""
    rows = rows.select("rank", "instance", pl.col("end_ns").cast(pl.Float64).alias("e"))
    rows = rows.with_columns(pl.col("e") - rows["e"].min())
    ref = int(rows["rank"].min())
    offs = pl.DataFrame({"rank": rows["rank"].unique().sort(), "o": 0.0})
    for _ in range(iterations):
        last = offs
        t = rows.join(offs, on="rank").group_by("instance").agg((pl.col("e") - pl.col("o")).median().alias("t"))
        offs = rows.join(t, on="instance").group_by("rank").agg((pl.col("e") - pl.col("t")).median().alias("o"))
        offs = offs.with_columns(pl.col("o") - offs.filter(pl.col("rank") == ref)["o"][0])
        if last.join(offs, on="rank").select((pl.col("o") - pl.col("o_right")).abs().max()).item() < 0.5:
            break
    t = rows.join(offs, on="rank").group_by("instance").agg((pl.col("e") - pl.col("o")).median().alias("t"))
    resid = rows.join(offs, on="rank").join(t, on="instance").select(
        "rank", (pl.col("e") - pl.col("t") - pl.col("o")).abs().alias("r"))
    return dict(offs.iter_rows()), float(resid.group_by("rank").agg(pl.col("r").median())["r"].max())


def _job(seed: int) -> pl.DataFrame:
    # ranks on skewed clocks, collectives of 2-5 participants (groups chained through other ranks), noisy ends
    rng = np.random.default_rng(seed)
    n_ranks = int(rng.integers(3, 9))
    skew = rng.integers(-50_000_000, 50_000_000, n_ranks)
    rows = []
    for i in range(int(rng.integers(20, 200))):
        members = rng.choice(n_ranks, size=int(rng.integers(2, min(5, n_ranks) + 1)), replace=False)
        end = i * 1_000_000
        for r in members:
            e = end + skew[r] + int(rng.integers(0, 20_000))
            rows.append((int(r), f"i{i}", "all_reduce", e - 5_000, e))
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "instance": pl.Utf8, "op": pl.Utf8, "start_ns": pl.Int64,
                                      "end_ns": pl.Int64}, orient="row")


@pytest.mark.parametrize("seed", range(8))
def test_the_fit_is_the_group_by_fit_number_for_number(seed: int) -> None:
    # the alternating medians, before the causal clamp, equal the group-by form's offsets and residuals exactly
    job = _job(seed)
    want, spread = _polars_fit(job)
    ranks, r_idx = np.unique(job["rank"].to_numpy(), return_inverse=True)
    _, i_idx = np.unique(job["instance"].to_numpy(), return_inverse=True)
    e = job["end_ns"].to_numpy().astype(np.float64)
    o, resid = align._alternating_medians(e - e.min(), r_idx, i_idx, 200)
    assert dict(zip(ranks.tolist(), o.tolist())) == want
    assert resid.max() == spread
    fit = align.fit_offsets(job, ranks.tolist())
    assert fit.instances == job["instance"].n_unique() and fit.uncertainty_ns >= spread


@pytest.mark.parametrize("seed", range(6))
def test_grouped_medians_equal_polars_medians(seed: int) -> None:
    # many group sizes (even and odd, one member, hundreds), in any row order
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 300 if seed % 2 else 6, int(rng.integers(1, 80)))
    group = rng.permutation(np.repeat(np.arange(sizes.size), sizes))
    v = rng.normal(0, 1e6, group.size)
    want = pl.DataFrame({"g": group, "v": v}).group_by("g").agg(pl.col("v").median()).sort("g")["v"].to_numpy()
    assert np.array_equal(align._Medians(group)(v), want)


def test_no_fit_without_two_ranks_in_blocking_collectives() -> None:
    # one rank, or only non-blocking / unmatched kernels: nothing to fit, every offset 0, no uncertainty
    job = _job(0)
    none = align.ClockFit("none", 0, {0: 0.0, 1: 0.0, 2: 0.0}, None, 0)
    assert align.fit_offsets(job.filter(pl.col("rank") == 0), [0, 1, 2]) == none
    assert align.fit_offsets(job.with_columns(pl.lit("send").alias("op")), [0, 1, 2]) == none
    assert align.fit_offsets(job.with_columns(pl.lit(None, pl.Utf8).alias("instance")), [0, 1, 2]) == none
    assert align.fit_offsets(job.clear(), []) == align.ClockFit("none", None, {}, None, 0)
    # two ranks are enough: a fit, with every matched instance counted
    two = job.filter(pl.col("rank") < 2)
    fit = align.fit_offsets(two, [0, 1])
    assert fit.method == "collective-end" and fit.reference == 0 and fit.instances == two["instance"].n_unique()


def _pair(rank1: list[tuple[int, int]]) -> pl.DataFrame:
    """Rank 0 runs instance k over [10,000 k, 10,000 k + 100]; rank 1 over rank1[k] = (start, end) relative
    to rank 0's end of that instance."""
    rows = []
    for k, (s, e) in enumerate(rank1):
        e0 = 10_000 * k + 100
        rows += [(0, f"i{k}", "all_reduce", e0 - 100, e0), (1, f"i{k}", "all_reduce", e0 + s, e0 + e)]
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "instance": pl.Utf8, "op": pl.Utf8, "start_ns": pl.Int64,
                                      "end_ns": pl.Int64}, orient="row")


@pytest.mark.parametrize(("rank1", "offset", "moved"), [
    # ends 500 ns later three times, 100 ns once, where rank 1 ended 200 ns after rank 0 began: the median
    # fit (500) is clamped to what causality allows (hi = 200)
    ([(450, 500)] * 3 + [(90, 100)], 200.0, 300.0),
    # ends 50 ns earlier three times; once rank 1 began 30 ns after rank 0 had left: clamped up to lo = 30
    ([(-70, -50)] * 3 + [(30, 40)], 30.0, 80.0),
    # long overlapping kernels whose ends disagree by 200 ns: 0 is causal, so the clocks are left alone
    ([(-1000 + 100 + 100, 200)] * 4, 0.0, 200.0),
])
def test_the_fit_is_clamped_to_what_causality_allows(rank1: list, offset: float, moved: float) -> None:
    # with two ranks the fit is the median end difference; a shared collective that neither rank can have
    # left before the other entered bounds it; the correction counts into the uncertainty
    fit = align.fit_offsets(_pair(rank1), [0, 1])
    assert fit.offsets_ns == {0: 0.0, 1: offset}
    assert fit.uncertainty_ns == moved


def test_ranks_never_beside_the_reference_keep_their_chained_fit() -> None:
    # pairs {0,1} and {1,2}, kernels on clocks 1,000 and 3,000 ns ahead of rank 0's: rank 2 shares nothing
    # with the reference, so no causal bound applies and it keeps the fit chained through rank 1; rank 3 is
    # in the job but in no collective: offset 0
    rows = []
    for k in range(4):
        t = 10_000 * k
        rows += [(0, f"a{k}", t, t + 100), (1, f"a{k}", t + 1_000, t + 1_100),
                 (1, f"b{k}", t + 5_000 + 1_000, t + 5_100 + 1_000), (2, f"b{k}", t + 5_000 + 3_000, t + 5_100 + 3_000)]
    job = pl.DataFrame([(r, i, "all_reduce", s, e) for r, i, s, e in rows], orient="row",
                       schema={"rank": pl.Int32, "instance": pl.Utf8, "op": pl.Utf8, "start_ns": pl.Int64,
                               "end_ns": pl.Int64})
    fit = align.fit_offsets(job, [0, 1, 2, 3])
    # the chain converges by half a pass at a time and stops when nothing moves by 0.5 ns
    assert fit.offsets_ns == {0: 0.0, 1: pytest.approx(1_000.0, abs=1.0), 2: pytest.approx(3_000.0, abs=1.0), 3: 0.0}
    assert fit.uncertainty_ns < 1.0 and fit.instances == 8
