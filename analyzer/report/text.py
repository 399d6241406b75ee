"""Terminal report (rich): verdict first, then per-rank table, top collectives, warnings."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from ..analysis import Analysis
from .dimensions import COLUMNS as DIM_COLUMNS
from .dimensions import summary as dim_summary
from .verdict import headline
from .whatif import sentence as whatif_sentence
from .whatif import text_lines as whatif_lines


def _f(x: object, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def render(a: Analysis, width: int = 140, color: bool = False, show_steps: bool = False) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False)
    src = a.source
    con.print(f"[bold]commscope[/bold]  {src['format']}  {len(src['ranks'])} rank(s)"
              + (f" of {src['world_size']}" if src.get("world_size") else ""))
    for line in headline(a):
        con.print(line)
    if lead := whatif_sentence(a):
        con.print(lead)
    con.print()
    rank_cols = [("rank", "rank"), ("steps", "steps"), ("step_time_mean_ms", "step ms"), ("compute_ms", "compute ms"),
                 ("comm_ms", "comm ms"), ("overlap_pct", "overlap %"), ("exposed_comm_ms", "exposed ms"),
                 ("exposed_wait_ms", "  of it wait"), ("exposed_transfer_ms", "  transfer"), ("idle_ms", "idle ms"),
                 ("wait_ms", "wait ms"), ("caused_wait_ms", "caused ms"), ("last_arrival_pct", "last %")]
    con.print(_table("Per rank (whole captured window; step time over profiled steps)", rank_cols, a.ranks.to_dicts()))
    if show_steps and a.steps.height:
        step_cols = [("rank", "rank"), ("step", "step"), ("span_ms", "span ms"), ("compute_ms", "compute ms"),
                     ("comm_ms", "comm ms"), ("exposed_comm_ms", "exposed ms"), ("exposed_wait_ms", "  of it wait"),
                     ("idle_ms", "idle ms"), ("wait_ms", "wait ms"), ("caused_wait_ms", "caused ms")]
        con.print(_table("Per step", step_cols, a.steps.to_dicts()))
    dims = dim_summary(a)
    if dims:
        con.print(_table("Per parallelism dimension (mean per participating rank)", [(k, h) for k, h, _ in DIM_COLUMNS],
                         dims))
    if a.pipeline is not None:
        p = a.pipeline
        pcols = [("stage", "stage"), ("ranks", "ranks"), ("step_ms", "step ms"), ("bubble_ms", "bubble ms"),
                 ("bubble_pct", "bubble %"), ("warmup_bubble_ms", "  warm-up"), ("steady_bubble_ms", "  steady"),
                 ("cooldown_bubble_ms", "  cool-down"), ("recv_wait_ms", "recv wait ms")]
        rows = [{**r, "ranks": _ranks_text(r["ranks"])} for r in p["stages"].to_dicts()]
        neck = "" if p["bottleneck_stage"] is None else f"; stage {p['bottleneck_stage']} sets the pace"
        con.print(_table(f"Pipeline (per rank and step; stages from {p['stage_source']}{neck})", pcols, rows))
    if a.experts is not None:
        e = a.experts
        con.print(f"Expert all-to-all: {e['instances']} instances with split sizes; received bytes max/mean "
                  f"p50 {_f(e['imbalance_p50'], 2)}, max {_f(e['imbalance_max'], 2)}; rank {e['top_receiver']} "
                  "receives most")
    if a.collectives.height:
        top = a.collectives.sort("total_wait_ms", descending=True, nulls_last=True).head(10)
        ct = Table(title="Collectives with the most waiting", title_justify="left")
        for label in ("pg", "seq", "op", "step", "bytes", "transfer ms", "max wait ms", "last rank", "busbw GB/s"):
            ct.add_column(label, justify="right")
        for r in top.to_dicts():
            ct.add_row(_f(r["pg"]), _f(r["seq"]), _f(r["op"]), _f(r["step"]), _f(r["bytes"]),
                       _f(r["transfer_ms"], 3), _f(r["max_wait_ms"], 3), _f(r["last_rank"]), _f(r["busbw_gbps"], 2))
        con.print(ct)
    if a.bandwidth.height:
        bt = Table(title="Bandwidth by operation and size", title_justify="left")
        for label in ("op", "size", "intra-node", "count", "transfer ms p50", "algbw GB/s p50", "busbw GB/s p50"):
            bt.add_column(label, justify="right")
        for r in a.bandwidth.to_dicts():
            intra = r.get("intra_node")
            bt.add_row(r["op"], _size(r["size_bucket"]), "-" if intra is None else "yes" if intra else "no",
                       _f(r["count"]), _f(r["transfer_ms_p50"], 3), _f(r["algbw_gbps_p50"], 2),
                       _f(r["busbw_gbps_p50"], 2))
        con.print(bt)
    fit = a.clock
    if fit.method != "none":
        offs = ", ".join(f"{r}: {o / 1e3:+.1f}" for r, o in sorted(fit.offsets_ns.items()))
        con.print(f"Clock offsets (us, vs rank {fit.reference}): {offs}; uncertainty "
                  f"{(fit.uncertainty_ns or 0) / 1e3:.1f} us from {fit.instances} collectives")
    for line in whatif_lines(a):
        con.print(line)
    for w in a.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}")
    return buf.getvalue()


def _table(title: str, cols: list[tuple[str, str]], rows: list[dict]) -> Table:
    t = Table(title=title, title_justify="left")
    for _, label in cols:
        t.add_column(label, justify="right")
    for row in rows:
        t.add_row(*[_f(row.get(k)) for k, _ in cols])
    return t


def _ranks_text(ranks: list[int]) -> str:
    return ",".join(map(str, ranks[:6])) + (f",... ({len(ranks)})" if len(ranks) > 6 else "")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} TiB"

