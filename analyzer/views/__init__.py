"""The shared views: what every presenter shows the same way, read from one ``Analysis``.

The text, Markdown, HTML and JSON reports (``analyzer/report``), the Perfetto export (``analyzer/export``)
and the Dash dashboards (``dashboards/``) import these and never one another; this package imports no
presenter. One module per view:

- ``verdict``: the headline (the verdict's lead lines) and the straggler chain's words;
  ``counterfactual``: S, its attribution and M_W / M_S as JSON records and sentences;
- ``whatif``: the critical path per step, the replay and its scenarios (JSON-shaped), the lead sentence;
- ``dimensions``: one row per parallelism dimension, and its columns; ``inspector``: NCCL Inspector tables;
- ``hang`` / ``hang_grid``: the hang triage's answer and its group x seq grid;
- ``figures`` (with ``summary`` for many ranks, ``timeline`` downsampling, ``axis`` ranges): the plotly
  figures both the dashboard and the HTML report draw; ``trend``: a metric over stored runs;
- ``selection``: what part of a run to export and the ``commscope export`` command for it;
- ``units``: ms at the edge (``Analysis`` holds ns) and ``num``, a number in a table cell.

Import the module you need (``from analyzer.views.verdict import headline``); the names below are the
light ones (no plotly) for callers that want one door.
"""

from __future__ import annotations

from .dimensions import COLUMNS as DIMENSION_COLUMNS
from .dimensions import summary as dimension_summary
from .hang import headline as hang_headline
from .hang import ranks_text
from .units import ms, ms_frame, ms_tables, num
from .verdict import chain_text, headline
from .whatif import critical_path_records, whatif_dict
from .whatif import sentence as whatif_sentence

__all__ = [
    "DIMENSION_COLUMNS", "chain_text", "critical_path_records", "dimension_summary", "hang_headline", "headline",
    "ms", "ms_frame", "ms_tables", "num", "ranks_text", "whatif_dict", "whatif_sentence",
]
