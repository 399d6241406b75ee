"""Hang triage over Flight Recorder entries: where the job went wrong, which collective it is stuck in, who holds
it up.

Three questions, one module each, put together here:

- ``consistency``: is every collective the same on every member of its group (op, sizes, dtypes, state; who never
  entered)? What PyTorch's own analyzer checks; the first op/size/dtype mismatch of a group is a **desync**, and
  a rank whose later collectives are its peers' shifted by one **skipped** one.
- ``stuck``: per group, the first collective not every member finished: who waits, who never entered, who
  entered something else, who has no dump.
- ``chain``: which stuck group cannot complete by itself (the root) and which only wait on it, following each
  rank's next pending collective across groups; ``order``: where a rank that never entered the root went astray.

The answer (``Hang.hang``) is the earliest desync when one precedes the stuck collectives (NCCL runs mismatched
collectives without a word, so the job stops later, elsewhere: ``hangs_at`` says where), else the first root.
Pure: tables in, tables and plain dicts out; times stay ns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import polars as pl

from ..crossrank import groups as pgroups
from . import chain, consistency, order
from . import stuck as stuck_mod
from .stuck import GRID_SEQS, NO_SIZE_CHECK

__all__ = ["GRID_SEQS", "NO_SIZE_CHECK", "Hang", "analyze"]


@dataclass(frozen=True)
class Hang:
    hang: dict | None  # the answer (the JSON ``hang`` key): the root desync or hang; None when nothing is wrong
    stuck: tuple[dict, ...]  # every group's hang, roots first, each as ``hang`` plus root / blocked_by
    groups: pl.DataFrame  # one row per process group: label, pg, desc, ranks, size, dimension, state, seqs
    grid: pl.DataFrame  # group label x seq: completed / waiting / missing / no_dump counts, op
    p2p_unmatched: tuple[dict, ...]
    missing_dumps: tuple[int, ...]  # ranks of the world without a dump
    world_size: int
    mismatches: tuple[dict, ...] = ()  # every collective whose members disagree (consistency.check), by group, seq
    mismatch_count: int = 0  # all of them (``mismatches`` lists at most consistency.MAX_PER_GROUP a group)


def analyze(entries: pl.DataFrame, dump_ranks: list[int], pg_config: dict[int, dict[str, tuple[str, tuple]]],
            dims: pgroups.Options | None = None) -> Hang:
    """``entries``: the Flight Recorder entry table; ``pg_config``: per rank, pg name -> (desc, members)."""
    dims = dims or pgroups.Options()
    have = set(dump_ranks)
    e, members = _with_groups(entries, pg_config)
    groups = _group_table(e, members)
    world = _world_size(groups, dump_ranks)
    missing_dumps = tuple(r for r in range(world) if r not in have)
    groups = _dimensions(groups, world, dims)
    coll = e.filter(~pl.col("is_p2p") & pl.col("seq").is_not_null())
    per = coll.group_by("gid", "rank", "seq").agg(
        pl.col("op").first(), pl.col("in_bytes").first(), pl.col("out_bytes").first(),
        pl.col("dtype").first(), pl.col("done").all(), pl.col("record_id").min(),
        pl.coalesce("started_ns", "created_ns").min().alias("since_ns"), pl.col("frames").first(),
        pl.col("pg").first(), pl.col("state").first(), pl.col("in_sizes").first(), pl.col("out_sizes").first(),
        pl.col("in_dtypes").first(), pl.col("out_dtypes").first(), pl.col("in_numel").first(),
        pl.col("out_numel").first(),
    )
    pending = stuck_mod.pending_positions(e)
    stuck, grid = stuck_mod.collective_hangs(per, groups, have)
    unmatched = stuck_mod.p2p_unmatched(e, groups, have)
    stuck += [stuck_mod.p2p_hang(u, groups) for u in unmatched if u["waiting"]]
    stuck = chain.link(stuck, pending)
    checked = consistency.check(per, groups, have)
    root = _answer(stuck, checked.desyncs, per, have)
    done_in, latest = chain.last_entries(e) if stuck or root else ({}, {})
    for h in ([root] if root is not None and not any(root is h for h in stuck) else []) + stuck:
        h["last_completed"] = {str(r): done_in[(r, h["gid"])] for r in h["missing"] if (r, h["gid"]) in done_in}
        h["last_entry"] = {str(r): latest[r] for r in h["missing"] if r in latest}
        h["stacks"] = chain.stacks(e, h, latest)
        h["went_astray"] = order.divergence(e, h, groups) if h.get("cause") == "never_entered" else []
        for k in ("last_completed", "last_entry"):
            h[k] = {r: {f: v for f, v in x.items() if f != "frames"} for r, x in h[k].items()}
    grid = _grid_mismatches(grid, checked.records)
    state = {h["gid"]: "hung" for h in stuck if h["kind"] == "collective"}
    groups = groups.with_columns(pl.col("gid").replace_strict(state, default="ok").alias("state"))
    return Hang(root, tuple(stuck), groups, grid, tuple(unmatched), missing_dumps, world, checked.records,
                checked.total)


def _grid_mismatches(grid: pl.DataFrame, records: tuple[dict, ...]) -> pl.DataFrame:
    """The grid's cells with how many members entered them with another op, size or dtype."""
    odd = pl.DataFrame({"gid": [r["gid"] for r in records], "seq": [r["seq"] for r in records],
                        "mismatched": [len(r["ranks"]) for r in records]},
                       schema={"gid": pl.Utf8, "seq": pl.Int64, "mismatched": pl.Int32})
    return grid.join(odd, on=["gid", "seq"], how="left").with_columns(pl.col("mismatched").fill_null(0))


def _answer(stuck: list[dict], desyncs: tuple[dict, ...], per: pl.DataFrame, have: set[int]) -> dict | None:
    """The earliest desync when it comes before the stuck collectives (it is their cause), else the first root."""
    first = stuck[0] if stuck else None
    if not desyncs:
        return first
    d = min(desyncs, key=lambda x: (x["since_ns"] if x["since_ns"] is not None else 1 << 62, x["gid"], x["seq"]))
    for h in stuck:  # the desync is a stuck group's own collective: that hang, with what the check adds
        if h["kind"] == "collective" and (h["gid"], h["seq"]) == (d["gid"], d["seq"]):
            h["shift"] = d["shift"]
            if d["shift"]:
                h["cause"] = "skipped"
            return h
    rows = per.filter((pl.col("gid") == d["gid"]) & (pl.col("seq") == d["seq"]))
    done = dict(rows.select("rank", "done").iter_rows())
    return {
        "kind": "collective", "gid": d["gid"], "group": d["group"], "pg": d["pg"], "desc": d["desc"],
        "dimension": d["dimension"], "group_ranks": d["group_ranks"], "seq": d["seq"], "op": d["op"],
        "bytes": d["bytes"], "dtype": d["dtype"],
        "waiting": sorted(r for r, ok in done.items() if not ok), "missing": d["missing"],
        "no_dump": [r for r in d["group_ranks"] if r not in have], "completed": sorted(r for r, ok in done.items() if ok),
        "mismatched": [{"rank": x["rank"], "op": x["op"], "bytes": x["bytes"], "dtype": x["dtype"]}
                       for x in d["entries"] if x["kind"] in consistency.DESYNC],
        "queued": [], "since_ns": d["since_ns"], "root": True, "alone": True, "depth": 0, "blocked_by": [],
        "explains": len(stuck), "cause": "skipped" if d["shift"] else "mismatch", "shift": d["shift"],
        "desync": True,
        "hangs_at": {"group": first["group"], "seq": first["seq"], "op": first["op"], "waiting": first["waiting"],
                     "missing": first["missing"], "since_ns": first["since_ns"]} if first else None,
    }


def _with_groups(e: pl.DataFrame, pg_config: dict[int, dict[str, tuple[str, tuple]]]
                 ) -> tuple[pl.DataFrame, dict[str, tuple[tuple[int, ...], str, str | None]]]:
    """A group id per entry: the pg name and its members as the rank's own pg_config gives them (split groups
    may share a name), else the ranks whose dumps record that name (gloo writes no pg_config). Returns the
    entries with ``gid`` and gid -> (members, where the members came from, pg_config's description)."""
    seen = e.group_by("pg").agg(pl.col("rank").unique().sort().alias("_seen"))
    inferred = {r["pg"]: tuple(r["_seen"]) for r in seen.iter_rows(named=True)}
    pairs = e.select("rank", "pg").unique()
    ids: dict[tuple[str, str, str], str] = {}
    tuples: dict[tuple[str, str, str], tuple[int, ...]] = {}
    text: dict[int, str] = {}  # id(member tuple) -> its text: the reader shares one tuple per distinct list
    per_pg: Counter = Counter()

    cfg_desc: dict[str, str] = {}

    def gid(pg: str, members: tuple[int, ...], source: str, desc: str | None = None) -> str:
        t = text.get(id(members))
        if t is None:
            t = text[id(members)] = ",".join(map(str, members))
        key = (pg, t, source)
        if key not in ids:
            ids[key] = f"{pg}#{per_pg[pg]}"
            per_pg[pg] += 1
            tuples[key] = members
        if desc is not None:
            cfg_desc.setdefault(ids[key], desc)
        return ids[key]

    keys = []
    for rank, pg in pairs.iter_rows():
        cfg = pg_config.get(rank, {}).get(pg)
        keys.append(gid(pg, cfg[1], "pg_config", cfg[0]) if cfg else gid(pg, inferred[pg], "entries"))
    # groups a dump's pg_config names but no entry used: they cannot hang, but give the world's size
    for cfg in pg_config.values():
        for pg, (desc, members) in cfg.items():
            gid(pg, members, "pg_config", desc)
    pairs = pairs.with_columns(pl.Series("gid", keys, dtype=pl.Utf8))
    return e.join(pairs, on=["rank", "pg"], how="left"), {g: (tuples[k], k[2], cfg_desc.get(g)) for k, g in ids.items()}


def _group_table(e: pl.DataFrame, members: dict[str, tuple[tuple[int, ...], str, str | None]]) -> pl.DataFrame:
    descs = dict(e.group_by("gid").agg(pl.col("pg_desc").drop_nulls().first()).iter_rows())
    gids = sorted(members, key=lambda g: (g.rsplit("#", 1)[0], int(g.rsplit("#", 1)[1])))
    return pl.DataFrame({
        "gid": gids, "pg": [g.rsplit("#", 1)[0] for g in gids],
        "desc": [descs.get(g) or members[g][2] for g in gids],
        "ranks": [list(members[g][0]) for g in gids], "members_source": [members[g][1] for g in gids],
        "size": [len(members[g][0]) for g in gids],
    }, schema={"gid": pl.Utf8, "pg": pl.Utf8, "desc": pl.Utf8, "ranks": pl.List(pl.Int32),
               "members_source": pl.Utf8, "size": pl.Int32})


def _world_size(groups: pl.DataFrame, dump_ranks: list[int]) -> int:
    world = groups.filter(pl.col("desc") == "default_pg")["size"]
    top = max([*dump_ranks, *[r for rs in groups["ranks"].to_list() for r in rs[-1:]]]) + 1
    return max(int(world.max()) if world.len() else 0, top)


def _dimensions(groups: pl.DataFrame, world: int, dims: pgroups.Options) -> pl.DataFrame:
    meta = groups.select(pl.col("gid").alias("pg"), "desc", "ranks")
    empty = pl.DataFrame(schema={"pg": pl.Utf8, "group_ranks": pl.Utf8, "pg_desc": pl.Utf8, "rank": pl.Int32,
                                 "op": pl.Utf8, "instance": pl.Int64, "comm": pl.Utf8})
    named = pgroups.groups(meta, empty, world, None, dims).select(
        pl.col("pg").alias("gid"), "dimension", "dimension_source", "intra_node")
    label = pl.when(pl.col("pg").is_duplicated()).then(pl.format("{} [{}]", "pg", pl.col("ranks").list.first())) \
        .otherwise(pl.col("pg"))
    return groups.join(named, on="gid", how="left").with_columns(label.alias("label"))
