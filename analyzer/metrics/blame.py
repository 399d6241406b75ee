"""Root cause: pass the wait a rank caused only because it was itself waiting back to whoever delayed it.

Per matched instance i with last arriver L and waits w_q, L caused C_i = Σ_q w_q. For each peer q, c is
the last collective before i that L and q were both in (none: the capture's start): it released them
together, so what set L later than q since then is the time L was held beyond q (H_L − H_q, summed waits
in the collectives in between), the time it spent moving data beyond q (X_L − X_q, transfers), and its
own work. Of w_q, min(w_q, max(0, H_L − H_q)) is *propagated* (L was the messenger) and goes to whoever
caused the collective j that held L longest since c, in the proportions j's wait was root-caused; then
min(rest, max(0, X_L − X_q)) traces to slower transfers (``transfer_ns``: no rank's fault); the rest is
L's *own* (its compute or host time). Looking back to c rather than to L's previous collective follows a
delay carried through a chain (a TP group that ran in lockstep after one hold, then met its DP peers).
Each instance has at most one parent j, so the attribution is a few vectorized passes over the levels
of a forest: with f_c = P_c / C_a for a child c of a, the wait that traces back to a's own part is
own_a × T_a with T_a = 1 + Σ_c f_c T_c. Clock-free: only durations and per-rank order are used.

It reads the graph's member table (``Graph.members``: the instances, a ring's hop split per rank waited for, each
rank's comm-kernel order and the groups' member lists) and builds none of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..crossrank.members import Members

_MAX_LEVELS = 10_000  # a chain can never be longer than the instances in it; guards a cycle bug


@dataclass(frozen=True)
class Blame:
    instances: pl.DataFrame  # instance, step, pg, group_ranks, n_ranks, last_rank, caused/own/propagated_ns, parent
    ranks: pl.DataFrame  # rank, root_caused_wait_ns, propagated_wait_ns
    steps: pl.DataFrame  # rank, step, root_caused_wait_ns (wait suffered in that step, traced to this rank)
    # root rank, root instance, instance where the wait was suffered, its step and the amount
    flows: pl.DataFrame
    transfer_caused_ns: float = 0.0  # wait traced to slower transfers on the late rank's path (no rank's)


_INSTANCE_SCHEMA = {
    "instance": pl.Utf8, "step": pl.Int64, "pg": pl.Utf8, "group_ranks": pl.Utf8, "n_ranks": pl.UInt32,
    "last_rank": pl.Int32,
    "caused_ns": pl.Float64, "own_ns": pl.Float64, "propagated_ns": pl.Float64, "transfer_ns": pl.Float64,
    "parent": pl.Utf8,
}


def root_cause(m: Members, ranks: list[int]) -> Blame:
    """``m``: the graph's member table (``Graph.members``; hand-built kernels: ``crossrank.members.members``)."""
    inst = _instances(m)
    flows = _flows(inst)
    base = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32})
    root = flows.group_by("root_rank").agg(pl.col("amount_ns").sum().alias("root_caused_wait_ns"))
    prop = inst.group_by("last_rank").agg(pl.col("propagated_ns").sum().alias("propagated_wait_ns"))
    rank_df = (
        base.join(root.rename({"root_rank": "rank"}), on="rank", how="left")
        .join(prop.rename({"last_rank": "rank"}), on="rank", how="left")
        .with_columns(pl.col("root_caused_wait_ns", "propagated_wait_ns").fill_null(0.0))
    )
    step_df = (
        flows.filter(pl.col("step").is_not_null())
        .group_by("root_rank", "step").agg(pl.col("amount_ns").sum().alias("root_caused_wait_ns"))
        .rename({"root_rank": "rank"}).sort("rank", "step")
    )
    # an instance's transfer part, and the share of it its propagated part inherited from its roots
    kept = flows.group_by("instance").agg(pl.col("amount_ns").sum().alias("_kept"))
    lost = inst.join(kept, on="instance", how="left").select(
        (pl.col("caused_ns") - pl.col("_kept").fill_null(0.0)).clip(0.0).sum()).item() if inst.height else 0.0
    return Blame(instances=inst, ranks=rank_df, steps=step_df, flows=flows, transfer_caused_ns=float(lost or 0.0))


def _instances(m: Members) -> pl.DataFrame:
    """Per instance: caused, own, propagated and transfer-caused wait, and the instance that held L most."""
    if m.units.height == 0:
        return pl.DataFrame(schema=_INSTANCE_SCHEMA)
    # the graph's units (a ring's hop split per rank waited for) and members, in blame's names: ``instance`` is the
    # unit, ``inst0`` the matched instance it belongs to
    names = {"instance": "inst0", "unit": "instance"}
    inst = m.units.rename(names)
    members = m.groups
    # each rank's comm kernels in its own order (the graph's), with running totals of the time it was held (wait)
    # and moving data (transfer): differences of these between two kernels are clock-free
    nodes = m.kernels.rename(names).with_columns(pl.col("w").cum_sum().over("rank").alias("H"),
                                                 pl.col("x").cum_sum().over("rank").alias("X"))
    # the last arriver's own kernel in the instance (of a split hop: its row in the hop, keyed by its own gate)
    lnode = inst.select("instance", "inst0", pl.col("last_rank").alias("rank")).join(
        nodes.drop("instance"), on=["inst0", "rank"])
    peers = (
        nodes.join(inst.select("instance", "last_rank"), on="instance")
        .filter(pl.col("rank") != pl.col("last_rank"))
        .select("instance", pl.col("rank").alias("q"), pl.col("w").alias("w_q"),
                (pl.col("H") - pl.col("w")).alias("Hq_i"), (pl.col("X") - pl.col("x")).alias("Xq_i"))
        .join(lnode.select("instance", pl.col("rank").alias("L"), pl.col("ord").alias("ord_i"),
                           (pl.col("H") - pl.col("w")).alias("HL_i"), (pl.col("X") - pl.col("x")).alias("XL_i")),
              on="instance")
    )
    # c: the last collective before i that L and q were both in (L's latest earlier kernel whose group holds q)
    cand = peers.select("instance", "q", "L", "ord_i").join(members, left_on="q", right_on="member")
    cand = cand.join(members, left_on=["g", "L"], right_on=["g", "member"], how="semi")
    # a ring's hop is no release point: each kernel waited for its own peers (an eager send for none), and
    # they did not end together, so a rank held in one carries that hold into the next
    lhist = nodes.filter(~pl.col("ring")).select(pl.col("rank").alias("L"), "g", pl.col("ord").alias("ord_c"),
                                                   pl.col("instance").alias("c"))
    common = (
        cand.sort("ord_i").join_asof(lhist.sort("ord_c"), left_on="ord_i", right_on="ord_c",
                                     by=["L", "g"], strategy="backward", allow_exact_matches=False,
                                     check_sortedness=False)
        .filter(pl.col("c").is_not_null())
        .sort("ord_c").group_by("instance", "q").agg(pl.col("c").last(), pl.col("ord_c").last())
    )
    at_c = nodes.select(pl.col("instance").alias("c"), "rank", "H", "X")
    peers = (
        peers.join(common, on=["instance", "q"], how="left")
        .join(at_c.rename({"rank": "L", "H": "HL_c", "X": "XL_c"}), on=["c", "L"], how="left")
        .join(at_c.rename({"rank": "q", "H": "Hq_c", "X": "Xq_c"}), on=["c", "q"], how="left")
    )
    # since c released them together (no common collective yet: since the capture began), what set L
    # later than q: the holds L had beyond q's (that wait is passed back), then the extra time L spent
    # moving data (no rank's fault); the rest is L's own work
    since = {f"{a}_c": pl.col(f"{a}_c").fill_null(0.0) for a in ("HL", "XL", "Hq", "Xq")}
    peers = peers.with_columns(**since).with_columns(
        ((pl.col("HL_i") - pl.col("HL_c")) - (pl.col("Hq_i") - pl.col("Hq_c"))).clip(0.0).alias("dH"),
        ((pl.col("XL_i") - pl.col("XL_c")) - (pl.col("Xq_i") - pl.col("Xq_c"))).clip(0.0).alias("dX"),
    ).with_columns(pl.min_horizontal("w_q", "dH").alias("hold"))
    peers = peers.with_columns(pl.min_horizontal(pl.col("w_q") - pl.col("hold"), "dX").clip(0.0).alias("xfer"))
    agg = peers.group_by("instance").agg(
        pl.col("hold").sum().alias("propagated_ns"), pl.col("xfer").sum().alias("transfer_ns"),
        pl.col("ord_c").filter(pl.col("hold") > 0).min().alias("lo"), pl.col("L").first(), pl.col("ord_i").first(),
    )
    # the propagated part goes to the collective that held L longest since then
    held = nodes.filter(pl.col("w") > 0).select(pl.col("rank").alias("L"), "ord", "w", pl.col("instance").alias("parent"))
    todo = agg.filter(pl.col("propagated_ns") > 0).select("instance", "L", pl.col("lo").fill_null(-1), "ord_i")
    parent = _parents(held, todo)
    inst = (
        inst.join(agg.select("instance", "propagated_ns", "transfer_ns"), on="instance", how="left")
        .join(parent, on="instance", how="left")
        .with_columns(pl.col("propagated_ns", "transfer_ns").fill_null(0.0))
        .with_columns(pl.when(pl.col("parent").is_null()).then(0.0).otherwise(pl.col("propagated_ns"))
                      .alias("propagated_ns"))
        .with_columns((pl.col("caused_ns") - pl.col("propagated_ns") - pl.col("transfer_ns")).clip(0.0).alias("own_ns"))
    )
    return inst.select(list(_INSTANCE_SCHEMA)).sort("instance")


def _parents(held: pl.DataFrame, todo: pl.DataFrame) -> pl.DataFrame:
    """Per ``todo`` row (instance, L, lo, ord_i): the held kernel of L with lo < ord < ord_i and the largest
    wait (the later one on a tie). A range-maximum query (sparse table): a range can span L's whole history
    (no common collective found), so pairing every instance with every earlier hold would be quadratic."""
    held = held.sort("L", "ord")
    n = held.height
    if n == 0 or todo.height == 0:
        return pl.DataFrame(schema={"instance": pl.Utf8, "parent": pl.Utf8})
    # the key orders holds by (w, ord): the maximum key is the answer
    key = np.empty(n, dtype=np.int64)
    key[np.lexsort((held["ord"].to_numpy(), held["w"].to_numpy()))] = np.arange(n)
    table = [key]
    while 2 * (1 << (len(table) - 1)) <= n:
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
    at = held["L"].cast(pl.Int64).to_numpy() << 32 | held["ord"].cast(pl.Int64).to_numpy()
    big = todo["L"].cast(pl.Int64).to_numpy() << 32
    lo = np.searchsorted(at, big | (todo["lo"].cast(pl.Int64).to_numpy() + 1))
    hi = np.searchsorted(at, big | todo["ord_i"].cast(pl.Int64).to_numpy())
    ok = hi > lo
    lo, hi = lo[ok], hi[ok]
    level = np.floor(np.log2(hi - lo)).astype(np.int64)
    best = np.empty(lo.size, dtype=np.int64)
    for j in np.unique(level):  # one gather per level of the table (at most log2 n)
        m = level == j
        t = table[j]
        best[m] = np.maximum(t[lo[m]], t[hi[m] - (1 << j)])
    order = np.argsort(key)  # key -> row of ``held``
    return pl.DataFrame({"instance": todo["instance"].filter(pl.Series(ok)),
                         "parent": held["parent"].gather(order[best])})


def _flows(inst: pl.DataFrame) -> pl.DataFrame:
    """Every (root instance, instance where wait was suffered) pair with the wait that flows between them.

    An instance's own wait stays with it; its propagated part is split over its parent's flows in
    proportion, level by level from the roots down (a loop over chain depth, not over instances).
    """
    schema = {"root": pl.Utf8, "root_rank": pl.Int32, "instance": pl.Utf8, "step": pl.Int64, "amount_ns": pl.Float64}
    if inst.height == 0:
        return pl.DataFrame(schema=schema)
    # share of each root in an instance's caused wait: start with the instance's own part
    share = inst.select(
        pl.col("instance").alias("root"), pl.col("last_rank").alias("root_rank"), "instance",
        pl.when(pl.col("caused_ns") > 0).then(pl.col("own_ns") / pl.col("caused_ns")).otherwise(0.0).alias("frac"),
    ).filter(pl.col("frac") > 0)
    children = inst.filter(pl.col("parent").is_not_null()).select(
        "instance", "parent", (pl.col("propagated_ns") / pl.col("caused_ns")).alias("f")
    )
    resolved = inst.filter(pl.col("parent").is_null()).select("instance")
    done = share.join(resolved, on="instance", how="semi")
    pending = children
    parts = [done]
    for _ in range(_MAX_LEVELS):
        ready = pending.join(resolved, left_on="parent", right_on="instance", how="semi")
        if ready.height == 0:
            break
        inherited = (
            ready.join(done.rename({"instance": "parent"}), on="parent")
            .select("root", "root_rank", "instance", (pl.col("f") * pl.col("frac")).alias("frac"))
        )
        own = share.join(ready.select("instance"), on="instance", how="semi")
        done = pl.concat([own, inherited]).group_by("root", "root_rank", "instance").agg(pl.col("frac").sum())
        parts.append(done)
        resolved = ready.select("instance")
        pending = pending.join(resolved, on="instance", how="anti")
    fr = pl.concat(parts)
    return (
        fr.join(inst.select("instance", "step", "caused_ns"), on="instance")
        .select("root", "root_rank", "instance", "step", (pl.col("frac") * pl.col("caused_ns")).alias("amount_ns"))
        .filter(pl.col("amount_ns") > 0)
        .cast(schema)
        .sort("root", "instance")
    )
