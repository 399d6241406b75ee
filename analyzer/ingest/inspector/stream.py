"""Large NCCL Inspector logs, streamed: the files are read block by block *in step* (one block of every file
in turn), each block folded into running aggregates (``inspector_fold``), so memory stays flat in the number of
records: the open collective instances, the aggregates and the latest verbose records are all that is held.

The summary (busbw per communicator x op x size x algo/proto, slow links, per-rank wait and caused wait, the
verdict, outliers, the op x size x intra/inter table) comes out the same as from the whole table
(``metrics.inspector.analyze``), medians within ``inspector_fold.SKETCH_EPS`` where a key holds more than
``SKETCH_CAP`` distinct values. Verbose records put the latest ``TIMELINE_MAX_RECORDS`` on the timeline.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import polars as pl

from ...errors import TraceError
from ...model import INSPECTOR_COMM_SCHEMA, INSPECTOR_SCHEMA, InspectorLog, conform, empty
from .decode import OPS, Reading, concat, header_frames
from .fold import Fold, Folded
from .ranks import map_ranks
from .workers import Local, Workers

# a block of every file is open at once (64 files x 1 MB: ~150 k records), then folded
STREAM_BLOCK_BYTES = 1 << 20


def fold_files(files: list[Path], timeline_max: int, jobs: int = 1) -> tuple[Folded, dict]:
    """Every file's records folded; returns the aggregates and what ``finish`` needs to map ranks."""
    readers = [Reading(p) for p in files]  # headers, metadata and counters as the blocks come (read here or not)
    source = (Workers(files, STREAM_BLOCK_BYTES, jobs) if jobs > 1 and len(files) > 1
              else Local(files, STREAM_BLOCK_BYTES))
    try:
        return _fold(source, readers, timeline_max)
    finally:
        source.close()


def _fold(source: Local | Workers, readers: list[Reading], timeline_max: int) -> tuple[Folded, dict]:
    files = [r.path for r in readers]
    active = set(range(len(files)))
    ids: dict[str, int] = {}
    procs: dict[str, int] = {}
    hdr_maps: list[list[tuple[int, int]]] = [[] for _ in files]  # local header -> (cid, n_ranks)
    meta_maps: list[list[int]] = [[] for _ in files]  # local metadata -> proc
    used: set[tuple[int, int, int]] = set()
    fold = Fold()
    verbose: list[pl.DataFrame] = []
    n_verbose = n_records = 0
    last_block: dict[int, int] = {}  # file -> records in its last block

    def ask() -> None:
        # in step: a file whose records wait for the other members' (it is ahead in coll_sn) skips this round,
        # so the open window does not grow with the drift between files (a rank with more operations than its
        # peers logs more bytes per coll_sn); when every file waits (a member's log is missing) all are read
        held = fold.open_by_proc()
        ahead = {fi for fi in active
                 if sum(held.get(p, 0) for p in set(meta_maps[fi])) > last_block.get(fi, 1 << 30)}
        source.ask(sorted(active - ahead) or sorted(active))

    ask()
    while True:
        raws, ended = [], []
        for fi, raw, new_h, new_m, end in source.take():
            r = readers[fi]
            r.cols.headers.extend(new_h)
            r.cols.metas.extend(new_m)
            for h in new_h:
                hdr_maps[fi].append((ids.setdefault(h.id, len(ids)), h.n_ranks))
            for m in new_m:
                key = f"{m.hostname}:{m.pid}" if m.hostname and m.pid >= 0 else str(r.path)
                meta_maps[fi].append(procs.setdefault(key, len(procs)))
            if raw is None:
                r.lines, r.bad, r.first_bad, r.truncated = end["lines"], end["bad"], end["first_bad"], end["truncated"]
                r.cols.unknown, r.cols.no_header = end["unknown"], end["no_header"]
                active.discard(fi)
                ended.append(fi)
                continue
            last_block[fi] = raw.height
            if raw.height:
                raws.append(raw.with_columns(pl.lit(fi, dtype=pl.Int32).alias("file")))
        if active:
            ask()  # the next round is decoded (by the workers) while this one is folded
        # the round's blocks as one frame: Polars' cost per call is paid once a round, not once a file
        raw = concat(raws).filter(pl.col("hdr") >= 0) if raws else pl.DataFrame()
        if raw.height:
            n_records += raw.height
            used.update(raw.select("file", "hdr", "meta").unique().iter_rows())
            hdr_tab = pl.DataFrame([(f, i, c, n) for f in range(len(files)) for i, (c, n) in enumerate(hdr_maps[f])],
                                   schema={"file": pl.Int32, "hdr": pl.Int32, "cid": pl.Int32, "n_ranks": pl.Int32},
                                   orient="row")
            meta_tab = pl.DataFrame([(f, i, p) for f in range(len(files)) for i, p in enumerate(meta_maps[f])],
                                    schema={"file": pl.Int32, "meta": pl.Int32, "proc": pl.Int32}, orient="row")
            ops = {o: OPS.get(o, o.lower()) for o in raw["op"].unique().drop_nulls().to_list()}
            fold.add(raw.select(
                "file", "hdr", "meta", "p2p", pl.col("op").replace_strict(ops, return_dtype=pl.Utf8).alias("op"),
                "seq", "bytes", (pl.col("exec_us") * 1000).alias("exec_ns"), "busbw_gbps",
                pl.col("algo").cast(pl.Utf8), pl.col("proto").cast(pl.Utf8))
                .join(hdr_tab, on=["file", "hdr"], how="left").join(meta_tab, on=["file", "meta"], how="left"))
            v = raw.filter(pl.col("kstart_us").is_not_null() & pl.col("kstop_us").is_not_null())
            if v.height:  # the latest operations only (``_latest`` picks whole instances among them)
                verbose.append(v)
                n_verbose += v.height
                if sum(x.height for x in verbose) > 2 * timeline_max:
                    both = pl.concat(verbose, how="diagonal_relaxed")
                    verbose = [both.filter(pl.col("kstart_us") >= both["kstart_us"].top_k(timeline_max).min())]
        for fi in ended:
            for p in set(meta_maps[fi]):
                fold.end_of(p)
        fold.step()
        if not active:
            break
    return fold.finish(), {"readers": readers, "used": used, "procs": procs, "ids": ids, "verbose": verbose,
                           "n_verbose": n_verbose, "n_records": n_records}


def read_streaming(files: list[Path], timeline_max: int, jobs: int, mapped: Callable, file_warnings: Callable
                   ) -> tuple[InspectorLog, list[str], pl.DataFrame, object]:
    """The job's logs -> an ``InspectorLog`` carrying ``folded`` aggregates (no per-record table), the readers'
    warnings, the latest verbose records (raw, with ``file``: the caller maps them) and the rank mapping.
    ``mapped`` and ``file_warnings`` are the whole-table reader's (``nccl_inspector``), handed in so that the two
    readers say and map the same things without importing each other."""

    was = gc.isenabled()
    gc.disable()  # as ``read_file``: many short-lived objects a block, no cycles
    try:
        folded, st = fold_files(files, timeline_max, jobs)
    finally:
        if was:
            gc.enable()
    readers = st["readers"]
    warnings: list[str] = []
    for r in readers:
        warnings.extend(file_warnings(r.log_file(pl.DataFrame())))
    usable = sorted({fi for fi, _, _ in st["used"]})
    if not usable:
        raise TraceError(files[0], "has no NCCL Inspector record that could be read",
                         "check that the files are the plugin's JSON logs (NCCL_INSPECTOR_PROM_DUMP=0)")
    new = {fi: i for i, fi in enumerate(usable)}
    hdrs, metas = [], []
    for fi in usable:
        c = readers[fi].cols
        hdrs.extend({"file": new[fi], "hdr": i, "id": h.id, "name": h.comm_name, "comm_rank": h.rank,
                     "n_ranks": h.n_ranks, "nnodes": h.nnodes} for i, h in enumerate(c.headers))
        metas.extend({"file": new[fi], "meta": i, "hostname": m.hostname or None, "pid": m.pid if m.pid >= 0 else None,
                      "version": m.inspector_output_format_version} for i, m in enumerate(c.metas))
    hdr_df, meta_df = header_frames(hdrs, metas, warnings)
    used = pl.DataFrame([(new[f], h, m) for f, h, m in st["used"]], schema={"file": pl.Int32, "hdr": pl.Int32,
                                                                            "meta": pl.Int32}, orient="row")
    names = [str(readers[fi].path) for fi in usable]
    ranks = map_ranks(hdr_df, meta_df, used, names)
    warnings.extend(ranks.warnings)
    # processes and communicators -> global ranks and the mapping's communicator numbers
    proc_key = {}
    for fi in usable:
        for i, m in enumerate(readers[fi].cols.metas):
            proc_key[(new[fi], i)] = st["procs"][f"{m.hostname}:{m.pid}" if m.hostname and m.pid >= 0
                                                 else str(readers[fi].path)]
    rank_of = {proc_key[(f, m)]: r for f, m, r in ranks.process_of.iter_rows()}
    comm_of = dict(zip(ranks.comms["id"].to_list(), ranks.comms["comm"].to_list()))
    cid_comm = {cid: comm_of.get(i) for i, cid in st["ids"].items()}
    folded = _to_ranks(folded, cid_comm, rank_of)
    if folded.forced:
        warnings.append(f"{folded.forced} collective instances were closed before every member's record had come "
                        "(more were open at once than the streaming window holds: a member's log is far behind or "
                        "missing): each may count as incomplete twice")
    raw_verbose = pl.concat(st["verbose"], how="diagonal_relaxed") if st["verbose"] else pl.DataFrame()
    if raw_verbose.height:
        raw_verbose = raw_verbose.filter(pl.col("file").is_in(usable)).with_columns(
            pl.col("file").replace_strict(new, return_dtype=pl.Int32))
        op_names = {o: OPS.get(o, o.lower()) for o in raw_verbose["op"].unique().drop_nulls().to_list()}
        verbose = conform(mapped(raw_verbose, ranks, op_names), INSPECTOR_SCHEMA)
    else:
        verbose = empty(INSPECTOR_SCHEMA)
    counts = {"files": len(files), "lines": sum(r.lines for r in readers), "records": st["n_records"],
              "bad_lines": sum(r.bad for r in readers), "unknown_records": sum(r.cols.unknown for r in readers),
              "truncated_files": sum(r.truncated for r in readers),
              "unmapped_records": int(folded.per_proc.filter(pl.col("rank").is_null())["records"].sum()),
              "verbose_records": st["n_verbose"]}
    log = InspectorLog(empty(INSPECTOR_SCHEMA), conform(ranks.comms, INSPECTOR_COMM_SCHEMA), st["n_verbose"] > 0,
                       counts, folded=folded)
    return log, warnings, verbose, ranks


def _to_ranks(f: Folded, cid_comm: dict[int, int | None], rank_of: dict[int, int]) -> Folded:
    cids = list(cid_comm)

    def comm(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.col("cid").replace_strict(cids, [cid_comm[c] for c in cids], default=None,
                                                            return_dtype=pl.Int32).alias("comm")).drop("cid")

    procs = list(rank_of)

    def rank(col: str, out: str) -> pl.Expr:
        return pl.col(col).replace_strict(procs, [rank_of[p] for p in procs], default=None,
                                          return_dtype=pl.Int32).alias(out)

    return Folded(per_proc=comm(f.per_proc).with_columns(rank("proc", "rank")).drop("proc"),
                  per_comm=comm(f.per_comm), bw_stats=comm(f.bw_stats), sketch=comm(f.sketch),
                  outliers=comm(f.outliers).with_columns(rank("last_proc", "last_rank")).drop("last_proc"),
                  forced=f.forced, peak_rows=f.peak_rows, peak_open=f.peak_open)
