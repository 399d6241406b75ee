"""Which stuck group is the root, and the chain from it: follow each member's next pending collective across groups.

A rank runs its collectives in order: its oldest unfinished entry is where it is (``pending``); everything it
queued after that waits behind it. A stuck group is **blocked by** another when one of its members (waiting in it,
queued in it, or never there) is pending in that other stuck group: the rank stuck in a tp all_reduce is why its
dp peers wait, even when it has already queued its dp all_reduce (a real NCCL job enqueues without blocking, so
the dp group shows every member "in" it). The **root** is a group that cannot complete by itself: a member never
entered it (and is not pending elsewhere), entered something else, or left no dump; or, failing that, one that
nothing explains (every member waits in it: NCCL or the network). Roots come first: those that cannot complete by
themselves, the one most other hangs wait on first; then the unexplained; then the rest in chain order.
Pure: plain dicts in and out.
"""

from __future__ import annotations

import polars as pl


def link(stuck: list[dict], pending: dict[int, tuple[str, bool, int]]) -> list[dict]:
    """``stuck`` ordered roots first, each with ``blocked_by``, ``root``, ``cause``, ``explains``, ``depth``."""
    where = {(h["gid"], h["kind"] == "p2p", h["seq"]): i for i, h in enumerate(stuck)}
    edges: list[set[int]] = []
    free: list[list[int]] = []  # members that never entered and are not pending in another stuck group
    for i, h in enumerate(stuck):
        by = set()
        for r in (*h["waiting"], *h["missing"]):
            j = where.get(pending.get(r, (None, None, None)))
            if j is not None and j != i:
                by.add(j)
        edges.append(by)
        free.append([r for r in h["missing"] if where.get(pending.get(r, (None, None, None)), i) == i])
    for i, h in enumerate(stuck):
        h["alone"] = bool(h["mismatched"] or h["no_dump"] or free[i])
        h["root"] = h["alone"] or not edges[i]
        h["cause"] = ("mismatch" if h["mismatched"] else "never_entered" if free[i] else "no_dump" if h["no_dump"]
                      else "blocked" if edges[i] else "waiting")
    children: dict[int, list[int]] = {}
    for k, by in enumerate(edges):
        for j in by:
            children.setdefault(j, []).append(k)
    for i, h in enumerate(stuck):  # how many hangs wait on this one, directly or through others
        h["explains"] = _downstream(children, i)
    if stuck and not any(h["root"] for h in stuck):  # a cycle (deadlock): every hang waits on another
        for h in stuck:
            h["root"] = True
    depth = _depths(stuck, edges, children)
    order = sorted(range(len(stuck)), key=lambda i: (
        not stuck[i]["root"], not stuck[i]["alone"], depth[i], -stuck[i]["explains"],
        stuck[i]["since_ns"] if stuck[i]["since_ns"] is not None else 1 << 62, stuck[i]["group"], stuck[i]["seq"]))
    for i, h in enumerate(stuck):  # indexes -> readable references
        h["depth"] = depth[i]
        h["blocked_by"] = [{"group": stuck[j]["group"], "seq": stuck[j]["seq"], "op": stuck[j]["op"]}
                           for j in sorted(edges[i], key=lambda j: (stuck[j]["group"], stuck[j]["seq"]))]
        h["queued"] = [r for r in h.get("queued", []) if pending.get(r, (h["gid"],))[0] != h["gid"]]
    return [stuck[i] for i in order]


def _downstream(children: dict[int, list[int]], i: int) -> int:
    seen, todo = {i}, [i]
    while todo:
        for k in children.get(todo.pop(), []):
            if k not in seen:
                seen.add(k)
                todo.append(k)
    return len(seen) - 1


def _depths(stuck: list[dict], edges: list[set[int]], children: dict[int, list[int]]) -> list[int]:
    """Steps from the nearest root along blocked-by edges (roots 0; unreachable: after every reachable one)."""
    depth = [0 if h["root"] else -1 for h in stuck]
    todo = [i for i, d in enumerate(depth) if d == 0]
    while todo:
        nxt = []
        for i in todo:
            for k in children.get(i, []):
                if depth[k] < 0:
                    depth[k] = depth[i] + 1
                    nxt.append(k)
        todo = nxt
    far = max(depth, default=0) + 1
    return [d if d >= 0 else far for d in depth]


def last_entries(e: pl.DataFrame) -> tuple[dict[tuple[int, str], dict], dict[int, dict]]:
    """Each rank's last completed op per group, and its last op in any group (where it is now)."""
    cols = ("rank", "gid", "pg", "seq", "op", "in_bytes", "dtype", "done", "state", "completed_ns", "started_ns",
            "created_ns", "frames")
    ordered = e.sort("record_id").select(cols)

    def brief(r: dict) -> dict:
        return {"group": r["pg"], "seq": r["seq"], "op": r["op"], "bytes": r["in_bytes"], "dtype": r["dtype"],
                "state": "completed" if r["done"] else r["state"],
                "time_ns": r["completed_ns"] or r["started_ns"] or r["created_ns"],
                "frames": r["frames"].split("\n") if r["frames"] else []}
    done_in = {(r["rank"], r["gid"]): brief(r)
               for r in ordered.filter(pl.col("done")).group_by("rank", "gid").last().iter_rows(named=True)}
    latest = {r["rank"]: brief(r) for r in ordered.group_by("rank").last().iter_rows(named=True)}
    return done_in, latest


def stacks(e: pl.DataFrame, h: dict, latest: dict[int, dict]) -> dict[str, dict]:
    """Stacks of the ranks that hold the hang up (their latest op; a mismatched rank's entry there), and of the
    first waiting rank (its wait)."""
    out: dict[str, dict] = {}
    for r in h["missing"]:
        entry = latest.get(r)
        if entry and entry["frames"]:
            out[str(r)] = {"op": entry["op"], "seq": entry["seq"], "group": entry["group"],
                           "frames": entry["frames"], "user_frame": user_frame(entry["frames"])}
    for r in [*(m["rank"] for m in h["mismatched"]), *h["waiting"][:1]]:
        if str(r) in out:
            continue
        row = e.filter((pl.col("rank") == r) & (pl.col("gid") == h["gid"]) & (pl.col("seq") == h["seq"]))
        if row.height and row["frames"][0]:
            frames = row["frames"][0].split("\n")
            out[str(r)] = {"op": row["op"][0], "seq": h["seq"], "group": h["pg"], "frames": frames,
                           "user_frame": user_frame(frames)}
    return out


def user_frame(frames: list[str]) -> str | None:
    """The innermost frame outside torch and the Python runtime: the user's line that called the op."""
    for f in frames:
        low = f.replace("\\", "/")
        if "/torch/" not in low and "/multiprocessing/" not in low and "<string>" not in low \
                and "/threading.py" not in low and "/runpy.py" not in low:
            return f
    return frames[0] if frames else None


__all__ = ["last_entries", "link", "stacks", "user_frame"]
