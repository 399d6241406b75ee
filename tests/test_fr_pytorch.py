"""Commscope's hang triage reports everything PyTorch's own Flight Recorder analyzer finds (issue #40).

PyTorch's analyzer (``tests/fr_pytorch.py``: ``fr_trace``'s database builder, fed by commscope's restricted loader)
runs on every real NCCL dump (``sample_traces/flight_recorder_nccl/``, copies of ``../shared/traces/nccl_real``), on
the held-out 2-D DeviceMesh dumps (``sample_traces/flight_recorder_nccl.py``) and on the generated NCCL-format dumps;
each collective it flags must be in commscope's report (``flight_recorder.mismatches``) with the same kind, the same
missing ranks, and the same culprit, up to PyTorch's reference: it compares every entry with its first rank's, so
when that rank is the odd one it names every other member instead.

torch is not a commscope dependency: ``.ci/run`` installs the CPU wheel ``torch==2.13.0`` where the machine has
it (``/opt/wheels``); without torch these tests skip and say so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer import triage
from sample_traces import flight_recorder_gen, flight_recorder_nccl
from tests import fr_pytorch
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not fr_pytorch.available(), reason="PyTorch is absent (pip install torch==2.13.0, "
                                "the CPU wheel): its Flight Recorder analyzer is this test's oracle")

SHARED_DUMPS = ("fr_never_joined", "fr_size_mismatch")


def assert_covers(folder: Path) -> tuple[int, int]:
    """Every finding of PyTorch's analyzer is in commscope's report; (PyTorch's count, commscope's)."""
    pt = fr_pytorch.findings(folder)
    a = triage(folder)
    ours: dict[tuple[str, int], list[dict]] = {}
    for m in a.result.mismatches:
        ours.setdefault((m["pg"], m["seq"]), []).append(m)
    assert a.result.mismatch_count == len(a.result.mismatches)  # nothing capped in these dumps
    for f in pt:
        recs = ours.get((f.pg, f.seq))
        assert recs, f"PyTorch flags {f.op} #{f.seq} of pg {f.pg}; commscope does not"
        r = recs[0]
        if f.missing:
            assert set(r["missing"]) == set(f.missing), (f, r)
        if f.culprits:
            assert set(f.culprits.values()) <= set(r["kinds"]), (f, r)
            odd = {e["rank"] for e in r["entries"]}
            entered = set(r["reference_ranks"]) | odd
            for rank in f.culprits:
                # the same odd rank, or PyTorch's reference is commscope's odd one (and it names everyone else)
                assert rank in odd or (odd and odd.isdisjoint(f.culprits) and odd | set(f.culprits) == entered), \
                    (f, r)
    return len(pt), len(a.result.mismatches)


@pytest.mark.parametrize("name", SHARED_DUMPS)
def test_every_shared_dump(name: str) -> None:
    folder = ROOT / "sample_traces" / "flight_recorder_nccl" / name  # copies of ../shared/traces/nccl_real
    n_pt, n_ours = assert_covers(folder)
    assert n_pt >= 1 and n_ours >= n_pt  # both dumps hold a desync: PyTorch finds it, so must commscope


@pytest.mark.parametrize("scenario", flight_recorder_nccl.SCENARIOS)
@pytest.mark.parametrize("shape", [(2, 4, 5, 2), (4, 2, 2, 1), (2, 8, 3, 3)])
def test_held_out_2d_mesh(tmp_path: Path, scenario: str, shape: tuple[int, int, int, int]) -> None:
    dp, tp, culprit, at = shape
    flight_recorder_nccl.write(flight_recorder_nccl.Mesh2D(scenario, dp, tp, 6, at, culprit), tmp_path / "d")
    n_pt, _ = assert_covers(tmp_path / "d")
    assert (n_pt == 0) == (scenario == "healthy")


@pytest.mark.parametrize("scenario", ["never_joined", "wrong_size", "wrong_op", "healthy"])
def test_generated(tmp_path: Path, scenario: str) -> None:
    flight_recorder_gen.write(flight_recorder_gen.Job(16, scenario), tmp_path / "d")
    n_pt, _ = assert_covers(tmp_path / "d")
    assert (n_pt == 0) == (scenario == "healthy")


def test_the_oracle_never_unpickles(tmp_path: Path) -> None:
    """fr_trace's loader is replaced while it runs: a dump that would run code is refused by commscope's loader."""
    from torch.distributed.flight_recorder.components import loader

    flight_recorder_nccl.write(flight_recorder_nccl.Mesh2D("healthy"), tmp_path / "d")
    before = loader.read_dump
    fr_pytorch.findings(tmp_path / "d")
    assert loader.read_dump is before
