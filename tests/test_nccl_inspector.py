"""NCCL Inspector logs: generated jobs with exact truth (sample_traces/inspector_gen.py) through the real CLI.

Expected numbers come from the generator's truth (integer-microsecond transfers, arrivals, the
communicators it built), never from the code under test.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from sample_traces.inspector_gen import Spec, generate, write
from tests.helpers import cli

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "nccl_inspector"


def _json(*args: object) -> dict:
    res = cli("analyze", *args, "--format", "json", "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("quiet")
    truth = write(Spec(nodes=2, gpus_per_node=4, iterations=30, verbose=False, slow_rank=5, slow_link=2, seed=3), out)
    return out, truth


@pytest.fixture(scope="module")
def verbose(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("verbose")
    truth = write(Spec(nodes=2, gpus_per_node=4, iterations=30, verbose=True, slow_rank=6, slow_link=1, seed=4,
                       clock_offsets_us={1: 250}), out)
    return out, truth


def _truth_busbw(truth: dict) -> dict[tuple[str, str], float]:
    return {(c["id"], o["op"]): o["busbw_gbs"] for c in truth["communicators"] for o in c["ops"]}


def test_quiet_logs_verdict_and_slow_link(quiet: tuple[Path, dict]) -> None:
    folder, truth = quiet
    doc = _json(folder)
    ins = doc["inspector"]
    assert doc["source"]["format"] == "nccl_inspector" and doc["source"]["world_size"] == 8
    assert ins["verbose"] is False and ins["counts"]["records"] == truth["records"]
    assert ins["verdict"]["rank"] == truth["slow_rank"]
    # the slow rank is the unique last arriver wherever it is late: its caused wait is the truth's, to the us
    ranks = {r["rank"]: r for r in ins["ranks"]}
    slow = str(truth["slow_rank"])
    assert ranks[truth["slow_rank"]]["caused_wait_ms"] == pytest.approx(truth["caused_wait_us"][slow] / 1e3, abs=1e-6)
    # every instance's waits add up the same whoever gets a tie
    total = sum(truth["caused_wait_us"].values()) / 1e3
    assert sum(r["caused_wait_ms"] for r in ins["ranks"]) == pytest.approx(total, abs=1e-6)
    # the busbw table: every communicator x op at the generator's bandwidth
    want = _truth_busbw(truth)
    rows = {(r["id"], r["op"]): r for r in ins["busbw"]}
    assert {k for k in rows if k[1] != "recv"} == set(want)
    for key, bw in want.items():
        assert rows[key]["busbw_gbps_p50"] == pytest.approx(bw, abs=1e-6)
        assert rows[key]["busbw_gbps_min"] == pytest.approx(bw, abs=1e-6)
    slow_id = truth["slow_link"]["id"]
    assert {r["id"] for r in ins["slow_links"]} == {slow_id}
    for r in ins["slow_links"]:
        normal = next(c for c in truth["communicators"] if c["kind"] == "dp" and c["id"] != slow_id)
        assert r["busbw_gbps_p50"] == pytest.approx(want[(slow_id, r["op"])], abs=1e-6)
        assert r["peer_busbw_gbps_p50"] == pytest.approx(want[(normal["id"], r["op"])], abs=1e-6)
        assert r["ranks"] == ",".join(map(str, truth["slow_link"]["ranks"])) and r["intra_node"] is False
    # intra-node (TP) and inter-node rows are told apart by nnodes
    intra = {c["id"]: c["intra_node"] for c in truth["communicators"]}
    assert all(r["intra_node"] == intra[r["id"]] for r in ins["busbw"])


def test_quiet_text_leads_with_the_answer(quiet: tuple[Path, dict]) -> None:
    folder, truth = quiet
    res = cli("analyze", folder, "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[1].startswith(f"Straggler (from Inspector kernel times): rank {truth['slow_rank']} ")
    assert f"Slow link: communicator {truth['slow_link']['name']} ({truth['slow_link']['id']}" in res.stdout
    md = cli("analyze", folder, "--no-cache", "-j", "1", "--format", "markdown").stdout
    assert f"rank {truth['slow_rank']} caused" in md and "### NCCL Inspector: bus bandwidth" in md
    html = cli("analyze", folder, "--no-cache", "-j", "1", "--format", "html").stdout
    assert f"rank {truth['slow_rank']} caused" in html and truth["slow_link"]["name"] in html


def test_ranks_come_from_the_world_communicator(quiet: tuple[Path, dict]) -> None:
    folder, truth = quiet
    doc = _json(folder)
    # pids are shuffled against ranks by the generator: only the world communicator's ranks can order them
    for rank, path in enumerate(doc["source"]["paths"]):
        p = truth["processes"][rank]
        assert Path(path).name == f"{p['hostname']}-pid{p['pid']}.log"


def test_verbose_logs_feed_the_trace_pipeline(verbose: tuple[Path, dict]) -> None:
    folder, truth = verbose
    doc = _json(folder)
    assert doc["stragglers"]["verdict"]["rank"] == truth["slow_rank"]
    assert doc["inspector"]["verdict"]["rank"] == truth["slow_rank"]
    n_inst = sum(c["ops"] and 1 for c in truth["communicators"])  # non-empty
    assert n_inst == len(truth["communicators"])
    # every logged collective is matched across all its members (instances = records / members, p2p in pairs)
    assert doc["matching"]["unmatched_kernels"] == 0 and doc["matching"]["p2p_unmatched_kernels"] == 0
    want = _truth_busbw(truth)
    # the trace pipeline's own bandwidth table sees the slow link: the inter-node all_gather minimum
    ag = next(r for r in doc["bandwidth"] if r["op"] == "all_gather")
    assert ag["busbw_gbps_max"] == pytest.approx(want[(_dp(truth, 0), "all_gather")], rel=2e-3)
    # dimensions named from the communicator names, hosts from the logs
    dims = {g["dimension"] for g in doc["process_groups"]}
    assert {"tp", "dp", "world"} <= dims
    tp = [g for g in doc["process_groups"] if g["dimension"] == "tp"]
    assert tp and all(g["intra_node"] is True for g in tp)


def _dp(truth: dict, rail: int) -> str:
    return next(c["id"] for c in truth["communicators"] if c["name"] == f"dp_{rail}")


def test_balanced_job_has_no_verdict_and_no_slow_link(tmp_path: Path) -> None:
    # no p2p either: the pipeline pair's sends make ranks 0 and 4 late at the next world all-reduce (truly)
    write(Spec(nodes=2, gpus_per_node=4, iterations=30, verbose=False, seed=5, p2p_bytes=0), tmp_path)
    ins = _json(tmp_path)["inspector"]
    assert ins["verdict"] is None and ins["slow_links"] == []
    res = cli("analyze", tmp_path, "--no-cache", "-j", "1")
    assert "No straggler" in res.stdout.splitlines()[1]


def test_bad_lines_are_counted_not_fatal(quiet: tuple[Path, dict], tmp_path: Path) -> None:
    folder, truth = quiet
    shutil.copytree(folder, tmp_path / "logs")
    logs = sorted((tmp_path / "logs").glob("*.log"))
    # 1: the job died while the plugin wrote: the last line is cut short
    data = logs[0].read_bytes()
    logs[0].write_bytes(data[:-40])
    # 2: garbage in the middle, and a record type this reader does not know
    lines = logs[1].read_text().splitlines(keepends=True)
    other = json.loads(lines[0])
    other.pop("coll_perf")
    other["future_perf"] = {"x": 1}
    lines[5:5] = ["{not json at all\n", json.dumps(other) + "\n"]
    logs[1].write_text("".join(lines))
    # 3: a gzipped log reads like the plain one
    with gzip.open(str(logs[2]) + ".gz", "wb") as fh:
        fh.write(logs[2].read_bytes())
    logs[2].unlink()
    # 4: a non-JSON .log beside them (a launcher's output) is not an Inspector log: ignored
    (tmp_path / "logs" / "torchrun.log").write_text("W1127 08:00:00 launching 8 processes\n")
    res = cli("analyze", tmp_path / "logs", "--format", "json", "--no-cache", "-j", "1")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    c = doc["inspector"]["counts"]
    assert c["bad_lines"] == 1 and c["unknown_records"] == 1 and c["truncated_files"] == 1
    assert c["records"] == truth["records"] - 1
    warnings = "\n".join(doc["warnings"])
    assert f"{logs[1]}: 1 of " in warnings and "(first: line 6)" in warnings
    assert "the last line is cut short" in warnings and "neither coll_perf nor p2p_perf" in warnings
    assert doc["inspector"]["verdict"]["rank"] == truth["slow_rank"]


def test_two_jobs_in_one_folder_are_refused(tmp_path: Path) -> None:
    for seed in (1, 2):
        files, _ = generate(Spec(nodes=1, gpus_per_node=4, iterations=3, verbose=False, seed=seed, p2p_bytes=0))
        for name, lines in files.items():
            (tmp_path / f"job{seed}-{name}").write_text("".join(x + "\n" for x in lines))
    res = cli("analyze", tmp_path, "--no-cache", "-j", "1")
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "more than one job" in res.stderr and "Traceback" not in res.stderr


def test_a_rank_claimed_twice_is_refused(quiet: tuple[Path, dict], tmp_path: Path) -> None:
    folder, _ = quiet
    shutil.copytree(folder, tmp_path / "logs")
    first = sorted((tmp_path / "logs").glob("*.log"))[0]
    # the same process's log again under another pid: rank r of every communicator now has two owners
    text = first.read_text()
    pid = json.loads(text.splitlines()[0])["metadata"]["pid"]
    (tmp_path / "logs" / "copy-pid1.log").write_text(text.replace(f'"pid":{pid}', '"pid":1'))
    res = cli("analyze", tmp_path / "logs", "--no-cache", "-j", "1")
    assert res.returncode == 2 and "logged by two processes" in res.stderr and "Traceback" not in res.stderr


def test_a_file_with_no_record_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "node-pid1.log"
    bad.write_text('{"header": {"id": "0x1"}, "coll_perf": {"coll": 3}}\n')
    res = cli("analyze", bad, "--no-cache")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_shipped_sample_matches_its_ground_truth() -> None:
    truth = json.loads((SAMPLE / "ground_truth.json").read_text())
    doc = _json(SAMPLE)
    assert doc["inspector"]["verdict"]["rank"] == truth["slow_rank"]
    assert doc["stragglers"]["verdict"]["rank"] == truth["slow_rank"]
    assert {r["id"] for r in doc["inspector"]["slow_links"]} == {truth["slow_link"]["id"]}


def test_without_a_world_communicator_the_mesh_numbers_the_ranks(quiet: tuple[Path, dict], tmp_path: Path) -> None:
    """The world all-reduce logged nothing (below the plugin's size floor, say): the tp communicators (one per
    node) and the dp ones (one per rail) cross in exactly one process each, a 2 x 4 mesh whose coordinates are the
    ranks torch gave (issue #40); pids are drawn in random order, so pid order would number them wrong."""
    folder, truth = quiet
    for f in folder.glob("*.log"):
        kept = [x for x in f.read_text().splitlines(keepends=True) if '"comm_name":"default_pg"' not in x]
        (tmp_path / f.name).write_text("".join(kept))
    doc = _json(tmp_path)
    assert not any("no communicator spans all 8 processes" in w for w in doc["warnings"])
    by_rank = sorted(truth["processes"], key=lambda p: p["rank"])
    assert [Path(p).name for p in doc["source"]["paths"]] == [f"{p['hostname']}-pid{p['pid']}.log" for p in by_rank]
    assert doc["inspector"]["verdict"]["rank"] == truth["slow_rank"]
    want = ",".join(map(str, truth["slow_link"]["ranks"]))
    assert {r["ranks"] for r in doc["inspector"]["slow_links"]} == {want}


def test_without_a_world_communicator_or_a_mesh_ranks_follow_hostname_and_pid() -> None:
    """Communicators that form no mesh (a 3-rank one and a 2-rank one over 4 processes): hostname and pid order."""
    from analyzer.ingest.inspector.ranks import map_ranks

    procs = [("h", 40), ("h", 10), ("h", 30), ("h", 20)]  # file i is process i; pid order: 1, 3, 2, 0
    meta = pl.DataFrame({"file": [0, 1, 2, 3], "meta": [0, 0, 0, 0], "hostname": [h for h, _ in procs],
                         "pid": [p for _, p in procs]})
    members = {"a": [1, 3, 2], "b": [2, 0]}  # comm -> files in comm-rank order
    rows = [(f, i, cid, cr, len(ms)) for i, (cid, ms) in enumerate(members.items()) for cr, f in enumerate(ms)]
    hdr = pl.DataFrame({"file": [r[0] for r in rows], "hdr": [r[1] for r in rows], "id": [r[2] for r in rows],
                        "name": ["unknown"] * len(rows), "comm_rank": [r[3] for r in rows],
                        "n_ranks": [r[4] for r in rows], "nnodes": [1] * len(rows)})
    used = hdr.select("file", "hdr", pl.lit(0).alias("meta"))
    ranks = map_ranks(hdr, meta, used, [f"h-pid{p}.log" for _, p in procs])
    assert ranks.rank_source == "hostname and pid order" and any("no communicator spans" in w for w in ranks.warnings)
    assert [p[1] for p in ranks.processes] == ["h-pid10.log", "h-pid20.log", "h-pid30.log", "h-pid40.log"]


def test_algorithm_and_protocol_where_a_writer_adds_them(quiet: tuple[Path, dict], tmp_path: Path) -> None:
    folder, truth = quiet
    for f in folder.glob("*.log"):  # the plugin's JSON has none; a patched writer may add them
        (tmp_path / f.name).write_text(f.read_text().replace('"coll_timing_source"',
                                                             '"coll_algo":"RING","coll_proto":"SIMPLE","coll_timing_source"'))
    doc = _json(tmp_path)
    assert {(r["algo"], r["proto"]) for r in doc["inspector"]["busbw"] if r["op"] not in ("send", "recv")} == {
        ("RING", "SIMPLE")}
    md = cli("analyze", tmp_path, "--no-cache", "-j", "1", "--format", "markdown").stdout
    assert "| algo/proto |" in md and "| RING/SIMPLE |" in md


def test_profiler_traces_of_another_job_and_inspector_logs_are_not_mixed(quiet: tuple[Path, dict],
                                                                          tmp_path: Path) -> None:
    """Kineto traces beside the logs name their communicators (issue #40, ``tests/test_inspector_2d.py``); a trace
    of another job (4 ranks beside 8 processes) is refused in one line, and Nsight reports are never mixed in."""
    folder, _ = quiet
    for f in sorted(folder.glob("*.log")):
        shutil.copy(f, tmp_path / f.name)
    kineto = next((SAMPLE.parent / "gpu_h200" / "ddp_balanced").glob("*rank0*"))
    shutil.copy(kineto, tmp_path / kineto.name)
    res = cli("analyze", tmp_path, "--no-cache", "-j", "1")
    assert res.returncode == 2 and "a trace of another job" in res.stderr and res.stderr.count("\n") == 1
    (tmp_path / kineto.name).unlink()
    (tmp_path / "rank0.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    res = cli("analyze", tmp_path, "--no-cache", "-j", "1")
    assert res.returncode == 2 and "among NCCL Inspector logs" in res.stderr and res.stderr.count("\n") == 1


def test_missing_ranks_are_named(quiet: tuple[Path, dict], tmp_path: Path) -> None:
    folder, truth = quiet
    gone = truth["processes"][3]
    for f in folder.glob("*.log"):
        if f.name != f"{gone['hostname']}-pid{gone['pid']}.log":
            shutil.copy(f, tmp_path / f.name)
    doc = _json(tmp_path)
    assert doc["source"]["ranks"] == [0, 1, 2, 4, 5, 6, 7] and doc["source"]["world_size"] == 7
    assert doc["source"]["declared_world_size"] == 8
    assert any("no log from rank(s) 3 of 8" in w for w in doc["warnings"])
    # rank 3's communicators have no complete instance left; the others still answer
    assert doc["inspector"]["verdict"]["rank"] == truth["slow_rank"]


def test_a_long_verbose_log_puts_its_latest_part_on_the_timeline(verbose: tuple[Path, dict],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from analyzer.ingest.inspector import reader as nccl_inspector

    folder, truth = verbose
    monkeypatch.setattr(nccl_inspector, "TIMELINE_MAX_RECORDS", 300)
    ts = nccl_inspector.read(sorted(folder.glob("*.log")), jobs=1)
    assert ts.inspector.records.height == truth["records"]  # the Inspector tables keep everything
    assert 0 < ts.collectives.height <= 300 and any("covers the" in w for w in ts.warnings)
    # whole instances only: every kept (communicator, seq) has all its members
    per = ts.collectives.group_by("pg", "op", "seq").agg(pl.len().alias("n"), pl.col("group_size").first())
    assert per.filter((pl.col("n") != pl.col("group_size")) & ~pl.col("op").is_in(["send", "recv"])).height == 0
    # and they are the latest: the last operation logged is kept, and nothing kept starts before the cut
    assert ts.collectives["start_ns"].max() == ts.inspector.records["start_ns"].max()
    cut = ts.inspector.records["start_ns"].top_k(300).min()
    assert ts.collectives["start_ns"].min() >= cut


def test_balanced_verbose_job_has_no_verdict_either(tmp_path: Path) -> None:
    write(Spec(nodes=2, gpus_per_node=4, iterations=40, verbose=True, seed=11, p2p_bytes=0), tmp_path)
    doc = _json(tmp_path)
    assert doc["stragglers"]["verdict"] is None and doc["inspector"]["verdict"] is None
    assert doc["inspector"]["slow_links"] == [] and doc["matching"]["unmatched_kernels"] == 0
