"""Hang triage (Flight Recorder input) in every format: the answer first, then the groups, stacks, warnings.

Formatting only: every fact comes from ``HangAnalysis``; the headline is worded once, in ``views.hang``,
and text, Markdown, HTML and the dashboard all print it.
"""

from __future__ import annotations

from ..hangs.analysis import HangAnalysis
from ..rules import size_text
from ..views.hang import headline, ranks_text

STUCK_COLUMNS = ("group", "dim", "seq", "op", "size", "dtype", "waiting", "never entered", "mismatched", "no dump",
                 "root")


def stuck_rows(a: HangAnalysis) -> list[list[str]]:
    return [[str(h["group"]), str(h["dimension"]), str(h["seq"]), str(h["op"]), size_text(h["bytes"], "size unknown"),
             str(h["dtype"] or "-"), _short(h["waiting"]), _short(h["missing"]),
             _short([m["rank"] for m in h["mismatched"]]), _short(h["no_dump"]), "yes" if h["root"] else "no"]
            for h in a.result.stuck]


GROUP_COLUMNS = ("group", "desc", "dimension", "size", "ranks", "state", "members from")


def group_rows(a: HangAnalysis) -> list[list[str]]:
    return [[str(g["label"]), str(g["desc"]), f"{g['dimension']} ({g['dimension_source']})", str(g["size"]),
             _short(g["ranks"]), g["state"], g["members_source"]] for g in a.result.groups.iter_rows(named=True)]


MISMATCH_COLUMNS = ("group", "dim", "seq", "op", "size", "kind", "odd ranks: what they did", "others", "never entered")


def mismatch_rows(a: HangAnalysis) -> list[list[str]]:
    """Every collective whose members disagree (PyTorch's analyzer's findings and commscope's), by group and seq."""
    out = []
    for m in a.result.mismatches:
        odd = "; ".join(f"{e['rank']}: {_entry_text(e, m)}" for e in m["entries"][:4]) or "-"
        if len(m["entries"]) > 4:
            odd += f"; +{len(m['entries']) - 4}"
        kind = "+".join(m["kinds"]) + (f" (shift {m['shift'][0]['by']:+d})" if m.get("shift") else "")
        out.append([str(m["group"]), str(m["dimension"]), str(m["seq"]), str(m["op"]),
                    size_text(m["bytes"], "-"), kind, odd, _short(m["reference_ranks"]), _short(m["missing"])])
    return out


def _entry_text(e: dict, m: dict) -> str:
    if e["kind"] == "state":
        return f"{e['state']} (others {m['state']})"
    if e["kind"] == "op":
        return f"{e['op']} {size_text(e['bytes'], '')}".strip()
    if e["kind"] == "dtype":
        return str(e["dtype"])
    return f"{e['in_sizes']} -> {e['out_sizes']}"


P2P_COLUMNS = ("group", "op", "src", "dst", "seq", "size", "peer has dump")


def p2p_rows(a: HangAnalysis) -> list[list[str]]:
    return [[str(u["pg"]), u["op"], str(u["src"]), str(u["dst"]), str(u["seq"]), size_text(u["bytes"], "size unknown"),
             "yes" if u["peer_has_dump"] else "no"] for u in a.result.p2p_unmatched]


def stack_blocks(a: HangAnalysis) -> list[tuple[str, list[str]]]:
    h = a.result.hang
    if not h:
        return []
    return [(f"rank {r}: {s['op']} #{s['seq']} (pg {s['group']})", s["frames"]) for r, s in h["stacks"].items()]


def _short(ranks: list[int]) -> str:
    return ranks_text(ranks).split(" ", 1)[1] if ranks else "-"


def text(a: HangAnalysis) -> str:
    src = a.source
    out = [f"commscope  flight recorder  {len(src['ranks'])} dump(s) of {src['world_size']} ranks "
           f"(version {', '.join(src['versions'])}, {', '.join(src['encodings'])})"]
    out += headline(a)
    for title, cols, rows in (("Stuck groups (roots first)", STUCK_COLUMNS, stuck_rows(a)),
                              ("Collectives whose members disagree", MISMATCH_COLUMNS, mismatch_rows(a)),
                              ("Process groups", GROUP_COLUMNS, group_rows(a)),
                              ("Unmatched send/recv", P2P_COLUMNS, p2p_rows(a))):
        if rows:
            out += ["", title, *_plain_table(cols, rows)]
    for title, frames in stack_blocks(a):
        out += ["", f"Stack of {title}", *(f"  {f}" for f in frames)]
    out += [f"warning: {w}" for w in a.warnings]
    return "\n".join(out) + "\n"


def _plain_table(cols: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(list(cols)), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def markdown(a: HangAnalysis) -> str:
    from .md import cell, table

    src = a.source
    lines = [f"## commscope: flight recorder, {len(src['ranks'])} dump(s) of {src['world_size']} ranks", ""]
    lines += [f"**{h}**" if i == 0 else h for i, h in enumerate(headline(a))] + [""]
    for title, cols, rows in (("Stuck groups (roots first)", STUCK_COLUMNS, stuck_rows(a)),
                              ("Collectives whose members disagree", MISMATCH_COLUMNS, mismatch_rows(a)),
                              ("Process groups", GROUP_COLUMNS, group_rows(a)),
                              ("Unmatched send/recv", P2P_COLUMNS, p2p_rows(a))):
        if rows:
            lines += [f"### {title}", "", *table(list(cols), [[cell(c) for c in r] for r in rows]), ""]
    for title, frames in stack_blocks(a):
        lines += [f"<details><summary>Stack of {cell(title)}</summary>", "", "```", *frames, "```", "", "</details>", ""]
    if a.warnings:
        lines += ["### Warnings", ""] + [f"- {w}" for w in a.warnings] + [""]
    return "\n".join(lines).rstrip() + "\n"


def html(a: HangAnalysis) -> str:
    from ..views.hang_grid import grid_figure
    from .html import esc, html_table, page

    src = a.source
    parts = [f"<h1>commscope: flight recorder, {len(src['ranks'])} dump(s) of {esc(src['world_size'])} ranks</h1>"]
    parts.append('<div class="headline">' + "".join(f"<p>{esc(h)}</p>" for h in headline(a)) + "</div>")
    fig = grid_figure(a)
    parts.append(f'<div class="figure">{fig.to_html(full_html=False, include_plotlyjs=True)}</div>')
    for title, cols, rows in (("Stuck groups (roots first)", STUCK_COLUMNS, stuck_rows(a)),
                              ("Collectives whose members disagree", MISMATCH_COLUMNS, mismatch_rows(a)),
                              ("Process groups", GROUP_COLUMNS, group_rows(a)),
                              ("Unmatched send/recv", P2P_COLUMNS, p2p_rows(a))):
        if rows:
            parts += [f"<h2>{esc(title)}</h2>", html_table(list(cols), rows)]
    for title, frames in stack_blocks(a):
        parts.append(f"<h2>Stack of {esc(title)}</h2><pre>" + esc("\n".join(frames)) + "</pre>")
    if a.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f'<li class="warn">{esc(w)}</li>' for w in a.warnings)
                     + "</ul>")
    parts.append('<p class="muted">Paths: ' + esc(", ".join(src["paths"])) + "</p>")
    return page("commscope hang report", "\n".join(parts))
