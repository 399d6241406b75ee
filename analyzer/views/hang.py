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


_PAST = {"all_reduce": "all_reduced", "all_gather": "all_gathered", "reduce_scatter": "reduce_scattered",
         "broadcast": "broadcast", "reduce": "reduced", "send": "sent", "recv": "received", "gather": "gathered",
         "scatter": "scattered"}


def did(op: str | None, what: str) -> str:
    """"all_reduce", "1 MiB" -> "all_reduced 1 MiB"; other ops -> "ran barrier (…)"."""
    return f"{_PAST[op]} {what}" if op in _PAST else f"ran {op or 'an unknown op'} ({what})"


def _size_dtype(n: int | None, dtype: str | None) -> str:
    return size_text(n, "an unknown size") + (f" {dtype}" if dtype else "")


def desync_sentence(h: dict) -> str:
    """The first collective whose members disagree, in one line: who did what where the others did what."""
    where = f"{h['op']} #{h['seq']} of {group_text(h)}"
    others = [r for r in h["group_ranks"] if r not in {m["rank"] for m in h["mismatched"]} and r not in h["no_dump"]
              and r not in h["missing"]]
    ref = did(h["op"], _size_dtype(h["bytes"], h["dtype"]))
    if h.get("shift"):
        sh = h["shift"][0]
        n = f"{sh['by']} collective{'s' if sh['by'] > 1 else ''}" if sh["by"] > 0 else None
        head = (f"rank {sh['rank']} skipped {h['op']} #{h['seq']} ({_size_dtype(h['bytes'], h['dtype'])}) of "
                f"{group_text(h)}: its #{sh['first']}-"
                f"#{sh['last']} ran against its peers' #{sh['first'] + sh['by']}-#{sh['last'] + sh['by']}"
                if n else f"rank {sh['rank']} ran {-sh['by']} extra collective(s) at {where}")
        m = h["mismatched"][0] if h["mismatched"] else None
        if m is not None and m["op"] != h["op"]:
            head += f" ({did(m['op'], _size_dtype(m['bytes'], m['dtype']))} where {ranks_text(others)} {ref})"
    else:
        parts = [f"{'rank ' + str(m['rank'])} {did(m['op'], _size_dtype(m['bytes'], m['dtype']))}"
                 for m in h["mismatched"][:3]]
        head = f"{' and '.join(parts)} where {ranks_text(others)} {ref}: {where}"
    at = h.get("hangs_at")
    if at:
        tail = (f"; the job hangs at {at['op']} #{at['seq']} of pg {at['group']}: {ranks_text(at['waiting'])} "
                f"wait{'s' if len(at['waiting']) == 1 else ''} since {clock_text(at['since_ns'])}"
                + (f", {ranks_text(at['missing'])} never entered it" if at["missing"] else ""))
    elif not h["waiting"] and not h["missing"]:
        tail = "; every member completed it (NCCL compares neither ops nor sizes: what followed ran on wrong data)"
    else:
        tail = f"; {ranks_text(h['waiting'])} wait{'s' if len(h['waiting']) == 1 else ''} in it"
    odd = [m["rank"] for m in h["mismatched"]]
    stack = next((s for r, s in h.get("stacks", {}).items() if int(r) in odd), None)
    return head + tail + (f"; rank {odd[0]}'s stack: {stack['user_frame'] or stack['frames'][0]}" if stack else "")


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
        for w in h.get("went_astray", [])[:3]:
            n = w["by"]
            clauses.append(
                f"rank {w['rank']} went astray at {w['op']} #{w['seq']} of pg {w['group']}: it ran it after #"
                f"{w['done_before']} of pg {h['group']}, where {ranks_text(w['peers'])} had run #{w['peers_done_before']}"
                + (f" (it skipped #{w['skipped_seq']}" + (f"-#{w['skipped_seq'] + n - 1}" if n > 1 else "") + ")"
                   if n > 0 else f" ({-n} extra)"))
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


def _also(h: dict) -> str:
    why = ""
    if h["blocked_by"]:
        b = h["blocked_by"][0]
        why = f", blocked by pg {b['group']} #{b['seq']}"
        if h.get("queued"):
            why += f" ({ranks_text(h['queued'])} queued it behind that)"
    elif h["root"]:
        why = " (another root)"
    who = ranks_text(h["waiting"]) + " wait" + ("s" if len(h["waiting"]) == 1 else "")
    return (f"Also stuck: {group_text(h)} {_op_text(h)}: {who}"
            + (f", {ranks_text(h['missing'])} not there" if h["missing"] else "") + why + ".")


def headline(a: HangAnalysis) -> list[str]:
    r = a.result
    h = r.hang
    if h is None:
        groups = r.groups.height
        lines = [f"No hang: every process group's latest collective completed on all its members, and no collective "
                 f"differs in op, size or dtype across them ({groups} groups, {a.source['entries']} entries)."]
        if r.mismatch_count:
            lines.append(f"{r.mismatch_count} collective(s) differ only in state or in who has entered them yet "
                         "(dumps taken moments apart): the mismatch table and the JSON report list them.")
    elif h.get("desync"):
        lines = [f"Desync: {desync_sentence(h)}."]
    else:
        lines = [f"Hang: {hang_sentence(h)}."]
    if h is not None:
        at = h.get("hangs_at") or {}
        also = [s for s in r.stuck if s is not h and (s["group"], s["seq"]) != (at.get("group"), at.get("seq"))]
        for s in also[:MAX_ALSO]:
            lines.append(_also(s))
        if len(also) > MAX_ALSO:
            lines.append(f"... and {len(also) - MAX_ALSO} more stuck groups (all in the JSON report).")
        wrong = [m for m in r.mismatches if m["kind"] in ("op", "size", "dtype")]
        extra = len(wrong) - (1 if any((m["gid"], m["seq"]) == (h["gid"], h["seq"]) for m in wrong) else 0)
        if extra > 0:
            lines.append(f"{extra} more collective(s) whose members ran different ops, sizes or dtypes: the "
                         "mismatch table and the JSON report list them.")
    if r.missing_dumps:
        lines.append(f"No dump from {ranks_text(list(r.missing_dumps))} (of {r.world_size}).")
    if r.p2p_unmatched:
        lines.append(f"{len(r.p2p_unmatched)} send/recv left unmatched.")
    return lines
