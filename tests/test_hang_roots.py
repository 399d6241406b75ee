"""Issue #40's hang cases with their ground truth: the real NCCL dumps (``sample_traces/flight_recorder_nccl``), the
held-out 2-D DeviceMesh class (dp x tp, real NCCL's layout and enqueue semantics, ``flight_recorder_nccl.py``),
and the ordering of roots: a group that cannot complete by itself comes before groups whose members all wait."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer import triage
from analyzer.ingest.flight_recorder.decode import decode
from analyzer.report import render
from analyzer.report.hang_json import to_dict
from sample_traces.flight_recorder_nccl import SCENARIOS, Mesh2D, groups, write
from tests.helpers import cli

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _nth_of_op(folder: Path, rank: int, op: str, n: int) -> int:
    """The collective_seq_id of ``rank``'s n-th (0-based) ``op`` in its dump: the truth's iteration as a seq."""
    doc, _ = decode(folder / f"rank_{rank}")
    seqs = [e["collective_seq_id"] for e in doc["entries"] if e["profiling_name"] == f"nccl:{op}"]
    return seqs[n]


@pytest.mark.parametrize("name", ["fr_never_joined", "fr_size_mismatch"])
def test_real_nccl_dumps(name: str) -> None:
    folder = SAMPLES / "flight_recorder_nccl" / name  # copies of ../shared/traces/nccl_real
    truth = json.loads((folder / "ground_truth.json").read_text())
    culprit, op = truth["culprit"], truth["op"]
    others = [r for r in range(truth["world_size"]) if r != culprit]
    seq = _nth_of_op(folder, others[0], op, truth["iteration"])  # a healthy rank's all_reduce of that iteration
    a = triage(folder)
    h = to_dict(a)["hang"]
    assert (h["group"], h["dimension"], h["op"], h["seq"]) == ("0", "world", op, seq)
    assert [m["rank"] for m in h["mismatched"]] == [culprit] and h["desync"]
    first = render(a, "text").splitlines()[1]
    assert first.startswith("Desync: "), first
    if truth["scenario"] == "size_mismatch":
        assert h["cause"] == "mismatch" and h["mismatched"][0]["bytes"] == 262_144 * 4 and h["bytes"] == 4 << 20
        assert (f"rank {culprit} all_reduced 1 MiB Float where ranks 0, 2-3 all_reduced 4 MiB Float: all_reduce #{seq}"
                f" of pg 0 (world)") in first
        assert a.result.stuck == ()  # NCCL ran every collective: nothing is stuck, the results are wrong
    else:  # rank 2 skipped the all_reduce: its later collectives are its peers' next ones
        assert h["cause"] == "skipped" and h["shift"][0]["rank"] == culprit and h["shift"][0]["by"] == 1
        assert first.startswith(f"Desync: rank {culprit} skipped all_reduce #{seq} "), first
        at = h["hangs_at"]
        assert at["seq"] > seq and sorted(at["waiting"]) == others  # where the job stopped: the peers wait


@pytest.mark.parametrize("shape", [(2, 4, 5, 2), (4, 2, 6, 1), (2, 8, 9, 4), (8, 4, 30, 3)])
def test_held_out_2d_mesh_skip(tmp_path: Path, shape: tuple[int, int, int, int]) -> None:
    """One rank skips its tp all_reduce: the tp group where it never entered is the root, on the first line;
    each dp group of its tp peers (both members "in" it: NCCL enqueues without blocking) is blocked by it."""
    dp, tp, culprit, at = shape
    job = Mesh2D("skipped_tp", dp, tp, 6, at, culprit)
    truth = write(job, tmp_path / "d")
    a = triage(tmp_path / "d")
    doc = to_dict(a)
    h = doc["hang"]
    assert (h["group"], h["dimension"], h["seq"], h["op"]) == (truth["group"], "tp", truth["seq"], "all_reduce")
    assert h["missing"] == [culprit] and h["waiting"] == truth["waiting"] and h["cause"] == "never_entered"
    assert h["went_astray"][0]["rank"] == culprit and h["went_astray"][0]["skipped_seq"] == truth["skipped_seq"]
    first = render(a, "text").splitlines()[1]
    assert first.startswith(f"Hang: pg {truth['group']} (tp) all_reduce #{truth['seq']} "), first
    assert f"rank {culprit} never entered it" in first and f"(it skipped #{truth['skipped_seq']})" in first
    stuck = doc["flight_recorder"]["stuck"]
    assert stuck[0]["group"] == truth["group"] and stuck[0]["root"]
    dp_groups = {name for name, (d, m) in groups(job).items() if d == "mesh_dp" and culprit not in m}
    rest = stuck[1:]
    assert {s["group"] for s in rest} == dp_groups  # every dp group holding a tp peer of the culprit
    for s in rest:
        assert not s["root"] and s["cause"] == "blocked" and s["missing"] == []
        assert s["blocked_by"] == [{"group": truth["group"], "seq": truth["seq"], "op": "all_reduce"}]
    assert sorted(r for s in rest for r in s["waiting"] if r not in truth["waiting"]) == truth["blocked_dp_waiting"]


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "skipped_tp"])
def test_held_out_2d_mesh_desync(tmp_path: Path, scenario: str) -> None:
    truth = write(Mesh2D(scenario), tmp_path / "d")
    a = triage(tmp_path / "d")
    h = to_dict(a)["hang"]
    first = render(a, "text").splitlines()[1]
    if scenario == "healthy":
        assert h is None and first.startswith("No hang") and a.result.mismatches == ()
        return
    assert (h["group"], h["seq"], h["op"], h["desync"]) == (truth["group"], truth["seq"], "all_reduce", True)
    assert [{k: m[k] for k in ("rank", "op", "bytes", "dtype")} for m in h["mismatched"]] == truth["mismatched"]
    culprit = truth["culprit"]
    verb = "all_gathered 1 MiB" if scenario == "wrong_op_tp" else "all_reduced 2 MiB"
    assert first.startswith(f"Desync: rank {culprit} {verb} Float where ranks "), first
    assert f": all_reduce #{truth['seq']} of pg {truth['group']} (tp)" in first
    from analyzer.views.hang_grid import grid_cells  # the grid marks the desync's cell although all completed it

    cell = {(c["label"], c["seq"]): c for c in grid_cells(a)}[(truth["group"], truth["seq"])]
    assert (cell["completed"], cell["mismatched"], cell["state"]) == (4, 1, 2)


def test_json_dumps_and_the_cli(tmp_path: Path) -> None:
    write(Mesh2D("skipped_tp"), tmp_path / "d", "json")
    out = cli("analyze", tmp_path / "d", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["hang"]["missing"] == [5] and doc["flight_recorder"]["mismatch_count"] >= 1
    kinds = {m["seq"]: m["kinds"] for m in doc["flight_recorder"]["mismatches"] if m["group"] == "2"}
    assert kinds == {6: ["missing"]}
    md = cli("analyze", tmp_path / "d", "--format", "markdown")
    assert md.returncode == 0 and "Collectives whose members disagree" in md.stdout


def test_a_waiting_group_with_nothing_blocking_it_is_a_root_after_the_groups_that_cannot_complete(tmp_path):
    """Chain order on hand-built stuck groups: a group missing a member sorts before one where all wait."""
    from analyzer.hangs import chain

    def hang(gid: str, waiting: list[int], missing: list[int], since: int) -> dict:
        return {"kind": "collective", "gid": gid, "group": gid, "seq": 3, "op": "all_reduce", "waiting": waiting,
                "missing": missing, "mismatched": [], "no_dump": [], "since_ns": since, "queued": []}

    stuck = [hang("dp", [0, 4], [], 1), hang("alone", [8, 9], [], 2), hang("tp", [4, 6, 7], [5], 3)]
    pending = {0: ("dp", False, 3), 4: ("tp", False, 3), 6: ("tp", False, 3), 7: ("tp", False, 3),
               8: ("alone", False, 3), 9: ("alone", False, 3)}
    out = chain.link(stuck, pending)
    assert [h["gid"] for h in out] == ["tp", "alone", "dp"]
    assert [h["cause"] for h in out] == ["never_entered", "waiting", "blocked"]
    assert [h["root"] for h in out] == [True, True, False] and out[0]["explains"] == 1


@pytest.mark.parametrize("scenario, cause", [("never_joined", "never_entered"), ("wrong_size", "mismatch"),
                                             ("wrong_op", "mismatch"), ("missing_dump", "no_dump")])
def test_the_cause_of_each_generated_hang(tmp_path: Path, scenario: str, cause: str) -> None:
    """Why the root cannot complete by itself. A wrong op at the hang is no skip: one collective matching the op of
    an earlier seq is not a shift (a shift must explain two collectives or more)."""
    from sample_traces.flight_recorder_gen import Job
    from sample_traces.flight_recorder_gen import write as write_gen

    write_gen(Job(16, scenario), tmp_path / "d")
    h = triage(tmp_path / "d").hang
    assert h["cause"] == cause and not h.get("shift") and not h.get("desync")
