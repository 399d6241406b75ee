"""Which NCCL Inspector process is which global rank, and which communicator holds whom.

Every Inspector record names its communicator (``header.id``) and the process's rank *within* it; the
process itself is ``metadata.hostname`` + ``metadata.pid`` (the plugin writes one log per process). A
process that drives one GPU is one global rank, numbered by its rank in the largest communicator that
every process belongs to (torch's default process group, or any other world-sized one). Without such a
communicator (its collectives were all below ``NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES``, say) processes are
numbered in hostname and pid order, which is how torchrun starts local ranks, and a warning says so.

Logs that contradict each other are refused with one line: two processes claiming the same rank of one
communicator, or one communicator logged with two sizes, means logs of two jobs (or two runs) in one
folder; one process holding two ranks of a communicator (one process driving several GPUs) is not
supported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ...errors import UsageError
from ...model import ProcessGroup
from ...ranklist import compact


@dataclass(frozen=True)
class Ranks:
    process_of: pl.DataFrame  # file, meta -> rank
    comm_of: pl.DataFrame  # file, hdr -> comm, comm_rank
    peer_of: pl.DataFrame  # comm, peer_comm_rank -> peer (global rank)
    comms: pl.DataFrame  # comm, id, name, n_ranks, nnodes, ranks
    processes: list[tuple[int, str, str | None]]  # rank, source file, host
    world_size: int
    rank_source: str
    warnings: list[str] = field(default_factory=list)
    groups: dict[int, tuple[ProcessGroup, ...]] = field(default_factory=dict)

    def groups_of(self, rank: int) -> tuple[ProcessGroup, ...]:
        return self.groups.get(rank, ())


def map_ranks(hdr: pl.DataFrame, meta: pl.DataFrame, used: pl.DataFrame, names: list[str]) -> Ranks:
    """``hdr``: file, hdr, id, name, comm_rank, n_ranks, nnodes; ``meta``: file, meta, hostname, pid;
    ``used``: the distinct (file, hdr, meta) of the records; ``names``: each file's path."""
    meta = meta.with_columns(
        pl.coalesce(pl.format("{}:{}", "hostname", "pid"),
                    pl.col("file").map_elements(lambda i: names[i], return_dtype=pl.Utf8)).alias("proc"))
    procs = (meta.group_by("proc").agg(pl.col("hostname").first(), pl.col("pid").first(), pl.col("file").min())
             .sort("hostname", "pid", "proc", nulls_last=True).with_row_index("p"))
    member = (used.join(hdr, on=["file", "hdr"]).join(meta.select("file", "meta", "proc"), on=["file", "meta"])
              .join(procs.select("proc", "p"), on="proc").select("p", "id", "name", "comm_rank", "n_ranks", "nnodes")
              .unique())
    _check(member, procs, names)
    n_proc = procs.height
    comms = (member.group_by("id").agg(pl.col("name").first(), pl.col("n_ranks").first(), pl.col("nnodes").max(),
                                       pl.col("p").n_unique().alias("_members"))
             .sort("name", "id", nulls_last=True).with_row_index("comm").with_columns(pl.col("comm").cast(pl.Int32)))
    warnings: list[str] = []
    world = comms.filter(pl.col("_members") == n_proc).sort("n_ranks", "name", descending=[True, False])
    if world.height:
        wid, wsize = world["id"][0], int(world["n_ranks"][0])
        glob = member.filter(pl.col("id") == wid).select("p", pl.col("comm_rank").alias("rank"))
        source = f"world communicator {wid}"
        if wsize > n_proc:
            have = set(glob["rank"].to_list())
            warnings.append(f"no log from rank(s) {compact([r for r in range(wsize) if r not in have])} of "
                            f"{wsize}: their operations are missing from every table")
    else:
        parts = _components(member, n_proc)
        if parts > 1:  # a TP x DP job links every process through its groups: these are separate jobs
            raise UsageError(f"{files_text(names)}: the logs form {parts} sets of processes that share no "
                             "communicator, i.e. logs of more than one job (or run); put each job's logs in its "
                             "own folder")
        wsize = n_proc
        glob = procs.select("p", pl.col("p").cast(pl.Int32).alias("rank"))
        source = "hostname and pid order"
        warnings.append(f"no communicator spans all {n_proc} processes: global ranks are numbered in hostname and "
                        "pid order (as torchrun starts them); communicator ranks are exact")
    glob = glob.with_columns(pl.col("rank").cast(pl.Int32))
    member = member.join(glob, on="p").join(comms.select("id", "comm"), on="id")
    ranks_str = member.group_by("comm").agg(pl.col("comm_rank"), pl.col("rank"))
    rank_lists = {c: dict(zip(cr, gr)) for c, cr, gr in ranks_str.iter_rows()}
    comms = comms.with_columns(pl.col("comm").map_elements(
        lambda c: ",".join(str(rank_lists[c].get(i, "?")) for i in range(_n(comms, c))), return_dtype=pl.Utf8)
        .alias("ranks")).drop("_members")
    process_of = (meta.join(procs.select("proc", "p"), on="proc").join(glob, on="p")
                  .select(pl.col("file").cast(pl.Int32), pl.col("meta").cast(pl.Int32), "rank"))
    comm_of = hdr.join(comms.select("id", "comm"), on="id").select(
        pl.col("file").cast(pl.Int32), pl.col("hdr").cast(pl.Int32), "comm", pl.col("comm_rank").cast(pl.Int32))
    peer_of = member.select("comm", pl.col("comm_rank").cast(pl.Int32).alias("peer_comm_rank"),
                            pl.col("rank").alias("peer")).unique()
    groups: dict[int, list[ProcessGroup]] = {}
    for cid, name, members in comms.select("id", "name", "ranks").iter_rows():
        known = tuple(int(x) for x in members.split(",") if x != "?")
        for r in known:
            groups.setdefault(r, []).append(ProcessGroup(cid, name or "", known))
    processes = sorted((int(r), names[int(f)], h) for r, f, h in
                       procs.join(glob, on="p").select("rank", "file", "hostname").iter_rows())
    return Ranks(process_of, comm_of, peer_of, comms, processes, wsize, source, warnings,
                 {r: tuple(g) for r, g in groups.items()})


def files_text(names: list[str]) -> str:
    folders = sorted({str(Path(n).parent) for n in names})
    return ", ".join(folders[:2]) + (" ..." if len(folders) > 2 else "")


def _n(comms: pl.DataFrame, c: int) -> int:
    return int(comms.filter(pl.col("comm") == c)["n_ranks"][0])


def _check(member: pl.DataFrame, procs: pl.DataFrame, names: list[str]) -> None:
    def files(ps: list[int]) -> str:
        f = procs.filter(pl.col("p").is_in(ps))["file"].to_list()
        return " and ".join(names[i] for i in sorted(set(f))[:2])

    sizes = member.group_by("id").agg(pl.col("n_ranks").unique().sort()).filter(pl.col("n_ranks").list.len() > 1)
    if sizes.height:
        cid, ns = sizes.row(0)
        raise UsageError(f"communicator {cid} is logged with {' and '.join(map(str, ns))} ranks: these logs come from "
                         "more than one job (or run); put each job's logs in its own folder")
    twice = member.group_by("id", "comm_rank").agg(pl.col("p").unique().sort()).filter(pl.col("p").list.len() > 1)
    if twice.height:
        cid, cr, ps = twice.row(0)
        raise UsageError(f"rank {cr} of communicator {cid} is logged by two processes ({files(ps)}): these logs come "
                         "from more than one job (or run); put each job's logs in its own folder")
    multi = member.group_by("id", "p").agg(pl.col("comm_rank").n_unique()).filter(pl.col("comm_rank") > 1)
    if multi.height:
        cid, p, _ = multi.row(0)
        raise UsageError(f"{files([p])}: one process holds several ranks of communicator {cid} (one process driving "
                         "several GPUs): not supported; log one process per GPU")


def _components(member: pl.DataFrame, n: int) -> int:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for ps in member.group_by("id").agg(pl.col("p"))["p"].to_list():
        for q in ps[1:]:
            parent[find(int(q))] = find(int(ps[0]))
    return len({find(i) for i in range(n)})
