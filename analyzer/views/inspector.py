"""What every presenter shows of NCCL Inspector input: the lead sentences and the tables (rows as dicts with
already-formatted cells), read from ``Analysis.inspector`` (ns inside; ms here). Formatting only."""

from __future__ import annotations

from ..analysis import Analysis
from ..rules import size_text
from .units import ms, ms_frame

MAX_SLOW_LINKS = 3
# (key, header, digits): per communicator x op x size; the busbw is the instance's (from its shortest kernel)
BUSBW_COLUMNS = (
    ("name", "comm", 0), ("op", "op", 0), ("size", "size", 0), ("algo_proto", "algo/proto", 0),
    ("n_ranks", "ranks", 0), ("where", "nodes", 0), ("count", "count", 0), ("transfer_ms_p50", "transfer ms", 3),
    ("busbw_gbps_p50", "busbw GB/s", 2), ("logged_busbw_gbps_p50", "logged GB/s", 2),
)
RANK_COLUMNS = (
    ("rank", "rank", 0), ("records", "records", 0), ("comm_ms", "comm ms", 1), ("wait_ms", "wait ms", 1),
    ("caused_wait_ms", "caused wait ms", 1), ("instances_last", "last at", 1), ("instances", "of", 0),
    ("last_arrival_pct", "last %", 1), ("caused_wait_z", "z", 1),
)
OUTLIER_COLUMNS = (
    ("name", "communicator", 0), ("seq", "coll_sn", 0), ("op", "op", 0), ("size", "size", 0),
    ("last_rank", "last rank", 0), ("transfer_ms", "transfer ms", 3), ("max_wait_ms", "max wait ms", 3),
    ("total_wait_ms", "total wait ms", 3),
)



def _where(intra: bool | None, nnodes: int | None) -> str:
    if intra is None:
        return "?"
    return "intra" if intra else f"inter ({nnodes})"


def headline(a: Analysis) -> list[str]:
    s = a.inspector
    if s is None:
        return []
    lines = []
    v = s.verdict
    if not s.verbose:  # with kernel timestamps the trace verdict (root cause, timeline) leads instead
        if v is not None:
            lines.append(
                f"Straggler (from Inspector kernel times): rank {v['rank']} caused {ms(v['caused_wait_ns']):,.1f} ms of the "
                f"others' wait ({v['share_pct']:.0f}% of all, {v['z']:.1f} sigma above chance), arriving last at "
                f"{v['last_arrival_pct']:.0f}% of its {v['instances']} collectives.")
        elif s.counts.get("complete_instances"):
            lines.append("No straggler: the wait the ranks cause each other stays within chance.")
    seen: list[str] = []
    for r in s.slow_links.to_dicts():
        if r["id"] in seen:
            continue
        seen.append(r["id"])
        if len(seen) > MAX_SLOW_LINKS:
            break
        lines.append(
            f"Slow link: communicator {r['name']} ({r['id']}, ranks {r['ranks']}, "
            f"{_where(r['intra_node'], r['nnodes'])}) runs {r['op']} of {size_text(r['size_bucket'])} at "
            f"{r['busbw_gbps_p50']:,.2f} GB/s busbw, {r['ratio']:.2f}x the {r['peer_busbw_gbps_p50']:,.2f} GB/s of "
            f"the {r['peers'] - 1} other communicator{'s' if r['peers'] > 2 else ''} doing the same.")
    return lines


def tables(a: Analysis) -> list[tuple[str, tuple, list[dict]]]:
    """(title, columns, rows) for each Inspector table, in the order presenters show them."""
    s = a.inspector
    if s is None:
        return []
    out = []
    bw = [{**r, "size": size_text(r["size_bucket"]), "where": _where(r["intra_node"], None).split(" ")[0],
           "algo_proto": "/".join(x for x in (r["algo"], r["proto"]) if x) or "-"} for r in ms_frame(s.busbw).to_dicts()]
    cols = BUSBW_COLUMNS if any(r["algo_proto"] != "-" for r in bw) else tuple(
        c for c in BUSBW_COLUMNS if c[0] != "algo_proto")  # the plugin's JSON has none; a writer may add them
    out.append(("NCCL Inspector: bus bandwidth per communicator, operation and size (medians; busbw from each "
                "instance's transfer, logged: the plugin's per-rank figure, waits included)",
                cols, bw))
    if not s.verbose:
        out.append(("NCCL Inspector: per rank (complete instances; wait = own kernel time - the instance's shortest)",
                    RANK_COLUMNS, ms_frame(s.ranks).to_dicts()))
    if s.outliers.height:
        rows = [{**r, "size": size_text(r["bytes"])} for r in ms_frame(s.outliers.head(10)).to_dicts()]
        out.append(("NCCL Inspector: instances with the largest arrival gap (coll_exec_time_us spread)",
                    OUTLIER_COLUMNS, rows))
    return out
