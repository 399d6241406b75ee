"""The hang triage's process group x seq grid as a plotly figure (no Dash): the HTML report and the
dashboard page both draw it.

Each cell is one collective of one group: green when every member completed it, orange when members
entered it and wait (none missing), red when some member never entered it, left no dump, or entered it with another
op, size or dtype than the others (completed or not: NCCL runs mismatched collectives).
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..hangs.analysis import HangAnalysis

STATES = ("all completed", "entered, waiting", "never entered / no dump / mismatched")
COLORS = ("#54A24B", "#F58518", "#E45756")


def cell_state(completed: int, waiting: int, missing: int, no_dump: int, mismatched: int = 0) -> int:
    """0: all completed; 1: some wait in it, nobody absent; 2: some member never entered it, has no dump, or
    entered it with another op, size or dtype."""
    if missing or mismatched or (no_dump and waiting):
        return 2
    return 1 if waiting else 0


def grid_cells(a: HangAnalysis) -> list[dict]:
    """One dict per drawn cell (the grid of the JSON report, plus the state drawn)."""
    out = []
    for c in a.result.grid.iter_rows(named=True):
        out.append({**c, "state": cell_state(c["completed"], c["waiting"], c["missing"], c["no_dump"],
                                             c.get("mismatched", 0))})
    return out


def grid_figure(a: HangAnalysis) -> go.Figure:
    cells = grid_cells(a)
    dims = {g["label"]: g["dimension"] for g in a.result.groups.iter_rows(named=True)}
    labels = sorted({c["label"] for c in cells}, key=lambda s: (len(s), s))
    seqs = sorted({c["seq"] for c in cells})
    pos = {s: i for i, s in enumerate(seqs)}
    row = {lab: i for i, lab in enumerate(labels)}
    z = [[None] * len(seqs) for _ in labels]
    text = [[""] * len(seqs) for _ in labels]
    for c in cells:
        i, j = row[c["label"]], pos[c["seq"]]
        z[i][j] = c["state"]
        text[i][j] = (f"pg {c['label']} #{c['seq']} {c['op']}<br>{c['completed']} completed, {c['waiting']} waiting, "
                      f"{c['missing']} never entered, {c['no_dump']} no dump (of {c['size']})"
                      + (f", {c['mismatched']} mismatched" if c.get("mismatched") else ""))
    scale = [[0.0, COLORS[0]], [0.33, COLORS[0]], [0.34, COLORS[1]], [0.66, COLORS[1]], [0.67, COLORS[2]],
             [1.0, COLORS[2]]]
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(s) for s in seqs], y=[f"{lab} ({dims.get(lab) or '?'})" for lab in labels], text=text,
        hovertemplate="%{text}<extra></extra>", zmin=0, zmax=2, colorscale=scale, xgap=2, ygap=2,
        colorbar={"tickvals": [0.33, 1, 1.67], "ticktext": list(STATES), "title": ""},
    ))
    fig.update_layout(title="Process group x collective seq (last seqs up to each group's hang)",
                      xaxis_title="collective seq", yaxis_title="process group", height=max(260, 40 * len(labels) + 140),
                      margin={"l": 140, "r": 40, "t": 60, "b": 50}, xaxis={"type": "category"})
    return fig
