"""The hang triage's answer in words (Flight Recorder input): the headline that text, Markdown, HTML and the
dashboard all print, and the phrases it is built of (ranks, groups, ops, wall-clock times).

Formatting only: every fact comes from ``HangAnalysis``.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ..hangs.analysis import HangAnalysis
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
