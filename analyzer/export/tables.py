"""The export's tables: slices, instants and counters on the aligned clock, for a few ranks at a time.

Pure and vectorized over the ranks of a chunk (``CHUNK``); the writers (``perfetto.py``,
``chrome_json.py``) take each rank's tables, write them and drop them, so memory follows the chunk,
not the rank count. What needs the whole run (the time origin, which kernels a flow joins and in which
order) is computed once in :func:`plan`, over the graph's comm-kernel table (``Graph.kernels``: each kernel's
instance in the graph's instance table).

Times: on the aligned clock of the analysis' graph (``Graph.clock``, the one place offsets are applied; the
comm kernels and step windows come aligned from the analysis). A slice's ``i`` is its index on its track and
``pos`` its place in the nesting of a split communication kernel (0 kernel, 1 wait, 3 transfer; a slice's end
is ``pos + 1``, the kernel's 5), so ``sort(ts, track, i, pos)`` is a valid begin/end order on every track.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import polars.selectors as cs

from ..analysis import Analysis
from ..crossrank.graph import Clock, Graph
from ..errors import UsageError
from ..rules import NS_PER_MS, NS_PER_US
from ..views.units import ms_tables
from .selection import Selection

CHUNK = 16  # ranks computed together: vectorized over them, memory bounded by them
MAX_LANES = 64  # overlapping slices of one stream/thread go to extra lanes; deeper overlap is dropped
KERNEL_END_POS = 5
ARG = "arg."  # columns with this prefix become a slice's arguments


@dataclass(frozen=True)
class Plan:
    ranks: tuple[int, ...]  # ranks to write, in order
    origin_ns: int  # aligned start of the run's first GPU event: --window's zero
    base_ns: int  # earliest aligned time written (the JSON format's zero)
    keep: pl.DataFrame | None  # rank, k_start, k_end: aligned intervals to keep (None: everything)
    flows: pl.DataFrame  # _k (kernel row), flow_id, flow_role (out | both | in)
    offsets: dict[int, int]  # rank -> ns subtracted (the graph's clock)
    sel: Selection
    gpu: pl.DataFrame  # the analysis' tables, grouped by rank (a view unless they were not)
    cpu: pl.DataFrame
    steps: pl.DataFrame
    kernels: pl.DataFrame  # comm kernels with instance, wait_ns, transfer_ns and a row number ``_k``
    clock: Clock  # the analysis' (its graph's): what ``rank_tables`` aligns with


@dataclass(frozen=True)
class RankTables:
    rank: int
    tracks: pl.DataFrame  # rank, order, track, counter (bool)
    slices: pl.DataFrame  # rank, track, i, pos, start_ns, end_ns, name, cat, flow_id, flow_role, arg.*
    instants: pl.DataFrame  # rank, track, ts, name, arg.*
    counters: pl.DataFrame  # rank, track, i, pos, ts, value
    dropped: int  # slices beyond MAX_LANES of overlap
    device: int | None  # the rank's GPU (device index of its kernels)


def _by_rank(df: pl.DataFrame) -> pl.DataFrame:
    return df if df["rank"].is_sorted() else df.sort("rank", maintain_order=True)


def _rows(df: pl.DataFrame, ranks: tuple[int, ...]) -> pl.DataFrame:
    """The rows of a few sorted ranks of a rank-sorted table: a slice, not a scan of the whole table."""
    col = df["rank"]
    lo = int(col.search_sorted(ranks[0], side="left"))
    hi = int(col.search_sorted(ranks[-1], side="right"))
    part = df.slice(lo, hi - lo)
    return part if ranks[-1] - ranks[0] + 1 == len(ranks) else part.filter(pl.col("rank").is_in(ranks))


def plan(a: Analysis, sel: Selection) -> Plan:
    known = [int(r) for r in a.source["ranks"]]
    if sel.ranks is not None:
        missing = sorted(set(sel.ranks) - set(known))
        if missing:
            raise UsageError(f"--ranks: rank(s) {missing} are not in the traces (they hold {_span(known)})")
    ranks = tuple(r for r in known if sel.ranks is None or r in sel.ranks)
    g = _graph(a)
    clock = g.clock
    gpu = clock.to_reference(g.gpu.select("rank", "start_ns", "end_ns"))
    origin = int(gpu["start_ns"].min()) if gpu.height else 0
    steps = g.steps.select("rank", "step", pl.col("a_start_ns").alias("start_ns"), pl.col("a_end_ns").alias("end_ns"))
    keep = _keep(sel, steps, origin, ranks)
    kern = _by_rank(g.kernels.rename({"k": "_k"}))
    a_kern = (kern.select("_k", "rank", "inst", "instance", pl.col("a_start_ns").alias("start_ns"),
                          pl.col("a_end_ns").alias("end_ns")) if "a_start_ns" in kern.columns
              else clock.to_reference(kern.select("_k", "rank", "inst", "instance", "start_ns", "end_ns"))
              ).filter(pl.col("rank").is_in(ranks))
    a_kern = _kept(a_kern, keep)
    if keep is not None and _kept(gpu.filter(pl.col("rank").is_in(ranks)), keep).height == 0:
        raise UsageError(f"{_describe(sel)}: no GPU event of the selected ranks falls there (--window is in ms "
                         f"from the run's first GPU event on the aligned clock; the run lasts "
                         f"{(int(gpu['end_ns'].max()) - origin) / NS_PER_MS:,.3f} ms)" if gpu.height else
                         f"{_describe(sel)}: the traces hold no GPU events")
    parts = [gpu.filter(pl.col("rank").is_in(ranks)), steps.filter(pl.col("rank").is_in(ranks))]
    if sel.host:
        parts.append(clock.to_reference(g.cpu.select("rank", "start_ns", "end_ns"))
                     .filter(pl.col("rank").is_in(ranks)))
    starts = [int(p["start_ns"].min()) for p in parts if p.height]
    return Plan(ranks=ranks, origin_ns=origin, base_ns=min(starts) if starts else origin, keep=keep,
                flows=_flows(a_kern), offsets=dict(clock.by_rank), sel=sel, gpu=_by_rank(g.gpu),
                cpu=_by_rank(g.cpu), steps=_by_rank(g.steps.drop("a_start_ns", "a_end_ns")), kernels=kern, clock=clock)


def _graph(a: Analysis) -> Graph:
    if a.graph is None or a.graph.steps is None or a.graph.kernels is None:
        raise UsageError("export needs an analysis of the traces themselves (this one has no cross-rank graph)")
    return a.graph


def _describe(sel: Selection) -> str:
    parts = [f"--steps {','.join(map(str, sel.steps))}"] if sel.steps is not None else []
    if sel.window_ms is not None:
        parts.append(f"--window {sel.window_ms[0]:g}:{sel.window_ms[1]:g}")
    return " ".join(parts)


def _span(ranks: list[int]) -> str:
    return f"{min(ranks)}-{max(ranks)}" if ranks else "none"


def _keep(sel: Selection, steps: pl.DataFrame, origin: int, ranks: tuple[int, ...]) -> pl.DataFrame | None:
    """Aligned intervals per rank that the selection keeps: its steps' windows, cut to the window."""
    if sel.steps is None and sel.window_ms is None:
        return None
    if sel.steps is not None:
        iv = steps.filter(pl.col("step").is_in(sel.steps) & pl.col("rank").is_in(ranks))
        if iv.height == 0:
            have = sorted(set(steps["step"].to_list()))
            raise UsageError(f"--steps: none of the steps {list(sel.steps)} is in the traces "
                             f"(they hold {_span(have) if have else 'no step markers'})")
        iv = iv.select("rank", pl.col("start_ns").alias("k_start"), pl.col("end_ns").alias("k_end"))
    else:
        iv = pl.DataFrame({"rank": list(ranks)}, schema={"rank": pl.Int32}).with_columns(
            pl.lit(-(2**62), dtype=pl.Int64).alias("k_start"), pl.lit(2**62, dtype=pl.Int64).alias("k_end"))
    if sel.window_ms is not None:
        # integer ns from the origin: epoch-scale floats would lose the last nanoseconds
        lo, hi = (max(min(origin + round(w * NS_PER_MS), 2**62), -(2**62)) if abs(w) < 1e15
                  else (2**62 if w > 0 else -(2**62)) for w in sel.window_ms)
        iv = iv.with_columns(pl.col("k_start").clip(lower_bound=lo), pl.col("k_end").clip(upper_bound=hi))
        iv = iv.filter(pl.col("k_end") > pl.col("k_start"))
    return iv.sort("rank", "k_start")


def _kept(df: pl.DataFrame, keep: pl.DataFrame | None, start: str = "start_ns", end: str = "end_ns") -> pl.DataFrame:
    """Rows whose [start, end] meets a kept interval of their rank (kept whole, never cut)."""
    if keep is None or df.height == 0:
        return df
    # keep intervals of a rank do not overlap, so the last one starting at or before the row's end decides
    # (strictly: touching is not meeting; a zero-length row meets the interval it lies in)
    probe = df.with_row_index("_row").with_columns(pl.max_horizontal(pl.col(end) - 1, start).alias("_probe"))
    hit = probe.sort("_probe").join_asof(keep.sort("k_start"), left_on="_probe", right_on="k_start", by="rank",
                                         strategy="backward", check_sortedness=False)
    ok = hit.filter(pl.col("k_end").is_not_null() & (pl.col("k_end") > pl.col(start)))
    return df.with_row_index("_row").filter(pl.col("_row").is_in(ok["_row"].implode())).drop("_row")


def _flows(kern: pl.DataFrame) -> pl.DataFrame:
    """One flow per instance of the graph's (``inst``) over its written participants, in aligned start order; flows
    numbered in the order of their match keys."""
    m = kern.filter(pl.col("inst").is_not_null())
    ids = m.select("inst", "instance").unique("inst").sort("instance").with_row_index("flow_id", offset=1)
    m = m.join(ids.select("inst", "flow_id"), on="inst").sort("flow_id", "start_ns", "rank").with_columns(
        pl.int_range(pl.len()).over("flow_id").alias("_o"), pl.len().over("flow_id").alias("_n"))
    return m.filter(pl.col("_n") >= 2).select(
        "_k", pl.col("flow_id").cast(pl.UInt64),
        pl.when(pl.col("_o") == 0).then(pl.lit("out"))
        .when(pl.col("_o") == pl.col("_n") - 1).then(pl.lit("in")).otherwise(pl.lit("both")).alias("flow_role"))


def _lanes(df: pl.DataFrame, key: str | list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A lane per slice so that no two slices of one lane overlap (longer first at equal starts).

    Returns the slices with ``lane`` and those left over beyond ``MAX_LANES`` (dropped)."""
    keys = [key] if isinstance(key, str) else key
    rest = df.sort([*keys, "start_ns", "end_ns"], descending=[*[False] * len(keys), False, True])
    out = []
    for lane in range(MAX_LANES):  # as many passes as the deepest overlap, each vectorized
        if rest.height == 0:
            break
        prev = pl.col("end_ns").cum_max().shift(1).over(keys)
        ok = rest.select((prev.is_null() | (pl.col("start_ns") >= prev)).alias("ok"))["ok"]
        out.append(rest.filter(ok).with_columns(pl.lit(lane, dtype=pl.Int32).alias("lane")))
        rest = rest.filter(~ok)
    return (pl.concat(out) if out else df.with_columns(pl.lit(0, dtype=pl.Int32).alias("lane"))), rest


def _on_tracks(df: pl.DataFrame, key: str, label: str, extra: str = "overlap") -> tuple[pl.DataFrame, pl.DataFrame]:
    """Lanes -> named tracks; ``i`` numbers the slices of each (rank, track) in time order."""
    if df.height == 0:
        return df.with_columns(pl.lit("", dtype=pl.Utf8).alias("track"), pl.lit(0, dtype=pl.Int64).alias("i"),
                               pl.lit(0, dtype=pl.Int32).alias("lane")), df
    df, rest = _lanes(df, ["rank", key])
    df = df.with_columns(
        pl.when(pl.col("lane") == 0).then(pl.format(f"{label} {{}}", key))
        .otherwise(pl.format(f"{label} {{}} ({extra} {{}})", key, "lane")).alias("track")
    ).sort("rank", "track", "start_ns", "end_ns", descending=[False, False, False, True])
    return df.with_columns(pl.int_range(pl.len()).over("rank", "track").cast(pl.Int64).alias("i")), rest


def rank_tables(a: Analysis, p: Plan, ranks: tuple[int, ...]) -> list[RankTables]:
    """The tables of a few ranks, computed together (vectorized over them), returned one rank each."""
    ranks = tuple(sorted(ranks))
    keep = p.keep.filter(pl.col("rank").is_in(ranks)) if p.keep is not None else None

    def aligned(df: pl.DataFrame) -> pl.DataFrame:
        # an end before its start (broken input) would break the nesting: such a row lasts 0 ns
        return _kept(p.clock.to_reference(df.with_columns(pl.max_horizontal("start_ns", "end_ns").alias("end_ns"))), keep)

    gpu_rows = _rows(p.gpu, ranks)
    gpu = aligned(gpu_rows.filter(pl.col("kind") != "comm").select(
        "rank", "stream", "start_ns", "end_ns", "name", pl.col("kind").alias("cat")))
    comm = aligned(_rows(p.kernels, ranks).select(
        "_k", "rank", "stream", "start_ns", "end_ns", "name", pl.lit("comm").alias("cat"),
        "wait_ns", "transfer_ns", "instance", "op", "pg", "seq", "step",
        pl.max_horizontal("in_bytes", "out_bytes").alias("bytes"),
    )).join(p.flows, on="_k", how="left")
    comm = comm.select(
        "rank", "stream", "start_ns", "end_ns", "name", "cat", "flow_id", "flow_role", "wait_ns", "transfer_ns",
        *[pl.col(c).alias(ARG + c) for c in ("op", "pg", "seq", "bytes", "step", "instance", "wait_ns", "transfer_ns")],
    )
    kernels, dropped = _on_tracks(pl.concat([gpu, comm], how="diagonal_relaxed"), "stream", "stream")
    kernels = kernels.with_columns(pl.lit(0, dtype=pl.Int8).alias("pos"))
    split = kernels.filter(pl.col("wait_ns").is_not_null() & pl.col("transfer_ns").is_not_null())
    mid = pl.col("start_ns") + pl.col("wait_ns")
    children = pl.concat([
        split.select("rank", "track", "i", pl.lit(1, dtype=pl.Int8).alias("pos"), "start_ns", mid.alias("end_ns"),
                     pl.lit("wait").alias("name"), pl.lit("comm.wait").alias("cat")),
        split.select("rank", "track", "i", pl.lit(3, dtype=pl.Int8).alias("pos"), mid.alias("start_ns"), "end_ns",
                     pl.lit("transfer").alias("name"), pl.lit("comm.transfer").alias("cat")),
    ])
    steps = _steps(a, aligned(_rows(p.steps, ranks)))
    parts = [kernels.drop("stream", "lane", "wait_ns", "transfer_ns"), children, steps]
    if p.sel.host:
        host = aligned(_rows(p.cpu, ranks).select(
            "rank", "tid", "start_ns", "end_ns", "name", pl.format("host.{}", "kind").alias("cat")))
        host, d = _on_tracks(host, "tid", "thread", "level")  # nested host ranges: one track per level
        dropped = pl.concat([dropped.select("rank"), d.select("rank")])
        parts.append(host.with_columns(pl.lit(0, dtype=pl.Int8).alias("pos")).drop("tid", "lane"))
    slices = pl.concat(parts, how="diagonal_relaxed")
    counters = _counters(steps)
    instants = _notes(a, p, ranks, slices)
    tracks = _tracks(slices, counters, ranks)
    devices = dict(gpu_rows.filter(pl.col("device").is_not_null()).group_by("rank")
                   .agg(pl.col("device").first()).iter_rows())
    lost = dict(dropped.group_by("rank").len().iter_rows()) if dropped.height else {}
    by = [_by(df, ranks) for df in (tracks, slices, instants, counters)]
    return [RankTables(rank=r, tracks=by[0][r], slices=by[1][r], instants=by[2][r], counters=by[3][r],
                       dropped=int(lost.get(r, 0)), device=devices.get(r)) for r in ranks]


def _by(df: pl.DataFrame, ranks: tuple[int, ...]) -> dict[int, pl.DataFrame]:
    parts = {int(k[0]): v for k, v in df.partition_by("rank", as_dict=True, maintain_order=True).items()}
    return {r: parts.get(r, df.clear()) for r in ranks}


def _steps(a: Analysis, st: pl.DataFrame) -> pl.DataFrame:
    nums = ms_tables(a).steps.select("rank", "step", *[pl.col(c).alias(ARG + c) for c in
                                            ("span_ms", "exposed_comm_ms", "wait_ms", "caused_wait_ms")])
    return st.sort("rank", "start_ns").join(nums, on=["rank", "step"], how="left").select(
        "rank", pl.lit("steps").alias("track"), pl.int_range(pl.len()).over("rank").cast(pl.Int64).alias("i"),
        pl.lit(0, dtype=pl.Int8).alias("pos"), "start_ns", "end_ns", pl.format("step {}", "step").alias("name"),
        pl.lit("step").alias("cat"), cs.starts_with(ARG), pl.col("step").alias(ARG + "step"),
    )


COUNTERS = (("exposed comm per step (ms)", ARG + "exposed_comm_ms"), ("wait per step (ms)", ARG + "wait_ms"))


def _counters(steps: pl.DataFrame) -> pl.DataFrame:
    """Each step's value from its start, 0 from its end (the next step's value replaces it at once)."""
    out = []
    for name, col in COUNTERS:
        v = steps.select("rank", "i", "start_ns", "end_ns", pl.col(col).fill_null(0.0).cast(pl.Float64).alias("value"))
        out += [v.select("rank", pl.lit(name).alias("track"), "i", pl.lit(0, dtype=pl.Int8).alias("pos"),
                         pl.col("start_ns").alias("ts"), "value"),
                v.select("rank", pl.lit(name).alias("track"), "i", pl.lit(KERNEL_END_POS, dtype=pl.Int8).alias("pos"),
                         pl.col("end_ns").alias("ts"), pl.lit(0.0).alias("value"))]
    return pl.concat(out)


def _notes(a: Analysis, p: Plan, ranks: tuple[int, ...], slices: pl.DataFrame) -> pl.DataFrame:
    """Each rank's clock correction and its root-caused wait (and the verdict on the straggler itself)."""
    first = dict(slices.group_by("rank").agg(pl.col("start_ns").min()).iter_rows())
    fit = a.clock
    unc = fit.uncertainty_ns / NS_PER_US if fit.uncertainty_ns is not None else None
    unc_text = f" ±{unc:,.1f} us" if unc is not None else ""
    ms_ranks = ms_tables(a).ranks  # the Analysis holds ns; the notes read as the JSON's ms
    wait_col = "root_caused_wait_ms" if "root_caused_wait_ms" in ms_ranks.columns else "caused_wait_ms"
    per = {row["rank"]: row for row in ms_ranks.filter(pl.col("rank").is_in(ranks)).to_dicts()}
    v = a.verdict
    rows = []
    for r in ranks:  # a few strings per rank: presentation, not a metric
        ts = first.get(r, p.base_ns)
        row = per.get(r, {})
        off_us = p.offsets.get(r, 0) / NS_PER_US
        caused = row.get(wait_col)
        rows.append({"rank": r, "ts": ts, "name": f"clock: {off_us:+,.3f} us subtracted ({fit.method}{unc_text}, "
                     f"reference rank {fit.reference})", ARG + "clock_method": fit.method,
                     ARG + "clock_offset_us": off_us, ARG + "clock_uncertainty_us": unc,
                     ARG + "clock_reference_rank": fit.reference})
        rows.append({"rank": r, "ts": ts, "name": f"{wait_col.removesuffix('_ms').replace('_', ' ')}: "
                     f"{caused or 0.0:,.3f} ms", ARG + wait_col: caused, ARG + "wait_ms": row.get("wait_ms"),
                     ARG + "exposed_comm_ms": row.get("exposed_comm_ms")})
        if v is not None and v.rank == r:
            rows.append({"rank": r, "ts": ts, "name": f"straggler: rank {v.rank} ({v.kind})",
                         ARG + "verdict_kind": v.kind, ARG + "caused_wait_ms": v.caused_wait_ns / NS_PER_MS,
                         ARG + "confidence": v.confidence, ARG + "chronic": v.chronic})
    return pl.DataFrame(rows, infer_schema_length=None).with_columns(
        pl.col("rank").cast(pl.Int32), pl.col("ts").cast(pl.Int64), pl.lit("commscope").alias("track"))


def _tracks(slices: pl.DataFrame, counters: pl.DataFrame, ranks: tuple[int, ...]) -> pl.DataFrame:
    """Per rank: notes first, then steps, streams in number order, host threads, counters."""
    notes = pl.DataFrame({"rank": list(ranks), "track": "commscope"}, schema={"rank": pl.Int32, "track": pl.Utf8})
    rows = pl.concat([
        notes.with_columns(pl.lit(False).alias("counter")),
        slices.select("rank", "track").unique().with_columns(pl.lit(False).alias("counter")),
        counters.select("rank", "track").unique().with_columns(pl.lit(True).alias("counter")),
    ])
    group = (pl.when(pl.col("track") == "commscope").then(0).when(pl.col("track") == "steps").then(1)
             .when(pl.col("track").str.starts_with("stream")).then(2).when(~pl.col("counter")).then(3).otherwise(4))
    num = pl.col("track").str.extract(r"(-?\d+)", 1).cast(pl.Int64, strict=False).fill_null(0)
    rows = rows.with_columns(group.alias("_g"), num.alias("_n")).sort("rank", "_g", "_n", "track")
    return rows.select("rank", pl.int_range(pl.len()).over("rank").cast(pl.UInt32).alias("order"), "track", "counter")
