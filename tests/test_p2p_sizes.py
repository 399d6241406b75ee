"""Batched send/recv (``batch_isend_irecv``) take their sizes from the records before the batch's kernel.

The real pipelines (sample_traces/real_parallel/pp*_1f1b_*, made by sample_traces/capture_parallel.py) send one
(256, 1024) float32 tensor per micro-batch and direction: a forward activation to the next stage, a gradient to
the previous one. So every transfer is exactly 1 MiB, and per step and pipeline 2 x M x (S - 1) tensors cross
the stage boundaries, at boundary s in M + min(S - s - 1, M) batches (1F1B's warm-up sends and cool-down
receives go alone, the steady state pairs a send with a receive).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.helpers import run

REAL = Path(__file__).resolve().parents[1] / "sample_traces" / "real_parallel"
SETS = sorted(p.name for p in REAL.iterdir() if p.is_dir() and p.name.startswith(("pp_1f1b", "pp4_1f1b")))
TENSOR_BYTES = 256 * 1024 * 4  # capture_parallel._pipeline: (mb, dim) = (256, 1024) float32


@pytest.mark.parametrize("name", SETS)
def test_pipeline_p2p_bytes_are_the_tensors_sent(name: str) -> None:
    truth = json.loads((REAL / name / "ground_truth.json").read_text())
    S, M, steps = truth["stages"], truth["microbatches"], truth["profiled_steps"]
    pipelines = truth["world_size"] // S
    a = run(REAL / name)
    p2p = a.collectives.filter(pl.col("op") == "send_recv")
    # every instance moved one tensor each way it went, and its bandwidth is reported
    assert p2p.height == steps * pipelines * sum(M + min(S - s - 1, M) for s in range(S - 1))
    assert p2p["bytes"].to_list() == [TENSOR_BYTES] * p2p.height
    assert p2p["busbw_gbps"].null_count() == 0 and (p2p["busbw_gbps"] > 0).all()
    assert (p2p["busbw_gbps"] == p2p["algbw_gbps"]).all()  # p2p: bus factor 1
    # each kernel: the bytes its batch's send records carry (in) and its recv records (out)
    k = a.traces.collectives.filter(pl.col("op") == "send_recv")
    assert set(k["in_bytes"].to_list()) <= {0, TENSOR_BYTES} and set(k["out_bytes"].to_list()) <= {0, TENSOR_BYTES}
    assert set(k["dtype"].to_list()) == {"Float"}
    per_step = 2 * M * (S - 1) * pipelines * TENSOR_BYTES
    in_steps = k.filter(pl.col("step").is_not_null())
    assert in_steps["in_bytes"].sum() == in_steps["out_bytes"].sum() == steps * per_step
    row = a.bandwidth.filter(pl.col("op") == "send_recv")
    assert row.height == 1 and row["size_bucket"][0] == TENSOR_BYTES and row["busbw_gbps_p50"][0] is not None
