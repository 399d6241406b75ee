"""Hang triage over Flight Recorder entries: which collective the job is stuck in, and who holds it up.

Every process group numbers its collectives per rank (``collective_seq_id``): the same number on every
member is the same collective. Per group, the first seq that not every member finished is where the group
hangs. At that seq each member either finished it, entered it and waits (its entry is not done), never
entered it (its last entry in the group is older: it is somewhere else), or has no dump. Members that
entered it with a different op, size or dtype than the others (a majority vote over the group and its
sibling groups, the other groups of the same description and size, which run the same program) are
mismatched. A group's hang is explained by another when the rank it waits for is itself waiting in that
other hang; the hangs nothing explains are the roots, and the earliest root is the answer.

Send/recv: per directed pair of ranks in a group, pending sends with no pending receive on the peer (or
the reverse) are left unmatched; each is a hang of its own (the sender waits, the receiver never posted).
Pure: tables in, tables and plain dicts out; times stay ns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import polars as pl

from ..crossrank import groups as pgroups

GRID_SEQS = 16  # the grid shows each group's last this many seqs up to its hang
NO_SIZE_CHECK = ("all_to_all", "gather", "scatter", "barrier", "coalesced")  # sizes differ by design


@dataclass(frozen=True)
class Hang:
    hang: dict | None  # the root hang (the JSON ``hang`` key), None when every group finished its last op
    stuck: tuple[dict, ...]  # every group's hang, roots first, each as ``hang`` plus root / blocked_by
    groups: pl.DataFrame  # one row per process group: label, pg, desc, ranks, size, dimension, state, seqs
    grid: pl.DataFrame  # group label x seq: completed / waiting / missing / no_dump counts, op
    p2p_unmatched: tuple[dict, ...]
    missing_dumps: tuple[int, ...]  # ranks of the world without a dump
    world_size: int


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
        pl.col("pg").first(),
    )
    pending_at = _pending_positions(e)
    stuck, grid = _collective_hangs(per, groups, have)
    unmatched = _p2p_unmatched(e, groups, have)
    stuck += [_p2p_hang(u, groups) for u in unmatched if u["waiting"]]
    _blocked_by(stuck, pending_at)
    # roots first; of those, the one most other hangs wait on (a rank that skipped a tp collective also stalls
    # its dp group, a second root; host clocks differ too much for "earliest" to decide), then the earliest
    stuck.sort(key=lambda h: (not h["root"], -h["explains"], h["since_ns"] if h["since_ns"] is not None else 1 << 62,
                              h["group"], h["seq"]))
    done_in, latest = _last_entries(e) if stuck else ({}, {})
    for h in stuck:
        h["last_completed"] = {str(r): done_in[(r, h["gid"])] for r in h["missing"] if (r, h["gid"]) in done_in}
        h["last_entry"] = {str(r): latest[r] for r in h["missing"] if r in latest}
        h["stacks"] = _stacks(e, h, latest)
    for h in stuck:
        for k in ("last_completed", "last_entry"):
            h[k] = {r: {f: v for f, v in x.items() if f != "frames"} for r, x in h[k].items()}
    state = {h["gid"]: "hung" for h in stuck if h["kind"] == "collective"}
    groups = groups.with_columns(pl.col("gid").replace_strict(state, default="ok").alias("state"))
    return Hang(stuck[0] if stuck else None, tuple(stuck), groups, grid, tuple(unmatched), missing_dumps, world)


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


def _pending_positions(e: pl.DataFrame) -> dict[int, tuple[str, bool, int]]:
    """Where each rank is blocked: its oldest entry that is not done (gid, is_p2p, seq)."""
    first = e.filter(~pl.col("done")).sort("record_id").group_by("rank").first()
    return {r["rank"]: (r["gid"], r["is_p2p"], r["seq"]) for r in first.iter_rows(named=True)}


def _collective_hangs(per: pl.DataFrame, groups: pl.DataFrame, have: set[int]) -> tuple[list[dict], pl.DataFrame]:
    span = per.group_by("gid", "rank").agg(pl.col("seq").min().alias("lo"), pl.col("seq").max().alias("hi"))
    open_seq = per.filter(~pl.col("done")).group_by("gid").agg(pl.col("seq").min().alias("open"))
    top = span.group_by("gid").agg(pl.col("hi").max().alias("top"))
    info = {r["gid"]: r for r in groups.iter_rows(named=True)}
    spans: dict[str, dict[int, tuple[int, int]]] = {}
    for gid, rank, lo, hi in span.iter_rows():
        spans.setdefault(gid, {})[rank] = (lo, hi)
    opens = dict(open_seq.iter_rows())
    tops = dict(top.iter_rows())
    hang_seq: dict[str, int] = {}
    for gid, members in ((g, info[g]["ranks"]) for g in tops):
        seen = spans.get(gid, {})
        behind = [seen[r][1] + 1 for r in members if r in seen and seen[r][1] < tops[gid]]
        never = [r for r in members if r in have and r not in seen]
        cands = [s for s in (opens.get(gid), min(behind) if behind else None) if s is not None]
        if never and not cands:
            cands = [min(lo for lo, _ in seen.values())]
        if cands:
            hang_seq[gid] = min(cands)
    at = per.join(pl.DataFrame({"gid": list(hang_seq), "seq": list(hang_seq.values())},
                               schema={"gid": pl.Utf8, "seq": pl.Int64}), on=["gid", "seq"])
    votes = _votes(per, groups, hang_seq)
    rows_at: dict[str, list[dict]] = {}
    for r in at.iter_rows(named=True):
        rows_at.setdefault(r["gid"], []).append(r)
    out = []
    for gid, seq in hang_seq.items():
        g = info[gid]
        here = {r["rank"]: r for r in rows_at.get(gid, [])}
        waiting, missing, no_dump, done = [], [], [], []
        for m in g["ranks"]:
            lo_hi = spans.get(gid, {}).get(m)
            if m not in have:
                no_dump.append(m)
            elif m in here:
                (done if here[m]["done"] else waiting).append(m)
            elif lo_hi and lo_hi[0] > seq:
                done.append(m)  # its buffer starts after this seq: it finished it long ago
            else:
                missing.append(m)
        ref = _reference(votes.get(gid), here)
        mismatched = [{"rank": r, "op": x["op"], "bytes": x["in_bytes"], "dtype": x["dtype"]}
                      for r, x in sorted(here.items()) if ref and _signature(x) != ref]
        since = [here[r]["since_ns"] for r in waiting if here[r]["since_ns"]]
        out.append({
            "kind": "collective", "gid": gid, "group": g["label"], "pg": g["pg"], "desc": g["desc"],
            "dimension": g["dimension"], "group_ranks": g["ranks"], "seq": seq,
            "op": ref[0] if ref else None, "bytes": ref[1] if ref else None, "dtype": ref[2] if ref else None,
            "waiting": waiting, "missing": missing, "no_dump": no_dump, "completed": done, "mismatched": mismatched,
            "since_ns": min(since) if since else None,
        })
    # members merely behind in the window (all done, none waiting) are dumps taken a moment apart, not a hang
    return [h for h in out if h["waiting"] or h["mismatched"]], _grid(per, groups, hang_seq, have)


def _signature(x: dict) -> tuple:
    sized = x["op"] not in NO_SIZE_CHECK
    return (x["op"], x["in_bytes"] if sized else None, x["dtype"] if sized else None)


def _votes(per: pl.DataFrame, groups: pl.DataFrame, hang_seq: dict[str, int]) -> dict[str, Counter]:
    """Signature counts at each hang's seq over its group and its siblings (same description and size)."""
    fam = {r["gid"]: (r["desc"], r["size"]) for r in groups.iter_rows(named=True)}
    sibs: dict[tuple, list[str]] = {}
    for gid, key in fam.items():
        if key[0] and key[0] not in ("undefined", "default_pg"):
            sibs.setdefault(key, []).append(gid)
    want = {(s, seq) for gid, seq in hang_seq.items() for s in sibs.get(fam[gid], [gid])} | set(hang_seq.items())
    if not want:
        return {}
    keys = pl.DataFrame({"gid": [w[0] for w in want], "seq": [w[1] for w in want]},
                        schema={"gid": pl.Utf8, "seq": pl.Int64})
    counts: dict[tuple[str, int], Counter] = {}
    for r in per.join(keys, on=["gid", "seq"]).iter_rows(named=True):
        counts.setdefault((r["gid"], r["seq"]), Counter())[_signature(r)] += 1
    out = {}
    for gid, seq in hang_seq.items():
        total: Counter = Counter()
        for s in sibs.get(fam[gid], [gid]):
            total.update(counts.get((s, seq), Counter()))
        out[gid] = total
    return out


def _reference(votes: Counter | None, here: dict[int, dict]) -> tuple | None:
    """The signature most members (and siblings) used; a tie goes to the lowest rank's."""
    if not here:
        return None
    if votes:
        best = max(votes.values())
        tied = {s for s, n in votes.items() if n == best}
        for r in sorted(here):
            if _signature(here[r]) in tied:
                return _signature(here[r])
        return next(iter(sorted(tied, key=str)))
    return _signature(here[min(here)])


def _grid(per: pl.DataFrame, groups: pl.DataFrame, hang_seq: dict[str, int], have: set[int]) -> pl.DataFrame:
    """group x seq: how many members completed, wait in it, never entered it, have no dump (last seqs only)."""
    top = per.group_by("gid").agg(pl.col("seq").max().alias("top"))
    end = {g: hang_seq.get(g, t) for g, t in top.iter_rows()}
    lim = pl.DataFrame({"gid": list(end), "end": list(end.values())}, schema={"gid": pl.Utf8, "end": pl.Int64})
    sized = groups.select("gid", "label", "size", pl.col("ranks").list.eval(
        pl.element().is_in(list(have)).not_()).list.sum().alias("no_dump"))
    cells = (
        per.join(lim, on="gid").filter((pl.col("seq") <= pl.col("end")) & (pl.col("seq") > pl.col("end") - GRID_SEQS))
        .group_by("gid", "seq").agg(pl.col("done").sum().alias("completed"), (~pl.col("done")).sum().alias("waiting"),
                                    pl.col("op").mode().first().alias("op"))
        .join(sized, on="gid")
        .with_columns(
            (pl.col("size") - pl.col("completed") - pl.col("waiting") - pl.col("no_dump")).clip(0).alias("missing"))
    )
    return cells.select("label", "gid", "seq", "op", "size", "completed", "waiting", "missing", "no_dump").with_columns(
        pl.col("completed", "waiting", "missing", "no_dump").cast(pl.Int32)).sort("label", "seq")


def _p2p_unmatched(e: pl.DataFrame, groups: pl.DataFrame, have: set[int]) -> list[dict]:
    p = e.filter(pl.col("is_p2p") & ~pl.col("done") & pl.col("src").is_not_null())
    if p.height == 0:
        return []
    members = dict(groups.select("gid", "ranks").iter_rows())
    out = []
    pending: dict[tuple, list[dict]] = {}
    for r in p.sort("record_id").iter_rows(named=True):
        ranks = members[r["gid"]]
        if not (0 <= r["src"] < len(ranks) and 0 <= r["dst"] < len(ranks)):
            continue
        pending.setdefault((r["gid"], ranks[r["src"]], ranks[r["dst"]], r["op"]), []).append(r)
    for (gid, src, dst, op), rows in sorted(pending.items()):
        if op != "send" and op != "recv":
            continue
        peer_op = "recv" if op == "send" else "send"
        peer = dst if op == "send" else src
        k = len(pending.get((gid, src, dst, peer_op), []))
        for r in rows[k:]:
            out.append({"gid": gid, "pg": r["pg"], "op": op, "src": src, "dst": dst, "rank": r["rank"],
                        "peer": peer, "seq": r["seq"], "bytes": r["in_bytes"] if op == "send" else r["out_bytes"],
                        "dtype": r["dtype"], "since_ns": r["started_ns"] or r["created_ns"],
                        "peer_has_dump": peer in have, "waiting": [r["rank"]]})
    return out


def _p2p_hang(u: dict, groups: pl.DataFrame) -> dict:
    g = groups.filter(pl.col("gid") == u["gid"]).row(0, named=True)
    peer_missing = [u["peer"]] if u["peer_has_dump"] else []
    return {"kind": "p2p", "gid": u["gid"], "group": g["label"], "pg": g["pg"], "desc": g["desc"],
            "dimension": g["dimension"], "group_ranks": g["ranks"], "seq": u["seq"], "op": u["op"],
            "bytes": u["bytes"], "dtype": u["dtype"], "src": u["src"], "dst": u["dst"], "waiting": [u["rank"]],
            "missing": peer_missing, "no_dump": [] if u["peer_has_dump"] else [u["peer"]], "completed": [],
            "mismatched": [], "since_ns": u["since_ns"]}


def _mis_ranks(h: dict) -> list[int]:
    return [m["rank"] for m in h["mismatched"]]


def _blocked_by(stuck: list[dict], pending_at: dict) -> None:
    """A hang is explained by another when a rank it waits for is itself waiting in that other hang."""
    where = {(h["gid"], h["kind"] == "p2p", h["seq"]): i for i, h in enumerate(stuck)}
    for h in stuck:
        by = set()
        for r in h["missing"]:
            j = where.get(pending_at.get(r, (None, None, None)))
            if j is not None and stuck[j] is not h:
                by.add(j)
        h["blocked_by"] = sorted(by)
        h["root"] = bool(h["mismatched"] or h["no_dump"] or not by)
    children: dict[int, list[int]] = {}
    for k, h in enumerate(stuck):
        for j in h["blocked_by"]:
            children.setdefault(j, []).append(k)
    for i, h in enumerate(stuck):  # how many hangs wait on this one, directly or through others
        h["explains"] = _downstream(children, i)
    for h in stuck:  # indexes -> readable references
        h["blocked_by"] = [{"group": stuck[j]["group"], "seq": stuck[j]["seq"], "op": stuck[j]["op"]}
                           for j in h["blocked_by"]]
    if stuck and not any(h["root"] for h in stuck):  # a cycle (deadlock): every hang waits on another
        for h in stuck:
            h["root"] = True


def _downstream(children: dict[int, list[int]], i: int) -> int:
    seen, todo = {i}, [i]
    while todo:
        for k in children.get(todo.pop(), []):
            if k not in seen:
                seen.add(k)
                todo.append(k)
    return len(seen) - 1


def _last_entries(e: pl.DataFrame) -> tuple[dict[tuple[int, str], dict], dict[int, dict]]:
    """Each rank's last completed op per group, and its last op in any group (where it is now)."""
    cols = ("rank", "gid", "pg", "seq", "op", "in_bytes", "dtype", "done", "state", "completed_ns", "started_ns",
            "created_ns", "frames")
    ordered = e.sort("record_id").select(cols)

    def brief(r: dict) -> dict:
        return {"group": r["pg"], "seq": r["seq"], "op": r["op"], "bytes": r["in_bytes"], "dtype": r["dtype"],
                "state": "completed" if r["done"] else r["state"],
                "time_ns": r["completed_ns"] or r["started_ns"] or r["created_ns"],
                "frames": r["frames"].split("\n") if r["frames"] else []}
    done_in = {(r["rank"], r["gid"]): brief(r)
               for r in ordered.filter(pl.col("done")).group_by("rank", "gid").last().iter_rows(named=True)}
    latest = {r["rank"]: brief(r) for r in ordered.group_by("rank").last().iter_rows(named=True)}
    return done_in, latest


def _stacks(e: pl.DataFrame, h: dict, latest: dict[int, dict]) -> dict[str, dict]:
    """Stacks of the ranks that hold the hang up (their latest op), and of the first waiting rank (its wait)."""
    out: dict[str, dict] = {}
    for r in (*h["missing"], *_mis_ranks(h)):
        entry = latest.get(r)
        if entry and entry["frames"]:
            out[str(r)] = {"op": entry["op"], "seq": entry["seq"], "group": entry["group"],
                           "frames": entry["frames"], "user_frame": user_frame(entry["frames"])}
    if h["waiting"]:
        r = h["waiting"][0]
        row = e.filter((pl.col("rank") == r) & (pl.col("gid") == h["gid"]) & (pl.col("seq") == h["seq"]))
        if row.height and row["frames"][0]:
            frames = row["frames"][0].split("\n")
            out.setdefault(str(r), {"op": h["op"], "seq": h["seq"], "group": h["pg"], "frames": frames,
                                    "user_frame": user_frame(frames)})
    return out


def user_frame(frames: list[str]) -> str | None:
    """The innermost frame outside torch and the Python runtime: the user's line that called the op."""
    for f in frames:
        low = f.replace("\\", "/")
        if "/torch/" not in low and "/multiprocessing/" not in low and "<string>" not in low \
                and "/threading.py" not in low and "/runpy.py" not in low:
            return f
    return frames[0] if frames else None
