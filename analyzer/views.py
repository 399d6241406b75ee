"""The one module of views that every presenter shares: what the text, Markdown, HTML and JSON reports,
the Perfetto export's metadata and the Dash dashboards all show the same way.

- headline sentences: the verdict's lead lines, the straggler chain, the hang triage's answer;
- what-if records: the critical path per step, the replay and its scenarios (JSON-shaped), the lead sentence;
- the dimension summary: one row per parallelism dimension, and its columns;
- figures both the HTML reports and the dashboards draw: the hang grid, a run-history trend.

Presenters outside ``analyzer/report`` (``dashboards/``, ``analyzer/export``) import these from here and
never from another presenter module. The definitions still sit in the report modules they grew in
(``verdict``, ``whatif``, ``dimensions``, ``hang``, ``hang_grid``, ``trend_*``), which the counterfactual,
replay and Inspector work edit in parallel; this module is their one public door, so moving a
definition here later changes no importer.
"""

from __future__ import annotations

from .report.dimensions import COLUMNS as DIMENSION_COLUMNS
from .report.dimensions import summary as dimension_summary
from .report.hang import headline as hang_headline
from .report.hang import ranks_text
from .report.hang_grid import grid_cells, grid_figure
from .report.trend_html import figure as trend_figure
from .report.trend_text import num
from .report.verdict import chain_text, headline
from .report.whatif import critical_path_records, whatif_dict
from .report.whatif import sentence as whatif_sentence

__all__ = [
    "DIMENSION_COLUMNS", "chain_text", "critical_path_records", "dimension_summary", "grid_cells", "grid_figure",
    "hang_headline", "headline", "num", "ranks_text", "trend_figure", "whatif_dict", "whatif_sentence",
]
