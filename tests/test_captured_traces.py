"""Real 4-rank H200 captures shipped in sample_traces/ with known injected stragglers (ground_truth.json).

compute_straggler and host_straggler were captured with sample_traces/capture_torch.py after the
analysis was written, so they check the straggler verdict on traces it was not tuned on.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import SAMPLES
from tests.helpers import report

H200 = SAMPLES / "gpu_h200"


@pytest.mark.parametrize("folder", ["hybrid_tp_dp", "compute_straggler", "host_straggler", "ddp_balanced",
                                    "fsdp_balanced"])
def test_verdict_matches_ground_truth(folder: str) -> None:
    truth = json.loads((H200 / folder / "ground_truth.json").read_text())
    rep = report(H200 / folder)
    v = rep["stragglers"]["verdict"]
    if truth["straggler_rank"] is None:
        assert v is None
        return
    assert v is not None and v["rank"] == truth["straggler_rank"] and v["chronic"]
    want = truth["straggler_kind"] if truth["straggler_kind"] in ("host", "compute") else "host"  # cpu_sleep_* is host
    assert v["kind"] == want


def test_host_straggler_idle_matches_the_injected_sleep() -> None:
    truth = json.loads((H200 / "host_straggler" / "ground_truth.json").read_text())
    v = report(H200 / "host_straggler")["stragglers"]["verdict"]
    per_step = v["idle_before_ms"] / v["steps_last"]
    # the rank slept delay_ms on the CPU before each step; its GPU idles at least that long, plus launch latency
    assert truth["delay_ms"] <= per_step <= 2 * truth["delay_ms"]


def test_compute_straggler_extra_compute_is_visible() -> None:
    rep = report(H200 / "compute_straggler")
    compute = {r["rank"]: r["compute_ms"] for r in rep["ranks"]}
    others = sorted(c for r, c in compute.items() if r != 2)
    assert compute[2] > 5 * others[len(others) // 2]
    assert rep["stragglers"]["verdict"]["compute_before_ms"] == pytest.approx(compute[2] - others[1], rel=0.01)
