"""Static, self-contained HTML comparison (tables only: no scripts, nothing fetched)."""

from __future__ import annotations

from ..compare.diff import Comparison, Delta
from .compare_text import change, confidence, label, run_line, status, straggler_lines, summary, value
from .html import esc, html_table, page

HEADERS = ["metric", "scope", "base", "new", "delta", "confidence", "threshold", "status"]


def _table(deltas: tuple[Delta, ...]) -> str:
    rows = [[label(d), d.scope, value(d.before, d.unit), value(d.after, d.unit), change(d),
             confidence(d), d.rule.spec() if d.rule else "–", status(d)] for d in deltas]
    return html_table(HEADERS, rows, ["bad" if d.regressed else "" for d in deltas])


def render(c: Comparison) -> str:
    verdict = "good" if c.passed else "bad"
    parts = ["<h1>commscope compare</h1>", f'<p class="headline {verdict}">{esc(summary(c))}</p>',
             f"<p>base: {esc(run_line(c.base))}<br>new: {esc(run_line(c.new))}</p>"]
    parts += [f"<p>{esc(line)}</p>" for line in straggler_lines(c.straggler)]
    if c.regressions:
        parts += ["<h2>Regressions</h2>", _table(c.regressions)]
    parts += ["<h2>Overall</h2>", '<p class="muted">Median over steps of the per-step mean across ranks.</p>',
              _table(c.overall)]
    if c.per_rank:
        parts += ["<h2>Per rank</h2>", _table(c.per_rank)]
    if c.bandwidth:
        parts += ["<h2>Bus bandwidth per operation and size</h2>", _table(c.bandwidth)]
    if c.dimensions:
        parts += ["<h2>Per parallelism dimension</h2>", '<p class="muted">Median over ranks of the per-step value.</p>',
                  _table(c.dimensions)]
    if c.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f'<li class="warn">{esc(n)}</li>' for n in c.notes) + "</ul>")
    return page("commscope compare", "\n".join(parts))
