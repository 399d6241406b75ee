"""NCCL Inspector records folded into running aggregates, batch by batch (memory flat in the record count).

``Fold.add`` takes one batch of a file's raw columns (``inspector_decode``) with each record's communicator
(``cid``, the communicator id's index), member count and process (``proc``) already attached. Collective
records wait in an *open* table until their instance ``(cid, coll_sn)`` closes: when every member logged it,
or when every member that logs the communicator has passed that ``coll_sn`` (a member's records of one
communicator come in ``coll_sn`` order), so only instances still open are held. An instance is then reduced
exactly as ``metrics.inspector.instances`` does, and what the summary needs is kept as sums (per
communicator x process) or bounded structures:

- medians: a ``(key, value, count)`` table per quantity. Values are exact while a key holds at most
  ``SKETCH_CAP`` distinct values; beyond that its values are replaced by the centre of their log-spaced bin
  (ratio ``1 + SKETCH_EPS``), a monotone map, so the median of the binned values is within
  ``sqrt(1 + SKETCH_EPS) - 1`` (0.5 %) of the exact one. Bounded by keys x max(cap, bins).
- outliers: the instances with the largest wait (ties at the cut kept).

Nothing here knows global ranks: ``finish`` maps processes and communicators once ``inspector_ranks`` has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from ...rules import bus_factor_expr

SKETCH_CAP = 512  # distinct values a key keeps exactly
SKETCH_EPS = 0.01  # log-bin ratio - 1 beyond that: median error <= sqrt(1.01) - 1 = 0.499 %
OPEN_MAX = 4_000_000  # open collective records held at most (instances of a rank whose log is missing)
TOP = 20
_LOG = math.log1p(SKETCH_EPS)
# the sketched quantities, as ``m``
BYTES, TRANSFER, BUSBW, LOGGED = 0, 1, 2, 3
KEY = ["cid", "op", "size_bucket", "algo", "proto"]


def size_bucket(col: str = "bytes") -> pl.Expr:
    return (2 ** pl.col(col).cast(pl.Float64).log(2).floor()).cast(pl.Int64).alias("size_bucket")


def busbw(t_ns: pl.Expr) -> pl.Expr:
    """The instance's bus bandwidth from its transfer time (as ``metrics.inspector``)."""
    op, n = pl.col("op"), pl.col("n_ranks").cast(pl.Int64)
    traffic = pl.when(op.is_in(["all_gather", "reduce_scatter"])).then(pl.col("bytes") * n).otherwise(pl.col("bytes"))
    return pl.when(t_ns > 0).then(traffic / t_ns * bus_factor_expr(pl.col("op"), pl.col("n_ranks")))


def _binned(v: pl.Expr) -> pl.Expr:
    """A value -> the geometric centre of its log bin (idempotent; 0 and negatives kept)."""
    return pl.when(v > 0).then(((v.log() / _LOG).floor() + 0.5).mul(_LOG).exp()).otherwise(v)


@dataclass
class Folded:
    """What ``Fold`` holds at the end, by ``cid`` and ``proc`` (mapped to comm / rank by the reader)."""

    per_proc: pl.DataFrame  # cid, proc: records, exec_ns, wait_ns, instances, share, caused_ns, expected_ns, var
    per_comm: pl.DataFrame  # cid: instances, complete_instances
    bw_stats: pl.DataFrame  # KEY: count, busbw_min, busbw_max
    sketch: pl.DataFrame  # KEY, m, v, n
    outliers: pl.DataFrame  # cid, seq, op, bytes, n_ranks, last_proc, transfer_ns, max_wait_ns, caused_wait_ns, busbw
    forced: int = 0  # instances closed before all their members' records could have come (the window was full)
    peak_rows: int = 0
    peak_open: int = 0


@dataclass
class Fold:
    open: list[pl.DataFrame] = field(default_factory=list)
    n_open: int = 0
    progress: dict[tuple[int, int], int] = field(default_factory=dict)  # (cid, proc) -> last coll_sn seen
    members: dict[int, int] = field(default_factory=dict)  # cid -> n_ranks
    finished: set[int] = field(default_factory=set)  # procs whose files ended
    parts: dict[str, list[pl.DataFrame]] = field(default_factory=dict)
    forced: int = 0
    peak_rows: int = 0  # the most rows held at once (open records + aggregates): what memory follows
    peak_open: int = 0  # the most open collective records at once

    def _keep(self, name: str, df: pl.DataFrame) -> None:
        lst = self.parts.setdefault(name, [])
        lst.append(df)
        if len(lst) >= 64:
            self.parts[name] = [_compact(name, pl.concat(lst, how="diagonal_relaxed"))]

    def add(self, batch: pl.DataFrame) -> None:
        """``batch``: cid, proc, n_ranks, p2p, op (commscope names), seq, bytes, exec_ns, busbw_gbps, algo, proto."""
        if batch.height == 0:
            return
        self._keep("per_proc", batch.group_by("cid", "proc").agg(
            pl.len().alias("records"), pl.col("exec_ns").sum()))
        p2p = batch.filter(pl.col("p2p"))
        if p2p.height:  # each record alone: its transfer is its kernel time
            self._bandwidth(p2p.select("cid", "n_ranks", "op", "bytes", "algo", "proto", pl.col("exec_ns")
                                       .alias("transfer_ns"), pl.col("busbw_gbps").cast(pl.Float64)
                                       .alias("logged_busbw_gbps")))
        coll = batch.filter(~pl.col("p2p")).select("cid", "proc", "n_ranks", "op", "seq", "bytes", "exec_ns", "algo",
                                                   "proto", "busbw_gbps")
        if coll.height == 0:
            return
        for cid, n in coll.select("cid", "n_ranks").unique().iter_rows():
            self.members[cid] = n
        for cid, proc, seq in coll.group_by("cid", "proc").agg(pl.col("seq").max()).iter_rows():
            self.progress[(cid, proc)] = max(seq, self.progress.get((cid, proc), seq))
        self.open.append(coll)
        self.n_open += coll.height

    def step(self) -> None:
        """After a block of every file: fold the instances that can no longer get a record."""
        self._close(final=False)

    def open_by_proc(self) -> dict[int, int]:
        """Open collective records per process (a process far ahead of the others holds many)."""
        if not self.open:
            return {}
        return dict(self.open[0].group_by("proc").len().iter_rows())

    def end_of(self, proc: int) -> None:
        """A process's file ended: it holds up no instance any more."""
        self.finished.add(proc)

    def _close(self, final: bool) -> None:
        if not self.open:
            return
        rows = pl.concat(self.open, how="vertical_relaxed") if len(self.open) > 1 else self.open[0]
        seen = rows.group_by("cid", "seq").agg(pl.len().alias("_seen"), pl.col("n_ranks").first())
        if final:
            done = seen
        else:
            upto = self._closed_upto()
            done = seen.join(upto, on="cid", how="left").filter(
                (pl.col("_seen") >= pl.col("n_ranks")) | (pl.col("seq") <= pl.col("_upto")))
            if rows.height - done["_seen"].sum() > OPEN_MAX:  # the window is full: the oldest instances go
                rest = seen.join(done.select("cid", "seq"), on=["cid", "seq"], how="anti").sort("seq")
                extra = rest.filter(pl.col("_seen").cum_sum() > rest["_seen"].sum() - OPEN_MAX // 2)
                extra = rest.head(rest.height - extra.height)
                self.forced += extra.height
                done = pl.concat([done.select("cid", "seq"), extra.select("cid", "seq")])
        keys = done.select("cid", "seq")
        closing = rows.join(keys, on=["cid", "seq"], how="semi")
        left = rows.join(keys, on=["cid", "seq"], how="anti")
        self.open = [left] if left.height else []
        self.n_open = left.height
        if closing.height:
            self._instances(closing)
        held = sum(d.height for v in self.parts.values() for d in v)
        self.peak_rows = max(self.peak_rows, rows.height + held)
        self.peak_open = max(self.peak_open, rows.height)

    def _closed_upto(self) -> pl.DataFrame:
        """Per communicator whose members all logged: the coll_sn every unfinished member has reached."""
        by: dict[int, list[int]] = {}
        count: dict[int, int] = {}
        for (cid, proc), seq in self.progress.items():
            count[cid] = count.get(cid, 0) + 1
            if proc not in self.finished:
                by.setdefault(cid, []).append(seq)
        out = []
        for cid, n in count.items():
            if n >= self.members.get(cid, 1 << 30):
                s = by.get(cid)
                out.append((cid, min(s) if s else 1 << 62))
        return pl.DataFrame(out, schema={"cid": pl.Int32, "_upto": pl.Int64}, orient="row")

    def _instances(self, rows: pl.DataFrame) -> None:
        inst = rows.group_by("cid", "seq").agg(
            pl.col("op").first(), pl.col("bytes").first(), pl.len().alias("seen"), pl.col("n_ranks").first(),
            pl.col("exec_ns").min().alias("transfer_ns"), pl.col("exec_ns").max().alias("max_exec_ns"),
            pl.col("exec_ns").sum().alias("sum_exec_ns"), pl.col("proc").sort_by("exec_ns").first().alias("last_proc"),
            (pl.col("exec_ns") == pl.col("exec_ns").min()).sum().alias("n_last"),
            pl.col("algo").first(), pl.col("proto").first(),
            pl.col("busbw_gbps").median().cast(pl.Float64).alias("logged_busbw_gbps"),
        ).with_columns(
            (pl.col("seen") == pl.col("n_ranks")).alias("complete"),
            (pl.col("max_exec_ns") - pl.col("transfer_ns")).alias("max_wait_ns"),
            (pl.col("sum_exec_ns") - pl.col("seen") * pl.col("transfer_ns")).alias("caused_wait_ns"),
        ).with_columns(busbw(pl.col("transfer_ns")).alias("busbw_gbps"))
        self._keep("per_comm", inst.group_by("cid").agg(pl.len().alias("instances"),
                                                        pl.col("complete").sum().alias("complete_instances")))
        complete = inst.filter(pl.col("complete"))
        if complete.height == 0:
            return
        self._bandwidth(complete.select("cid", "n_ranks", "op", "bytes", "algo", "proto", "transfer_ns",
                                        "logged_busbw_gbps"))
        out = complete.select("cid", "seq", "op", "bytes", "n_ranks", "last_proc", "transfer_ns", "max_wait_ns",
                              "caused_wait_ns", "busbw_gbps")
        prev = self.parts.get("outliers", [])
        self.parts["outliers"] = [_top(pl.concat([*prev, out], how="vertical_relaxed"))]
        # per member: its wait, its share of being last, and the chance terms of the verdict's z-score
        p = 1.0 / pl.col("n_ranks")
        share = pl.when(pl.col("exec_ns") == pl.col("transfer_ns")).then(1.0 / pl.col("n_last")).otherwise(0.0)
        caused = pl.col("caused_wait_ns").cast(pl.Float64)
        mem = rows.select("cid", "seq", "proc", "exec_ns").join(
            complete.select("cid", "seq", "transfer_ns", "n_ranks", "n_last", "caused_wait_ns"), on=["cid", "seq"])
        self._keep("per_proc", mem.group_by("cid", "proc").agg(
            (pl.col("exec_ns") - pl.col("transfer_ns")).sum().alias("wait_ns"), pl.len().alias("instances"),
            share.sum().alias("share"), (share * caused).sum().alias("caused_ns"),
            (caused * p).sum().alias("expected_ns"),
            (caused ** 2 * p * (1 - p)).sum().alias("var")))  # ns squared

    def _bandwidth(self, rows: pl.DataFrame) -> None:
        rows = rows.with_columns(size_bucket(), busbw(pl.col("transfer_ns")).alias("busbw_gbps"))
        self._keep("bw_stats", rows.group_by(KEY).agg(pl.len().alias("count"), pl.col("busbw_gbps").min()
                                                      .alias("busbw_min"), pl.col("busbw_gbps").max().alias("busbw_max")))
        long = pl.concat([rows.select(*KEY, pl.lit(m, dtype=pl.Int8).alias("m"), pl.col(c).cast(pl.Float64).alias("v"))
                          for m, c in ((BYTES, "bytes"), (TRANSFER, "transfer_ns"), (BUSBW, "busbw_gbps"),
                                       (LOGGED, "logged_busbw_gbps"))]).drop_nulls("v")
        self._keep("sketch", long.group_by(*KEY, "m", "v").agg(pl.len().cast(pl.Int64).alias("n")))

    def finish(self) -> Folded:
        self._close(final=True)
        got = {name: _compact(name, pl.concat(v, how="diagonal_relaxed")) for name, v in self.parts.items() if v}

        def take(name: str, schema: dict) -> pl.DataFrame:
            return got.get(name, pl.DataFrame(schema=schema))

        key_schema = {"cid": pl.Int32, "op": pl.Utf8, "size_bucket": pl.Int64, "algo": pl.Utf8, "proto": pl.Utf8}
        per_proc = take("per_proc", {"cid": pl.Int32, "proc": pl.Int32, "records": pl.UInt32, "exec_ns": pl.Int64})
        for c, t in (("wait_ns", pl.Int64), ("instances", pl.UInt32), ("share", pl.Float64), ("caused_ns", pl.Float64),
                     ("expected_ns", pl.Float64), ("var", pl.Float64)):
            if c not in per_proc.columns:
                per_proc = per_proc.with_columns(pl.lit(None, dtype=t).alias(c))
        return Folded(
            per_proc=per_proc,
            per_comm=take("per_comm", {"cid": pl.Int32, "instances": pl.UInt32, "complete_instances": pl.UInt32}),
            bw_stats=take("bw_stats", {**key_schema, "count": pl.UInt32, "busbw_min": pl.Float64,
                                       "busbw_max": pl.Float64}),
            sketch=take("sketch", {**key_schema, "m": pl.Int8, "v": pl.Float64, "n": pl.Int64}),
            outliers=take("outliers", {"cid": pl.Int32, "seq": pl.Int64, "op": pl.Utf8, "bytes": pl.Int64,
                                       "n_ranks": pl.Int32, "last_proc": pl.Int32, "transfer_ns": pl.Int64,
                                       "max_wait_ns": pl.Int64, "caused_wait_ns": pl.Int64, "busbw_gbps": pl.Float64}),
            forced=self.forced, peak_rows=self.peak_rows, peak_open=self.peak_open)


def _top(df: pl.DataFrame) -> pl.DataFrame:
    """The ``TOP`` largest waits, and every instance tied with the last of them (the final order breaks ties)."""
    if df.height <= TOP:
        return df
    cut = df["max_wait_ns"].top_k(TOP).min()
    return df.filter(pl.col("max_wait_ns") >= cut).sort("max_wait_ns", descending=True).head(50 * TOP)


def _compact(name: str, df: pl.DataFrame) -> pl.DataFrame:
    if name == "per_proc":
        return df.group_by("cid", "proc").agg(pl.all().sum())
    if name == "per_comm":
        return df.group_by("cid").agg(pl.all().sum())
    if name == "bw_stats":
        return df.group_by(KEY).agg(pl.col("count").sum(), pl.col("busbw_min").min(), pl.col("busbw_max").max())
    if name == "sketch":
        df = df.group_by(*KEY, "m", "v").agg(pl.col("n").sum())
        wide = pl.col("v").len().over(*KEY, "m") > SKETCH_CAP
        if df.select(wide.any()).item():
            df = df.with_columns(pl.when(wide).then(_binned(pl.col("v"))).otherwise(pl.col("v")).alias("v")).group_by(
                *KEY, "m", "v").agg(pl.col("n").sum())
        return df
    return df


def median_of(sketch: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per ``by`` x ``m``: the median of the counted values (the mean of the two middle ones for an even count,
    as Polars' ``median``)."""
    s = sketch.group_by(*by, "m", "v").agg(pl.col("n").sum()).sort(*by, "m", "v", nulls_last=True)
    s = s.with_columns(pl.col("n").cum_sum().over(*by, "m").alias("_cum"), pl.col("n").sum().over(*by, "m").alias("_N"))
    lo = (pl.col("_N") - 1) // 2 + 1
    hi = pl.col("_N") // 2 + 1
    return s.group_by(*by, "m").agg(
        ((pl.col("v").filter(pl.col("_cum") >= lo).first() + pl.col("v").filter(pl.col("_cum") >= hi).first()) / 2)
        .alias("median"))
