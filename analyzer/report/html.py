"""One self-contained, static HTML report: the dashboard's main views with plotly.js inlined (no network)."""

from __future__ import annotations

import html as html_lib

from ..analysis import Analysis
from ..views import communication as comm_view
from ..views.dimensions import COLUMNS as DIM_COLUMNS
from ..views.dimensions import summary as dim_summary
from ..views.inspector import tables as inspector_tables
from ..views.selection import command_line
from ..views.units import ms_tables
from ..views.verdict import headline
from ..views.whatif import sentence as whatif_sentence
from .markdown import COLLECTIVE_COLUMNS, RANK_COLUMNS, TOP_COLLECTIVES
from .md import cell

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.headline { font-size: 1.05rem; background: #f6f6f9; border-left: 4px solid #4C78A8; padding: .6rem 1rem; }
table { border-collapse: collapse; margin: .5rem 0; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .6rem; text-align: right; }
th { background: #f0f0f4; } .warn { color: #9a5b00; } .figure { margin: 1rem 0; }
.good { color: #1a7f37; } .bad { color: #c62828; font-weight: 600; } .muted { color: #777; }
"""


def esc(x: object) -> str:
    return html_lib.escape(str(x), quote=True)


def html_table(headers: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    """Cells are escaped here; ``classes`` gives an optional CSS class per row."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{esc(classes[i])}"' if classes and classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def _figures(a: Analysis) -> list[str]:
    """The dashboard's main views as static divs; the first carries the whole plotly.js bundle inline."""
    from ..views import figures as fg  # lazy: plotly is imported for HTML only

    figs = [fg.breakdown_figure(a), fg.heatmap_figure(a, "span_ms"), fg.heatmap_figure(a, "caused_wait_ms"),
            fg.wait_figure(a), fg.busbw_figure(a), fg.timeline_figure(a)]
    config = {"displaylogo": False, "responsive": True}
    return [f'<div class="figure">{fig.to_html(full_html=False, include_plotlyjs=(i == 0), config=config)}</div>'
            for i, fig in enumerate(figs)]


def render(a: Analysis) -> str:
    src = a.source
    declared = src.get("declared_world_size", src.get("world_size"))
    world = f" of {declared}" if declared else ""
    parts = [f"<h1>commscope: {esc(src['format'])}, {len(src['ranks'])} rank(s){esc(world)}</h1>"]
    lead = [*headline(a), *[s for s in [whatif_sentence(a)] if s]]
    parts.append('<div class="headline">' + "".join(f"<p>{esc(h)}</p>" for h in lead) + "</div>")
    parts += _figures(a)
    if a.ranks.height:
        parts.append("<h2>Per rank</h2><p class=\"muted\">Whole captured window; step time is the mean over "
                     "profiled steps.</p>")
        rows = [[cell(r.get(k)) for k, _ in RANK_COLUMNS] for r in ms_tables(a).ranks.to_dicts()]
        parts.append(html_table([h for _, h in RANK_COLUMNS], rows))
    split = comm_view.summary(a)
    if split is not None:
        parts.append(f"<h2>{esc(comm_view.TITLE)}</h2><p class=\"muted\">{esc(comm_view.NOTE)}.</p>")
        parts.append(html_table([h for _, h, _ in comm_view.COLUMNS],
                                [[cell(r.get(k), d) for k, _, d in comm_view.COLUMNS] for r in split.to_dicts()]))
    dims = dim_summary(a)
    if dims:
        parts.append("<h2>Per parallelism dimension</h2><p class=\"muted\">Mean per participating rank.</p>")
        parts.append(html_table([h for _, h, _ in DIM_COLUMNS], [[cell(r.get(k), d) for k, _, d in DIM_COLUMNS]
                                                                  for r in dims]))
    if a.collectives.height:
        top = ms_tables(a).collectives.sort("total_wait_ms", descending=True, nulls_last=True).head(TOP_COLLECTIVES)
        parts.append(f"<h2>Top {top.height} collectives by wait</h2>")
        rows = [[cell(r.get(k), d) for k, _, d in COLLECTIVE_COLUMNS] for r in top.to_dicts()]
        parts.append(html_table([h for _, h, _ in COLLECTIVE_COLUMNS], rows))
    for title, cols, rows in inspector_tables(a):
        parts.append(f"<h2>{esc(title)}</h2>")
        parts.append(html_table([h for _, h, _ in cols], [[cell(r.get(k), d) for k, _, d in cols] for r in rows]))
    if a.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f'<li class="warn">{esc(w)}</li>' for w in a.warnings)
                     + "</ul>")
    # a full trace is too big to embed: the command that writes it
    parts.append('<h2>Merged Perfetto trace</h2><p>Every rank on the aligned clock, for https://ui.perfetto.dev: '
                 f"<code>{esc(command_line(a))}</code></p>")
    parts.append('<p class="muted">Paths: ' + esc(", ".join(str(p) for p in src.get("paths", []))) + "</p>")
    return page("commscope report", "\n".join(parts))
