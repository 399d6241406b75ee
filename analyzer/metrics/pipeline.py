"""Pipeline parallelism: stages, bubbles and who makes whom wait, from matched send/recv pairs.

Stages come from ``--layout`` (the pp coordinate) or from the p2p topology: ranks linked by matched
pairs form chains; a chain starts at the end rank whose first transfer of the step is a send.
Batched send/recv (``batch_isend_irecv``: one SendRecv kernel per batch, matched as a 2-rank exchange, no
direction) counts as a pair when its group is a pp group (DeviceMesh or layout); its stages then come
from the layout, else from each rank's position in that pp group (the pipeline's stage order).

Bubble (per rank and step) = the step's GPU span minus the time the GPU did useful work: compute,
collectives, memcpy/memset and the transfer part of each send/recv (its last ``transfer`` ns); so
idle time and waiting on a peer count. It is split by the pipeline's phases, taken from the chain's
last stage: warm-up until it starts its first compute after its first recv (the pipeline is full),
cool-down after its last compute ends (it is drained). Boundaries move between ranks on the aligned clock.
"""

from __future__ import annotations

import polars as pl

from ..crossrank.graph import Clock
from ..rules import RECEIVING_P2P_OPS
from .flat import FlatAxis

P2P_RULES = ("p2p_peer", "p2p_pair")
USEFUL_KINDS = ("compute", "memcpy", "memset")
_PHASE = ("full_start", "full_end")  # the pipeline-full interval of a step (the last stage's)
# a batch's one kernel sends and receives; on the last stage its first batch of a step is the first receive
_RECEIVING = RECEIVING_P2P_OPS


def _batched(rows: pl.DataFrame) -> pl.Expr:
    """Batched send/recv kernels between two ranks of a pp group (matched as an exchange)."""
    if "dimension" not in rows.columns:
        return pl.lit(False)
    return ((pl.col("match_rule") == "exchange") & (pl.col("op") == "send_recv") & (pl.col("dimension") == "pp")
            & (pl.len().over("instance") == 2)).fill_null(False)


def _group_stages(batched: pl.DataFrame) -> tuple[pl.DataFrame, str] | None:
    """rank, stage (its position in its pp group's member list), chain (the group's first member)."""
    members = (
        batched.filter(pl.col("group_ranks").is_not_null()).select("rank", "group_ranks").unique("rank", keep="first")
        .with_columns(pl.col("group_ranks").str.split(",").cast(pl.List(pl.Int32)).alias("_m"))
        .explode("_m").with_columns(pl.int_range(pl.len(), dtype=pl.Int32).over("rank").alias("stage"),
                                    pl.col("_m").first().over("rank").alias("chain"))
        .filter(pl.col("_m") == pl.col("rank"))
    )
    if members.height == 0 or members["stage"].max() < 1:
        return None
    return members.select(pl.col("rank").cast(pl.Int32), "stage", pl.col("chain").cast(pl.Int32)), "pp group"


def stages(pairs: pl.DataFrame, layout_stage: pl.Expr | None) -> tuple[pl.DataFrame, str] | None:
    """rank, stage, chain (the chain's first rank); None when the pairs form no chain."""
    ranks = pairs.select("rank").unique()
    if layout_stage is not None:
        out = ranks.with_columns(layout_stage.cast(pl.Int32).alias("stage"))
        # a chain: the ranks that differ only in their stage (same tp/dp coordinates) share the stage-0 rank
        first = pairs.select("rank", "_peer").unique()
        return _chains_from_stage(out, first), "layout"
    edges = pairs.select("rank", "_peer").unique()
    degree = edges.group_by("rank").agg(pl.len().alias("deg"))
    first_op = pairs.sort("start_ns").group_by("rank").agg(pl.col("op").first().alias("first"))
    start = degree.join(first_op, on="rank").filter((pl.col("deg") == 1) & (pl.col("first") == "send"))
    if start.height == 0:
        return None
    assigned = start.select("rank", pl.lit(0, dtype=pl.Int32).alias("stage"), pl.col("rank").alias("chain"))
    frontier = assigned
    for k in range(1, pairs["rank"].n_unique() + 1):  # one pass per stage, vectorized over chains
        nxt = (frontier.join(edges, on="rank").select(pl.col("_peer").alias("rank"), "chain")
               .join(assigned.select("rank"), on="rank", how="anti").unique("rank", keep="first")
               .with_columns(pl.lit(k, dtype=pl.Int32).alias("stage")).select("rank", "stage", "chain"))
        if nxt.height == 0:
            break
        assigned = pl.concat([assigned, nxt])
        frontier = nxt
    if assigned["stage"].max() < 1:
        return None
    return assigned.with_columns(pl.col("rank").cast(pl.Int32), pl.col("chain").cast(pl.Int32)), "p2p"


def _chains_from_stage(st: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """Chain id by walking p2p edges down to stage 0 (layout known, so stage is given)."""
    chain = st.filter(pl.col("stage") == 0).select("rank", pl.col("rank").alias("chain"))
    for k in range(1, int(st["stage"].max() or 0) + 1):
        nxt = (edges.join(chain, left_on="_peer", right_on="rank").select("rank", "chain")
               .join(st.filter(pl.col("stage") == k).select("rank"), on="rank").unique("rank", keep="first"))
        chain = pl.concat([chain, nxt.select(pl.col("rank").cast(chain.schema["rank"]), "chain")])
    return st.join(chain, on="rank", how="left").with_columns(pl.coalesce("chain", "rank").cast(pl.Int32).alias("chain"),
                                                                pl.col("rank").cast(pl.Int32))


def analyze(rows: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, clock: Clock,
            layout_stage: pl.Expr | None = None) -> dict | None:
    """The ``pipeline`` report: per stage bubbles and waits; None without matched send/recv chains.

    ``rows``: comm kernels (waits.per_row, with ``match_rule``); ``windows``: rank, step, start_ns, end_ns
    (GPU step windows); ``clock``: the graph's (moves the phase boundaries between ranks).
    """
    is_pair = pl.col("match_rule").is_in(P2P_RULES) | _batched(rows)
    pairs = rows.filter(is_pair)
    if pairs.height == 0 or windows.height == 0:
        return None
    pairs = pairs.with_columns((pl.col("rank").sum().over("instance") - pl.col("rank")).cast(pl.Int32).alias("_peer"))
    batched = pairs.filter(pl.col("op") == "send_recv")
    got = stages(pairs, layout_stage) if layout_stage is not None or batched.height == 0 else _group_stages(batched)
    if got is None:
        return None
    st, source = got
    axis = FlatAxis.of(gpu)
    useful_rows = pl.concat([
        gpu.filter(pl.col("kind").is_in(USEFUL_KINDS)).select("rank", "start_ns", "end_ns"),
        # every collective, matched or not (a null rule is no send/recv pair), is useful work
        rows.filter((~is_pair).fill_null(True)).select("rank", "start_ns", "end_ns"),
        pairs.select("rank", (pl.col("end_ns") - pl.col("transfer_ns")).alias("start_ns"), "end_ns"),
    ])
    useful = axis.coverage(useful_rows)
    win = windows.join(st, on="rank")
    bounds = _phase_bounds(pairs, gpu, win, clock)
    # the last stage's boundaries on this rank's clock, clipped to the window
    win = clock.to_rank_clock(win.join(bounds, on=["chain", "step"], how="left"), _PHASE).with_columns(
        *[pl.col(c).clip(pl.col("start_ns"), pl.col("end_ns"))
          .fill_null(pl.col("start_ns") if c == "full_start" else pl.col("end_ns")).alias(c) for c in _PHASE]
    )
    cuts = [("start_ns", "full_start"), ("full_start", "full_end"), ("full_end", "end_ns")]
    parts = {}
    for i, (a_col, b_col) in enumerate(cuts):  # three phases, not a loop over ranks
        a, b = axis.map(win, a_col, b_col)
        # the phase's own length: the flat axis clips to the rank's kernels, and idle before its first kernel or
        # after its last is bubble too (no useful work lies outside them, so ``within`` is the same)
        parts[f"_b{i}"] = (win[b_col] - win[a_col]).to_numpy() - useful.within(a, b)
    a, b = axis.map(win)
    parts["_compute"] = axis.coverage(gpu.filter(pl.col("kind") == "compute")).within(a, b)
    win = win.with_columns(*[pl.Series(k, v) for k, v in parts.items()]).with_columns(
        (pl.col("_b0") + pl.col("_b1") + pl.col("_b2")).alias("bubble_ns"),
        (pl.col("end_ns") - pl.col("start_ns")).alias("span_ns"),
    )
    recv_wait = (pairs.filter(pl.col("op").is_in(_RECEIVING)).group_by("rank")
                 .agg(pl.col("wait_ns").sum().alias("recv_wait_ns")))
    caused = (
        pairs.filter(pl.col("rank") != pl.col("last_rank")).group_by("last_rank").agg(pl.col("wait_ns").sum().alias("c"))
        .join(st.select(pl.col("rank").alias("last_rank"), "stage"), on="last_rank").group_by("stage")
        .agg(pl.col("c").sum().alias("caused_wait_ns"))
    )
    n_steps = win.select(pl.col("step").n_unique()).item()
    per_rank = win.group_by("rank", "stage").agg(
        pl.col("bubble_ns").sum(), pl.col("span_ns").sum(), pl.col("_b0").sum(), pl.col("_b1").sum(),
        pl.col("_b2").sum(), pl.col("_compute").sum(), pl.col("step").n_unique().alias("steps"),
    ).join(recv_wait, on="rank", how="left").with_columns(pl.col("recv_wait_ns").fill_null(0))
    # rank order: the stage means below add floats in row order, which a group-by leaves to chance (their last digit
    # changed from run to run: tp_pp_dp_mps_host_slow's stage-0 cool-down bubble, 3.021831 or 3.02183 ms)
    per_rank = per_rank.sort("rank")
    per_step = pl.col("steps")  # ns per rank and step; ms only at the edge (units.ms_frame)
    table = per_rank.group_by("stage").agg(
        pl.col("rank").sort().alias("ranks"),
        (pl.col("bubble_ns") / per_step).mean().alias("bubble_ns"),
        (100.0 * pl.col("bubble_ns").sum() / pl.col("span_ns").sum()).alias("bubble_pct"),
        (pl.col("_b0") / per_step).mean().alias("warmup_bubble_ns"),
        (pl.col("_b1") / per_step).mean().alias("steady_bubble_ns"),
        (pl.col("_b2") / per_step).mean().alias("cooldown_bubble_ns"),
        (pl.col("recv_wait_ns") / per_step).mean().alias("recv_wait_ns"),
        (pl.col("span_ns") / per_step).mean().alias("step_ns"),
        (pl.col("_compute") / per_step).mean().alias("compute_ns"),
    ).join(caused, on="stage", how="left").with_columns(
        (pl.col("caused_wait_ns").fill_null(0) / n_steps).alias("caused_wait_ns")
    ).sort("stage")
    return {
        "stage_source": source,
        "steps": n_steps,
        "chains": st["chain"].n_unique(),
        "bottleneck_stage": bottleneck(table),
        "stages": table,
        "transfers": pairs.select("rank", "op", "start_ns", "end_ns", "transfer_ns", "instance").sort("rank", "start_ns"),
        "rank_steps": win.select("rank", "stage", "chain", "step", "start_ns", "end_ns", "bubble_ns",
                                 pl.col("_b0").alias("warmup_bubble_ns"), pl.col("_b1").alias("steady_bubble_ns"),
                                 pl.col("_b2").alias("cooldown_bubble_ns")).sort("rank", "step"),
    }


def bottleneck(table: pl.DataFrame, margin: float = 0.01) -> int | None:
    """The stage with the most compute per step sets the pipeline's pace (the others wait for it).

    Not the last arriver of each transfer: a stage waiting on a slow neighbour arrives late at the
    other side too, and would be blamed for what it only passed on. None when the top two are within
    ``margin`` of each other (a balanced pipeline).
    """
    top = table.sort("compute_ns", descending=True)
    if top.height < 2 or top["compute_ns"][0] is None:
        return None
    first, second = float(top["compute_ns"][0]), float(top["compute_ns"][1])
    return int(top["stage"][0]) if first > second * (1 + margin) else None


def _phase_bounds(pairs: pl.DataFrame, gpu: pl.DataFrame, win: pl.DataFrame, clock: Clock) -> pl.DataFrame:
    """Per (chain, step), on the reference clock: when the last stage starts working and when it ends."""
    last = win.filter(pl.col("stage") == pl.col("stage").max().over("chain"))
    lw = last.select("rank", "chain", "step", pl.col("start_ns").alias("ws"), pl.col("end_ns").alias("we"))
    recv = pairs.filter(pl.col("op").is_in(_RECEIVING)).join(lw.select("rank").unique(), on="rank").select("rank", "end_ns")
    first_recv = (
        recv.sort("end_ns")
        .join_asof(lw.sort("ws"), left_on="end_ns", right_on="ws", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("end_ns") <= pl.col("we")).group_by("chain", "step").agg(pl.col("end_ns").min().alias("_r"))
    )
    comp = gpu.filter(pl.col("kind") == "compute").join(lw.select("rank").unique(), on="rank").sort("start_ns")
    comp = comp.join_asof(lw.sort("ws"), left_on="start_ns", right_on="ws", by="rank", strategy="backward",
                          check_sortedness=False).filter(pl.col("start_ns") < pl.col("we"))
    comp = comp.join(first_recv, on=["chain", "step"], how="left")
    out = comp.group_by("chain", "step").agg(
        pl.col("start_ns").filter(pl.col("start_ns") >= pl.col("_r").fill_null(0)).min().alias("full_start"),
        pl.col("end_ns").max().alias("full_end"),
        pl.col("rank").first(),
    )
    return clock.to_reference(out, _PHASE).select("chain", "step", *_PHASE)
