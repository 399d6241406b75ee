"""Presenting the critical path and the what-if replay (JSON records, the lead sentence, text lines)."""

from __future__ import annotations

import polars as pl

from ..analysis import Analysis
from ..metrics.critical_path import step_summary
from ..rules import NS_PER_MS
from .units import duration

_CP_FIELDS = ("compute", "exposed_transfer", "wait", "host_idle")


def critical_path_records(a: Analysis) -> list[dict]:
    cp = a.critical_path
    if cp is None or cp.height == 0:
        return []
    return cp.select("step", "rank", *[(pl.col(f"{f}_ns") / NS_PER_MS).alias(f"{f}_ms") for f in _CP_FIELDS]).to_dicts()


def whatif_dict(a: Analysis) -> dict | None:
    w = a.whatif
    if w is None:
        return None
    return {
        "replay_step_time_ms": w.replay_step_time_ns / NS_PER_MS,
        "measured_step_time_ms": w.measured_step_time_ns / NS_PER_MS,
        "replay_error_pct": w.replay_error_pct,
        "ideal_speedup": w.ideal_speedup,
        "scenarios": w.scenarios.select(
            "name", *[(pl.col(c) / NS_PER_MS).alias(c.replace("_ns", "_ms")) for c in ("step_time_ns", "saving_ns")],
            "saving_pct").to_dicts(),
        "ranks": w.ranks.select("rank", (pl.col("saving_ns") / NS_PER_MS).alias("saving_ms"), "saving_pct").to_dicts(),
        "ranks_replayed": w.ranks_replayed,
        "rank_steps": w.rank_steps.sort("rank", "step").select(
            "rank", "step", (pl.col("saving_ns") / NS_PER_MS).alias("saving_ms")).to_dicts(),
        "replay_steps": w.errors.sort("rank", "step").select(
            "rank", "step", (pl.col("measured_ns") / NS_PER_MS).alias("measured_ms"),
            (pl.col("replay_ns") / NS_PER_MS).alias("replay_ms"), "error_pct").to_dicts(),
    }


def _phrase(name: str, a: Analysis) -> str:
    if name == "no_straggler":
        return f"fixing the straggler (rank {a.verdict.rank})" if a.verdict else "fixing the straggler"
    if name.startswith("rank:"):
        return f"making rank {name[5:]} ideal"
    if name == "no_exposed_comm":
        return "hiding all exposed communication"
    if name.startswith("no_exposed_comm:"):
        return f"hiding the {name.split(':', 1)[1]} communication"
    if name == "balanced_experts":
        return "balancing the experts' tokens"
    if name.startswith("busbw:"):
        op, _, gbps = name[6:].partition("=")
        return f"{'every collective' if op == 'all' else op} at {gbps} GB/s bus bandwidth"
    return "an ideal run (every operation at its typical time)"


def sentence(a: Analysis) -> str | None:
    """The largest savings, largest first, in one sentence."""
    w = a.whatif
    if w is None or w.scenarios.height == 0:
        return None
    rows = [(r["name"], r["saving_ns"], r["saving_pct"]) for r in w.scenarios.to_dicts() if r["name"] != "ideal"]
    top_rank = w.ranks.head(1).to_dicts()
    if top_rank and not any(n == "no_straggler" for n, _, _ in rows):
        rows.append((f"rank:{top_rank[0]['rank']}", top_rank[0]["saving_ns"], top_rank[0]["saving_pct"]))
    # a saving that rounds to nothing has nothing to say
    rows = [r for r in sorted(rows, key=lambda r: -(r[1] or 0.0)) if (r[1] or 0.0) >= 0.05 * NS_PER_MS][:3]
    if not rows and not w.ideal_speedup:
        return None
    parts = []
    for i, (name, saving, pct) in enumerate(rows):
        amount = f"{duration(max(saving, 0.0) / NS_PER_MS)} ({max(pct or 0.0, 0.0):.0f}%)"
        parts.append(f"{_phrase(name, a)} would shorten the step by {amount}" if i == 0
                     else f"{_phrase(name, a)}, by {amount}")
    text = "What if: " + "; ".join(parts)
    if w.ideal_speedup:
        text += f"{'; ' if parts else ''}the ideal run is {w.ideal_speedup:.2f}x faster"
    # what every figure above rests on: how close the replay of the measured run came to it
    return text + (f" (the replay of the measured run is {w.replay_error_pct:.1f}% off its "
                   f"{duration(w.measured_step_time_ns / NS_PER_MS)} step).")


def text_lines(a: Analysis) -> list[str]:
    """A line per step of the critical path, then the scenarios and the replay's accuracy."""
    lines = []
    cp = a.critical_path
    if cp is not None and cp.height:
        for r in step_summary(cp).to_dicts():
            total = r["path_ns"] or 1.0
            split = ", ".join(f"{label} {r[f'{f}_ns'] / NS_PER_MS:,.1f} ms ({100 * r[f'{f}_ns'] / total:.0f}%)"
                              for f, label in zip(_CP_FIELDS, ("compute", "exposed transfer", "wait", "host/idle")))
            lines.append(f"Critical path, step {r['step']}: {total / NS_PER_MS:,.1f} ms over {r['ranks']} rank(s), "
                         f"mostly rank {r['top_rank']}: {split}.")
    w = a.whatif
    if w is not None:
        lines.append(f"Replay: {w.replay_step_time_ns / NS_PER_MS:,.2f} ms per step against "
                     f"{w.measured_step_time_ns / NS_PER_MS:,.2f} ms measured ({w.replay_error_pct:.1f}% off).")
        for r in w.scenarios.to_dicts():
            lines.append(f"  {r['name']}: {r['step_time_ns'] / NS_PER_MS:,.2f} ms per step, saves "
                         f"{r['saving_ns'] / NS_PER_MS:,.2f} ms ({r['saving_pct'] or 0.0:.1f}%)")
        top = ", ".join(f"{r['rank']}: {r['saving_ns'] / NS_PER_MS:,.2f} ms" for r in w.ranks.head(5).to_dicts())
        if top:
            lines.append(f"  making one rank ideal (the {w.ranks_replayed} with most to gain): {top}")
    return lines
