"""The JSON contract is declared once (``analyzer/report/schema.py``) and real reports keep to it.

Reports of real and generated inputs that together fill every section (a pipeline with dimensions and a
verdict, experts, op tables with the study's block, NCCL Inspector logs, Flight Recorder hangs including a
mismatch, an unmatched send, a missing dump, and a skipped rank) are validated against the schema with
``jsonschema``: a key a writer adds without declaring it fails (every object is closed), and so does a declared
key that none of them writes (the schema would document a field that does not exist).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import analyzer
from analyzer.report import hang_json
from analyzer.report import json as report_json
from analyzer.report.schema import ANALYSIS, SCHEMA_ID
from sample_traces import flight_recorder_nccl

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
VALIDATOR = jsonschema.Draft202012Validator(ANALYSIS)


def _gen(module: str, out: Path, *args: str) -> Path:
    subprocess.run([sys.executable, "-m", f"sample_traces.{module}", str(out), *args], cwd=ROOT, check=True,
                   capture_output=True)
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("schema")
    # a folder with one broken rank: it is skipped and named in source.skipped
    broken = tmp / "broken"
    shutil.copytree(SAMPLES / "gpu_h200" / "hybrid_tp_dp", broken)
    (broken / "rank3.json").write_text("{")
    traces = {
        "hybrid_tp_dp": [SAMPLES / "gpu_h200" / "hybrid_tp_dp"],
        "moe_a2a_slow": [SAMPLES / "real_parallel" / "moe_a2a_slow"],
        "optable": [_gen("optable_gen", tmp / "optable", "--dp", "2", "--pp", "2", "--microbatches", "4",
                         "--steps", "3", "--slow-worker", "1:1:1.5")],
        "inspector": [SAMPLES / "nccl_inspector"],
        "broken": [broken],
    }
    out = {name: report_json.to_dict(analyzer.analyze(*paths, jobs=1)) for name, paths in traces.items()}
    hangs = {
        "fr_skip": SAMPLES / "flight_recorder" / "skip" / "pickle",
        "fr_wrong_op": SAMPLES / "flight_recorder" / "wrong_op" / "pickle",
        "fr_p2p": _gen("flight_recorder_gen", tmp / "p2p", "--ranks", "8", "--scenario", "p2p"),
        "fr_missing": _gen("flight_recorder_gen", tmp / "missing", "--ranks", "8", "--scenario", "missing_dump"),
    }
    hangs["fr_nccl_never_joined"] = SAMPLES / "flight_recorder_nccl" / "fr_never_joined"  # a desync's shift
    for scenario in ("skipped_tp", "wrong_op_tp", "wrong_size_tp"):  # NCCL's layout, a 2-D mesh (issue #40)
        flight_recorder_nccl.write(flight_recorder_nccl.Mesh2D(scenario), tmp / scenario)
        hangs[f"fr_nccl_{scenario}"] = tmp / scenario
    out.update({name: hang_json.to_dict(analyzer.triage(path)) for name, path in hangs.items()})
    return out


def test_every_report_keeps_to_the_schema(reports: dict[str, dict]) -> None:
    for name, doc in reports.items():
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in VALIDATOR.iter_errors(doc)]
        assert not errors, f"{name}: {errors[:10]}"
        assert doc["schema"] == SCHEMA_ID


def _declared(node: dict, path: str = "") -> set[str]:
    """Every key path the schema declares (``[]`` for list items, ``*`` for mapping values)."""
    out: set[str] = set()
    if "properties" in node:
        for k, v in node["properties"].items():
            out.add(f"{path}.{k}")
            out |= _declared(v, f"{path}.{k}")
    if isinstance(node.get("items"), dict):
        out |= _declared(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out |= _declared(node["additionalProperties"], f"{path}.*")
    return out


def _written(value: object, path: str = "", mapping: bool = False) -> set[str]:
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            key = f"{path}.*" if mapping else f"{path}.{k}"
            out.add(key)
            # objects keyed by data: ranks, group keys, counters
            out |= _written(v, key, mapping=key.endswith((".offsets_us", ".last_completed", ".stacks", ".last_entry",
                                                           ".counts", ".by_rank", ".by_stage", ".by_dp_replica",
                                                           ".by_dimension", ".by_op")))
    elif isinstance(value, list):
        for v in value:
            out |= _written(v, f"{path}[]")
    return out


def test_every_declared_field_is_written(reports: dict[str, dict]) -> None:
    written = set().union(*(_written(doc) for doc in reports.values()))
    # the root hang is blocked by nothing by definition; the stuck groups (the same shape) show blocked_by
    written |= {p.replace(".flight_recorder.stuck[]", ".hang", 1) for p in written if ".flight_recorder.stuck[]" in p}
    # and a desync's answer (its shift, where the job then hangs) is the root's alone: the stuck groups share its shape
    written |= {p.replace(".hang", ".flight_recorder.stuck[]", 1) for p in written if p.startswith(".hang.")}
    missing = sorted(_declared(ANALYSIS) - written)
    assert not missing, f"declared in analyzer/report/schema.py but written by no report: {missing}"


def test_the_schema_is_closed(reports: dict[str, dict]) -> None:
    # the check above is only as good as additionalProperties: a planted key must fail, at the top and in a record
    doc = dict(reports["hybrid_tp_dp"])
    assert not VALIDATOR.is_valid({**doc, "new_field": 1})
    ranks = [dict(r) for r in doc["ranks"]]
    ranks[0]["new_ms"] = 1.0
    assert not VALIDATOR.is_valid({**doc, "ranks": ranks})
    assert not VALIDATOR.is_valid({**doc, "clock": {**doc["clock"], "method": "guess"}})
