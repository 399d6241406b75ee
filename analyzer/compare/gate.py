"""Can two runs be compared at all? (pure: two Analyses -> the reasons they cannot, none when they can.)

A gate that compares a run missing a rank, or a different job, answers PASS or a list of "regressions" that
mean nothing. ``compare`` refuses (exit 2) when any reason below holds, unless the user allows the mismatch:
- a run skipped an input (``source.skipped``) or analyzed fewer ranks than its declared world size
  (ranks left out on purpose with ``--ranks`` do not count);
- the runs differ in world size (analyzed ranks, or the declared size where both declare one);
- the runs differ in layout: their process groups as (dimension, member ranks), so a TP 2 x DP 4 job is not
  compared with a TP 4 x DP 2 one;
- their step counts (the median over ranks) differ by more than ``STEP_COUNT_TOLERANCE_PCT`` of the larger,
  or one run has step windows and the other none: the samples would not measure the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

import polars as pl

from ..analysis import Analysis
from ..ranklist import compact

STEP_COUNT_TOLERANCE_PCT = 50.0  # 4 steps against 8 still compares; 2 against 8 does not
MISSING_LISTED = 64  # missing ranks named in the message; the rest counted
LAYOUT_STORED = "layout_stored"  # source key of a stored run (history/stored.py): False where it has no layout


def _compact(ranks: Iterable[int]) -> str:
    return compact(sorted(ranks))


def _declared(a: Analysis) -> int | None:
    """The world size the traces declare (``source.world_size`` is what was analyzed; a summary stored by an
    older run history has only that)."""
    return a.source.get("declared_world_size") or a.source.get("world_size")


def _incomplete(label: str, a: Analysis, selected: tuple[int, ...] | None) -> list[str]:
    out: list[str] = []
    skipped = a.source.get("skipped") or []
    if skipped:
        first = skipped[0]
        more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
        out.append(f"{label} skipped {len(skipped)} input(s): {first['path']}: {first['reason']}{more}")
    declared = _declared(a)
    analyzed = set(a.source.get("ranks") or [])
    if declared and not skipped:  # a skipped file already explains its missing rank
        # counted and listed lazily: a declared world of 3 billion must not become a set of 3 billion
        n = int(declared)
        wanted = range(n) if selected is None else sorted({r for r in selected if 0 <= r < n})
        n_missing = len(wanted) - len({r for r in analyzed if 0 <= r < n and (selected is None or r in selected)})
        if n_missing > 0:
            first = list(islice((r for r in wanted if r not in analyzed), MISSING_LISTED))
            more = f" and {n_missing - len(first):,} more" if n_missing > len(first) else ""
            out.append(f"{label} analyzed {len(analyzed)} of {declared} declared ranks (missing rank(s) "
                       f"{_compact(first)}{more})")
    return out


def _layout(a: Analysis) -> set[tuple[str, tuple[int, ...]]]:
    g = a.process_groups
    if g is None or g.height == 0:
        return set()
    return {(str(d), tuple(sorted(int(r) for r in rs))) for d, rs in g.select("dimension", "ranks").iter_rows()}


def _layout_text(groups: set[tuple[str, tuple[int, ...]]]) -> str:
    sizes: dict[str, set[int]] = {}
    for d, rs in groups:
        sizes.setdefault(d, set()).add(len(rs))
    return ", ".join(f"{d} {'/'.join(str(s) for s in sorted(v))}" for d, v in sorted(sizes.items())) or "none"


def _step_count(a: Analysis) -> int:
    if a.steps.height == 0:
        return 0
    return int(a.steps.group_by("rank").agg(pl.len().alias("n"))["n"].median())


def mismatches(base: Analysis, new: Analysis, selected: tuple[int, ...] | None = None,
               step_tolerance_pct: float = STEP_COUNT_TOLERANCE_PCT) -> list[str]:
    """Every reason BASE and NEW cannot be compared, most basic first; empty when they can."""
    out = _incomplete("BASE", base, selected) + _incomplete("NEW", new, selected)
    nb, nn = len(base.source.get("ranks") or []), len(new.source.get("ranks") or [])
    wb, wn = _declared(base), _declared(new)
    if nb != nn:
        out.append(f"the runs have different world sizes: BASE {nb} ranks, NEW {nn} ranks")
    elif wb and wn and wb != wn:
        out.append(f"the runs declare different world sizes: BASE {wb}, NEW {wn}")
    for label, a in (("BASE", base), ("NEW", new)):
        if a.source.get(LAYOUT_STORED) is False:
            out.append(f"{label} is a run stored by an older commscope without its process groups, so its layout "
                       "cannot be checked (add the run to the history again and point the baseline at it)")
    lb, ln = _layout(base), _layout(new)
    if nb == nn and lb and ln and lb != ln:
        out.append(f"the runs have different layouts: BASE process groups {_layout_text(lb)}, NEW "
                   f"{_layout_text(ln)} ({len(lb ^ ln)} group(s) in one run only)")
    sb, sn = _step_count(base), _step_count(new)
    if (sb == 0) != (sn == 0):
        out.append(f"one run has step windows and the other none: BASE {sb} steps, NEW {sn} steps")
    elif sb and sn and abs(sb - sn) > step_tolerance_pct / 100.0 * max(sb, sn):
        out.append(f"the runs' step counts differ by more than {step_tolerance_pct:g}%: BASE {sb} steps, "
                   f"NEW {sn} steps")
    return out
