"""Collectives outside steps are matched by shifting each rank's (op, size) sequence against the
group's reference rank: the one-query version picks the shift a brute-force search picks."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.crossrank.match import _shift_aligned

SIGS = [("all_reduce", 8), ("all_reduce", 16), ("all_gather", 8)]


def _brute_shift(ref: list, other: list, max_shift: int = 64) -> int:
    best, best_score = 0, -1
    for s in sorted(range(-min(max_shift, len(other)), min(max_shift, len(ref)) + 1), key=abs):
        score = sum(1 for j, sig in enumerate(other) if 0 <= j + s < len(ref) and ref[j + s] == sig)
        if score > best_score:
            best, best_score = s, score
    return best


seqs = st.lists(st.integers(0, 2), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from([0, 1, 2, 5]), seqs, min_size=1), seqs, st.integers(0, 5))
def test_shift_matches_brute_force(by_rank: dict, tail: list, drop: int) -> None:
    # rank 5 often repeats rank 0's sequence with a few kernels missing at the start (a later window)
    if 0 in by_rank and 5 in by_rank:
        by_rank[5] = by_rank[0][drop:] + tail[:2]
    rows = [(r, k, *SIGS[x]) for r, seq in by_rank.items() for k, x in enumerate(seq)]
    meta = pl.DataFrame(
        {"rank": [x[0] for x in rows], "start_ns": [x[1] for x in rows], "op": [x[2] for x in rows],
         "_bytes": [x[3] for x in rows], "pg": "0", "group_ranks": "0,1,2,5"},
        schema={"rank": pl.Int32, "start_ns": pl.Int64, "op": pl.Utf8, "_bytes": pl.Int64, "pg": pl.Utf8,
                "group_ranks": pl.Utf8},
    )
    # a second group in the same frame, with each rank's sequence reversed, must not disturb the first
    other = meta.with_columns(pl.lit("1").alias("pg"), (1000 - pl.col("start_ns")).alias("start_ns"))
    got = _shift_aligned(pl.concat([other, meta]).sort("rank", "start_ns")).filter(pl.col("pg") == "0")
    assert got.height == meta.height
    ref_rank = min(by_rank)
    ref = [SIGS[x] for x in by_rank[ref_rank]]
    for r, seq in by_rank.items():
        shift = 0 if r == ref_rank else _brute_shift(ref, [SIGS[x] for x in seq])
        want = [f"pg0|0,1,2,5|n{k + shift}" for k in range(len(seq))]
        assert got.filter(pl.col("rank") == r).sort("start_ns")["instance"].to_list() == want, (r, shift)
