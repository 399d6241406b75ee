"""Where each process group stops: the first collective not every member finished, who waits in it, who never
entered it, who entered something else; the group x seq grid; unmatched send/recv.

Every process group numbers its collectives per rank (``collective_seq_id``): the same number on every member is
the same collective. Per group, the first seq that not every member finished is where the group hangs. At that seq
each member either finished it, entered it and waits (its entry is not done), never entered it (its last entry in
the group is older: it is somewhere else), or has no dump. Members that entered it with a different op, size or
dtype than the others (a majority vote over the group and its sibling groups, the other groups of the same
description and size, which run the same program) are mismatched.

Send/recv: per directed pair of ranks in a group, pending sends with no pending receive on the peer (or the
reverse) are left unmatched; each is a hang of its own (the sender waits, the receiver never posted).
Pure: tables in, plain dicts and tables out; times stay ns.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from ..crossrank.groups import generic_desc

GRID_SEQS = 16  # the grid shows each group's last this many seqs up to its hang
NO_SIZE_CHECK = ("all_to_all", "gather", "scatter", "barrier", "coalesced")  # sizes differ by design


def pending_positions(e: pl.DataFrame) -> dict[int, tuple[str, bool, int]]:
    """Where each rank is blocked: its oldest entry that is not done (gid, is_p2p, seq)."""
    first = e.filter(~pl.col("done")).sort("record_id").group_by("rank").first()
    return {r["rank"]: (r["gid"], r["is_p2p"], r["seq"]) for r in first.iter_rows(named=True)}


def collective_hangs(per: pl.DataFrame, groups: pl.DataFrame, have: set[int]) -> tuple[list[dict], pl.DataFrame]:
    """Every group's hang (see the module doc) and the grid."""
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
    out = [hang_at(info[gid], seq, rows_at.get(gid, []), spans.get(gid, {}), have, votes.get(gid))
           for gid, seq in hang_seq.items()]
    # members merely behind in the window (all done, none waiting) are dumps taken a moment apart, not a hang
    return [h for h in out if h["waiting"] or h["mismatched"]], _grid(per, groups, hang_seq, have)


def hang_at(g: dict, seq: int, rows: list[dict], spans: dict[int, tuple[int, int]], have: set[int],
            votes: Counter | None) -> dict:
    """One collective of group ``g`` as a hang: who finished it, waits in it, never entered it, has no dump, or
    entered it with another op, size or dtype than the reference (``votes``: signature counts)."""
    here = {r["rank"]: r for r in rows}
    waiting, missing, no_dump, done, queued = [], [], [], [], []
    for m in g["ranks"]:
        lo_hi = spans.get(m)
        if m not in have:
            no_dump.append(m)
        elif m in here:
            (done if here[m]["done"] else waiting).append(m)
            if not here[m]["done"] and here[m].get("state") == "scheduled":
                queued.append(m)
        elif lo_hi and lo_hi[0] > seq:
            done.append(m)  # its buffer starts after this seq: it finished it long ago
        else:
            missing.append(m)
    ref = _reference(votes, here)
    mismatched = [{"rank": r, "op": x["op"], "bytes": x["in_bytes"], "dtype": x["dtype"]}
                  for r, x in sorted(here.items()) if ref and signature(x) != ref]
    since = [here[r]["since_ns"] for r in waiting if here[r]["since_ns"]]
    return {
        "kind": "collective", "gid": g["gid"], "group": g["label"], "pg": g["pg"], "desc": g["desc"],
        "dimension": g["dimension"], "group_ranks": g["ranks"], "seq": seq,
        "op": ref[0] if ref else None, "bytes": ref[1] if ref else None, "dtype": ref[2] if ref else None,
        "waiting": waiting, "missing": missing, "no_dump": no_dump, "completed": done, "mismatched": mismatched,
        "queued": queued, "since_ns": min(since) if since else None,
    }


def signature(x: dict) -> tuple:
    sized = x["op"] not in NO_SIZE_CHECK
    return (x["op"], x["in_bytes"] if sized else None, x["dtype"] if sized else None)


def _votes(per: pl.DataFrame, groups: pl.DataFrame, hang_seq: dict[str, int]) -> dict[str, Counter]:
    """Signature counts at each hang's seq over its group and its siblings (same description and size)."""
    fam = {r["gid"]: (r["desc"], r["size"]) for r in groups.iter_rows(named=True)}
    sibs: dict[tuple, list[str]] = {}
    for gid, key in fam.items():
        if not generic_desc(key[0]):
            sibs.setdefault(key, []).append(gid)
    want = {(s, seq) for gid, seq in hang_seq.items() for s in sibs.get(fam[gid], [gid])} | set(hang_seq.items())
    if not want:
        return {}
    keys = pl.DataFrame({"gid": [w[0] for w in want], "seq": [w[1] for w in want]},
                        schema={"gid": pl.Utf8, "seq": pl.Int64})
    counts: dict[tuple[str, int], Counter] = {}
    for r in per.join(keys, on=["gid", "seq"]).iter_rows(named=True):
        counts.setdefault((r["gid"], r["seq"]), Counter())[signature(r)] += 1
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
            if signature(here[r]) in tied:
                return signature(here[r])
        return next(iter(sorted(tied, key=str)))
    return signature(here[min(here)])


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


def p2p_unmatched(e: pl.DataFrame, groups: pl.DataFrame, have: set[int]) -> list[dict]:
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


def p2p_hang(u: dict, groups: pl.DataFrame) -> dict:
    g = groups.filter(pl.col("gid") == u["gid"]).row(0, named=True)
    peer_missing = [u["peer"]] if u["peer_has_dump"] else []
    return {"kind": "p2p", "gid": u["gid"], "group": g["label"], "pg": g["pg"], "desc": g["desc"],
            "dimension": g["dimension"], "group_ranks": g["ranks"], "seq": u["seq"], "op": u["op"],
            "bytes": u["bytes"], "dtype": u["dtype"], "src": u["src"], "dst": u["dst"], "waiting": [u["rank"]],
            "missing": peer_missing, "no_dump": [] if u["peer_has_dump"] else [u["peer"]], "completed": [],
            "mismatched": [], "queued": [], "since_ns": u["since_ns"]}


__all__ = ["GRID_SEQS", "NO_SIZE_CHECK", "collective_hangs", "hang_at", "p2p_hang", "p2p_unmatched",
           "pending_positions", "signature"]
