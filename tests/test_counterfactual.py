"""The counterfactual verdict (analyzer/whatif/counterfactual.py): S, attribution, M_W, M_S and roots, against
hand-built jobs with answers worked out by hand, generated jobs against their twin without the slow part,
and the published What-if study (OSDI'25) on its own traces."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import polars as pl
import pytest

from analyzer.crossrank import graph
from analyzer.model import STEP_SCHEMA, conform
from analyzer.whatif import counterfactual as cf
from sample_traces.generate import Scenario, build, write_kineto
from sample_traces.pipeline_job import PipelineScenario, build_pipeline
from tests.conftest import SAMPLES
from tests.helpers import report, run
from tests.test_graph import comm_rows, gpu_table

REPLICAS = cf.Roles(role={0: 0, 1: 0}, replicated=True, replica={0: 0, 1: 1}, stage={})


def _hand(late: str) -> graph.Graph:
    """Two data-parallel ranks, one step: pre, fwd (compute), an all-reduce, opt (compute).
    compute: rank 1's fwd takes 190 ns against rank 0's 90; host: rank 1 starts its fwd 100 ns after its pre.
    Either way rank 0 waits 100 ns in the all-reduce (transfer 100), both run opt [300, 350]: a 350 ns step.
    Ideal (rank 1 like rank 0): fwd [10, 100], all-reduce [100, 200], opt [200, 250]: 250 ns."""
    f1 = (10, 200) if late == "compute" else (110, 200)
    gpu = gpu_table([
        (0, 7, 0, 10, "pre", "compute"), (0, 7, 10, 100, "fwd", "compute"), (0, 20, 100, 300, "nccl_ar", "comm"),
        (0, 7, 300, 350, "opt", "compute"),
        (1, 7, 0, 10, "pre", "compute"), (1, 7, *f1, "fwd", "compute"), (1, 20, 200, 300, "nccl_ar", "comm"),
        (1, 7, 300, 350, "opt", "compute"),
    ])
    rows = comm_rows([(0, 20, 100, 300, "nccl_ar", "i0"), (1, 20, 200, 300, "nccl_ar", "i0")])
    steps = conform(pl.DataFrame({"rank": [0, 1], "step": [1, 1], "start_ns": [0, 0], "end_ns": [350, 350]}),
                    STEP_SCHEMA)
    return graph.build(gpu, rows, steps), steps


@pytest.mark.parametrize("late", ["compute", "host"])
def test_hand_built_dp_job_slowdown_attribution_and_root(late: str) -> None:
    g, steps = _hand(late)
    c = cf.analyze(g, steps, REPLICAS)
    assert c.replay_ns == 350 and c.ideal_ns == 250 and c.slowdown == pytest.approx(350 / 250)
    by_rank = dict(c.attribution["by_rank"].select("key", "added_ns").iter_rows())
    assert by_rank == {1: 100.0, 0: 0.0}  # putting rank 1 back adds its 100 ns; rank 0 nothing
    share = dict(c.attribution["by_rank"].select("key", "share").iter_rows())
    assert share[1] == pytest.approx(1.0) and share[0] == pytest.approx(0.0)
    ops = dict(c.attribution["by_op"].select("key", "added_ns").iter_rows())
    assert ops == {"fwd": 100.0, "nccl_ar": 0.0, "opt": 0.0, "pre": 0.0}  # a late start is fwd's gap, put back too
    assert c.m_w == pytest.approx(1.0) and c.workers == (1,)
    assert [(r.rank, r.kind) for r in c.roots] == [(1, late)]
    root = c.roots[0]
    assert root.saving_ns == 100 and root.added_ns == 100 and c.no_straggler_ns == 250
    assert (root.dur_added_ns, root.gap_added_ns) == ((100, 0) if late == "compute" else (0, 100))


def test_a_balanced_hand_built_job_has_s_one_and_no_root() -> None:
    gpu = gpu_table([
        (r, s, a, b, n, k) for r in (0, 1)
        for s, a, b, n, k in ((7, 0, 100, "fwd", "compute"), (20, 100, 200, "nccl_ar", "comm"),
                              (7, 200, 250, "opt", "compute"))
    ])
    rows = comm_rows([(0, 20, 100, 200, "nccl_ar", "i0"), (1, 20, 100, 200, "nccl_ar", "i0")])
    steps = conform(pl.DataFrame({"rank": [0, 1], "step": [1, 1], "start_ns": [0, 0], "end_ns": [250, 250]}),
                    STEP_SCHEMA)
    c = cf.analyze(graph.build(gpu, rows, steps), steps, REPLICAS)
    assert c.slowdown == 1.0 and c.roots == () and c.m_w is None  # nothing between the run and its ideal


def _step_ms(a) -> float:
    return a.whatif.measured_step_time_ns / 1e6


def _gen(tmp: Path, name: str, sc: Scenario):
    folder = tmp / name
    write_kineto(build(sc), folder)
    return run(folder)


@pytest.mark.parametrize("kind", ["compute", "host"])
def test_generated_dp_job_against_its_twin_without_the_late_rank(tmp_path: Path, kind: str) -> None:
    base = dict(ranks=8, tp=2, steps=4, overlap=0.3, seed=5)
    late = _gen(tmp_path, "late", Scenario(**base, late_ranks={6: (2_000_000, kind)}))
    clean = _gen(tmp_path, "clean", Scenario(**base))
    c = late.counterfactual
    # the ideal run is the job without the late rank; S the measured step over that one's
    assert c.ideal_ns / 1e6 == pytest.approx(_step_ms(clean), rel=0.03)
    assert c.slowdown == pytest.approx(_step_ms(late) / _step_ms(clean), rel=0.03)
    top = c.attribution["by_rank"].row(0, named=True)
    assert top["key"] == 6 and top["share"] == pytest.approx(1.0, abs=0.05)
    assert c.attribution["by_dp_replica"].row(0, named=True)["share"] == pytest.approx(1.0, abs=0.05)
    assert (late.verdict.rank, late.verdict.kind) == (6, kind)
    ns = late.whatif.scenarios.filter(pl.col("name") == "no_straggler")["step_time_ns"][0] / 1e6
    assert ns == pytest.approx(_step_ms(clean), rel=0.05)
    assert c.m_w == pytest.approx(1.0, abs=0.05)
    # the twin: no root, S within its jitter of 1
    assert clean.verdict is None and clean.counterfactual.slowdown < 1.05


def test_two_stage_pipeline_with_one_slow_stage(tmp_path: Path) -> None:
    # a pure pipeline (no replicas): stage 1's forwards take 3x stage 0's; its twin runs both at stage 0's
    def job(name: str, fwd: tuple[int, ...]):
        wl, _ = build_pipeline(PipelineScenario(tp=1, dp=1, pp=2, microbatches=4, steps=3, forward_ns=fwd))
        write_kineto(wl, tmp_path / name)
        return run(tmp_path / name)

    slow, even = job("slow", (200_000, 600_000)), job("even", (200_000,))
    c = slow.counterfactual
    assert c.ideal_ns / 1e6 == pytest.approx(_step_ms(even), rel=0.03)  # the ideal run is the even twin
    assert c.slowdown == pytest.approx(_step_ms(slow) / _step_ms(even), rel=0.03)
    stage = dict(c.attribution["by_stage"].select("key", "share").iter_rows())
    # put back alone, stage 1 explains all of the gap (a little more: the effects do not add up exactly)
    # (stage 0's own host gaps, compared with stage 1's across the pipeline, explain a part too: 0.25)
    assert 0.95 <= stage[1] <= 1.15 and stage[1] > 3 * stage[0]
    assert (slow.verdict.rank, slow.verdict.kind) == (1, "compute") and slow.pipeline["bottleneck_stage"] == 1
    ns = slow.whatif.scenarios.filter(pl.col("name") == "no_straggler")["step_time_ns"][0] / 1e6
    # between the ideal run and the measured one; 11% above the twin: this generator's stage 0 idles on the
    # host until stage 1's gradients arrive (no recv kernel holds the wait), a gap the replay keeps
    assert c.ideal_ns / 1e6 <= ns < 0.8 * _step_ms(slow)
    assert 0.7 <= c.m_s <= 1.0  # the last stage explains most of it (the rest: stage 0's gaps, above)
    # the even pipeline: putting either stage back changes nothing
    assert even.verdict is None and even.counterfactual.slowdown < 1.05


def test_real_pipeline_rank_slow_in_one_replica_is_the_root_and_the_bottleneck() -> None:
    # dp 2 x pp 2: rank 3 (stage 1 of replica 1) runs ~40 ms of extra GPU products per step
    rep = report(SAMPLES / "real_parallel" / "pp_1f1b_mps_slow")
    s = rep["stragglers"]
    assert (s["verdict"]["rank"], s["verdict"]["kind"]) == (3, "compute")
    assert rep["pipeline"]["bottleneck_stage"] == 1
    assert max(s["attribution"]["by_stage"], key=lambda k: s["attribution"]["by_stage"][k]["added_ms"]) == "1"
    assert s["attribution"]["by_rank"]["3"]["share"] > 0.5


def test_json_and_text_lead_with_the_fix(tmp_path: Path) -> None:
    rep = report(SAMPLES / "gpu_h200" / "host_straggler")
    s = rep["stragglers"]
    assert {"slowdown", "slowdown_no_host", "attribution", "m_w", "m_s"} <= set(s)
    assert set(s["attribution"]) == {"by_rank", "by_stage", "by_dp_replica", "by_dimension", "by_op"}
    assert s["verdict"]["saving_ms"] > 0 and s["slowdown"] > 1
    out = subprocess.run(["python", "-m", "analyzer.cli", "analyze", str(SAMPLES / "gpu_h200" / "host_straggler"),
                          "--no-cache"], capture_output=True, text=True, check=True).stdout
    lead = out.splitlines()[1]
    assert lead.startswith("Fixing rank 1 would cut the step by ") and "%)" in lead
    assert "(its )" not in out


# ------------------------------------------------------------------ the published study's own traces

STUDY = Path("/work/.mirror/ByteDance-Seed+StragglerAnalysis/repo")
SHIPPED = SAMPLES / "whatif"


def _study_file(name: str, tmp: Path) -> Path | None:
    shipped = SHIPPED / name.split("-")[1].split(".")[0] / name  # sample_traces/whatif/AR/trace-AR.parquet
    if shipped.exists():
        return shipped
    if not STUDY.exists():
        return None
    out = tmp / name
    if not out.exists():
        blob = subprocess.run(["git", "-C", str(STUDY), "show", f"HEAD:data/{name}"], capture_output=True)
        if blob.returncode:
            return None
        out.write_bytes(blob.stdout)
    return out


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("study")
    out = {}
    for t in ("AR", "SE", "ST"):
        files = [_study_file(f"{k}-{t}.{e}", tmp) for k, e in (("trace", "parquet"), ("meta", "yaml"),
                                                                 ("result", "json"), ("ms", "json"), ("mw", "json"))]
        if any(f is None for f in files):
            pytest.skip("the What-if study's traces are neither shipped nor in the snapshot")
        trace, _, result, ms, mw = files
        out[t] = (report(trace)["stragglers"]["study"], json.loads(result.read_text()), json.loads(ms.read_text()),
                  json.loads(mw.read_text()))
    return out


def _top(d: dict) -> str:
    return max(d, key=lambda k: d[k]["slowdown"])


@pytest.mark.parametrize("trace", ["AR", "SE", "ST"])
def test_study_top_groups_match_the_published_attribution(study: dict, trace: str) -> None:
    mine, pub, _, _ = study[trace]
    for axis, key in (("by_dp_replica", "blocking_decompose_by_dp_rank"), ("by_stage", "blocking_decompose_by_stage"),
                      ("by_op", "blocking_decompose_by_optype")):
        want = max(pub[key], key=pub[key].get)
        got = _top(mine["attribution"][axis])
        # the study merges a stage's send and recv into one pp-comm type; compute types are named alike
        assert got == want, (axis, got, want)


@pytest.mark.parametrize("trace", ["AR", "SE", "ST"])
def test_study_slowdown_within_2_percent_of_the_published_one(study: dict, trace: str) -> None:
    # published S: mean step_t_nodelay / mean step_t_noblk; ours replays the same steps on commscope's graph
    # with the artifact's dependencies (ingest/optable_deps.py)
    mine, pub, _, _ = study[trace]
    want = statistics.mean(pub["step_t_nodelay"].values()) / statistics.mean(pub["step_t_noblk"].values())
    assert want == pytest.approx(pub["blocking_slowdown"], rel=1e-9)
    assert mine["slowdown"] == pytest.approx(want, rel=0.02)


@pytest.mark.parametrize("trace", ["AR", "SE", "ST"])
def test_study_replays_match_the_published_step_times(study: dict, trace: str) -> None:
    # the run without launch delays and the ideal run, mean step (published in seconds): the same dependency
    # model replays the same steps, so they agree far inside S's 2% (measured: within 0.04%)
    mine, pub, _, _ = study[trace]
    assert mine["replay_step_time_ms"] == pytest.approx(1e3 * statistics.mean(pub["step_t_nodelay"].values()),
                                                        rel=0.002)
    assert mine["ideal_step_time_ms"] == pytest.approx(1e3 * statistics.mean(pub["step_t_noblk"].values()), rel=0.002)


@pytest.mark.parametrize("trace,metric", [(t, m) for t in ("AR", "SE", "ST") for m in ("m_w", "m_s")])
def test_study_m_w_and_m_s_within_0_05(study: dict, trace: str, metric: str) -> None:
    mine, _, ms, mw = study[trace]
    want = mw["Mw"] if metric == "m_w" else ms["Ms"]
    assert mine[metric] == pytest.approx(want, abs=0.05)


def test_commscopes_own_model_is_sound_on_the_study_traces_and_near_the_study() -> None:
    # commscope's own model on the same op tables (their declared dependencies, launch delays kept as host time):
    # S >= 1, M_W and M_S within [0, 1] (before host chains and job steps: AR's S was 0.685, ST's M_W -2.42), and
    # without launch delays its S within 15% of the published one (measured: AR +6%, SE -2%, ST -13%; the report
    # says why where they differ by more than 5%). AR: rank 0, the worker of DP rank 0 and stage 0 that the study
    # found, is named by commscope's own model (before: only through the study's, commscope's being unsound); SE
    # (sequence length imbalance) and ST (a long last stage) have no single slow worker
    if not (SHIPPED / "AR" / "trace-AR.parquet").exists():
        pytest.skip("the study's traces are not shipped")
    published = {"AR": 1.973, "SE": 1.537, "ST": 1.179}  # blocking_slowdown in result-*.json
    for t, want in published.items():
        r = report(SHIPPED / t)
        st = r["stragglers"]
        assert st["slowdown"] >= 1.0 and 0.0 <= st["m_w"] <= 1.0 and 0.0 <= st["m_s"] <= 1.0, t
        assert st["slowdown_no_host"] == pytest.approx(want, rel=0.15), t
        said = any("differ by" in w and "study's" in w for w in r["warnings"])
        assert said == (abs(st["slowdown_no_host"] / st["study"]["slowdown"] - 1.0) > 0.05), t
        if t == "AR":
            assert _top(st["attribution"]["by_rank"]) == "0"
            assert (st["verdict"]["rank"], st["verdict"]["kind"]) == (0, "compute")
            assert not any("the verdict is the published study's model's" in w for w in r["warnings"])
        else:
            assert st["verdict"] is None, t


def test_one_profiled_step_still_names_the_late_rank_and_says_what_it_cannot_tell(tmp_path: Path) -> None:
    # one step gives the step-to-step noise test nothing to work with: the verdict is decided on that step and
    # the report says a chronic straggler cannot be told from a one-off (before: "No single rank holds the job
    # back" on a real 8-rank one-step capture whose rank 7 caused 35.5 ms of the others' wait)
    write_kineto(build(Scenario(ranks=8, steps=1, late_ranks={7: (3_000_000, "compute")})), tmp_path)
    a = run(tmp_path)
    assert a.verdict is not None and (a.verdict.rank, a.verdict.kind) == (7, "compute")
    assert a.counterfactual.steps == 1
    assert any(w.startswith("one profiled step") for w in a.warnings)


def test_no_verdict_without_others_that_waited(tmp_path: Path) -> None:
    # one rank: nobody waited for it, so it is never "the root of 0.0 ms of the others' wait"
    write_kineto(build(Scenario(ranks=1, steps=3, late_ranks={0: (3_000_000, "compute")})), tmp_path)
    a = run(tmp_path)
    assert a.verdict is None and a.counterfactual.slowdown == pytest.approx(1.0)
