"""Pipeline stages from a job's collective groups: where a send/recv is pipeline parallelism (pp) and where not.

A **stage** is a set of ranks the job's collective groups (not the world's, not pp or unknown ones, not those that
only carry send/recv) join together. A tp x dp (or tp x FSDP) job joins every rank into one stage, so its send/recv
(a 4 KiB exchange on the 2-rank communicator PyTorch gives each pair, say) is no pipeline: its group, or its
matched pair, takes the dimension of the smallest collective group holding both ranks, else unknown. A tp x pp job
has one stage per pipeline stage, a pure pipeline one per rank: their send/recv between stages is pp.
Used by ``groups`` (the groups' and the pairs' dimensions) without a ``--layout`` (which says it exactly).
"""

from __future__ import annotations

import polars as pl

_NOT_STAGE = ("pp", "world", "unknown")


def stages(g: pl.DataFrame, world: int) -> tuple[dict[int, int], list[tuple[int, str, frozenset[int]]]]:
    """rank -> its stage (module doc), and the collective groups that make them (size, dimension, members).
    ``g``: groups with ``ranks``, ``size`` and ``dimension`` (``_traffic`` where known: send/recv-only groups
    join nothing)."""
    dim = pl.coalesce(*[c for c in ("dimension", "_layout_dim", "_desc_dim", "_geo_dim") if c in g.columns])
    cond = (pl.col("size") < world) & ~dim.is_in(_NOT_STAGE).fill_null(True)
    if "_traffic" in g.columns:
        cond = cond & (pl.col("_traffic").is_null() | (pl.col("_traffic") != "p2p"))
    coll = g.filter(cond).select("size", dim.alias("_d"), "ranks")
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    made = []
    for size, d, ranks in coll.iter_rows():
        made.append((int(size), str(d), frozenset(ranks)))
        for r in ranks[1:]:
            parent[find(int(r))] = find(int(ranks[0]))
    return {r: find(r) for r in list(parent)}, made


def p2p_within_stages(g: pl.DataFrame, world: int) -> pl.DataFrame:
    """Send/recv-only groups that geometry called pp but whose ranks are all in one stage: the dimension of the
    smallest collective group holding them all, else unknown."""
    p2p = g.filter((pl.col("_traffic") == "p2p") & (pl.col("size") < world))
    if p2p.height == 0:
        return g
    stage, made = stages(g, world)
    made.sort(key=lambda m: m[0])
    fixed: dict[int, str] = {}
    for gid, ranks in p2p.select("_gid", "ranks").iter_rows():
        if all(int(r) in stage for r in ranks) and len({stage[int(r)] for r in ranks}) == 1:
            members = set(ranks)
            fixed[gid] = next((d for _, d, m in made if members <= m), "unknown")
    if not fixed:
        return g
    return g.with_columns(pl.col("_gid").replace_strict(fixed, default=None, return_dtype=pl.Utf8)
                          .fill_null(pl.col("_geo_dim")).alias("_geo_dim"))


def pair_by_stage(rows: pl.DataFrame, grp: pl.DataFrame) -> pl.Expr:
    """Without a layout, a matched pair between two stages is pp; within one, the dimension of the smallest
    collective group holding both ranks, else unknown (module doc)."""
    pairs = rows.filter(pl.col("_peer_rank").is_not_null()).select("rank", "_peer_rank").unique()
    if pairs.height == 0:
        return pl.lit("pp")
    world = max(int(grp["size"].max() or 0), int(rows["rank"].max() or 0) + 1) if grp.height else 0
    stage, made = stages(grp, world) if grp.height else ({}, [])
    made.sort(key=lambda m: m[0])
    dims = {}
    for a, b in pairs.iter_rows():
        if a == b or int(a) not in stage or stage[int(a)] != stage.get(int(b)):  # a rank in no group: its own stage
            dims[(a, b)] = "pp"
        else:
            dims[(a, b)] = next((d for _, d, m in made if a in m and b in m), "unknown")
    keys = pl.DataFrame({"rank": [k[0] for k in dims], "_peer_rank": [k[1] for k in dims], "_pd": list(dims.values())},
                        schema={"rank": rows.schema["rank"], "_peer_rank": rows.schema["_peer_rank"], "_pd": pl.Utf8})
    # a small lookup: rank * (max + 1) + peer -> dimension
    base = int(max(keys["rank"].max(), keys["_peer_rank"].max())) + 1
    lookup = dict(zip((keys["rank"].cast(pl.Int64) * base + keys["_peer_rank"].cast(pl.Int64)).to_list(),
                      keys["_pd"].to_list(), strict=True))
    return (pl.col("rank").cast(pl.Int64) * base + pl.col("_peer_rank").cast(pl.Int64)).replace_strict(
        lookup, default="pp", return_dtype=pl.Utf8)


__all__ = ["p2p_within_stages", "pair_by_stage", "stages"]
