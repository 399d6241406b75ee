"""The compiled replay (whatif/native.py over _waves.c) against the numpy paths, bit for bit, and both against an
oracle: the replay's definition evaluated event by event in a topological order of its own (graphlib), with no
waves, runs, levels or schedule. With integer-valued changes every sum is exact, so each path must equal the
oracle exactly; with fractional ones (and ties, and -0.0) the two paths must still be the same bits."""

from __future__ import annotations

import dataclasses
import graphlib
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analyzer.crossrank import graph
from analyzer.model import STEP_SCHEMA, conform
from analyzer.report.json import to_dict
from analyzer.whatif import counterfactual, native, replay
from sample_traces.generate import Scenario, build, write_kineto
from sample_traces.pipeline_job import PipelineScenario, build_pipeline
from tests.conftest import SAMPLES, SHARED
from tests.helpers import run
from tests.test_graph import comm_rows, gpu_table, hand

BUILT = native._waves is not None
needs_built = pytest.mark.skipif(not BUILT, reason="analyzer/whatif/_waves.c is not built (pip install builds it)")
PATHS = [False, True] if BUILT else [False]


def _oracle(a: replay.Arrays, mods: replay.Mods) -> tuple[np.ndarray, np.ndarray]:
    """Δs, Δe (S, events) from the replay's definition (replay.py's module doc), one event at a time."""
    n = a.rank.size
    s = mods.ddur.shape[0]
    deps: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for src, dst, slack in zip(a.dep_src.tolist(), a.dep_dst.tolist(), a.dep_slack.tolist()):
        deps[dst].append((src, slack))
    arrivals: dict[int, list[tuple[int, float]]] = {}
    for i in range(n):
        if a.inst[i] >= 0:
            arrivals.setdefault(int(a.inst[i]), []).append((i, float(a.wait[i])))
        if a.also[i] >= 0:
            arrivals.setdefault(int(a.also[i]), []).append((i, 0.0))
    # what each value waits for: a start ("s", i), an end ("e", i), a group's last arrival ("g", k)
    needs: dict[tuple[str, int], set] = {}
    for i in range(n):
        bp, sp = int(a.bind_pred[i]), int(a.stream_pred[i])
        needs[("s", i)] = {("e", j) for j in [bp if bp >= 0 else -1, sp, *(d for d, _ in deps[i])] if j >= 0}
        needs[("e", i)] = {("s", i)} | ({("g", int(a.inst[i]))} if a.inst[i] >= 0 else set())
    for k, arr in arrivals.items():
        needs[("g", k)] = {("s", q) for q, _ in arr}
    order = list(graphlib.TopologicalSorter(needs).static_order())
    ds, de = np.zeros((s, n)), np.zeros((s, n))
    for c in range(s):
        dur, gap, tr, hide = mods.ddur[c].tolist(), mods.dgap[c].tolist(), mods.dtr[c].tolist(), mods.hide[c].tolist()
        vs, ve, vg = [0.0] * n, [0.0] * n, {}
        for kind, i in order:
            if kind == "g":
                vg[i] = max(vs[q] - w for q, w in arrivals[i])
                continue
            if kind == "e":
                if a.inst[i] < 0:
                    ve[i] = vs[i] + dur[i]
                elif hide[i]:
                    ve[i] = vs[i] - float(a.dur[i])
                else:
                    ve[i] = vg[int(a.inst[i])] + tr[int(a.parent[a.inst[i]])]
                continue
            bp, sp, slack = int(a.bind_pred[i]), int(a.stream_pred[i]), float(a.slack[i])
            terms = [ve[src] - sl for src, sl in deps[i]]
            if sp >= 0:  # after its stream predecessor, the slack used up; the gap too where it binds
                terms.append(ve[sp] + (max(gap[i], -slack) if bp == sp else -slack))
            if bp >= 0 and bp != sp:  # its binding predecessor's end plus the gap
                terms.append(ve[bp] + gap[i])
            elif bp == -1:  # the job's start
                terms.append(gap[i])
            vs[i] = max(terms) if terms else -math.inf
        ds[c], de[c] = vs, ve
    return ds + 0.0, de + 0.0


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x.view(np.int64), y.view(np.int64))


def _schedules_equal(a: replay.Arrays) -> replay.Schedule:
    s0 = replay.schedule(a, compiled=False)
    if BUILT:
        s1 = replay.schedule(a, compiled=True)
        for f in dataclasses.fields(s0):
            if f.name != "memo":
                x, y = getattr(s0, f.name), getattr(s1, f.name)
                assert np.array_equal(x, y) and np.asarray(x).dtype == np.asarray(y).dtype, f.name
    return s0


def _mods(a: replay.Arrays, rng: np.random.Generator, s: int, whole: bool) -> replay.Mods:
    """``s`` scenarios of changes to durations, gaps, transfers and hidden communication. Values come from a few
    levels (many ties: equal maxima everywhere), -0.0 among them; ``whole``: integers (exact sums), else fractions."""
    n, ni = a.rank.size, a.n_graph_instances
    m = replay.Mods.zeros(s, n, ni)
    levels = np.array([-0.0, 0.0, -1000.0, -250.0, 500.0]) if whole else np.array([-0.0, 0.1, -0.3, -1e3 / 3, 7.7])
    for c in range(1, s):  # row 0: the measured run
        pick = rng.random(n) < 0.4
        m.ddur[c] = np.where(pick, levels[rng.integers(0, levels.size, n)], 0.0)
        m.dgap[c] = np.where(rng.random(n) < 0.4, levels[rng.integers(0, levels.size, n)], -0.0)
        m.dtr[c] = levels[rng.integers(0, levels.size, ni)]
        m.hide[c] = rng.random(n) < (0.2 if c % 2 else 0.0)
    return m


def _check(a: replay.Arrays, mods: replay.Mods, exact: bool) -> None:
    """Both paths the same bits; with ``exact`` (integer changes, no forced ends) both equal the oracle."""
    sch = _schedules_equal(a)
    got = [replay.run(a, sch, mods, compiled=c) for c in PATHS]
    for ds, de in got[1:]:
        assert _same_bits(ds, got[0][0]) and _same_bits(de, got[0][1])
    if exact:
        assert sch.forced == 0
        ods, ode = _oracle(a, mods)
        for ds, de in got:
            assert _same_bits(ds, ods) and _same_bits(de, ode)


def _steps(ends: dict[int, int]) -> pl.DataFrame:
    return conform(pl.DataFrame({"rank": list(ends), "step": [1] * len(ends), "start_ns": [0] * len(ends),
                                 "end_ns": list(ends.values())}), STEP_SCHEMA)


def _generated(tmp_path: Path) -> list[graph.Graph]:
    """Generated Kineto jobs (host chains, TP x DP, a late rank; a 1F1B-style pipeline with TP and DP)."""
    out = []
    for name, wl in [("tpdp", build(Scenario(ranks=8, tp=2, steps=2, overlap=0.5, late_ranks={5: (900_000, "host")}))),
                     ("pipe", build_pipeline(PipelineScenario(tp=2, dp=2, pp=2, microbatches=3, steps=2))[0])]:
        write_kineto(wl, tmp_path / name)
        out.append(counterfactual.declared(run(tmp_path / name).graph))
    return out


def test_both_paths_equal_the_oracle_on_hand_built_and_generated_jobs(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    graphs = [graph.build(*hand()), *_generated(tmp_path)]
    assert graphs[1].host is not None and graphs[1].host.height  # the host chains are in the replay
    for g in graphs:
        a = replay.Arrays.of(g)
        _check(a, _mods(a, rng, 5, whole=True), exact=True)
        _check(a, _mods(a, rng, 5, whole=False), exact=False)


def test_the_oracle_gives_the_hand_built_answers() -> None:
    # the hand job (tests/test_graph.py): B 50 ns shorter, rank 1 arrives at 150, the instance ends at 150 + 100 on
    # both ranks, D at 350 (-50); B 150 shorter: rank 0 still arrives at 100, so -100; communication hidden: D
    # starts when rank 0 arrives (-200), E keeps its 50 ns gap after rank 1's arrival (-100)
    g = graph.build(*hand())
    ids = {(r["rank"], r["name"]): r["node"] for r in g.nodes.to_dicts()}
    a = replay.Arrays.of(g)
    mods = replay.Mods.zeros(3, a.rank.size, a.n_graph_instances)
    mods.ddur[0, ids[(1, "B")]] = -50
    mods.ddur[1, ids[(1, "B")]] = -150
    mods.hide[2] = True
    _, de = _oracle(a, mods)
    assert de[0, ids[(0, "nccl_ar")]] == de[0, ids[(1, "nccl_ar")]] == de[0, ids[(0, "D")]] == -50
    assert de[1, ids[(0, "D")]] == -100
    assert de[2, ids[(0, "D")]] == -200 and de[2, ids[(1, "E")]] == -100


def _random_job(rng: np.random.Generator, ranks: int, colls: int, crossing: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Ranks running compute kernels on two streams and the same collectives on a third, in a random order per
    rank where ``crossing`` (ends then wait for arrivals behind other ends: forced through)."""
    gpu, rows = [], []
    for r in range(ranks):
        order = rng.permutation(colls) if crossing else np.arange(colls)
        t = 0
        for k in order:
            for stream in (7, 8):
                if rng.random() < 0.7:
                    d = int(rng.integers(1, 4)) * 100
                    gpu.append((r, stream, t, t + d, f"k{stream}", "compute"))
                    t += int(rng.integers(0, 2)) * 100 if stream == 7 else d
            d = int(rng.integers(1, 4)) * 100
            gpu.append((r, 20, t, t + d, "nccl", "comm"))
            rows.append((r, 20, t, t + d, "nccl", f"i{k}"))
            t += d + int(rng.integers(0, 2)) * 50
    return gpu_table(gpu), comm_rows(rows)


@pytest.mark.parametrize("crossing", [False, True])
def test_both_paths_agree_on_random_jobs_and_forced_ends(crossing: bool) -> None:
    rng = np.random.default_rng(11)
    forced = 0
    for _ in range(12):
        gpu, rows = _random_job(rng, int(rng.integers(2, 5)), int(rng.integers(2, 7)), crossing)
        g = graph.build(gpu, rows, _steps({r: 10**6 for r in range(4)}))
        a = replay.Arrays.of(g)
        forced += replay.schedule(a).forced
        _check(a, _mods(a, rng, 4, whole=True), exact=not crossing)
        _check(a, _mods(a, rng, 4, whole=False), exact=False)
    assert (forced > 0) == crossing


def _real_sets() -> list[Path]:
    sets = [SAMPLES / "real_parallel" / n for n in ("cp_ring_mps_host_slow", "pp4_1f1b_mps_host_slow",
                                                    "moe_a2a_slow", "fsdp_threads_mps_slow")]
    sets += [SAMPLES / "gpu_h200" / "hybrid_tp_dp", SAMPLES / "whatif" / "ST" / "trace-ST.parquet"]
    if (SHARED / "library_parallel" / "gpipe_slow").is_dir():
        sets.append(SHARED / "library_parallel" / "gpipe_slow")
    return sets


@pytest.mark.parametrize("path", _real_sets(), ids=lambda p: p.parent.name + "/" + p.name)
def test_both_paths_give_the_same_bits_on_real_sets(path: Path) -> None:
    an = run(path)
    rep = counterfactual.declared(an.graph)
    # the published study's graph too (op tables): every step on its own, send/recv pairs not eager
    graphs = [(rep, True)] + ([(counterfactual.steps_apart(rep), False)] if an.counterfactual.study is not None else [])
    idl = an.counterfactual.ideal_changes
    rank = replay.Arrays.of(rep).rank
    top = int(an.counterfactual.attribution["by_rank"]["key"][0])
    for g, eager in graphs:
        a = replay.Arrays.of(g, eager=eager)
        rng = np.random.default_rng(3)
        # the counterfactual's own scenarios (the ideal run, with and without host gaps, a rank put back and a
        # rank made ideal) and tie-heavy fractional changes
        mods = replay.Mods.zeros(5, a.rank.size, a.n_graph_instances)
        idl.whole()(mods, 0)
        idl.whole(False)(mods, 1)
        idl.put_back(np.flatnonzero(rank == top))(mods, 2)
        idl.remove(np.flatnonzero(rank == top))(mods, 3)
        _check(a, mods, exact=False)
        _check(a, _mods(a, rng, 4, whole=False), exact=False)
        # integer changes: the oracle too (these sets have no forced ends)
        _check(a, _mods(a, rng, 3, whole=True), exact=True)


@needs_built
def test_the_report_is_the_same_without_the_compiled_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    path = SAMPLES / "real_parallel" / "pp_1f1b_mps_slow"
    with_c = to_dict(run(path))
    monkeypatch.setenv("COMMSCOPE_NO_NATIVE", "1")
    assert not native.available()
    assert to_dict(run(path)) == with_c


@needs_built
def test_a_schedule_out_of_bounds_is_refused_not_read() -> None:
    a = replay.Arrays.of(graph.build(*hand()))
    sch = replay.schedule(a)
    mods = replay.Mods.zeros(2, a.rank.size, a.n_graph_instances)
    for field, value in [("x", a.rank.size), ("brow", a.rank.size + 2), ("v_arr", -1), ("s_off", 10**6)]:
        arr = getattr(sch, field).copy()
        arr[-1] = value
        with pytest.raises(ValueError, match="out of range"):
            native.run(a, dataclasses.replace(sch, **{field: arr}), mods)
    bad = sch.e_view.copy()
    bad[0] = 99  # an end's group view outside its wave's
    with pytest.raises(ValueError, match="outside a wave"):
        native.run(a, dataclasses.replace(sch, e_view=bad), mods)


@pytest.mark.parametrize("compiled", PATHS)
def test_events_that_wait_for_each_other_are_an_error_not_a_hang(compiled: bool) -> None:
    a = replay.Arrays.of(graph.build(*hand()))
    n = a.rank.size
    # two events bound to each other (no trace gives this; a cycle must not loop forever)
    bp = np.arange(n) ^ 1
    cyc = dataclasses.replace(a, bind_pred=bp, stream_pred=np.full(n, -1), inst=np.full(n, -1), also=np.full(n, -1),
                              simple=np.zeros(n, dtype=bool), root=np.arange(n), lead=np.arange(n),
                              dep_src=a.dep_src[:0], dep_dst=a.dep_dst[:0], dep_slack=a.dep_slack[:0])
    with pytest.raises(ValueError, match="cycle"):
        replay.schedule(cyc, compiled=compiled)
