"""Hang triage (Flight Recorder input) in every format: the answer first, then the groups, stacks, warnings.

Formatting only: every fact comes from ``HangAnalysis``; ``headline`` is the one place the sentences
are worded, and text, Markdown, HTML and the dashboard all print it.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ..hang_analysis import HangAnalysis
from ..rules import NS_PER_S, size_text

MAX_ALSO = 5  # further stuck groups named under the headline


def ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 6] -> "ranks 0-3, 6"; one rank -> "rank 6"."""
    if not ranks:
        return "no rank"
    rs = sorted(ranks)
    runs, start, prev = [], rs[0], rs[0]
    for r in rs[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    if len(runs) > 8:
        runs = runs[:8] + [f"... ({len(rs)} in all)"]
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(runs)



def clock_text(ns: int | None) -> str:
    if not ns:
        return "an unknown time"
    t = datetime.fromtimestamp(ns / NS_PER_S, tz=timezone.utc)
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 100000} UTC"


def group_text(h: dict) -> str:
    return f"pg {h['group']} ({h['dimension'] or h['desc'] or 'unknown'})"


def _op_text(h: dict) -> str:
    detail = [size_text(h["bytes"], "size unknown")] + ([h["dtype"]] if h["dtype"] else [])
    if h["kind"] == "p2p":
        detail.insert(0, f"rank {h['src']} -> {h['dst']}" if h["src"] is not None else "")
    return f"{h['op']} #{h['seq']} ({', '.join(d for d in detail if d)})"


def hang_sentence(h: dict) -> str:
    parts = [f"{group_text(h)} {_op_text(h)}"]
    clauses = []
    if h["waiting"]:
        verb = "waits" if len(h["waiting"]) == 1 else "wait"
        clauses.append(f"{ranks_text(h['waiting'])} entered it and {verb} since {clock_text(h['since_ns'])}")
    if h["missing"]:
        what = "never posted the matching " + ("recv" if h["op"] == "send" else "send") if h["kind"] == "p2p" \
            else "never entered it"
        clauses.append(f"{ranks_text(h['missing'])} {what}")
        for r in h["missing"][:3]:
            last = h["last_completed"].get(str(r))
            now = h["last_entry"].get(str(r))
            bits = []
            if last:
                bits.append(f"rank {r}'s last completed op there is {last['op']} #{last['seq']} (pg {last['group']})")
            if now and (not last or (now["group"], now["seq"]) != (last["group"], last["seq"])):
                bits.append(f"its latest op is {now['op']} #{now['seq']} (pg {now['group']}, {now['state']})")
            if bits:
                clauses.append("; ".join(bits))
    for m in h["mismatched"][:5]:
        what = f"{size_text(m['bytes'], 'size unknown')}" + (f", {m['dtype']}" if m["dtype"] else "")
        clauses.append(f"rank {m['rank']} called it with {what}" if m["op"] == h["op"]
                       else f"rank {m['rank']} called {m['op']} ({what}) instead")
    if h["no_dump"]:
        clauses.append(f"{ranks_text(h['no_dump'])} left no dump")
    for r, s in list(h["stacks"].items())[:2]:
        if int(r) not in h["waiting"] or int(r) in [m["rank"] for m in h["mismatched"]]:
            clauses.append(f"rank {r}'s stack: {s['user_frame'] or s['frames'][0]}")
    return f"{parts[0]}: " + "; ".join(clauses)


def headline(a: HangAnalysis) -> list[str]:
    r = a.result
    if r.hang is None:
        groups = r.groups.height
        lines = [f"No hang: every process group's latest collective completed on all its members ({groups} groups, "
                 f"{a.source['entries']} entries)."]
    else:
        lines = [f"Hang: {hang_sentence(r.hang)}."]
        also = [h for h in r.stuck[1:]]
        for h in also[:MAX_ALSO]:
            why = f", blocked by pg {h['blocked_by'][0]['group']} #{h['blocked_by'][0]['seq']}" if h["blocked_by"] \
                else (" (another root)" if h["root"] else "")
            who = ranks_text(h["waiting"]) + " wait" + ("s" if len(h["waiting"]) == 1 else "")
            lines.append(f"Also stuck: {group_text(h)} {_op_text(h)}: {who}"
                         + (f", {ranks_text(h['missing'])} not there" if h["missing"] else "") + why + ".")
        if len(also) > MAX_ALSO:
            lines.append(f"... and {len(also) - MAX_ALSO} more stuck groups (all in the JSON report).")
    if r.missing_dumps:
        lines.append(f"No dump from {ranks_text(list(r.missing_dumps))} (of {r.world_size}).")
    if r.p2p_unmatched:
        lines.append(f"{len(r.p2p_unmatched)} send/recv left unmatched.")
    return lines


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
    from .markdown import cell, table

    src = a.source
    lines = [f"## commscope: flight recorder, {len(src['ranks'])} dump(s) of {src['world_size']} ranks", ""]
    lines += [f"**{h}**" if i == 0 else h for i, h in enumerate(headline(a))] + [""]
    for title, cols, rows in (("Stuck groups (roots first)", STUCK_COLUMNS, stuck_rows(a)),
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
    from .hang_grid import grid_figure
    from .html import esc, html_table, page

    src = a.source
    parts = [f"<h1>commscope: flight recorder, {len(src['ranks'])} dump(s) of {esc(src['world_size'])} ranks</h1>"]
    parts.append('<div class="headline">' + "".join(f"<p>{esc(h)}</p>" for h in headline(a)) + "</div>")
    fig = grid_figure(a)
    parts.append(f'<div class="figure">{fig.to_html(full_html=False, include_plotlyjs=True)}</div>')
    for title, cols, rows in (("Stuck groups (roots first)", STUCK_COLUMNS, stuck_rows(a)),
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
