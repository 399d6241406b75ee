"""Dashboard section: parallelism dimensions (the per-dimension summary) and the process groups behind them.

The numbers are the report's (``analyzer.report.dimensions.summary`` and ``Analysis.process_groups``),
presented unchanged; Dash is imported lazily so importing this module stays cheap.
"""

from __future__ import annotations

from analyzer.analysis import Analysis
from analyzer.views.dimensions import COLUMNS, summary

GROUP_COLUMNS = (("pg", "pg"), ("desc", "description"), ("size", "size"), ("ranks_text", "ranks"),
                 ("dimension", "dimension"), ("dimension_source", "decided by"), ("intra_node_text", "intra-node"))


def group_rows(a: Analysis, limit: int = 12) -> list[dict]:
    """Process groups with their dimension; long member lists shortened for display."""
    if a.process_groups is None:
        return []
    rows = []
    for g in a.process_groups.to_dicts():
        ranks = g["ranks"] or []
        text = ",".join(map(str, ranks[:limit])) + (f",... ({len(ranks)})" if len(ranks) > limit else "")
        source = g["dimension_source"] + (" (guess)" if g.get("guess") else "")
        intra = "?" if g["intra_node"] is None else "yes" if g["intra_node"] else "no"
        rows.append({**{k: g[k] for k in ("pg", "desc", "size", "dimension")}, "ranks_text": text,
                     "dimension_source": source, "intra_node_text": intra})
    return rows


def section(a: Analysis):  # -> html.Section | None
    dims = summary(a)
    if not dims:
        return None
    from dash import dash_table, html

    style = {"fontFamily": "system-ui, sans-serif", "fontSize": "13px", "padding": "3px 8px"}
    return html.Section([
        html.H2("Parallelism dimensions", style={"fontSize": "18px", "margin": "18px 0 6px"}),
        dash_table.DataTable(id="dimension-table", data=dims, style_cell=style, style_header={"fontWeight": "bold"},
                             columns=[{"id": k, "name": h, "type": "numeric" if d else "text",
                                       **({"format": {"specifier": f".{d}f"}} if d else {})} for k, h, d in COLUMNS]),
        html.Details([html.Summary(f"{a.process_groups.height} process groups"),
                      dash_table.DataTable(id="dimension-groups", data=group_rows(a), page_size=20, style_cell=style,
                                           style_header={"fontWeight": "bold"},
                                           columns=[{"id": k, "name": h} for k, h in GROUP_COLUMNS])]),
    ], id="section-dimensions")
