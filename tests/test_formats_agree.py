"""The same workload written as Kineto and as Nsight SQLite gives identical metrics (one pipeline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sample_traces.generate import Scenario, build, write_kineto
from sample_traces.nsys_writer import kineto_to_nsys
from tests.conftest import shared
from tests.helpers import report

KEYS = ("compute_ms", "comm_ms", "overlapped_comm_ms", "exposed_comm_ms", "idle_ms", "span_ms")


def test_kineto_and_nsys_give_identical_overlap(tmp_path: Path) -> None:
    kdir = tmp_path / "kineto"
    files = write_kineto(build(Scenario(ranks=2, steps=3, late_ranks={1: (300_000, "host")})), kdir)
    ndir = tmp_path / "nsys"
    kineto_to_nsys(files, ndir, single_report=False)
    k, n = report(kdir), report(ndir)
    assert n["source"]["format"] == "nsys" and k["source"]["format"] == "kineto"
    assert [r["rank"] for r in k["ranks"]] == [r["rank"] for r in n["ranks"]]
    for rk, rn in zip(k["ranks"], n["ranks"]):
        for key in KEYS:
            assert rn[key] == pytest.approx(rk[key], abs=1e-6), key
    assert [(s["rank"], s["step"]) for s in k["steps"]] == [(s["rank"], s["step"]) for s in n["steps"]]
    for sk, sn in zip(k["steps"], n["steps"]):
        assert sn["exposed_comm_ms"] == pytest.approx(sk["exposed_comm_ms"], abs=1e-6)


def test_nsys_answer_key_through_analyze() -> None:
    rep = report(shared("nsys", "mfu_2gpu_before.sqlite"))
    exposed = [r["exposed_comm_ms"] for r in rep["ranks"]]
    assert exposed == pytest.approx([17.173, 8.229], abs=0.0005)
    assert [r["overlapped_comm_ms"] for r in rep["ranks"]] == [0.0, 0.0]
