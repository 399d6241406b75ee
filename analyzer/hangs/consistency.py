"""Every collective checked across the members of its group, as PyTorch's Flight Recorder analyzer does: op, sizes,
dtypes and state, whether the entries completed or not; plus members that never entered it.

PyTorch's ``fr_trace`` (``torch/distributed/flight_recorder/components``) compares each entry with the first rank's
and calls the others culprits; here each collective ``(group, seq)`` gets a reference by majority vote over its
members and its sibling groups (same description and size: the same program on other ranks), so the culprit is the
odd one out also when it is the first rank. What counts as a mismatch follows ``types.Op.match``:

- ``op``: another collective type;
- ``size``: other input sizes (not for all_to_all, scatter) or output sizes (not for all_to_all, gather), or an
  entry inconsistent in itself (all_gather output != input x group size; reduce_scatter input != output x group
  size; all_reduce input != output);
- ``dtype``: another set of input dtypes (not for scatter, broadcast) or output dtypes (not for gather);
- ``state``: the same collective completed on some members and not on others (weak: dumps are taken moments
  apart; never a root by itself);
- ``missing``: a member with a dump whose buffer covers the seq has no entry for it.

NCCL checks none of this: a mismatched pair runs (the real ``fr_size_mismatch`` capture completed every
collective), so a desync shows in completed entries long before the job stops. A rank that **skipped** a
collective runs every later one against its peers' next: its signatures from the first mismatch on equal the
reference's one or more seqs later (``shift``; an extra collective is a negative shift).
Pure: tables in, plain dicts out.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..crossrank.groups import sibling_family

MAX_PER_GROUP = 64  # mismatched collectives listed per group (earliest first; PyTorch stops after 10)
MAX_SHIFT = 3  # collectives skipped (or added) that the shift test looks for
_NO_IN_SIZE = ("all_to_all", "scatter", "coalesced")
_NO_OUT_SIZE = ("all_to_all", "gather", "coalesced")
_NO_IN_DTYPE = ("scatter", "broadcast", "coalesced")
_NO_OUT_DTYPE = ("gather", "coalesced")
KINDS = ("op", "size", "dtype", "state", "missing")  # precedence: the first that applies names the mismatch
DESYNC = ("op", "size", "dtype")  # kinds that make a collective wrong (state and missing are where it stopped)


@dataclass(frozen=True)
class Mismatches:
    records: tuple[dict, ...]  # one per mismatched collective, by group then seq (at most MAX_PER_GROUP a group)
    total: int  # mismatched collectives in all (records may list fewer)
    desyncs: tuple[dict, ...]  # per group, its first op/size/dtype mismatch (with its shift when found)


def signatures(per: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """``per`` (one row per group, rank, seq) with ``sig`` (op, sizes and dtypes as compared), ``bad_self``
    (inconsistent in itself) and ``fam`` (the group's family: its siblings vote with it)."""
    op = pl.col("op").fill_null("?")
    n = pl.col("size").cast(pl.Int64)
    in_size = pl.when(op.is_in(_NO_IN_SIZE)).then(pl.lit("")).otherwise(pl.col("in_sizes").fill_null("?"))
    out_size = pl.when(op.is_in(_NO_OUT_SIZE)).then(pl.lit("")).otherwise(pl.col("out_sizes").fill_null("?"))
    in_dt = pl.when(op.is_in(_NO_IN_DTYPE)).then(pl.lit("")).otherwise(_dtype_set("in_dtypes"))
    out_dt = pl.when(op.is_in(_NO_OUT_DTYPE)).then(pl.lit("")).otherwise(_dtype_set("out_dtypes"))
    bad_self = (
        ((op == "all_gather") & (pl.col("out_numel") != pl.col("in_numel") * n))
        | ((op == "reduce_scatter") & (pl.col("in_numel") != pl.col("out_numel") * n))
        | ((op == "all_reduce") & (pl.col("in_sizes") != pl.col("out_sizes")))
    ).fill_null(False)
    fam = sibling_family()
    return per.join(groups.select("gid", "desc", "size"), on="gid", how="left").with_columns(
        op.alias("_op"), pl.concat_str([in_size, out_size], separator="|").alias("size_sig"),
        pl.concat_str([in_dt, out_dt], separator="|").alias("dtype_sig"), bad_self.alias("bad_self"),
        fam.alias("fam"),
    ).with_columns(pl.concat_str(["_op", "size_sig", "dtype_sig"], separator="#").alias("sig"))


def _dtype_set(col: str) -> pl.Expr:
    return pl.col(col).fill_null("?").str.split(",").list.unique().list.sort().list.join(",")


def check(per: pl.DataFrame, groups: pl.DataFrame, have: set[int]) -> Mismatches:
    """Every (group, seq) whose members disagree or where a member is missing; see the module doc."""
    if per.height == 0:
        return Mismatches((), 0, ())
    s = signatures(per, groups)
    votes = s.group_by("fam", "seq", "sig").agg(pl.len().alias("_votes"))
    s = s.join(votes, on=["fam", "seq", "sig"], how="left")
    ref = (s.sort("_votes", "rank", descending=[True, False]).group_by("gid", "seq", maintain_order=True)
           .agg(pl.col("sig").first().alias("ref_sig"), pl.col("_op").first().alias("ref_op"),
                pl.col("size_sig").first().alias("ref_size"), pl.col("dtype_sig").first().alias("ref_dtype"),
                pl.col("rank").first().alias("ref_rank")))
    states = (s.group_by("gid", "seq", "state").agg(pl.len().alias("_n"), pl.col("rank").min().alias("_r"))
              .sort("_n", "_r", descending=[True, False]).group_by("gid", "seq", maintain_order=True)
              .agg(pl.col("state").first().alias("ref_state")))
    s = s.join(ref, on=["gid", "seq"]).join(states, on=["gid", "seq"]).with_columns(
        pl.when(pl.col("_op") != pl.col("ref_op")).then(pl.lit("op"))
        .when((pl.col("size_sig") != pl.col("ref_size")) | pl.col("bad_self")).then(pl.lit("size"))
        .when(pl.col("dtype_sig") != pl.col("ref_dtype")).then(pl.lit("dtype"))
        .when(pl.col("state") != pl.col("ref_state")).then(pl.lit("state"))
        .alias("odd"))
    missing = _missing(s, groups, have)
    flagged = set(map(tuple, s.filter(pl.col("odd").is_not_null()).select("gid", "seq").unique().iter_rows()))
    flagged |= set(missing)
    if not flagged:
        return Mismatches((), 0, ())
    info = {r["gid"]: r for r in groups.iter_rows(named=True)}
    keep: dict[str, list[int]] = {}
    for gid, seq in sorted(flagged, key=lambda k: (k[0], k[1])):
        keep.setdefault(gid, []).append(seq)
    chosen = {(g, q) for g, seqs in keep.items() for q in seqs[:MAX_PER_GROUP]}
    sel = pl.DataFrame({"gid": [k[0] for k in chosen], "seq": [k[1] for k in chosen]},
                       schema={"gid": pl.Utf8, "seq": pl.Int64})
    rows: dict[tuple[str, int], list[dict]] = {}
    for r in s.join(sel, on=["gid", "seq"]).sort("rank").iter_rows(named=True):
        rows.setdefault((r["gid"], r["seq"]), []).append(r)
    records = [_record(info[g], q, rows.get((g, q), []), missing.get((g, q), [])) for g, q in sorted(chosen)]
    records.sort(key=lambda r: (_group_order(r["gid"]), r["seq"]))
    firsts: dict[str, dict] = {}
    for r in records:
        if r["kind"] in DESYNC and r["gid"] not in firsts:
            firsts[r["gid"]] = r
    desyncs = tuple(_with_shift(d, s) for d in firsts.values())
    shifted = {(d["gid"], d["seq"]): d for d in desyncs}
    records = [shifted.get((r["gid"], r["seq"]), r) for r in records]
    return Mismatches(tuple(records), len(flagged), desyncs)


def _group_order(gid: str) -> tuple[str, int]:
    name, _, k = gid.rpartition("#")
    return (name, int(k) if k.isdigit() else 0)


def _missing(s: pl.DataFrame, groups: pl.DataFrame, have: set[int]) -> dict[tuple[str, int], list[int]]:
    """(gid, seq) -> members with a dump whose buffer covers the seq (their first entry in the group is not later;
    members with no entry in the group count from where every member's buffer has begun) and have no entry.
    Counted in columns (a 4,096-rank job has ~20 k (group, rank) pairs); only the short collectives are listed."""
    out: dict[tuple[str, int], list[int]] = {}
    span = s.group_by("gid", "rank").agg(pl.col("seq").min().alias("lo"))
    dumped = (groups.select("gid", pl.col("ranks").alias("rank")).explode("rank")
              .filter(pl.col("rank").is_in(list(have))).group_by("gid").agg(pl.len().alias("_dumped")))
    per_gid = span.group_by("gid").agg(pl.len().alias("_with"), pl.col("lo").max().alias("_floor")).join(
        dumped, on="gid", how="left").with_columns((pl.col("_dumped").fill_null(0) - pl.col("_with")).clip(0)
                                                   .alias("_absent"))
    # members whose first seq is <= this seq: the running count of first seqs, taken as of each seq
    firsts = span.group_by("gid", "lo").agg(pl.len().alias("_k")).sort("gid", "lo").with_columns(
        pl.col("_k").cum_sum().over("gid").alias("_cov"))
    at = (s.group_by("gid", "seq").agg(pl.len().alias("_n")).sort("gid", "seq")
          .join_asof(firsts.select("gid", pl.col("lo").alias("seq"), "_cov"), on="seq", by="gid", strategy="backward",
                     check_sortedness=False)  # both sorted by gid, then seq
          .join(per_gid, on="gid", how="left")
          .with_columns((pl.col("_cov").fill_null(0) + pl.when(pl.col("seq") >= pl.col("_floor"))
                         .then(pl.col("_absent")).otherwise(0)).alias("_expected")))
    short = at.filter(pl.col("_expected") > pl.col("_n")).select("gid", "seq")
    if short.height == 0:
        return out
    lo: dict[str, dict[int, int]] = {}
    for g, r, x in span.join(short.select("gid").unique(), on="gid").iter_rows():
        lo.setdefault(g, {})[r] = x
    floors = dict(per_gid.select("gid", "_floor").iter_rows())
    members = dict(groups.select("gid", "ranks").iter_rows())
    ranks_at = {(g, q): set(rs) for g, q, rs in s.join(short, on=["gid", "seq"]).group_by("gid", "seq")
                .agg(pl.col("rank")).iter_rows()}
    for g, q in short.iter_rows():
        mine = lo.get(g, {})
        have_q = ranks_at.get((g, q), set())
        floor = floors.get(g)
        who = [m for m in members.get(g, []) if m in have and m not in have_q
               and (mine[m] <= q if m in mine else floor is not None and q >= floor)]
        if who:
            out[(g, q)] = who
    return out


def _record(g: dict, seq: int, rows: list[dict], missing: list[int]) -> dict:
    odd = [r for r in rows if r["odd"] is not None]
    kinds = [k for k in KINDS if any(r["odd"] == k for r in odd) or (k == "missing" and missing)]
    ref = next((r for r in rows if r["sig"] == r["ref_sig"]), rows[0]) if rows else None
    majority = [r["rank"] for r in rows if r["odd"] is None or r["odd"] == "state"]
    return {
        "gid": g["gid"], "group": g["label"], "pg": g["pg"], "desc": g["desc"], "dimension": g["dimension"],
        "group_ranks": g["ranks"], "seq": seq, "kind": kinds[0], "kinds": kinds,
        "op": ref["op"] if ref else None, "bytes": ref["in_bytes"] if ref else None,
        "dtype": ref["dtype"] if ref else None, "in_sizes": ref["in_sizes"] if ref else None,
        "out_sizes": ref["out_sizes"] if ref else None, "state": ref["ref_state"] if ref else None,
        "ranks": [r["rank"] for r in odd if r["odd"] != "state"],
        "reference_ranks": majority,
        "entries": [{"rank": r["rank"], "kind": r["odd"], "op": r["op"], "bytes": r["in_bytes"],
                     "dtype": r["dtype"], "in_sizes": r["in_sizes"], "out_sizes": r["out_sizes"],
                     "state": r["state"]} for r in odd[:32]],
        "missing": missing, "done": all(r["done"] for r in rows) and not missing,
        "since_ns": min((r["since_ns"] for r in rows if r["since_ns"]), default=None),
        "shift": None,
    }


def _with_shift(d: dict, s: pl.DataFrame) -> dict:
    """The odd rank's signatures from this seq on against the reference's ``k`` seqs later (k = 1..MAX_SHIFT: it
    skipped k; k < 0: it ran -k extra): the smallest k under which every seq it has matches, two at least."""
    if not d["ranks"] or len(d["ranks"]) > 3:
        return d
    g = s.filter((pl.col("gid") == d["gid"]) & (pl.col("seq") >= d["seq"] - MAX_SHIFT))
    ref = dict(g.select("seq", "ref_sig").unique("seq").iter_rows())
    found = {}
    for rank in d["ranks"]:
        mine = dict(g.filter((pl.col("rank") == rank) & (pl.col("seq") >= d["seq"])).select("seq", "sig").iter_rows())
        for k in (*range(1, MAX_SHIFT + 1), *range(-1, -MAX_SHIFT - 1, -1)):
            pairs = [(sig, ref.get(q + k)) for q, sig in mine.items()]
            pairs = [(a, b) for a, b in pairs if b is not None]
            # two collectives at least: one alone matching another seq's op is no evidence of a shift
            if len(pairs) >= 2 and all(a == b for a, b in pairs) and (k > 0 or len(pairs) == len(mine)):
                found[rank] = {"rank": rank, "by": k, "first": min(mine), "last": max(mine), "compared": len(pairs)}
                break
    if len(found) == len(d["ranks"]):
        return {**d, "shift": list(found.values())}
    return d


__all__ = ["DESYNC", "KINDS", "MAX_PER_GROUP", "Mismatches", "check", "signatures"]
