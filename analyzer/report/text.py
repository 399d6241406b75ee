"""Terminal report (rich): verdict first, then per-rank table, top collectives, warnings; fits the terminal."""

from __future__ import annotations

import io
import shutil

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analysis import Analysis
from ..rules import NS_PER_US, size_text
from ..views import communication as comm_view
from ..views.dimensions import summary as dim_summary
from ..views.inspector import tables as inspector_tables
from ..views.units import ms_frame, ms_tables, time_unit
from ..views.verdict import headline
from ..views.whatif import sentence as whatif_sentence
from ..views.whatif import text_lines as whatif_lines
from .md import plain as plain_cell


def _f(x: object, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


# (column, header); times are ms (said in the table title), so headers stay short and never truncate
RANK_COLUMNS = [("rank", "rank"), ("step_time_mean_ms", "step"), ("compute_ms", "compute"), ("comm_ms", "comm"),
                ("overlap_pct", "overlap %"), ("exposed_comm_ms", "exposed"), ("exposed_wait_ms", "exposed wait"),
                ("idle_ms", "idle"), ("caused_wait_ms", "caused wait")]
RANK_COLUMNS_WIDE = [("rank", "rank"), ("steps", "steps"), ("step_time_mean_ms", "step"), ("compute_ms", "compute"),
                     ("comm_ms", "comm"), ("overlap_pct", "overlap %"), ("exposed_comm_ms", "exposed"),
                     ("exposed_wait_ms", "exposed wait"), ("exposed_transfer_ms", "exposed transfer"),
                     ("idle_ms", "idle"), ("wait_ms", "wait"), ("caused_wait_ms", "caused wait"),
                     ("last_arrival_pct", "last arrival %")]
STEP_COLUMNS = [("rank", "rank"), ("step", "step"), ("span_ms", "span"), ("compute_ms", "compute"), ("comm_ms", "comm"),
                ("exposed_comm_ms", "exposed"), ("exposed_wait_ms", "exposed wait"), ("idle_ms", "idle"),
                ("caused_wait_ms", "caused wait")]
STEP_COLUMNS_WIDE = [*STEP_COLUMNS[:6], ("exposed_wait_ms", "exposed wait"), ("exposed_transfer_ms", "exposed transfer"),
                     ("idle_ms", "idle"), ("wait_ms", "wait"), ("caused_wait_ms", "caused wait")]
LEGEND = ("exposed: communication not hidden by compute; exposed wait: the part of it spent waiting for a late "
          "peer; caused wait: the others' wait in collectives this rank arrived at last. --wide shows every column.")
WIDE_TABLES = 1000  # --wide: tables take the width they need; the prose still wraps at the terminal


def terminal_width() -> int:
    """$COLUMNS, else the terminal's width, else 100 (output to a pipe or file)."""
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def render(a: Analysis, width: int | None = None, color: bool = False, show_steps: bool = False,
           wide: bool = False) -> str:
    width = width or terminal_width()
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False)
    # --wide: tables take the width they need (a console clamps each print to its own width)
    tcon = Console(file=buf, width=WIDE_TABLES, force_terminal=color, no_color=not color) if wide else con
    src = a.source
    declared = src.get("declared_world_size", src.get("world_size"))
    con.print(f"[bold]commscope[/bold]  {src['format']}  {len(src['ranks'])} rank(s)"
              + (f" of {declared}" if declared else ""))
    for s in src.get("skipped", []):  # a rank left out is said first, never only at the end
        said = s["reason"] if s["reason"].startswith(s["path"]) else f"{s['path']}: {s['reason']}"
        con.print(f"[red]skipped[/red] {escape(said)}", soft_wrap=True)  # one line each: grep finds the file
    for line in headline(a):
        con.print(line)
    if lead := whatif_sentence(a):
        con.print(lead)
    con.print()
    if a.ranks.height or a.inspector is None:  # NCCL Inspector logs without timestamps have no timeline
        tcon.print(_table("Per rank, ms (whole captured window; step: mean over the profiled steps)",
                          RANK_COLUMNS_WIDE if wide else RANK_COLUMNS, ms_tables(a).ranks.to_dicts()))
        if not wide:
            con.print(LEGEND, style="dim")
    if show_steps and a.steps.height:
        con.print()
        tcon.print(_table("Per step, ms", STEP_COLUMNS_WIDE if wide else STEP_COLUMNS, ms_tables(a).steps.to_dicts()))
    split = comm_view.summary(a)
    if split is not None:
        con.print()
        st = _new_table(f"{comm_view.TITLE}, ms")
        for _, label, _ in comm_view.TEXT_COLUMNS:
            st.add_column(label, justify="left" if label in ("family", "engine") else "right")
        for r in split.to_dicts():
            st.add_row(*[size_text(r.get(k)) if k == "bytes" else plain_cell(r.get(k), d)
                         for k, _, d in comm_view.TEXT_COLUMNS])
        tcon.print(st)
        con.print(comm_view.NOTE, style="dim")
    dims = dim_summary(a)
    if dims:
        con.print()
        tcon.print(_table("Per parallelism dimension, ms (mean per participating rank; root-caused: all ranks)",
                          DIM_TEXT_COLUMNS, dims))
        decided = sorted({f"{d['dimension']}: {d['source']}" for d in dims if d["source"]})
        if decided:  # a family without process groups (expert all-to-all, custom all-reduce) has no source
            con.print("dimension decided by " + "; ".join(decided), style="dim")
    if a.pipeline is not None:
        p = a.pipeline
        pcols = [("stage", "stage"), ("ranks", "ranks"), ("step_ms", "step"), ("bubble_ms", "bubble"),
                 ("bubble_pct", "bubble %"), ("warmup_bubble_ms", "warm-up"), ("steady_bubble_ms", "steady"),
                 ("cooldown_bubble_ms", "cool-down"), ("recv_wait_ms", "recv wait")]
        rows = [{**r, "ranks": _ranks_text(r["ranks"])} for r in ms_frame(p["stages"]).to_dicts()]
        neck = "" if p["bottleneck_stage"] is None else f"; stage {p['bottleneck_stage']} sets the pace"
        con.print()
        tcon.print(_table(f"Pipeline, ms per rank and step (stages from {p['stage_source']}{neck})", pcols, rows))
    if a.experts is not None:
        e = a.experts
        con.print(f"Expert all-to-all: {e['instances']} instances with split sizes; received bytes max/mean "
                  f"p50 {_f(e['imbalance_p50'], 2)}, max {_f(e['imbalance_max'], 2)}; rank {e['top_receiver']} "
                  "receives most")
    if a.collectives.height:
        con.print()
        top = ms_tables(a).collectives.sort("total_wait_ms", descending=True, nulls_last=True).head(10)
        ct = _new_table("Collectives with the most waiting")
        for label in ("pg", "seq", "op", "step", "size", "transfer ms", "max wait ms", "last rank", "busbw GB/s"):
            ct.add_column(label, justify="left" if label == "op" else "right")
        for r in top.to_dicts():
            ct.add_row(_f(r["pg"]), _f(r["seq"]), _f(r["op"]), _f(r["step"]), size_text(r["bytes"]),
                       _f(r["transfer_ms"], 3), _f(r["max_wait_ms"], 3), _f(r["last_rank"]), _f(r["busbw_gbps"], 2))
        tcon.print(ct)
    if a.bandwidth.height:
        con.print()
        bt = _new_table("Bandwidth by operation and size (medians)")
        for label in ("op", "size", "intra-node", "count", "transfer ms", "algbw GB/s", "busbw GB/s"):
            bt.add_column(label, justify="left" if label == "op" else "right")
        for r in ms_tables(a).bandwidth.to_dicts():
            intra = r.get("intra_node")
            bt.add_row(r["op"], size_text(r["size_bucket"]), "-" if intra is None else "yes" if intra else "no",
                       _f(r["count"]), _f(r["transfer_ms_p50"], 3), _f(r["algbw_gbps_p50"], 2),
                       _f(r["busbw_gbps_p50"], 2))
        tcon.print(bt)
    for title, cols, rows in inspector_tables(a):
        con.print()
        it = _new_table(title)
        for _, label, _ in cols:
            it.add_column(label, justify="right")
        for r in rows:
            it.add_row(*[plain_cell(r.get(k), d) for k, _, d in cols])
        tcon.print(it)
    fit = a.clock
    con.print()
    if fit.method != "none":
        offs = ", ".join(f"{r}: {o / NS_PER_US:+.1f}" for r, o in sorted(fit.offsets_ns.items()))
        con.print(f"Clock offsets (us, vs rank {fit.reference}): {offs}; uncertainty "
                  f"{(fit.uncertainty_ns or 0) / NS_PER_US:.1f} us from {fit.instances} collectives")
    for line in whatif_lines(a):
        con.print(line)
    for w in a.warnings:  # a warning's own text is never markup ("[[comm_kernel]]" is a TOML table)
        con.print(f"[yellow]warning:[/yellow] {escape(w)}")
    # rich pads every line to the table width; trailing blanks only get in the way in a pipe or a diff
    return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))


# the dimension table at 100 columns: short headers; how each dimension was decided goes on a line below
DIM_TEXT_COLUMNS = [("dimension", "dim"), ("groups", "groups"), ("intra_node", "intra"), ("comm_ms", "comm"),
                    ("exposed_comm_ms", "exposed"), ("exposed_wait_ms", "exposed wait"), ("wait_ms", "wait"),
                    ("root_caused_wait_ms", "root-caused"), ("busbw_gbps_p50", "busbw GB/s")]


def _new_table(title: str) -> Table:
    # no vertical rules: two spaces between columns instead of three characters keeps 9 columns in 100
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)


def _table(title: str, cols: list[tuple[str, str]], rows: list[dict]) -> Table:
    """Numbers fit their columns: a column of times whose values need more than five digits before the point
    reads in seconds (its header says so), and no number cell is ever cut (its column is at least as wide as
    its longest number; headers wrap instead)."""
    t = _new_table(title)
    cells = []
    for key, label in cols:
        vals = [row.get(key) for row in rows]
        if key.endswith("_ms"):
            unit, k = time_unit([v for v in vals if isinstance(v, (int, float))])
            if unit != "ms":
                label = f"{label} ({unit})"
                vals = [v * k if isinstance(v, (int, float)) else v for v in vals]
        text = [_f(v) for v in vals]
        cells.append(text)
        t.add_column(label, justify="right", no_wrap=False, overflow="fold",
                     min_width=max((len(x) for x in text), default=1))
    for i in range(len(rows)):
        t.add_row(*[c[i] for c in cells])
    return t


def _ranks_text(ranks: list[int]) -> str:
    return ",".join(map(str, ranks[:6])) + (f",... ({len(ranks)})" if len(ranks) > 6 else "")
