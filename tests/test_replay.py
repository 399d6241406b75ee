"""The replay and the what-if scenarios: exact hand-built deltas, generator truth, real traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analyzer.analysis import analyze
from analyzer.compare.diff import compare
from analyzer.crossrank import graph
from analyzer.model import STEP_SCHEMA, conform
from analyzer.report.json import to_dict
from analyzer.whatif import replay
from analyzer.whatif import scenarios as whatif
from sample_traces.generate import Collective, Scenario, build, write_kineto
from tests.conftest import SAMPLES, SHARED
from tests.helpers import cli, run
from tests.test_graph import comm_rows, gpu_table, hand


def _hand_replay(fill) -> tuple[dict, np.ndarray]:
    g = graph.build(*hand())
    arr = replay.Arrays.of(g)
    mods = replay.Mods.zeros(1, g.n_nodes, g.instances.height)
    fill(mods, {(r["rank"], r["name"]): r["node"] for r in g.nodes.to_dicts()})
    _, de = replay.run(arr, replay.schedule(arr), mods)
    return {(r["rank"], r["name"]): r["node"] for r in g.nodes.to_dicts()}, de[0]


def test_hand_built_deltas() -> None:
    # nothing changed: nothing moves
    ids, de = _hand_replay(lambda m, ids: None)
    assert not de.any()
    # B 50 ns shorter: rank 1 arrives at 150, the instance ends at 150 + 100 = 250 on both ranks, D at 350
    ids, de = _hand_replay(lambda m, ids: m.ddur.__setitem__((0, ids[(1, "B")]), -50))
    assert de[ids[(0, "nccl_ar")]] == de[ids[(1, "nccl_ar")]] == -50 and de[ids[(0, "D")]] == -50
    # B 150 shorter: rank 1 would arrive at 50, but rank 0 arrives at 100: end 200, D [200, 300] (A ends at 100)
    ids, de = _hand_replay(lambda m, ids: m.ddur.__setitem__((0, ids[(1, "B")]), -150))
    assert de[ids[(0, "nccl_ar")]] == -100 and de[ids[(0, "D")]] == -100
    # communication hidden: D starts when rank 0 arrives (100), E keeps its 50 ns host gap after rank 1's arrival
    ids, de = _hand_replay(lambda m, ids: m.hide.__setitem__((0, slice(None)), True))
    assert de[ids[(0, "D")]] == -200 and de[ids[(1, "E")]] == -100
    # transfer halved: ends at 250
    ids, de = _hand_replay(lambda m, ids: m.dtr.__setitem__((0, 0), -50))
    assert de[ids[(0, "D")]] == -50 and de[ids[(1, "E")]] == -50


def _replay_of(gpu, rows, steps, fill) -> tuple[dict, np.ndarray, np.ndarray, replay.Schedule]:
    g = graph.build(gpu, rows, steps)
    arr = replay.Arrays.of(g)
    sch = replay.schedule(arr)
    ids = {(r["rank"], r["name"]): r["node"] for r in g.nodes.to_dicts()}
    mods = replay.Mods.zeros(1, g.n_nodes, g.instances.height)
    fill(mods, ids)
    ds, de = replay.run(arr, sch, mods)
    return ids, ds[0], de[0], sch


def _steps(ends: dict[int, int]) -> pl.DataFrame:
    return conform(pl.DataFrame({"rank": list(ends), "step": [1] * len(ends), "start_ns": [0] * len(ends),
                                 "end_ns": list(ends.values())}), STEP_SCHEMA)


def test_a_longer_first_operation_delays_the_collective_it_binds() -> None:
    # the hand job; A (node 0, rank 0's first operation) 150 ns longer: rank 0 arrives at 250, after rank 1 (200);
    # the instance ends at 250 + transfer 100 = 350 on both ranks, D [350, 450], E keeps its 50 ns gap: [400, 430]
    ids, ds, de, _ = _replay_of(*hand(), lambda m, ids: m.ddur.__setitem__((0, ids[(0, "A")]), 150))
    assert ids[(0, "A")] == 0
    assert de[ids[(0, "A")]] == 150 and ds[ids[(0, "nccl_ar")]] == 150
    assert de[ids[(0, "nccl_ar")]] == de[ids[(1, "nccl_ar")]] == 50
    assert de[ids[(0, "D")]] == 50 and de[ids[(1, "E")]] == 50


def test_a_stream_predecessor_that_ends_later_holds_the_next_kernel() -> None:
    # one rank: X [0,100] and Z [130,200] on stream 7, Y [0,120] on stream 8. Z's binding predecessor is Y (the
    # latest end before 130, gap 10); its stream predecessor X (slack 30). X 100 ns longer ends at 200: Y still
    # lets Z start at 130, but X holds it until 200: Z [200, 270], +70 (the binding rule alone would say 0)
    gpu = gpu_table([(0, 7, 0, 100, "X", "compute"), (0, 8, 0, 120, "Y", "compute"), (0, 7, 130, 200, "Z", "compute")])
    ids, ds, de, _ = _replay_of(gpu, _no_comm(), _steps({0: 200}),
                                lambda m, ids: m.ddur.__setitem__((0, ids[(0, "X")]), 100))
    assert ids[(0, "X")] == 0
    assert ds[ids[(0, "Z")]] == 70 and de[ids[(0, "Z")]] == 70 and de[ids[(0, "Y")]] == 0
    # Y 20 ns longer instead: Z's binding predecessor ends at 140, and Z keeps its 10 ns gap: [150, 220]
    ids, ds, de, _ = _replay_of(gpu, _no_comm(), _steps({0: 200}), lambda m, ids: m.ddur.__setitem__((0, ids[(0, "Y")]), 20))
    assert de[ids[(0, "Z")]] == 20


def _no_comm() -> pl.DataFrame:
    return comm_rows([(0, 20, 0, 1, "x", "unused")]).clear()


def test_an_end_waits_for_every_arrival_even_when_its_rank_gets_there_first() -> None:
    # rank 0: A [0,100], C [100,300] (comm), D [300,400]; rank 1: B1 [0,100], B2 [100,200] on another stream,
    # C [200,300], E [350,380]. Rank 0 reaches the end of C two events before rank 1 arrives. B2 50 ns longer:
    # rank 1 arrives at 250, the instance ends at 350 on both (transfer 100), so D and E move by +50
    gpu = gpu_table([
        (0, 7, 0, 100, "A", "compute"), (0, 20, 100, 300, "nccl_ar", "comm"), (0, 7, 300, 400, "D", "compute"),
        (1, 7, 0, 100, "B1", "compute"), (1, 8, 100, 200, "B2", "compute"), (1, 20, 200, 300, "nccl_ar", "comm"),
        (1, 7, 350, 380, "E", "compute"),
    ])
    rows = comm_rows([(0, 20, 100, 300, "nccl_ar", "i0"), (1, 20, 200, 300, "nccl_ar", "i0")])
    ids, _, de, sch = _replay_of(gpu, rows, _steps({0: 400, 1: 380}),
                                 lambda m, ids: m.ddur.__setitem__((0, ids[(1, "B2")]), 50))
    assert sch.forced == 0
    assert de[ids[(0, "nccl_ar")]] == de[ids[(1, "nccl_ar")]] == 50
    assert de[ids[(0, "D")]] == 50 and de[ids[(1, "E")]] == 50


def _crossing() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rank 0 runs instance a [100,200] then b [300,400] on stream 20, rank 1 b then a (kernels of 100 ns)."""
    gpu = gpu_table([
        (0, 20, 100, 200, "nccl_a", "comm"), (0, 20, 300, 400, "nccl_b", "comm"),
        (1, 20, 100, 200, "nccl_b", "comm"), (1, 20, 300, 400, "nccl_a", "comm"),
    ])
    rows = comm_rows([(0, 20, 100, 200, "nccl_a", "a"), (1, 20, 300, 400, "nccl_a", "a"),
                      (0, 20, 300, 400, "nccl_b", "b"), (1, 20, 100, 200, "nccl_b", "b")])
    return gpu, rows


def test_collectives_matched_in_crossing_order_are_forced_through_and_counted() -> None:
    # rank 0 runs instance a then b, rank 1 b then a: each end waits for an arrival behind the other end.
    # The replay releases both blocked ends (2 forced ends) instead of stopping, and still ends; a second
    # crossing pair later (c then d against d then c) is released again: 4 forced ends in all
    gpu, rows = _crossing()
    _, _, de, sch = _replay_of(gpu, rows, _steps({0: 400, 1: 400}), lambda m, ids: None)
    assert sch.forced == 2
    assert np.isfinite(de).all()
    gpu2 = pl.concat([gpu, gpu.with_columns(pl.col("start_ns") + 1000, pl.col("end_ns") + 1000,
                                            pl.col("name").str.replace("_a", "_c").str.replace("_b", "_d"))])
    rows2 = pl.concat([rows, rows.with_columns(pl.col("start_ns") + 1000, pl.col("end_ns") + 1000,
                                               pl.col("name").str.replace("_a", "_c").str.replace("_b", "_d"),
                                               pl.col("instance").replace({"a": "c", "b": "d"}))])
    _, _, de, sch = _replay_of(gpu2, rows2, _steps({0: 1400, 1: 1400}), lambda m, ids: None)
    assert sch.forced == 4


def test_an_end_waits_for_its_own_instance_not_an_earlier_complete_one() -> None:
    # as above, after a first collective i0 that both ranks finish together: rank 0 reaches the end of i1
    # while rank 1 still runs B2; i0 being complete must not release it. B2 50 ns longer: i1 ends 50 later
    gpu = gpu_table([
        (0, 20, 0, 50, "nccl_0", "comm"), (0, 7, 50, 100, "A", "compute"), (0, 20, 100, 300, "nccl_1", "comm"),
        (0, 7, 300, 400, "D", "compute"),
        (1, 20, 0, 50, "nccl_0", "comm"), (1, 7, 50, 100, "B1", "compute"), (1, 8, 100, 200, "B2", "compute"),
        (1, 20, 200, 300, "nccl_1", "comm"), (1, 7, 350, 380, "E", "compute"),
    ])
    rows = comm_rows([(0, 20, 0, 50, "nccl_0", "i0"), (1, 20, 0, 50, "nccl_0", "i0"),
                      (0, 20, 100, 300, "nccl_1", "i1"), (1, 20, 200, 300, "nccl_1", "i1")])
    ids, _, de, sch = _replay_of(gpu, rows, _steps({0: 400, 1: 380}),
                                 lambda m, ids: m.ddur.__setitem__((0, ids[(1, "B2")]), 50))
    assert sch.forced == 0
    assert de[ids[(0, "nccl_1")]] == de[ids[(1, "nccl_1")]] == 50 and de[ids[(0, "D")]] == 50


def test_a_job_of_one_operation_and_a_job_of_none() -> None:
    # one kernel 10 ns longer ends 10 ns later; nothing at all replays to nothing, with no forced end
    ids, ds, de, sch = _replay_of(gpu_table([(0, 7, 0, 100, "X", "compute")]), _no_comm(), _steps({0: 100}),
                                  lambda m, ids: m.ddur.__setitem__((0, ids[(0, "X")]), 10))
    assert sch.n_waves == 1 and ds[ids[(0, "X")]] == 0 and de[ids[(0, "X")]] == 10
    _, ds, de, sch = _replay_of(gpu_table([]), _no_comm(), _steps({}), lambda m, ids: None)
    assert sch.n_waves == 0 and sch.forced == 0 and ds.size == de.size == 0


def _real_sets() -> list[Path]:
    sets = sorted(p for p in (SAMPLES / "gpu_h200").iterdir() if p.is_dir())
    if SHARED.exists():
        sets += sorted(p for p in (SHARED / "gpu_h200").iterdir() if p.is_dir())
    return sets


REAL = _real_sets()


def test_real_sets_are_found() -> None:
    assert len(REAL) >= 5  # the shipped captures at least: a glob that finds nothing must not pass


@pytest.mark.parametrize("folder", REAL, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_replay_reproduces_real_step_times(folder: Path) -> None:
    a = run(folder)
    w = a.whatif
    assert w is not None and len(a.source["ranks"]) > 1
    # the replay places every operation from the host chains and what it waits for: its error against the
    # measured run is measured, not zero by construction (it was 0.0% on every set before the host was in it)
    assert 0.0 < w.replay_error_pct < 5.0
    assert w.errors.height == a.steps.height and float(w.errors["error_pct"].max()) < 10.0
    assert w.forced_ends == 0
    # the step the replay measures is the job's, as reported: one interval per step on every rank
    # (analyzer/crossrank/step_sync.py), replayed the same way (analyzer/whatif/windows.py)
    assert a.steps.group_by("step").agg(pl.col("span_ns").n_unique())["span_ns"].max() == 1
    assert a.steps["span_ns"].mean() == pytest.approx(w.measured_step_time_ns, rel=1e-9)


def _gen(tmp_path: Path, name: str, sc: Scenario, **kw):
    d = tmp_path / name
    write_kineto(build(sc), d)
    return run(d, **kw)


def _step_ms(a) -> float:
    return a.whatif.measured_step_time_ns / 1e6


@pytest.mark.parametrize("sc", [
    Scenario(ranks=8, tp=2, steps=3, overlap=0.5, late_ranks={5: (1_500_000, "host"), 2: (700_000, "compute")}),
    Scenario(ranks=4, steps=3, overlap=0.0, jitter_ns=30_000, clock_offsets_ns={1: 3_000_000, 3: -2_000_000}),
    Scenario(ranks=16, tp=4, steps=2, overlap=0.8, missing_meta_first=2),
], ids=["tp2-late-overlap", "dp-clock-offsets", "tp4-missing-meta"])
def test_replay_reproduces_generated_step_times(tmp_path: Path, sc: Scenario) -> None:
    a = _gen(tmp_path, "run", sc)
    assert a.whatif.replay_error_pct < 5.0 and float(a.whatif.errors["error_pct"].max()) < 5.0


@pytest.mark.parametrize("kind,tp,ranks,late_rank", [("host", 1, 8, 6), ("compute", 1, 8, 6), ("host", 2, 8, 6),
                                                     ("compute", 4, 8, 6), ("host", 8, 32, 21)])
def test_no_straggler_predicts_the_run_without_the_late_rank(tmp_path: Path, kind: str, tp: int, ranks: int,
                                                             late_rank: int) -> None:
    base = dict(ranks=ranks, tp=tp, steps=4, overlap=0.5, seed=3)
    late = _gen(tmp_path, "late", Scenario(**base, late_ranks={late_rank: (3_000_000, kind)}))
    clean = _gen(tmp_path, "clean", Scenario(**base))
    assert late.verdict is not None and (late.verdict.rank, late.verdict.kind) == (late_rank, kind)
    pred = late.whatif.scenarios.filter(pl.col("name") == "no_straggler")["step_time_ns"][0] / 1e6
    assert _step_ms(late) > 1.5 * _step_ms(clean)  # the delay matters, so the prediction is not trivially close
    assert pred == pytest.approx(_step_ms(clean), rel=0.05)
    # compare checks that prediction against the run without the straggler
    p = compare(late, clean).straggler.prediction
    assert p is not None and abs(p.error_pct) < 5.0 and p.rank == late_rank


def test_busbw_at_twice_the_measured_bandwidth_predicts_half_the_transfer(tmp_path: Path) -> None:
    def sc(scale: int) -> Scenario:  # both all-reduces at the same bus bandwidth
        return Scenario(ranks=8, steps=3, overlap=0.3, collectives=(
            Collective("all_reduce", 32 << 20, 800_000 // scale), Collective("all_reduce", 16 << 20, 400_000 // scale)))
    slow = _gen(tmp_path, "slow", sc(1))
    fast = _gen(tmp_path, "fast", sc(2))
    busbw = float(slow.collectives["busbw_gbps"].median())
    a = analyze(slow.traces, busbw={"all_reduce": 2 * busbw})
    pred = a.whatif.scenarios.filter(pl.col("name").str.starts_with("busbw:"))["step_time_ns"][0] / 1e6
    assert _step_ms(slow) - _step_ms(fast) > 0.1 * _step_ms(fast)
    assert pred == pytest.approx(_step_ms(fast), rel=0.05)


def test_no_exposed_comm_is_an_upper_bound_and_ideal_is_consistent(tmp_path: Path) -> None:
    a = _gen(tmp_path, "run", Scenario(ranks=8, tp=2, steps=3, late_ranks={1: (2_000_000, "host")}))
    sc = {r["name"]: r for r in a.whatif.scenarios.to_dicts()}
    # hiding communication (its waits too) is no cure for a host that launches its step 2 ms late: the late rank's
    # own GPU work still starts 2 ms late (the old replay kept each op's gap to its predecessor, so a GPU that
    # stopped waiting pulled the late host along and this saving exceeded no_straggler's)
    assert sc["no_exposed_comm"]["saving_ns"] < 0.25 * sc["no_straggler"]["saving_ns"]
    assert sc["no_straggler"]["saving_ns"] == pytest.approx(2_000_000, rel=0.05)
    assert sc["no_exposed_comm"]["step_time_ns"] < _step_ms(a) * 1e6
    # S against the replay of the measured run (its error cancels, as in the counterfactual)
    assert a.whatif.ideal_speedup == pytest.approx(a.whatif.replay_step_time_ns / sc["ideal"]["step_time_ns"])
    # the late rank is the one whose ideal saves most, every step
    assert a.whatif.ranks["rank"][0] == 1
    cells = a.whatif.rank_steps
    best = cells.sort("saving_ns", descending=True).group_by("step", maintain_order=True).first()
    assert set(best["rank"].to_list()) == {1}


def test_json_whatif_and_critical_path_contract(tmp_path: Path) -> None:
    a = _gen(tmp_path, "run", Scenario(ranks=4, steps=3, late_ranks={2: (1_000_000, "host")}))
    d = json.loads(json.dumps(to_dict(a), allow_nan=False))
    w = d["whatif"]
    assert {"replay_step_time_ms", "measured_step_time_ms", "replay_error_pct", "scenarios", "ranks"} <= set(w)
    assert [s["name"] for s in w["scenarios"]] == ["no_straggler", "no_exposed_comm", "ideal"]
    assert set(w["scenarios"][0]) == {"name", "step_time_ms", "saving_ms", "saving_pct"}
    assert w["ranks"][0]["rank"] == 2 and set(w["ranks"][0]) == {"rank", "saving_ms", "saving_pct"}
    assert {r["rank"] for r in w["replay_steps"]} == {0, 1, 2, 3}
    cp = d["critical_path"]
    assert set(cp[0]) == {"step", "rank", "compute_ms", "exposed_transfer_ms", "wait_ms", "host_idle_ms"}
    host = [r for r in cp if r["rank"] == 2]
    assert len(host) == 3 and all(r["host_idle_ms"] == pytest.approx(1.0, rel=0.01) for r in host)


def test_cli_whatif_option(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    write_kineto(build(Scenario(ranks=4, steps=2)), folder)
    out = cli("analyze", folder, "--format", "json", "-j", "1", "--whatif", "busbw:all_reduce=400",
              "--whatif", "busbw:all=50")
    assert out.returncode == 0, out.stderr
    names = [s["name"] for s in json.loads(out.stdout)["whatif"]["scenarios"]]
    assert "busbw:all_reduce=400" in names and "busbw:all=50" in names
    text = cli("analyze", folder, "-j", "1")
    assert text.returncode == 0 and any(line.startswith("What if: ") for line in text.stdout.splitlines()[:6])
    bad = cli("analyze", folder, "--whatif", "busbw:all_reduce")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "busbw:OP=GBPS" in bad.stderr


def test_parse_specs() -> None:
    assert whatif.parse_specs(["busbw:all_reduce=400", "busbw:all=1.5"]) == {"all_reduce": 400.0, "all": 1.5}
    for bad in ("busbw:all_reduce=0", "bw:all_reduce=3", "busbw:=3"):
        with pytest.raises(Exception, match="busbw:OP=GBPS"):
            whatif.parse_specs([bad])


@pytest.mark.parametrize("name", ["hybrid_tp_dp", "host_straggler", "compute_straggler"])
def test_no_straggler_saves_about_the_injected_delay_on_real_captures(name: str) -> None:
    """No balanced capture of the same jobs exists; the injected per-step delay is the known answer instead."""
    folder = SAMPLES / "gpu_h200" / name
    truth = json.loads((folder / "ground_truth.json").read_text())
    delay_ms = truth.get("delay_ms") or 1000.0 * truth["cpu_sleep_s"]
    a = run(folder)
    assert a.verdict is not None and a.verdict.rank == truth["straggler_rank"]
    saving_ms = a.whatif.scenarios.filter(pl.col("name") == "no_straggler")["saving_ns"][0] / 1e6
    # (each shares one GPU time-sliced with the others: the late rank's waits for its time slices go with it)
    assert saving_ms == pytest.approx(delay_ms, rel=0.25)
    assert a.whatif.ranks["rank"][0] == truth["straggler_rank"]  # making it ideal saves most


def test_per_dimension_hiding_saves_exactly_that_dimensions_transfer(tmp_path: Path) -> None:
    sc = Scenario(ranks=8, tp=2, steps=3, overlap=0.0, jitter_ns=0)  # no waiting: each collective costs its transfer
    a = _gen(tmp_path, "run", sc)
    tp_pgs = {pg.name for pg in sc.process_groups[1:] if len(pg.ranks) == 2}
    dims = {pg.name: ("tp" if pg.name in tp_pgs else "dp") for pg in sc.process_groups[1:]}
    w = whatif.analyze(a.graph, a.traces.steps, None, None, dims)
    saving = {r["name"]: r["saving_ns"] for r in w.scenarios.to_dicts()}
    tp_transfer, dp_transfer = (c.transfer_ns for c in sc.collectives)
    assert saving["no_exposed_comm:tp"] == pytest.approx(tp_transfer, abs=1)
    assert saving["no_exposed_comm:dp"] == pytest.approx(dp_transfer, abs=1)
    assert saving["no_exposed_comm"] == pytest.approx(tp_transfer + dp_transfer, abs=1)


@pytest.mark.parametrize("folder", REAL, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_critical_path_covers_each_real_step(folder: Path) -> None:
    """The split adds up to the step's span over all ranks (aligned clock), even where kernel ends differ."""
    from analyzer.metrics.critical_path import step_summary

    a = run(folder)
    # each step from its earliest aligned start to its latest aligned end over ranks (the graph's windows)
    job = a.graph.steps.group_by("step").agg(pl.col("a_start_ns").min().alias("start_ns"),
                                             pl.col("a_end_ns").max().alias("end_ns")).sort("step")
    path = step_summary(a.critical_path)
    assert path["step"].to_list() == job["step"].to_list()
    spans = (job["end_ns"] - job["start_ns"]).to_numpy()
    assert path["path_ns"].to_numpy() == pytest.approx(spans, rel=1e-6)


@pytest.mark.parametrize("kind", ["host", "compute"])
def test_no_straggler_with_tiled_step_windows(tmp_path: Path, kind: str) -> None:
    """Without GPU-side step annotations the windows tile (a step ends where the next starts): a host-late
    rank's idle then sits at the end of its previous window, and must move with the next step's start."""
    base = dict(ranks=8, tp=2, steps=4, gpu_step_annotations=False)
    late = _gen(tmp_path, "late", Scenario(**base, late_ranks={5: (3_000_000, kind)}))
    clean = _gen(tmp_path, "clean", Scenario(**base))
    steps = late.traces.steps.sort("rank", "step")
    assert steps.filter(pl.col("step") < pl.col("step").max())["end_ns"].to_list() == \
        steps.filter(pl.col("step") > pl.col("step").min())["start_ns"].to_list()  # the windows do tile
    pred = late.whatif.scenarios.filter(pl.col("name") == "no_straggler")["step_time_ns"][0] / 1e6
    assert _step_ms(late) > 2 * _step_ms(clean)
    assert pred == pytest.approx(_step_ms(clean), rel=0.05)


def _spans(gpu, rows, steps, fill) -> dict[tuple[int, int], float]:
    g = graph.build(gpu, rows, steps)
    arr = replay.Arrays.of(g)
    ids = {(r["rank"], r["name"]): r["node"] for r in g.nodes.to_dicts()}
    mods = replay.Mods.zeros(1, g.n_nodes, g.instances.height)
    fill(mods, ids)
    ds, de = replay.run(arr, replay.schedule(arr), mods)
    seg = replay.segments(g, steps)
    span = replay.step_spans(seg, ds, de)[0]
    return {(r, s): float(v) for (r, s), v in zip(seg.table.select("rank", "step").iter_rows(), span)}


def test_without_steps_each_ranks_whole_window_is_replayed_as_one_step() -> None:
    # the hand job with no step table: rank 0's window is [0, 400], rank 1's [0, 380] (step -1). B 50 ns
    # shorter: the instance ends at 250, D [250, 350], E [300, 330]: windows 350 and 330
    gpu, rows, _ = hand()
    no_steps = _steps({}).clear()
    assert _spans(gpu, rows, no_steps, lambda m, ids: None) == {(0, -1): 400.0, (1, -1): 380.0}
    got = _spans(gpu, rows, no_steps, lambda m, ids: m.ddur.__setitem__((0, ids[(1, "B")]), -50))
    assert got == {(0, -1): 350.0, (1, -1): 330.0}


def test_a_step_numbered_zero_is_a_step() -> None:
    # the hand job's one step numbered 0 (profilers count from 0): the same spans as step 1 would give
    gpu, rows, steps = hand()
    zero = steps.with_columns(pl.lit(0, dtype=steps.schema["step"]).alias("step"))
    got = _spans(gpu, rows, zero, lambda m, ids: m.ddur.__setitem__((0, ids[(1, "B")]), -50))
    assert got == {(0, 0): 350.0, (1, 0): 330.0}


def test_step_spans_of_a_one_operation_job_and_of_an_empty_one() -> None:
    # one kernel in a step [0, 100]: the step lasts 100, and 110 with the kernel 10 ns longer; no operation: no step
    one = gpu_table([(0, 7, 0, 100, "X", "compute")])
    assert _spans(one, _no_comm(), _steps({0: 100}), lambda m, ids: None) == {(0, 1): 100.0}
    assert _spans(one, _no_comm(), _steps({0: 100}), lambda m, ids: m.ddur.__setitem__((0, ids[(0, "X")]), 10)) == {
        (0, 1): 110.0}
    g = graph.build(gpu_table([]), _no_comm(), _steps({}))
    arr = replay.Arrays.of(g)
    ds, de = replay.run(arr, replay.schedule(arr), replay.Mods.zeros(2, 0, 0))
    assert replay.step_spans(replay.segments(g, _steps({})), ds, de).shape == (2, 0)


def _random_job(rng: np.random.Generator) -> tuple[pl.DataFrame, pl.DataFrame]:
    """2-6 ranks, compute on two streams, collectives of every rank in one order: each rank arrives when its
    own compute gets it there, every participant ends at the last arrival + a transfer, and compute goes on
    beside the collective on the second stream."""
    n_ranks, n_coll = int(rng.integers(2, 7)), int(rng.integers(1, 6))
    t = rng.integers(0, 50, n_ranks)
    ops, comm = [], []
    for k in range(n_coll):
        arrive = []
        for r in range(n_ranks):
            for j in range(int(rng.integers(0, 4))):
                stream = 7 if rng.random() < 0.7 else 8
                d, gap = int(rng.integers(1, 100)), int(rng.integers(0, 30))
                ops.append((r, stream, int(t[r] + gap), int(t[r] + gap + d), f"k{k}_{j}_{stream}", "compute"))
                t[r] += gap + d
            arrive.append(int(t[r] + rng.integers(0, 20)))
        end = max(arrive) + int(rng.integers(1, 80))
        for r in range(n_ranks):
            ops.append((r, 20, arrive[r], end, f"nccl_{k}", "comm"))
            comm.append((r, 20, arrive[r], end, f"nccl_{k}", f"i{k}"))
            # the next compute starts beside the collective (stream 8) or after it
            t[r] = arrive[r] + int(rng.integers(1, 10)) if rng.random() < 0.4 else end
    return gpu_table(ops), comm_rows(comm)


def _oracle(g: graph.Graph, mods: replay.Mods, s: int) -> tuple[np.ndarray, np.ndarray]:
    """The replay's definition (module doc of analyzer/whatif/replay.py), one operation at a time in plain Python."""
    nodes = g.nodes.to_dicts()
    members: dict[int, list[int]] = {}
    for x in nodes:
        if x["inst"] is not None:
            members.setdefault(x["inst"], []).append(x["node"])
    ds: dict[int, float] = {}
    de: dict[int, float] = {}
    while len(de) < len(nodes):
        for x in nodes:
            i = x["node"]
            if i not in ds:
                bp, sp = x["bind_pred"], x["stream_pred"]
                if (bp is not None and bp not in de) or (sp is not None and sp not in de):
                    continue
                after_bind = (de[bp] if bp is not None else 0.0) + mods.dgap[s, i]
                after_stream = de[sp] - x["slack_ns"] if sp is not None else -np.inf
                ds[i] = max(after_bind, after_stream)
                if x["inst"] is None:
                    de[i] = ds[i] + mods.ddur[s, i]
            if i in ds and i not in de and all(q in ds for q in members[x["inst"]]):
                if mods.hide[s, i]:
                    de[i] = ds[i] - x["dur_ns"]
                else:
                    arrivals = [ds[q] - nodes[q]["wait_ns"] for q in members[x["inst"]]]
                    de[i] = max(arrivals) + mods.dtr[s, x["inst"]]
    n = len(nodes)
    return np.array([ds[i] for i in range(n)]), np.array([de[i] for i in range(n)])


@pytest.mark.parametrize("width", [1, replay.LIST_WIDTH])
@pytest.mark.parametrize("seed", range(12))
def test_the_replay_equals_its_definition_one_operation_at_a_time(seed: int, width: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # random jobs and random changes (durations, gaps, transfers, hidden communication), three scenarios at
    # once, against a plain-Python replay that computes each operation once everything it depends on is known;
    # width 1: an event's successors and an instance's ends past the first are read as ranges, not the table
    monkeypatch.setattr(replay, "LIST_WIDTH", width)
    rng = np.random.default_rng(seed)
    gpu, rows = _random_job(rng)
    g = graph.build(gpu, rows, _steps({}).clear())
    arr = replay.Arrays.of(g)
    sch = replay.schedule(arr)
    assert sch.forced == 0
    n, n_inst = g.n_nodes, g.instances.height
    mods = replay.Mods.zeros(3, n, n_inst)
    comm = (g.nodes["kind"] == "comm").to_numpy()
    for s in range(1, 3):
        mods.ddur[s] = np.where(comm, 0, rng.integers(-40, 60, n))
        mods.dgap[s] = np.maximum(rng.integers(-30, 40, n), -g.nodes["gap_ns"].to_numpy())
        mods.dtr[s] = rng.integers(-20, 50, n_inst)
        mods.hide[s] = comm & (rng.random(n) < 0.3)
    ds, de = replay.run(arr, sch, mods)
    assert not ds[0].any() and not de[0].any()  # nothing changed: nothing moves
    for s in range(1, 3):
        want_s, want_e = _oracle(g, mods, s)
        np.testing.assert_allclose(ds[s], want_s, atol=1e-9)
        np.testing.assert_allclose(de[s], want_e, atol=1e-9)


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("seed", range(4))
def test_lists_per_key_give_each_keys_items_in_order(seed: int, width: int) -> None:
    # a padded table for short lists, ranges for long ones: any keys asked together give the items of each,
    # in key order then insertion order (brute force: a dict of lists)
    rng = np.random.default_rng(seed)
    n_keys = int(rng.integers(1, 30))
    keys = rng.integers(0, n_keys, int(rng.integers(0, 120)))
    vals = rng.integers(0, 10**6, keys.size)
    vals[: keys.size // 3] = 0  # id 0 is an item like any other (the table pads with -1)
    lists = replay._Lists(keys, vals, n_keys, width)
    by_key: dict[int, list[int]] = {k: [] for k in range(n_keys)}
    for k, v in zip(keys.tolist(), vals.tolist()):
        by_key[k].append(v)
    for _ in range(20):
        ask = np.unique(rng.integers(0, n_keys, int(rng.integers(1, n_keys + 1))))
        short = [v for k in ask.tolist() if len(by_key[k]) <= width for v in by_key[k]]
        long = [v for k in ask.tolist() if len(by_key[k]) > width for v in by_key[k]]
        assert lists.of(ask).tolist() == short + long


def test_crossing_matches_are_released_with_what_had_arrived_then_completed() -> None:
    # rank 0 runs a [100,200] then b [300,400], rank 1 b then a (no waits: each kernel 100 ns, all transfer).
    # a's transfer 50 ns longer. Nothing can finish, so each rank's first blocked end is released with what
    # had arrived: a on rank 0 ends at 0 + 50, b on rank 1 at 0. Then b starts on rank 0 50 ns late (its
    # 100 ns gap kept) and a on rank 1 on time; a completes (+50 on rank 1 too) and b on rank 0 ends with its
    # own late arrival (+50): the released ends are not released again
    gpu, rows = _crossing()
    g = graph.build(gpu, rows, _steps({0: 400, 1: 400}))
    inst = {r["instance"]: r["inst"] for r in g.instances.to_dicts()}
    ids, ds, de, sch = _replay_of(gpu, rows, _steps({0: 400, 1: 400}),
                                  lambda m, ids: m.dtr.__setitem__((0, inst["a"]), 50))
    assert sch.forced == 2
    assert de[ids[(0, "nccl_a")]] == 50 and de[ids[(1, "nccl_b")]] == 0
    assert ds[ids[(0, "nccl_b")]] == 50 and ds[ids[(1, "nccl_a")]] == 0
    assert de[ids[(1, "nccl_a")]] == 50 and de[ids[(0, "nccl_b")]] == 50


def test_only_each_ranks_earliest_blocked_end_is_forced() -> None:
    # rank 0 runs a (stream 20) and c (stream 21) side by side, then b; rank 1 runs b, a, c. a and b cross,
    # so nothing can finish; rank 0 has two blocked ends (a, c), and only its earliest (a) is forced, with
    # rank 1's b: once they are released the rest completes in order (c is never forced)
    gpu = gpu_table([
        (0, 20, 100, 200, "nccl_a", "comm"), (0, 21, 150, 250, "nccl_c", "comm"), (0, 20, 300, 400, "nccl_b", "comm"),
        (1, 20, 100, 200, "nccl_b", "comm"), (1, 20, 300, 400, "nccl_a", "comm"), (1, 20, 450, 550, "nccl_c", "comm"),
    ])
    rows = comm_rows([(0, 20, 100, 200, "nccl_a", "a"), (1, 20, 300, 400, "nccl_a", "a"),
                      (0, 20, 300, 400, "nccl_b", "b"), (1, 20, 100, 200, "nccl_b", "b"),
                      (0, 21, 150, 250, "nccl_c", "c"), (1, 20, 450, 550, "nccl_c", "c")])
    _, ds, de, sch = _replay_of(gpu, rows, _steps({0: 400, 1: 550}), lambda m, ids: None)
    assert sch.forced == 2
    assert not ds.any() and not de.any()


def test_no_straggler_measures_a_host_gap_against_the_ranks_of_its_role() -> None:
    # one operation key on 4 ranks: rank 1 (the straggler) waited 100 ns before it, rank 3 (its role in the
    # other replica) 10 ns, ranks 0 and 2 (other pipeline stages, idle in their bubbles) 90 ns
    nodes = pl.DataFrame({"node": [0, 1, 2, 3], "rank": [0, 1, 2, 3], "kind": ["compute"] * 4, "name": [7] * 4,
                          "step": [1] * 4, "occurrence": [0] * 4, "dur_ns": [50] * 4, "gap_ns": [90, 100, 90, 10]})
    cut = {}
    for peers in (None, [3]):
        m = replay.Mods.zeros(1, 4, 0)
        whatif._no_straggler(m, 0, nodes, 1, "host", peers)
        cut[None if peers is None else tuple(peers)] = -m.dgap[0, 1]
    assert cut == {None: 10.0, (3,): 90.0}
