"""The export's tables, one rank at a time: slices, instants and counters on the aligned clock.

Pure and vectorized inside a rank; the writers (``perfetto.py``, ``chrome_json.py``) ask for one rank's
tables, write them and drop them, so memory follows the largest rank, not the rank count. What needs the
whole run (the time origin, which kernels a flow joins and in which order) is computed once in
:func:`plan`, over the comm-kernel table only.

Times: rank r's ``start_ns``/``end_ns`` minus ``round(offsets_ns[r])``, the rule ``align.apply`` uses for
the analysis. A slice's ``i`` is its index on its track and ``pos`` its place in the nesting of a split
communication kernel (0 kernel, 1 wait, 3 transfer; a slice's end is ``pos + 1``, the kernel's 5), so
``sort(ts, track, i, pos)`` is a valid begin/end order on every track.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import polars.selectors as cs

from .. import align
from ..analysis import Analysis
from ..errors import UsageError
from .selection import Selection

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
    offsets: dict[int, int]  # rank -> ns subtracted (rounded as align.apply does)
    sel: Selection
    gpu: pl.DataFrame  # the analysis' tables, grouped by rank (a view unless they were not)
    cpu: pl.DataFrame
    steps: pl.DataFrame
    kernels: pl.DataFrame  # comm kernels with instance, wait_ns, transfer_ns and a row number ``_k``


@dataclass(frozen=True)
class RankTables:
    rank: int
    tracks: pl.DataFrame  # track, order, counter (bool)
    slices: pl.DataFrame  # track, i, pos, start_ns, end_ns, name, cat, flow_id, flow_role, arg.*
    instants: pl.DataFrame  # track, ts, name, arg.*
    counters: pl.DataFrame  # track, i, pos, ts, value
    dropped: int  # slices beyond MAX_LANES of overlap
    device: int | None  # the rank's GPU (device index of its kernels)


def _by_rank(df: pl.DataFrame) -> pl.DataFrame:
    return df if df["rank"].is_sorted() else df.sort("rank", maintain_order=True)


def _rows(df: pl.DataFrame, rank: int) -> pl.DataFrame:
    """The rows of one rank of a rank-sorted table: a slice, not a scan per rank."""
    col = df["rank"]
    lo = int(col.search_sorted(rank, side="left"))
    hi = int(col.search_sorted(rank, side="right"))
    return df.slice(lo, hi - lo)


def _kernels(a: Analysis) -> pl.DataFrame:
    k = a.kernels if a.kernels is not None else a.traces.collectives.with_columns(
        pl.lit(None, dtype=pl.Utf8).alias("instance"), pl.lit(None, dtype=pl.Int64).alias("wait_ns"),
        pl.lit(None, dtype=pl.Int64).alias("transfer_ns"))
    return k.with_row_index("_k")


def plan(a: Analysis, sel: Selection) -> Plan:
    known = [int(r) for r in a.source["ranks"]]
    if sel.ranks is not None:
        missing = sorted(set(sel.ranks) - set(known))
        if missing:
            raise UsageError(f"--ranks: rank(s) {missing} are not in the traces (they hold {_span(known)})")
    ranks = tuple(r for r in known if sel.ranks is None or r in sel.ranks)
    offsets = {int(r): round(v) for r, v in a.clock.offsets_ns.items()}
    gpu = align.apply(a.traces.gpu.select("rank", "start_ns", "end_ns"), a.clock)
    origin = int(gpu["start_ns"].min()) if gpu.height else 0
    steps = align.apply(a.traces.steps.select("rank", "step", "start_ns", "end_ns"), a.clock)
    keep = _keep(sel, steps, origin, ranks)
    kern = _by_rank(_kernels(a))
    a_kern = align.apply(kern.select("_k", "rank", "instance", "start_ns", "end_ns"), a.clock).filter(
        pl.col("rank").is_in(ranks))
    a_kern = _kept(a_kern, keep)
    if keep is not None and _kept(gpu.filter(pl.col("rank").is_in(ranks)), keep).height == 0:
        raise UsageError(f"{_describe(sel)}: no GPU event of the selected ranks falls there (--window is in ms "
                         f"from the run's first GPU event on the aligned clock; the run lasts "
                         f"{(int(gpu['end_ns'].max()) - origin) / 1e6:,.3f} ms)" if gpu.height else
                         f"{_describe(sel)}: the traces hold no GPU events")
    parts = [gpu.filter(pl.col("rank").is_in(ranks)), steps.filter(pl.col("rank").is_in(ranks))]
    if sel.host:
        parts.append(align.apply(a.traces.cpu.select("rank", "start_ns", "end_ns"), a.clock)
                     .filter(pl.col("rank").is_in(ranks)))
    starts = [int(p["start_ns"].min()) for p in parts if p.height]
    return Plan(ranks=ranks, origin_ns=origin, base_ns=min(starts) if starts else origin, keep=keep,
                flows=_flows(a_kern), offsets=offsets, sel=sel, gpu=_by_rank(a.traces.gpu),
                cpu=_by_rank(a.traces.cpu), steps=_by_rank(a.traces.steps), kernels=kern)


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
        lo, hi = (max(min(origin + round(w * 1e6), 2**62), -(2**62)) if abs(w) < 1e15 else (2**62 if w > 0 else -(2**62))
                  for w in sel.window_ms)
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
    """One flow per matched instance over its written participants, in aligned start order."""
    m = kern.filter(pl.col("instance").is_not_null())
    ids = m.select(pl.col("instance").unique().sort()).with_row_index("flow_id", offset=1)
    m = m.join(ids, on="instance").sort("flow_id", "start_ns", "rank").with_columns(
        pl.int_range(pl.len()).over("flow_id").alias("_o"), pl.len().over("flow_id").alias("_n"))
    return m.filter(pl.col("_n") >= 2).select(
        "_k", pl.col("flow_id").cast(pl.UInt64),
        pl.when(pl.col("_o") == 0).then(pl.lit("out"))
        .when(pl.col("_o") == pl.col("_n") - 1).then(pl.lit("in")).otherwise(pl.lit("both")).alias("flow_role"))


def _lanes(df: pl.DataFrame, key: str) -> tuple[pl.DataFrame, int]:
    """A lane per slice so that no two slices of one lane overlap (longer first at equal starts)."""
    rest = df.sort(key, "start_ns", pl.col("end_ns"), descending=[False, False, True])
    out = []
    for lane in range(MAX_LANES):
        if rest.height == 0:
            break
        prev = pl.col("end_ns").cum_max().shift(1).over(key)
        ok = rest.select((prev.is_null() | (pl.col("start_ns") >= prev)).alias("ok"))["ok"]
        out.append(rest.filter(ok).with_columns(pl.lit(lane, dtype=pl.Int32).alias("lane")))
        rest = rest.filter(~ok)
    return (pl.concat(out) if out else df.with_columns(pl.lit(0, dtype=pl.Int32).alias("lane"))), rest.height


def _on_tracks(df: pl.DataFrame, key: str, label: str, extra: str = "overlap") -> tuple[pl.DataFrame, int]:
    """Lanes -> named tracks; ``i`` numbers the slices of each track in time order."""
    if df.height == 0:
        return df.with_columns(pl.lit("", dtype=pl.Utf8).alias("track"), pl.lit(0, dtype=pl.Int64).alias("i"),
                               pl.lit(0, dtype=pl.Int32).alias("lane")), 0
    df, dropped = _lanes(df, key)
    df = df.with_columns(
        pl.when(pl.col("lane") == 0).then(pl.format(f"{label} {{}}", key))
        .otherwise(pl.format(f"{label} {{}} ({extra} {{}})", key, "lane")).alias("track")
    ).sort("track", "start_ns", "end_ns", descending=[False, False, True])
    return df.with_columns(pl.int_range(pl.len()).over("track").cast(pl.Int64).alias("i")), dropped


def rank_tables(a: Analysis, p: Plan, rank: int) -> RankTables:
    off = p.offsets.get(rank, 0)
    keep = p.keep.filter(pl.col("rank") == rank) if p.keep is not None else None

    def aligned(df: pl.DataFrame) -> pl.DataFrame:
        # an end before its start (broken input) would break the nesting: such a row lasts 0 ns
        end = (pl.max_horizontal("start_ns", "end_ns") - off).alias("end_ns")
        return _kept(df.with_columns(pl.col("start_ns") - off, end), keep)

    gpu = aligned(_rows(p.gpu, rank).filter(pl.col("kind") != "comm").select(
        "rank", "stream", "start_ns", "end_ns", "name", pl.col("kind").alias("cat")))
    kern = _rows(p.kernels, rank)
    comm = aligned(kern.select(
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
        split.select("track", "i", pl.lit(1, dtype=pl.Int8).alias("pos"), "start_ns", mid.alias("end_ns"),
                     pl.lit("wait").alias("name"), pl.lit("comm.wait").alias("cat")),
        split.select("track", "i", pl.lit(3, dtype=pl.Int8).alias("pos"), mid.alias("start_ns"), "end_ns",
                     pl.lit("transfer").alias("name"), pl.lit("comm.transfer").alias("cat")),
    ])
    steps = _steps(a, _rows(p.steps, rank), off, keep)
    parts = [kernels.drop("rank", "stream", "lane", "wait_ns", "transfer_ns"), children, steps]
    if p.sel.host:
        host = aligned(_rows(p.cpu, rank).select(
            "rank", "tid", "start_ns", "end_ns", "name", pl.format("host.{}", "kind").alias("cat")))
        host, d = _on_tracks(host, "tid", "thread", "level")  # nested host ranges: one track per level
        dropped += d
        parts.append(host.with_columns(pl.lit(0, dtype=pl.Int8).alias("pos")).drop("rank", "tid", "lane"))
    slices = pl.concat(parts, how="diagonal_relaxed")
    counters = _counters(steps)
    instants = _notes(a, rank, slices, p)
    tracks = _tracks(slices, counters)
    dev = _rows(p.gpu, rank)["device"].drop_nulls()
    return RankTables(rank=rank, tracks=tracks, slices=slices, instants=instants, counters=counters, dropped=dropped,
                      device=int(dev[0]) if dev.len() else None)


def _steps(a: Analysis, st: pl.DataFrame, off: int, keep: pl.DataFrame | None) -> pl.DataFrame:
    rank = int(st["rank"][0]) if st.height else -1
    st = st.with_columns(pl.col("start_ns") - off, pl.col("end_ns") - off)
    st = _kept(st, keep).sort("start_ns")
    nums = a.steps.filter(pl.col("rank") == rank).select("step", *[pl.col(c).alias(ARG + c) for c in
                                                  ("span_ms", "exposed_comm_ms", "wait_ms", "caused_wait_ms")])
    return st.join(nums, on="step", how="left").select(
        pl.lit("steps").alias("track"), pl.int_range(pl.len()).cast(pl.Int64).alias("i"),
        pl.lit(0, dtype=pl.Int8).alias("pos"), "start_ns", "end_ns", pl.format("step {}", "step").alias("name"),
        pl.lit("step").alias("cat"), cs.starts_with(ARG), pl.col("step").alias(ARG + "step"),
    )


COUNTERS = (("exposed comm per step (ms)", ARG + "exposed_comm_ms"), ("wait per step (ms)", ARG + "wait_ms"))


def _counters(steps: pl.DataFrame) -> pl.DataFrame:
    """Each step's value from its start, 0 from its end (the next step's value replaces it at once)."""
    out = []
    for name, col in COUNTERS:
        v = steps.select("i", "start_ns", "end_ns", pl.col(col).fill_null(0.0).cast(pl.Float64).alias("value"))
        out += [v.select(pl.lit(name).alias("track"), "i", pl.lit(0, dtype=pl.Int8).alias("pos"),
                         pl.col("start_ns").alias("ts"), "value"),
                v.select(pl.lit(name).alias("track"), "i", pl.lit(KERNEL_END_POS, dtype=pl.Int8).alias("pos"),
                         pl.col("end_ns").alias("ts"), pl.lit(0.0).alias("value"))]
    return pl.concat(out)


def _notes(a: Analysis, rank: int, slices: pl.DataFrame, p: Plan) -> pl.DataFrame:
    """The rank's clock correction and its root-caused wait (and the verdict on the straggler itself)."""
    ts = int(slices["start_ns"].min()) if slices.height else p.base_ns
    fit = a.clock
    unc = fit.uncertainty_ns / 1e3 if fit.uncertainty_ns is not None else None
    off_us = p.offsets.get(rank, 0) / 1e3
    row = a.ranks.filter(pl.col("rank") == rank)
    wait_col = "root_caused_wait_ms" if "root_caused_wait_ms" in a.ranks.columns else "caused_wait_ms"
    caused = float(row[wait_col][0]) if row.height and row[wait_col][0] is not None else None
    unc_text = f" ±{unc:,.1f} us" if unc is not None else ""
    rows = [
        {"name": f"clock: {off_us:+,.3f} us subtracted ({fit.method}{unc_text}, reference rank {fit.reference})",
         ARG + "clock_method": fit.method, ARG + "clock_offset_us": off_us, ARG + "clock_uncertainty_us": unc,
         ARG + "clock_reference_rank": fit.reference},
        {"name": f"{wait_col.removesuffix('_ms').replace('_', ' ')}: {caused or 0.0:,.3f} ms",
         ARG + wait_col: caused,
         ARG + "wait_ms": float(row["wait_ms"][0]) if row.height else None,
         ARG + "exposed_comm_ms": float(row["exposed_comm_ms"][0]) if row.height else None},
    ]
    v = a.verdict
    if v is not None and v.rank == rank:
        rows.append({"name": f"straggler: rank {v.rank} ({v.kind})", ARG + "verdict_kind": v.kind,
                     ARG + "caused_wait_ms": v.caused_wait_ns / 1e6, ARG + "confidence": v.confidence,
                     ARG + "chronic": v.chronic})
    return pl.DataFrame(rows).with_columns(pl.lit("commscope").alias("track"), pl.lit(ts, dtype=pl.Int64).alias("ts"))


def _tracks(slices: pl.DataFrame, counters: pl.DataFrame) -> pl.DataFrame:
    """Notes first, then steps, streams in number order, host threads, counters."""
    names = slices.select("track").unique()
    kind = (pl.when(pl.col("track") == "steps").then(1).when(pl.col("track").str.starts_with("stream")).then(2)
            .otherwise(3))
    num = pl.col("track").str.extract(r"(-?\d+)", 1).cast(pl.Int64, strict=False).fill_null(0)
    order = names.with_columns(kind.alias("_g"), num.alias("_n")).sort("_g", "_n", "track")
    rows = pl.concat([
        pl.DataFrame({"track": ["commscope"], "counter": [False]}),
        order.select("track", pl.lit(False).alias("counter")),
        counters.select("track").unique(maintain_order=True).with_columns(pl.lit(True).alias("counter")),
    ])
    return rows.with_row_index("order")
