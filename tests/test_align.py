"""The clock fit's alternating medians, against the same fit written as Polars group-bys (the form it had)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analyzer import align


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
