"""Which NCCL Inspector process is which global rank, and which communicator holds whom.

Every Inspector record names its communicator (``header.id``) and the process's rank *within* it; the
process itself is ``metadata.hostname`` + ``metadata.pid`` (the plugin writes one log per process). A
process that drives one GPU is one global rank, numbered by its rank in the largest communicator that
every process belongs to (torch's default process group, or any other world-sized one). Without such a
communicator (its collectives were all below ``NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES``, or the job used only its
mesh's groups) a 2-D mesh still numbers them exactly: two families of communicators (each family's
communicators of one size, disjoint, covering every process) whose every pair shares one process are the axes of
a ``torch`` DeviceMesh, ``rank = slow coordinate x fast size + fast coordinate``, each coordinate the process's
rank in that axis's communicator (a subgroup ranks its members in order); the fast axis is the one whose
communicators stay on one host (torchrun numbers a host's ranks consecutively), else the larger. Otherwise
processes are numbered in hostname and pid order, which is how torchrun starts local ranks, and a warning says so.

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


def map_ranks(hdr: pl.DataFrame, meta: pl.DataFrame, used: pl.DataFrame, names: list[str],
              collective_ids: set[str] | None = None) -> Ranks:
    """``hdr``: file, hdr, id, name, comm_rank, n_ranks, nnodes; ``meta``: file, meta, hostname, pid;
    ``used``: the distinct (file, hdr, meta) of the records; ``names``: each file's path; ``collective_ids``: the
    communicators that carried collectives (None: unknown), the only ones a mesh is made of (PyTorch gives each
    send/recv pair a 2-rank communicator of its own)."""
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
        mesh = _mesh_ranks(member if collective_ids is None else member.filter(pl.col("id").is_in(collective_ids)),
                           procs)
        if mesh is not None:
            glob, source = mesh
        else:
            glob = procs.select("p", pl.col("p").cast(pl.Int32).alias("rank"))
            source = "hostname and pid order"
            warnings.append(f"no communicator spans all {n_proc} processes: global ranks are numbered in hostname "
                            "and pid order (as torchrun starts them); communicator ranks are exact")
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


def _mesh_ranks(member: pl.DataFrame, procs: pl.DataFrame) -> tuple[pl.DataFrame, str] | None:
    """Global ranks from a 2-D mesh of communicators (module doc); None when the communicators form none."""
    n = procs.height
    per = member.group_by("id").agg(pl.col("n_ranks").first(), pl.col("p"), pl.col("comm_rank"))
    families: dict[int, list[tuple[str, list[int], list[int]]]] = {}
    for cid, size, ps, crs in per.iter_rows():
        if 1 < size < n and len(ps) == size:
            families.setdefault(int(size), []).append((cid, [int(p) for p in ps], [int(c) for c in crs]))
    axes = []  # (size, coordinate of each process, every communicator on one host)
    host = dict(procs.select("p", "hostname").iter_rows())
    for size, comms in families.items():
        coord = {p: c for _, ps, crs in comms for p, c in zip(ps, crs)}
        if len(coord) == n and len(comms) * size == n:  # disjoint, covering every process: a partition
            one_host = all(len({host.get(p) for p in ps}) == 1 for _, ps, _ in comms)
            axes.append((size, coord, one_host, comms[0][0]))
    for i, a in enumerate(axes):
        for b in axes[i + 1:]:
            if a[0] * b[0] != n:
                continue
            fast, slow = sorted((a, b), key=lambda x: (not x[2], -x[0]))
            ranks = {p: slow[1][p] * fast[0] + fast[1][p] for p in range(n)}
            if sorted(ranks.values()) != list(range(n)):
                continue  # two partitions whose communicators do not cross in exactly one process each
            glob = pl.DataFrame({"p": list(ranks), "rank": list(ranks.values())},
                                schema={"p": procs["p"].dtype, "rank": pl.Int32})
            return glob, (f"a {slow[0]} x {fast[0]} mesh of communicators (e.g. {slow[3]} x {fast[3]}): rank = "
                          f"coordinate x {fast[0]} + coordinate")
    return None


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
