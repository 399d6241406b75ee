"""The text a person reads first on the What-if study's published traces names what the study found: the
slow worker's stage and DP replica on AR, the last stage on ST, no single rank on SE (expected values read
from the study's own published result files, not from commscope)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import analyzer
from analyzer.views.verdict import headline

WHATIF = Path(__file__).resolve().parent.parent / "sample_traces" / "whatif"


def _top(d: dict) -> str:
    return max(d, key=lambda k: d[k])


@pytest.mark.parametrize("name", ["AR", "SE", "ST"])
def test_headline_names_the_published_top_groups(name: str) -> None:
    folder = WHATIF / name
    published = json.loads((folder / f"result-{name}.json").read_text())
    said = " ".join(headline(analyzer.analyze(folder)))
    assert f"stage {_top(published['blocking_decompose_by_stage'])} (" in said
    assert f"DP replica {_top(published['blocking_decompose_by_dp_rank'])} (" in said
    assert f"op {_top(published['blocking_decompose_by_optype'])} (" in said
    assert f"S {published['blocking_slowdown']:.2f}x" in said
    if name == "ST":  # the study's cause: a long last stage
        meta = yaml.safe_load((folder / "meta-ST.yaml").read_text())
        assert _top(published["blocking_decompose_by_stage"]) == str(meta["pp_size"] - 1)
    if name == "SE":  # sequence-length imbalance: no single worker
        assert said.startswith("No single rank holds the job back")
