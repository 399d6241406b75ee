"""Scenarios keyed by the changes they write (replay.Keyed) are replayed once per schedule: the counterfactual's and
the what-if scenarios' results are the same bits as with every scenario replayed on its own, with fewer replays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from polars.testing import assert_frame_equal

from analyzer.whatif import replay
from tests.conftest import SAMPLES
from tests.helpers import run

SETS = [SAMPLES / "gpu_h200" / "compute_straggler", SAMPLES / "real_parallel" / "tp_pp_dp_mps_slow",
        SAMPLES / "real_parallel" / "pp4_1f1b_mps_host_slow"]


def _analyze(folder: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool) -> tuple[object, int]:
    plain_batched, plain_run = replay.batched, replay.run
    count = [0]

    def batched(a, sch, seg, fill, measure=None):  # without keys: every scenario replayed on its own
        return plain_batched(a, sch, seg, fill if keyed else [lambda m, i, f=f: f(m, i) for f in fill], measure)

    def counted(a, sch, mods):
        count[0] += mods.ddur.shape[0]
        return plain_run(a, sch, mods)

    with monkeypatch.context() as m:
        m.setattr(replay, "batched", batched)
        m.setattr(replay, "run", counted)
        return run(folder), count[0]


@pytest.mark.parametrize("folder", SETS, ids=lambda p: p.name)
def test_keyed_scenarios_give_the_same_results_with_fewer_replays(folder: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    a, n_keyed = _analyze(folder, monkeypatch, keyed=True)
    b, n_plain = _analyze(folder, monkeypatch, keyed=False)
    c, d = a.counterfactual, b.counterfactual
    assert c is not None and d is not None
    assert (c.replay_ns, c.ideal_ns, c.replay_no_host_ns, c.ideal_no_host_ns, c.m_w, c.m_s, c.roots) == \
        (d.replay_ns, d.ideal_ns, d.replay_no_host_ns, d.ideal_no_host_ns, d.m_w, d.m_s, d.roots)
    for ax in c.attribution:
        assert_frame_equal(c.attribution[ax], d.attribution[ax])
    assert_frame_equal(a.whatif.scenarios, b.whatif.scenarios)
    assert_frame_equal(a.whatif.ranks, b.whatif.ranks)
    # the scenarios' measured and ideal runs at least are the counterfactual's
    assert n_keyed <= n_plain - 2


def test_a_put_back_of_ideal_operations_is_the_ideal_run() -> None:
    a = run(SAMPLES / "gpu_h200" / "compute_straggler")
    idl = a.counterfactual.ideal_changes
    already = np.flatnonzero((idl.ddur == 0) & (idl.dgap == 0))[:50]
    changed = np.flatnonzero(idl.ddur < 0)[:50]
    assert already.size and changed.size
    assert idl.put_back(already).key == idl.whole().key
    assert idl.put_back(changed).key != idl.whole().key
    assert idl.remove(already).key == ("measured",)
    # and their rows are the same bits
    n, k = idl.ddur.size, idl.dtr.size
    m = replay.Mods.zeros(4, n, k)
    idl.put_back(already)(m, 0)
    idl.whole()(m, 1)
    idl.remove(already)(m, 2)
    for x in (m.ddur, m.dgap, m.dtr):
        assert x[0].tobytes() == x[1].tobytes() and not x[2].any() and not np.signbit(x[2]).any()
