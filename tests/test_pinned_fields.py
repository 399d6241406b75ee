"""Every published number of the JSON report, pinned on generated traces to an independent truth.

The generator knows each instance's arrivals, transfer, waits and last rank exactly (sample_traces/generate.py);
the oracle (tests/oracle.py) measures the interval lengths from the written files; everything derived from
them here (the exposed wait/transfer split, per-step waits, bandwidth, the verdict's numbers) is computed
by brute force in this file from those two, following DESIGN.md, never from the analyzer's tables.
The scenarios have compute beside every comm kernel (overlap > 0) and a late rank, so compute differs
from compute-only and exposed wait differs from exposed transfer: swapping any two of them fails.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest
from scipy.stats import binom

from sample_traces.generate import Collective, ProcessGroup, Scenario, Truth, build, write_kineto
from tests import oracle
from tests.helpers import report
from tests.oracle_blame import oracle_roots

MS = 1_000_000
TOL = 6e-7  # ms: the JSON keeps 6 decimals (1 ns, rounding <= 5e-7): a 1 ns error fails
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}

SCENARIOS = {
    # host straggler, clocks 3 / 7.3 / -2 ms off: skews need the alignment, durations do not
    "host_offsets": Scenario(ranks=4, steps=3, overlap=0.4, late_ranks={2: (300_000, "host")},
                             clock_offsets_ns={1: 3 * MS, 2: 7_300_123, 3: -2 * MS}),
    # compute straggler on one shared clock
    "compute_aligned": Scenario(ranks=4, steps=4, overlap=0.3, late_ranks={1: (500_000, "compute")}, seed=5),
    # TP x DP subgroups on two hosts 5 ms apart
    "tp_dp": Scenario(ranks=4, steps=3, tp=2, overlap=0.6, late_ranks={3: (400_000, "host")},
                      clock_offsets_ns={2: 5 * MS, 3: 5 * MS}, seed=2),
    # two ranks: the chance of being a step's top causer is 1/2
    "two_ranks": Scenario(ranks=2, steps=5, overlap=0.5, late_ranks={1: (300_000, "compute")}, seed=8),
    # every operation with its own bus-bandwidth factor
    "ops": Scenario(ranks=4, steps=2, overlap=0.5, late_ranks={0: (200_000, "host")}, seed=9,
                    compute_ns=(100_000,) * 6, clock_offsets_ns={3: 1 * MS},
                    collectives=(Collective("all_gather", 8 << 20, 50_000), Collective("reduce_scatter", 8 << 20, 60_000),
                                 Collective("all_to_all", 4 << 20, 70_000), Collective("broadcast", 2 << 20, 40_000),
                                 Collective("all_reduce", 16 << 20, 90_000))),
}


@dataclass(frozen=True)
class Truths:
    sc: Scenario
    truth: Truth
    folder: Path
    files: dict[int, Path]
    oracles: dict[int, oracle.RankOracle]
    events: dict[int, list[oracle.Interval]]


@dataclass(frozen=True)
class Case(Truths):
    rep: dict


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def truths(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Truths:
    sc = SCENARIOS[request.param]
    wl = build(sc)
    folder = tmp_path_factory.mktemp(request.param)
    paths = write_kineto(wl, folder)
    assert len(paths) == sc.ranks
    files = {oracle.rank_of(oracle.load(p), p): p for p in paths}
    # every instance has one last arriver, so "last rank" and "caused wait" have one right answer
    assert all(i.last_rank is not None for i in wl.truth.instances)
    return Truths(sc, wl.truth, folder, files, {r: oracle.analyze_file(p) for r, p in files.items()},
                  {r: oracle.gpu_events(oracle.load(p)) for r, p in files.items()})


@pytest.fixture
def case(truths: Truths) -> Case:
    """The analysis runs inside every test (not once per module), so a test of one field sees a change in
    any code path, and mutation testing maps each test to the code it runs."""
    return Case(**{f: getattr(truths, f) for f in Truths.__dataclass_fields__}, rep=report(truths.folder))


# ----------------------------------------------------------------------------- brute force helpers


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _covered(merged: list[tuple[int, int]], a: int, b: int) -> int:
    return sum(max(0, min(e, b) - max(s, a)) for s, e in merged)


def _file_start(c: Case, rank: int, true_ns: int) -> int:
    return true_ns + c.sc.clock_offsets_ns.get(rank, 0)


def _kernel_wait(c: Case, rank: int) -> dict[int, int]:
    """Comm kernel start on the rank's file clock -> its wait (generator truth)."""
    return {_file_start(c, rank, i.start_ns[rank]): i.wait_ns[rank] for i in c.truth.instances if rank in i.ranks}


def _exposed_split(c: Case, rank: int, window: tuple[int, int], exposed_ns: int) -> tuple[float, float]:
    waits = _kernel_wait(c, rank)
    kernels = [(k.start_ns, k.end_ns, waits[k.start_ns]) for k in c.oracles[rank].comm]
    return _split(kernels, c.events[rank], window, exposed_ns)


def _split(kernels: list[tuple[int, int, int]], events: list[oracle.Interval], window: tuple[int, int],
           exposed_ns: int) -> tuple[float, float]:
    """DESIGN.md: each comm kernel's (start, end, wait) part outside compute, split by wait/d, then scaled to
    the window's exposed union (comm kernels that overlap each other would otherwise count twice)."""
    a, b = window
    compute = _merge([(i.start_ns, i.end_ns) for i in events if i.kind == "compute"])
    raw_wait = raw_total = 0.0
    for start, end, wait in kernels:
        s, e = max(start, a), min(end, b)
        if e <= s:
            continue
        exposed_k = (e - s) - _covered(compute, s, e)
        raw_wait += exposed_k * min(wait, end - start) / (end - start)
        raw_total += exposed_k
    if exposed_ns <= 0 or raw_total <= 0:
        return 0.0, float(max(exposed_ns, 0))
    wait = raw_wait * exposed_ns / raw_total
    return wait, exposed_ns - wait


def _match_collectives(c: Case) -> list[tuple[dict, object]]:
    """JSON collectives paired with truth instances: by process group and step, in start order."""
    rows = c.rep["collectives"]
    assert len(rows) == len(c.truth.instances)
    got = sorted(rows, key=lambda r: (r["pg"], r["step"], r["start_ms"]))
    want = sorted(c.truth.instances, key=lambda i: (i.pg, i.step, min(i.start_ns.values())))
    return list(zip(got, want, strict=True))


# ----------------------------------------------------------------------------- per rank


def test_rank_waits_caused_waits_and_last_arrivals_are_exact(case: Case) -> None:
    rows = {r["rank"]: r for r in case.rep["ranks"]}
    assert sorted(rows) == sorted(case.truth.ranks)
    for r, t in case.truth.ranks.items():
        assert rows[r]["wait_ms"] == pytest.approx(t.wait_ns / MS, abs=TOL)
        assert rows[r]["caused_wait_ms"] == pytest.approx(t.caused_wait_ns / MS, abs=TOL)
        assert rows[r]["last_arrival_pct"] == pytest.approx(100.0 * t.last_arrivals / t.instances, abs=TOL)
    assert any(t.caused_wait_ns > 0 for t in case.truth.ranks.values())


def test_rank_whole_window_fields_match_brute_force(case: Case) -> None:
    rows = {r["rank"]: r for r in case.rep["ranks"]}
    for r, o in case.oracles.items():
        w, row = o.whole, rows[r]
        want = {"compute_ms": w.compute_ns, "compute_only_ms": w.compute_only_ns, "comm_ms": w.comm_ns,
                "overlapped_comm_ms": w.overlapped_ns, "exposed_comm_ms": w.exposed_ns, "memcpy_ms": w.memcpy_ns,
                "idle_ms": w.idle_ns, "busy_ms": w.busy_ns, "span_ms": w.span_ns}
        for key, ns in want.items():
            assert row[key] == pytest.approx(ns / MS, abs=TOL), key
        assert row["overlap_pct"] == pytest.approx(100.0 * w.overlapped_ns / w.comm_ns, abs=1e-6)
        # the scenario is not degenerate: overlap exists, so compute-only and exposed differ from their totals
        assert w.overlapped_ns > 0 and w.compute_only_ns < w.compute_ns and w.exposed_ns < w.comm_ns
        assert w.memcpy_ns > 0 and w.idle_ns > 0


def test_exposed_wait_and_transfer_match_brute_force_split(case: Case) -> None:
    rows = {r["rank"]: r for r in case.rep["ranks"]}
    lopsided = 0
    for r, o in case.oracles.items():
        w = o.whole
        wait, transfer = _exposed_split(case, r, (min(i.start_ns for i in case.events[r]),
                                                  max(i.end_ns for i in case.events[r])), w.exposed_ns)
        assert rows[r]["exposed_wait_ms"] == pytest.approx(wait / MS, abs=TOL)
        assert rows[r]["exposed_transfer_ms"] == pytest.approx(transfer / MS, abs=TOL)
        lopsided += abs(wait - transfer) > 0.05 * MS
    assert lopsided  # wait and transfer differ somewhere, so swapping them cannot pass


def test_ranking_and_clock_are_exact(case: Case) -> None:
    st = case.rep["stragglers"]
    ranking = st["ranking"]
    t = case.truth.ranks
    assert [r["rank"] for r in ranking] == sorted(t, key=lambda r: (-t[r].caused_wait_ns, r))
    steps_last = _steps_last(case)
    for row in ranking:
        rt = t[row["rank"]]
        assert row["caused_wait_ms"] == pytest.approx(rt.caused_wait_ns / MS, abs=TOL)
        assert row["wait_ms"] == pytest.approx(rt.wait_ns / MS, abs=TOL)
        assert row["last_arrival_pct"] == pytest.approx(100.0 * rt.last_arrivals / rt.instances, abs=TOL)
        assert row["instances"] == rt.instances
        assert row["steps_last"] == steps_last.get(row["rank"], 0)
    clock = case.rep["clock"]
    assert clock["reference_rank"] == 0
    for r, want in case.truth.offsets_us(0).items():
        assert clock["offsets_us"][str(r)] == pytest.approx(want, abs=1e-3)
    assert clock["uncertainty_us"] == pytest.approx(0.0, abs=1e-3)  # every instance ends together exactly


def _steps_last(c: Case) -> dict[int, int]:
    """Per rank: steps in which the wait it caused is the most of any rank (and more than zero)."""
    out: dict[int, int] = {}
    for s in {i.step for i in c.truth.instances}:
        caused: dict[int, int] = {}
        for i in c.truth.instances:
            if i.step == s:
                caused[i.last_rank] = caused.get(i.last_rank, 0) + sum(i.wait_ns.values())
        top = max(caused, key=lambda r: caused[r])
        if caused[top] > 0:
            out[top] = out.get(top, 0) + 1
    return out


def test_verdict_numbers_are_exact(case: Case) -> None:
    _check_verdict(case)


def _check_verdict(case: Case) -> None:
    v = case.rep["stragglers"]["verdict"]
    (late,) = case.sc.late_ranks
    assert v is not None and v["rank"] == late  # its kind is a judgement, tested in test_synthetic_crossrank
    t = case.truth.ranks
    by_step: dict[tuple[int, int], float] = {}
    root, _ = oracle_roots(case.truth, by_step)
    n_steps = case.sc.steps
    steps = sorted({s for _, s in by_step})
    # steps where it is the top root-causer (ties: the lower rank), against the ranks that root-caused anything
    top = [min((r for r, s in by_step if s == st), key=lambda r: (-by_step[(r, st)], r)) for st in steps]
    steps_last = top.count(late)
    causers = max(len({r for r, _ in by_step}), 2)
    assert v["caused_wait_ms"] == pytest.approx(t[late].caused_wait_ns / MS, abs=TOL)
    assert v["root_caused_wait_ms"] == pytest.approx(root[late] / MS, abs=TOL)
    assert v["last_arrival_pct"] == pytest.approx(100.0 * t[late].last_arrivals / t[late].instances, abs=TOL)
    assert v["instances_last"] == t[late].last_arrivals
    assert (v["steps_seen"], v["steps_last"], v["chronic"]) == (len(steps), steps_last, steps_last * 2 > len(steps))
    # consistency: steps are repeated measurements (top root-causer by chance: 1 / causers), instances too
    # (last by chance: 1 / group size), and an overwhelming share of the root-caused wait counts as well
    p_steps = binom.sf(steps_last - 1, n_steps, 1 / causers) if len(steps) >= 3 else 1.0
    mine = [i for i in case.truth.instances if late in i.ranks]
    chance = sum(1 / len(i.ranks) for i in mine) / len(mine)
    k = t[late].last_arrivals
    p_inst = binom.sf(k - 1, len(mine), chance) if k > len(mine) * chance else 1.0
    share = root[late] / sum(root.values())
    p_cons = min(p_steps, p_inst) if share < 0.8 else min(p_steps, p_inst, 1 - share)
    # the verdict is the counterfactual's now (test_counterfactual): its confidence is a t-test over steps of
    # the rank's put-back, no longer 1 − p of these binomial tests; both call this late rank near certain
    assert v["confidence"] >= 0.95 and 1 - p_cons >= 0.95
    compute = {r: o.whole.compute_ns for r, o in case.oracles.items()}
    excess = compute[late] - statistics.median(c for r, c in compute.items() if r != late)
    assert v["compute_before_ms"] == pytest.approx(max(excess, 0) / MS, abs=TOL)
    # GPU idle of the late rank while the others already waited: union of [start - L, start], minus busy
    windows = _merge([(_file_start(case, late, i.start_ns[late]) - max(i.wait_ns.values()),
                       _file_start(case, late, i.start_ns[late])) for i in case.truth.instances if i.last_rank == late])
    busy = _merge([(i.start_ns, i.end_ns) for i in case.events[late]])
    idle = sum(b - a - _covered(busy, a, b) for a, b in windows)
    assert v["idle_before_ms"] == pytest.approx(idle / MS, abs=TOL)


def _case(sc: Scenario, folder: Path) -> Case:
    wl = build(sc)
    files = dict(enumerate(write_kineto(wl, folder)))
    return Case(sc, wl.truth, folder, files, {r: oracle.analyze_file(p) for r, p in files.items()},
                {r: oracle.gpu_events(oracle.load(p)) for r, p in files.items()}, rep=report(folder))


def test_verdict_numbers_when_the_straggler_was_last_once(tmp_path: Path) -> None:
    """One step with one all-reduce: the late rank is the last arriver of exactly one instance (the only
    causer, so consistent by its share); its extra compute and idle GPU still come out exact, and its kind."""
    sc = Scenario(ranks=3, steps=1, overlap=0.5, late_ranks={2: (400_000, "compute")}, seed=3,
                  collectives=(Collective("all_reduce", 16 << 20, 100_000),))
    c = _case(sc, tmp_path)
    assert [i.last_rank for i in c.truth.instances] == [2]
    _check_verdict(c)
    v = c.rep["stragglers"]["verdict"]
    assert v["kind"] == "compute" and v["compute_before_ms"] > 0.4 and v["instances_last"] == 1


# ----------------------------------------------------------------------------- per instance


def test_collective_fields_are_exact(case: Case) -> None:
    ref_offset = case.sc.clock_offsets_ns.get(0, 0)  # the aligned clock is rank 0's
    for got, want in _match_collectives(case):
        n = len(want.ranks)
        assert (got["pg"], got["op"], got["step"], got["bytes"]) == (want.pg, want.op, want.step, want.bytes)
        assert got["ranks"] == sorted(want.ranks) and got["group_size"] == n and got["has_meta"] is True
        assert got["seq"] == min(want.seq.values())
        assert got["transfer_ms"] == pytest.approx(want.transfer_ns / MS, abs=TOL)
        assert got["max_wait_ms"] == pytest.approx(max(want.wait_ns.values()) / MS, abs=TOL)
        assert got["total_wait_ms"] == pytest.approx(sum(want.wait_ns.values()) / MS, abs=TOL)
        assert got["last_rank"] == want.last_rank
        starts = want.start_ns.values()
        assert got["arrival_skew_ms"] == pytest.approx((max(starts) - min(starts)) / MS, abs=TOL)
        assert got["end_skew_ms"] == pytest.approx(0.0, abs=TOL)  # they end together on the true clock
        assert got["start_ms"] == pytest.approx((min(starts) + ref_offset) / MS, abs=1e-5)
        algbw = want.bytes / want.transfer_ns  # bytes per ns = GB/s
        assert got["algbw_gbps"] == pytest.approx(algbw, abs=TOL)
        assert got["busbw_gbps"] == pytest.approx(algbw * BUS_FACTOR.get(want.op, lambda n: 1.0)(n), abs=TOL)
    waits = [max(i.wait_ns.values()) for i in case.truth.instances]
    assert min(waits) > 0 and len(set(waits)) > 1  # max, min, sum and skew all differ from each other


def test_bandwidth_table_matches_truth(case: Case) -> None:
    groups: dict[tuple[str, int], list] = {}
    for i in case.truth.instances:
        groups.setdefault((i.op, 1 << (i.bytes.bit_length() - 1)), []).append(i)
    rows = case.rep["bandwidth"]
    assert [(r["op"], r["size_bucket"]) for r in rows] == sorted(groups)
    for row in rows:
        inst = groups[row["op"], row["size_bucket"]]
        n = len(inst[0].ranks)
        factor = BUS_FACTOR.get(row["op"], lambda n: 1.0)(n)
        algbw = [i.bytes / i.transfer_ns for i in inst]
        assert row["count"] == len(inst) and row["total_bytes"] == sum(i.bytes for i in inst)
        assert row["transfer_ms_p50"] == pytest.approx(statistics.median(i.transfer_ns for i in inst) / MS, abs=TOL)
        assert row["algbw_gbps_p50"] == pytest.approx(statistics.median(algbw), abs=TOL)
        assert row["busbw_gbps_p50"] == pytest.approx(statistics.median(algbw) * factor, abs=TOL)
        assert row["busbw_gbps_max"] == pytest.approx(max(algbw) * factor, abs=TOL)


def test_matching_counts_are_exact(case: Case) -> None:
    m = case.rep["matching"]
    assert m["instances"] == len(case.truth.instances)
    assert m["matched_kernels"] == sum(len(i.ranks) for i in case.truth.instances)
    assert (m["unmatched_kernels"], m["p2p_kernels"], m["kernels_without_metadata"]) == (0, 0, 0)
    assert case.rep["source"]["ranks"] == list(range(case.sc.ranks))


# ----------------------------------------------------------------------------- per step


def _common_windows(c: Case) -> dict[int, dict[int, tuple[int, int]]]:
    return oracle.common_step_windows(c.files, c.sc.clock_offsets_ns)


def test_step_fields_match_brute_force_and_truth(case: Case) -> None:
    """GPU-side ProfilerStep annotations cover every step's GPU work here (complete annotations); each step is
    one interval on the aligned clock on every rank (_common_windows)."""
    steps = {(s["rank"], s["step"]): s for s in case.rep["steps"]}
    assert len(steps) == case.sc.ranks * case.sc.steps
    common = _common_windows(case)
    for r in case.oracles:
        windows = common[r]
        assert sorted(windows) == sorted(s for rr, s in steps if rr == r)
        for n, w in windows.items():
            b = oracle.breakdown(case.events[r], w)
            row = steps[r, n]
            want = {"span_ms": b.span_ns, "compute_ms": b.compute_ns, "comm_ms": b.comm_ns,
                    "overlapped_comm_ms": b.overlapped_ns, "exposed_comm_ms": b.exposed_ns,
                    "compute_only_ms": b.compute_only_ns, "memcpy_ms": b.memcpy_ns, "idle_ms": b.idle_ns}
            for key, ns in want.items():
                assert row[key] == pytest.approx(ns / MS, abs=TOL), (r, n, key)
            assert row["start_ms"] == pytest.approx(windows[n][0] / MS, abs=1e-5)
            assert row["overlap_pct"] == pytest.approx(100.0 * b.overlapped_ns / b.comm_ns, abs=1e-6)
            wait, transfer = _exposed_split(case, r, windows[n], b.exposed_ns)
            assert row["exposed_wait_ms"] == pytest.approx(wait / MS, abs=TOL), (r, n)
            assert row["exposed_transfer_ms"] == pytest.approx(transfer / MS, abs=TOL), (r, n)
            mine = [i for i in case.truth.instances if i.step == n and r in i.ranks]
            assert row["wait_ms"] == pytest.approx(sum(i.wait_ns[r] for i in mine) / MS, abs=TOL)
            caused = sum(sum(i.wait_ns.values()) for i in mine if i.last_rank == r)
            assert row["caused_wait_ms"] == pytest.approx(caused / MS, abs=TOL)


def test_rank_step_time_summary_matches_brute_force(case: Case) -> None:
    rows = {r["rank"]: r for r in case.rep["ranks"]}
    common = _common_windows(case)
    for r in case.oracles:
        spans = [(e - s) / MS for s, e in common[r].values()]
        assert rows[r]["steps"] == len(spans) == case.sc.steps
        st = rows[r]["step_time_ms"]
        assert st["mean"] == pytest.approx(statistics.mean(spans), abs=TOL)
        assert st["p50"] == pytest.approx(statistics.median(spans), abs=TOL)
        assert st["max"] == pytest.approx(max(spans), abs=TOL)
        assert len(set(spans)) > 1  # mean, median and max are told apart
    # a synchronous job: every rank's steps span the same time
    assert len({tuple(round(s["span_ms"], 6) for s in case.rep["steps"] if s["rank"] == r) for r in rows}) == 1


def test_per_rank_totals_are_the_sum_of_the_steps_where_steps_tile_the_work(case: Case) -> None:
    """Whole-window wait and caused wait are the per-step ones added up (every instance lies in a step)."""
    rows = {r["rank"]: r for r in case.rep["ranks"]}
    for r in rows:
        steps = [s for s in case.rep["steps"] if s["rank"] == r]
        assert sum(s["wait_ms"] for s in steps) == pytest.approx(rows[r]["wait_ms"], abs=1e-5)
        assert sum(s["caused_wait_ms"] for s in steps) == pytest.approx(rows[r]["caused_wait_ms"], abs=1e-5)


# ----------------------------------------------------------------------------- end skew


def test_end_skew_and_waits_when_kernels_do_not_end_together(tmp_path: Path) -> None:
    """Each instance's kernel on one rank is made to end later (edited file): transfer, waits, last rank and
    both skews come from the kernels by brute force (one clock, so no alignment is involved)."""
    import json

    # integer microseconds: the edited JSON round-trips its timestamps exactly
    sc = Scenario(ranks=4, steps=3, overlap=0.0, late_ranks={1: (250_000, "host")}, seed=4, ts_style="int")
    paths = write_kineto(build(sc), tmp_path)
    for r, p in enumerate(paths):
        doc = json.loads(p.read_text())
        comm = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]),
                      key=lambda e: e["ts"])
        for i, e in enumerate(comm):
            if i % 4 == r:  # a different rank each time, late by (i + 1) x 3 us
                e["dur"] += 3 * (i + 1)
        p.write_text(json.dumps(doc))
    kernels = {r: oracle.comm_kernels(oracle.load(p)) for r, p in enumerate(paths)}
    rep = report(tmp_path)
    assert rep["clock"]["offsets_us"] == {str(r): 0.0 for r in range(4)}
    rows = sorted(rep["collectives"], key=lambda c: c["start_ms"])
    assert len(rows) == len(kernels[0])
    wait_total = dict.fromkeys(range(4), 0)
    for i, got in enumerate(rows):
        ks = {r: kernels[r][i] for r in range(4)}
        d = {r: k.end_ns - k.start_ns for r, k in ks.items()}
        transfer = min(d.values())
        wait = {r: d[r] - transfer for r in d}
        for r in d:
            wait_total[r] += wait[r]
        ends = [k.end_ns for k in ks.values()]
        starts = [k.start_ns for k in ks.values()]
        assert got["transfer_ms"] == pytest.approx(transfer / MS, abs=TOL)
        assert got["max_wait_ms"] == pytest.approx(max(wait.values()) / MS, abs=TOL)
        assert got["total_wait_ms"] == pytest.approx(sum(wait.values()) / MS, abs=TOL)
        assert got["last_rank"] == min(d, key=lambda r: d[r])
        assert got["arrival_skew_ms"] == pytest.approx((max(starts) - min(starts)) / MS, abs=TOL)
        assert got["end_skew_ms"] == pytest.approx((max(ends) - min(ends)) / MS, abs=TOL)
        assert max(ends) > min(ends)
    for row in rep["ranks"]:
        assert row["wait_ms"] == pytest.approx(wait_total[row["rank"]] / MS, abs=TOL)


# ----------------------------------------------------------------------------- no step markers


def test_without_step_markers_every_whole_window_number_is_still_exact(tmp_path: Path) -> None:
    """ProfilerStep events removed from every file: no step rows, and the whole-window numbers unchanged."""
    import json

    sc = Scenario(ranks=3, steps=2, overlap=0.5, late_ranks={1: (300_000, "host")}, ts_style="int", seed=6)
    wl = build(sc)
    paths = write_kineto(wl, tmp_path)
    for p in paths:
        doc = json.loads(p.read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
        p.write_text(json.dumps(doc))
    files = {r: p for r, p in enumerate(paths)}
    c = Case(sc, wl.truth, tmp_path, files, {r: oracle.analyze_file(p) for r, p in files.items()},
             {r: oracle.gpu_events(oracle.load(p)) for r, p in files.items()}, rep=report(tmp_path))
    assert c.rep["steps"] == [] and all(not o.steps for o in c.oracles.values())
    assert any("no step markers" in w for w in c.rep["warnings"])
    rows = {r["rank"]: r for r in c.rep["ranks"]}
    for r, o in c.oracles.items():
        row, w = rows[r], o.whole
        assert row["steps"] == 0 and row["step_time_ms"] == {"mean": None, "p50": None, "max": None}
        assert row["exposed_comm_ms"] == pytest.approx(w.exposed_ns / MS, abs=TOL)
        assert row["compute_only_ms"] == pytest.approx(w.compute_only_ns / MS, abs=TOL)
        assert row["wait_ms"] == pytest.approx(wl.truth.ranks[r].wait_ns / MS, abs=TOL)
        wait, transfer = _exposed_split(c, r, (min(i.start_ns for i in c.events[r]), max(i.end_ns for i in c.events[r])),
                                        w.exposed_ns)
        assert row["exposed_wait_ms"] == pytest.approx(wait / MS, abs=TOL)
        assert row["exposed_transfer_ms"] == pytest.approx(transfer / MS, abs=TOL)


# ----------------------------------------------------------------------------- row order


def test_collectives_are_listed_by_start(case: Case) -> None:
    starts = [c["start_ms"] for c in case.rep["collectives"]]
    assert starts == sorted(starts) and len(set(starts)) > 1


def test_collectives_starting_together_are_listed_by_process_group(tmp_path: Path) -> None:
    """No jitter: both TP pairs start their all-reduce in the same nanosecond; the order is still fixed."""
    write_kineto(build(Scenario(ranks=4, steps=2, tp=2, jitter_ns=0)), tmp_path)
    rows = report(tmp_path)["collectives"]
    keys = [(c["start_ms"], c["pg"]) for c in rows]
    assert keys == sorted(keys) and len(set(s for s, _ in keys)) < len(keys)  # ties exist


# ----------------------------------------------------------------------------- one rank


def test_one_rank_has_no_matched_waits_and_exact_breakdown(tmp_path: Path) -> None:
    """A single rank's collectives have no peer to match: no waits, all exposed comm is transfer."""
    # 3 steps: 4 windows of 4 columns, where a table built without its orientation would read columns as rows
    (path,) = write_kineto(build(Scenario(ranks=1, steps=3, overlap=0.5)), tmp_path)
    rep = report(tmp_path)
    ref = oracle.analyze_file(path)
    (row,) = rep["ranks"]
    assert (row["wait_ms"], row["caused_wait_ms"], row["last_arrival_pct"], row["exposed_wait_ms"]) == (0, 0, None, 0)
    assert row["exposed_transfer_ms"] == pytest.approx(ref.whole.exposed_ns / MS, abs=TOL) and ref.whole.exposed_ns > 0
    assert row["compute_only_ms"] == pytest.approx(ref.whole.compute_only_ns / MS, abs=TOL)
    heuristic = {k: rep["stragglers"][k] for k in ("verdict", "roots", "ranking", "transfer_caused_wait_ms")}
    assert heuristic == {"verdict": None, "roots": [], "ranking": [
        {"rank": 0, "root_caused_wait_ms": 0.0, "propagated_wait_ms": 0.0, "caused_wait_ms": 0.0, "wait_ms": 0.0,
         "last_arrival_pct": None, "steps_last": 0, "instances": 0}],
        "transfer_caused_wait_ms": 0.0}
    # one rank is its own ideal but for its steps' jitter (test_counterfactual pins S on hand-built jobs)
    assert rep["stragglers"]["slowdown"] == pytest.approx(1.0, abs=0.01)
    assert rep["matching"]["instances"] == 0 and rep["matching"]["unmatched_kernels"] == len(ref.comm) == 2 * 3
    assert rep["collectives"] == [] and rep["bandwidth"] == []
    assert rep["clock"] == {"method": "none", "reference_rank": 0, "offsets_us": {"0": 0.0}, "uncertainty_us": None,
                            "instances": 0}
    for s in rep["steps"]:
        b = ref.steps[s["step"]]
        assert (s["wait_ms"], s["caused_wait_ms"], s["exposed_wait_ms"]) == (0, 0, 0)
        assert s["exposed_transfer_ms"] == pytest.approx(b.exposed_ns / MS, abs=TOL)


# ----------------------------------------------------------------------------- significance


@pytest.mark.parametrize("n", [1, 3, 8, 40])
@pytest.mark.parametrize("p", [0.0, 0.05, 0.25, 0.5])
def test_binomial_tail_matches_scipy(n: int, p: float) -> None:
    """The verdict's p-values (P(X >= k), X ~ Binomial(n, p)) against scipy, edges included. p is a chance of
    being last (1 / group size, groups of 2 or more), so at most 0.5."""
    from analyzer.metrics.stragglers import binom_sf

    for k in range(-1, n + 2):
        want = 1.0 if k <= 0 else float(binom.sf(k - 1, n, p))
        assert binom_sf(k, n, p) == pytest.approx(want, abs=1e-12), (k, n, p)


def test_consistent_but_small_lateness_gets_no_verdict(tmp_path: Path) -> None:
    """Rank 2 is last everywhere and causes all the wait, but the wait is 2% of the others' communication
    (< 5%): no verdict. Judged against the others' communication, not the late rank's own."""
    sc = Scenario(ranks=4, steps=4, jitter_ns=0, late_ranks={2: (20_000, "host")},
                  collectives=(Collective("all_reduce", 64 << 20, 1_000_000),))
    wl = build(sc)
    write_kineto(wl, tmp_path)
    rep = report(tmp_path)
    caused = wl.truth.ranks[2].caused_wait_ns
    others_comm = sum(r["comm_ms"] for r in rep["ranks"] if r["rank"] != 2) * MS
    own_comm = next(r["comm_ms"] for r in rep["ranks"] if r["rank"] == 2) * MS
    assert caused == sum(rt.caused_wait_ns for rt in wl.truth.ranks.values()) > 0
    assert caused / others_comm < 0.05 <= caused / own_comm
    assert rep["stragglers"]["ranking"][0]["rank"] == 2 and rep["stragglers"]["ranking"][0]["steps_last"] == 4
    assert rep["stragglers"]["verdict"] is None


def test_fully_hidden_communication_has_nothing_to_split(tmp_path: Path) -> None:
    """overlap = 1: the last arriver's comm (transfer only) runs entirely under compute, so its exposed comm,
    exposed wait and exposed transfer are exactly 0 in every window; the waiting ranks still split theirs."""
    sc = Scenario(ranks=3, steps=3, overlap=1.0, late_ranks={1: (300_000, "host")}, seed=2,
                  collectives=(Collective("all_reduce", 16 << 20, 100_000),))  # one per step: rank 1 is always last
    wl = build(sc)
    files = dict(enumerate(write_kineto(wl, tmp_path)))
    assert all(i.last_rank == 1 for i in wl.truth.instances)
    c = Case(sc, wl.truth, tmp_path, files, {r: oracle.analyze_file(p) for r, p in files.items()},
             {r: oracle.gpu_events(oracle.load(p)) for r, p in files.items()}, rep=report(tmp_path))
    windows = [row for row in c.rep["ranks"] + c.rep["steps"] if row["rank"] == 1]
    assert len(windows) == 1 + sc.steps
    for row in windows:
        assert (row["exposed_comm_ms"], row["exposed_wait_ms"], row["exposed_transfer_ms"]) == (0.0, 0.0, 0.0)
    for row in c.rep["ranks"]:
        if row["rank"] != 1:
            r = row["rank"]
            ev = c.events[r]
            wait, transfer = _exposed_split(c, r, (min(i.start_ns for i in ev), max(i.end_ns for i in ev)),
                                            c.oracles[r].whole.exposed_ns)
            assert row["exposed_wait_ms"] == pytest.approx(wait / MS, abs=TOL) and wait > 0
            assert row["exposed_transfer_ms"] == pytest.approx(transfer / MS, abs=TOL)


def test_split_is_scaled_when_comm_kernels_overlap_each_other(tmp_path: Path) -> None:
    """Rank 0's first all-reduce of each step is made to run 1 ms longer (edited file), over its second one (moved to
    another stream):
    the kernels' exposed parts then add up to more than the exposed union, and the split is scaled to it.
    Waits come from the kernels by brute force (d - min d per instance; one clock, world group only)."""
    import json

    sc = Scenario(ranks=4, steps=2, overlap=0.3, late_ranks={2: (200_000, "host")}, seed=1, ts_style="int")
    paths = write_kineto(build(sc), tmp_path)
    doc = json.loads(paths[0].read_text())
    comm = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]),
                  key=lambda e: e["ts"])
    for e in comm[::2]:
        e["dur"] += 1000  # us
    for e in comm[1::2]:  # on a second NCCL stream (another communicator's), so the overlap is one a GPU can run;
        e["tid"] = 99     # on one stream it is impossible, and the loader clips it (sanity.py)
        if isinstance(e.get("args"), dict) and "stream" in e["args"]:
            e["args"]["stream"] = 99
    paths[0].write_text(json.dumps(doc))
    events = {r: oracle.gpu_events(oracle.load(p)) for r, p in enumerate(paths)}
    comm_k = {r: sorted((i for i in ev if i.kind == "comm"), key=lambda i: i.start_ns) for r, ev in events.items()}
    assert comm_k[0][0].end_ns > comm_k[0][1].start_ns  # they overlap now
    rep = report(tmp_path)
    rows = {r["rank"]: r for r in rep["ranks"]}
    for r in range(4):
        kernels = []
        for i, k in enumerate(comm_k[r]):
            d = {q: comm_k[q][i].end_ns - comm_k[q][i].start_ns for q in range(4)}
            kernels.append((k.start_ns, k.end_ns, d[r] - min(d.values())))
        whole = oracle.breakdown(events[r])
        window = (min(i.start_ns for i in events[r]), max(i.end_ns for i in events[r]))
        wait, transfer = _split(kernels, events[r], window, whole.exposed_ns)
        assert rows[r]["exposed_wait_ms"] == pytest.approx(wait / MS, abs=TOL), r
        assert rows[r]["exposed_transfer_ms"] == pytest.approx(transfer / MS, abs=TOL), r
        if r == 0:  # the scaling matters here: unscaled, the parts would exceed the exposed union
            compute = _merge([(i.start_ns, i.end_ns) for i in events[0] if i.kind == "compute"])
            parts = sum((e - s) - _covered(compute, s, e) for s, e, _ in kernels)
            assert parts > whole.exposed_ns * 1.05 and wait > 0.05 * MS


def test_a_run_without_any_wait_has_no_step_straggler(tmp_path: Path) -> None:
    """No jitter and no late rank: every rank arrives at every collective together, so nobody waits, nobody
    is the straggler of a step, and nobody caused wait (a step whose top causer caused 0 does not count)."""
    sc = Scenario(ranks=3, steps=3, jitter_ns=0, overlap=0.5)
    wl = build(sc)
    write_kineto(wl, tmp_path)
    assert all(i.last_rank is None and not any(i.wait_ns.values()) for i in wl.truth.instances)
    rep = report(tmp_path)
    st = rep["stragglers"]
    assert st["verdict"] is None and st["roots"] == []
    assert [(r["steps_last"], r["caused_wait_ms"], r["wait_ms"], r["root_caused_wait_ms"]) for r in st["ranking"]] == [
        (0, 0.0, 0.0, 0.0)] * sc.ranks
    assert all(s["caused_wait_ms"] == 0.0 and s["exposed_wait_ms"] == 0.0 for s in rep["steps"])


def test_one_nanosecond_of_caused_wait_makes_a_step_straggler(tmp_path: Path) -> None:
    """Rank 1 arrives 1 ns late at one collective of every step (the other arrives together): 1 ns of caused
    wait per step is still more than zero, so rank 1 is every step's straggler."""
    sc = Scenario(ranks=2, steps=3, jitter_ns=0, late_ranks={1: (1, "host")})
    wl = build(sc)
    write_kineto(wl, tmp_path)
    late = [i for i in wl.truth.instances if i.last_rank is not None]
    assert {(i.last_rank, sum(i.wait_ns.values())) for i in late} == {(1, 1)} and len({i.step for i in late}) == 3
    ranking = {r["rank"]: r for r in report(tmp_path)["stragglers"]["ranking"]}
    assert (ranking[1]["steps_last"], ranking[0]["steps_last"]) == (3, 0)
    assert ranking[1]["caused_wait_ms"] == pytest.approx(3 / MS, abs=TOL) and ranking[0]["wait_ms"] == ranking[1][
        "caused_wait_ms"]


def test_a_rank_outside_every_collective_is_listed_with_zero_waits(tmp_path: Path) -> None:
    """Ranks 0 and 1 all-reduce in their own group; rank 2 only computes. It keeps its rows, with zero waits
    and no last-arrival share (no instance), and the others' numbers are the generator's."""
    sc = Scenario(ranks=3, steps=2, late_ranks={1: (200_000, "host")},
                  process_groups=(ProcessGroup("0", (0, 1, 2)), ProcessGroup("1", (0, 1))),
                  collectives=(Collective("all_reduce", 16 << 20, 100_000, groups=("1",)),))
    wl = build(sc)
    write_kineto(wl, tmp_path)
    t = wl.truth.ranks
    assert t[2].instances == 0 and t[0].wait_ns > 0
    rep = report(tmp_path)
    for rows in (rep["ranks"], rep["stragglers"]["ranking"]):
        got = {r["rank"]: r for r in rows}
        assert sorted(got) == [0, 1, 2]
        for r in range(3):
            assert got[r]["wait_ms"] == pytest.approx(t[r].wait_ns / MS, abs=TOL)
            assert got[r]["caused_wait_ms"] == pytest.approx(t[r].caused_wait_ns / MS, abs=TOL)
            pct = 100.0 * t[r].last_arrivals / t[r].instances if t[r].instances else None
            assert got[r]["last_arrival_pct"] == (pytest.approx(pct, abs=TOL) if pct is not None else None)


def test_point_to_point_pairs_are_listed_as_one_transfer(tmp_path: Path) -> None:
    """A send/recv pair is one instance, listed as "send_recv", matched by the recorded peer, with the
    generator's transfer, waits and last rank; the all-reduces keep their op and the metadata rule."""
    sc = Scenario(ranks=2, steps=2, late_ranks={1: (200_000, "host")},
                  collectives=(Collective("all_reduce", 16 << 20, 100_000),
                               Collective("send", 2 << 20, 40_000, peers=(0, 1))))
    c = _case(sc, tmp_path)
    pairs = _match_collectives(c)
    assert sorted(w.op for _, w in pairs) == ["all_reduce", "all_reduce", "send", "send"]
    for got, want in pairs:
        p2p = want.op == "send"
        assert (got["op"], got["match_rule"], got["partial"]) == (
            ("send_recv", "p2p_peer", False) if p2p else (want.op, "metadata", False))
        assert (got["pg"], got["step"], got["bytes"], got["ranks"]) == (want.pg, want.step, want.bytes, sorted(want.ranks))
        assert got["transfer_ms"] == pytest.approx(want.transfer_ns / MS, abs=TOL)
        assert got["max_wait_ms"] == pytest.approx(max(want.wait_ns.values()) / MS, abs=TOL)
        assert got["total_wait_ms"] == pytest.approx(sum(want.wait_ns.values()) / MS, abs=TOL)
        assert got["last_rank"] == want.last_rank


def test_split_of_windows_that_cut_comm_kernels(tmp_path: Path) -> None:
    """waits.exposed_split on windows that start and end in the middle of comm kernels (as host-side or
    misplaced step markers do), around a single kernel, of 1 ns, and without comm: only the part of
    each kernel inside a window counts, down to 1 ns windows. Brute force clips every kernel to the window
    and splits it by the generator's wait / duration."""
    import polars as pl

    from analyzer.metrics import overlap, waits
    from tests.helpers import run

    sc = Scenario(ranks=3, steps=2, overlap=0.3, late_ranks={1: (300_000, "host")}, seed=7)
    c = _case(sc, tmp_path)
    a = run(tmp_path)
    covs = overlap.coverages(a.traces.gpu)
    rows, want, ones = [], {}, 0
    for r, o in c.oracles.items():
        comm = sorted(o.comm, key=lambda k: k.start_ns)
        cuts = [((k1.start_ns + k1.end_ns) // 2, (k2.start_ns + k2.end_ns) // 2 + 1)
                for k1, k2 in zip(comm, comm[1:], strict=False)]
        alone = [(k.start_ns, k.end_ns) for k in comm]  # one kernel each
        after = [(comm[-1].end_ns + 1_000, comm[-1].end_ns + 2_000)]  # no comm at all, last of the rank
        # 1 ns windows inside a waiting kernel's exposed part: a 1 ns piece, total and exposed
        waits_of = _kernel_wait(c, r)
        tiny = [(t, t + 1) for k in comm if waits_of[k.start_ns] > 0 for t in range(k.start_ns, k.end_ns, 997)
                if oracle.breakdown(c.events[r], (t, t + 1)).exposed_ns == 1][:3]
        ones += len(tiny)
        for key, (lo, hi) in enumerate(cuts + alone + tiny + after):
            exposed = oracle.breakdown(c.events[r], (lo, hi)).exposed_ns
            rows.append({"rank": r, "key": key, "start_ns": lo, "end_ns": hi, "exposed_comm_ns": exposed})
            want[r, key] = _exposed_split(c, r, (lo, hi), exposed)
    windows = pl.DataFrame(rows, schema={"rank": pl.Int32, "key": pl.Int64, "start_ns": pl.Int64,
                                         "end_ns": pl.Int64, "exposed_comm_ns": pl.Int64})
    got = waits.exposed_split(a.kernels, covs, windows)
    assert got.height == len(want) and sum(w > 0 for w, _ in want.values()) > 3 and ones > 3
    for r, key, wait, transfer in got.select("rank", "key", "exposed_wait_ns", "exposed_transfer_ns").iter_rows():
        assert (wait, transfer) == pytest.approx(want[r, key], abs=1e-6), (r, key)


@pytest.mark.parametrize("seed", range(4))
def test_json_numbers_are_rounded_a_column_at_a_time_bit_for_bit(seed: int) -> None:
    # the column-wise rounding gives exactly round(x, 6) (or None for null, NaN, inf), ties and huge values
    # included: k + 0.5 ns, their neighbours one ulp away, values near 2^50 ns, tiny and negative ones
    import math
    import random

    import polars as pl

    from analyzer.report.json import _number, _numbers

    rng = random.Random(seed)
    ties = [(rng.randrange(10**12) + 0.5) / 1e6 for _ in range(2000)]
    vals = ties + [math.nextafter(t, math.inf) for t in ties] + [math.nextafter(t, -math.inf) for t in ties]
    vals += [rng.uniform(-1e6, 1e6) for _ in range(5000)] + [rng.uniform(-1e-5, 1e-5) for _ in range(2000)]
    vals += [2.0**50 / 1e6 * rng.uniform(0.5, 4) for _ in range(500)] + [1e300, -0.0, 0.0, 2.5e-6, 5e-7]
    vals += [float("nan"), float("inf"), -float("inf"), None]
    rng.shuffle(vals)
    got = _numbers(pl.Series(vals, dtype=pl.Float64))
    want = [_number(v) for v in vals]
    assert [(g is None, g if g is None else math.copysign(1.0, g), g) for g in got] == \
        [(w is None, w if w is None else math.copysign(1.0, w), w) for w in want]
