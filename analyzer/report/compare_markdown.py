"""Markdown comparison for a pull-request comment: verdict, regressions, overall table, straggler change."""

from __future__ import annotations

from ..compare.diff import Comparison, Delta
from .compare_text import change, confidence, label, run_line, status, straggler_lines, summary, value
from .md import table


def _rows(deltas: tuple[Delta, ...]) -> list[list[str]]:
    return [[label(d), d.scope, value(d.before, d.unit), value(d.after, d.unit), change(d),
             confidence(d), d.rule.spec() if d.rule else "–", ("**" + status(d) + "**") if d.regressed else status(d)]
            for d in deltas]


HEADERS = ["metric", "scope", "base", "new", "delta", "confidence", "threshold", "status"]


def render(c: Comparison) -> str:
    icon = ":white_check_mark:" if c.passed else ":x:"
    lines = [f"## commscope compare {icon}", "", f"**{summary(c)}**", "",
             f"- base: {run_line(c.base)}", f"- new: {run_line(c.new)}", ""]
    lines += straggler_lines(c.straggler) + [""]
    if c.regressions:
        lines += ["### Regressions", ""] + table(HEADERS, _rows(c.regressions)) + [""]
    lines += ["### Overall", "", "_Median over steps of the per-step mean across ranks._", ""]
    lines += table(HEADERS, _rows(c.overall)) + [""]
    if c.per_rank:
        lines += ["<details><summary>Per rank</summary>", ""] + table(HEADERS, _rows(c.per_rank))
        lines += ["", "</details>", ""]
    if c.bandwidth:
        lines += ["<details><summary>Bus bandwidth per operation and size</summary>", ""]
        lines += table(HEADERS, _rows(c.bandwidth)) + ["", "</details>", ""]
    if c.dimensions:
        lines += ["### Per parallelism dimension", "", "_Median over ranks of the per-step value._", ""]
        lines += table(HEADERS, _rows(c.dimensions)) + [""]
    if c.notes:
        lines += [f"> {n}" for n in c.notes] + [""]
    return "\n".join(lines).rstrip() + "\n"
