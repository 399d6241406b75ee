"""Where a rank that never entered the root collective went astray: its order of collectives across groups against
its peers'.

A rank that skips a collective in one group (a tp all_reduce) runs every later one of that group against its
peers' next, with the same op and size: no collective of the group mismatches, and the group only stops where the
counts run out, steps later. The skip shows in the order across groups instead: on the peers every dp all_reduce #k
comes after tp all_reduce #k; on the culprit, from the skip on, after #k-1. So for each of the culprit's
collectives in another group (matched to its peers' by the group's family, its description and size, and seq),
the last seq it had run in the root group is compared with its peers' majority; the first that differs is where
it went astray, and the difference how many it skipped (or ran extra, when negative).
Pure: the entry table in, plain dicts out.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from ..crossrank.groups import sibling_family

MAX_CULPRITS = 3
MAX_PEERS = 8


def divergence(e: pl.DataFrame, h: dict, groups: pl.DataFrame) -> list[dict]:
    """For each rank that never entered ``h`` (up to MAX_CULPRITS): the first of its collectives in another group
    before which it had run a different number of ``h``'s group's collectives than its peers (those waiting in
    ``h``) had before the same collective."""
    culprits = [r for r in h["missing"]][:MAX_CULPRITS]
    peers = h["waiting"][:MAX_PEERS]
    if not culprits or not peers or h["kind"] != "collective":
        return []
    fam = groups.select("gid", sibling_family().alias("fam"), "label")
    rows = (e.filter(pl.col("rank").is_in([*culprits, *peers]) & ~pl.col("is_p2p") & pl.col("seq").is_not_null())
            .sort("rank", "record_id")
            .with_columns(pl.when(pl.col("gid") == h["gid"]).then(pl.col("seq")).alias("_g"))
            .with_columns(pl.col("_g").shift(1).forward_fill().over("rank").fill_null(0).alias("before"))
            .filter(pl.col("gid") != h["gid"])
            .join(fam, on="gid", how="left"))
    ref: dict[tuple[str, int], Counter] = {}
    for f, seq, before in rows.filter(pl.col("rank").is_in(peers)).select("fam", "seq", "before").iter_rows():
        ref.setdefault((f, seq), Counter())[before] += 1
    out = []
    for c in culprits:
        for r in rows.filter(pl.col("rank") == c).iter_rows(named=True):
            votes = ref.get((r["fam"], r["seq"]))
            if not votes:
                continue
            want = votes.most_common(1)[0][0]
            if want != r["before"]:
                out.append({"rank": c, "group": r["label"], "seq": r["seq"], "op": r["op"], "done_before": r["before"],
                            "peers_done_before": want, "by": want - r["before"], "skipped_seq": r["before"] + 1,
                            "peers": sorted(peers)})
                break
    return out


__all__ = ["divergence"]
