"""The synthetic trace generator: its truth is self-consistent and survives the trip through real files."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from sample_traces.generate import (
    Collective,
    ProcessGroup,
    Scenario,
    Workload,
    build,
    main,
    parse_duration,
    write_kineto,
)
from tests.oracle import Interval, RankOracle, analyze_file, comm_kernels, load, step_windows

MS = 1_000_000


def _write(tmp_path: Path, sc: Scenario, gz: bool = False) -> tuple[Workload, dict[int, RankOracle]]:
    wl = build(sc)
    paths = write_kineto(wl, tmp_path, gzip=gz)
    return wl, {r: analyze_file(p) for r, p in enumerate(paths)}


def _instances_by_index(oracles: dict[int, RankOracle]) -> list[dict[int, Interval]]:
    """World-group-only runs: the i-th comm kernel of every rank is the same instance."""
    n = {len(o.comm) for o in oracles.values()}
    assert len(n) == 1
    return [{r: o.comm[i] for r, o in oracles.items()} for i in range(n.pop())]


def test_tiny_scenario_has_hand_computed_breakdown(tmp_path: Path) -> None:
    # memcpy [0,20] memset [20,22] K1 [22,122] comm [122,162] overlap kernel [122,142] K2 [162,212] (us)
    sc = Scenario(
        ranks=2,
        steps=1,
        compute_ns=(100_000, 50_000),
        overlap=0.5,
        jitter_ns=0,
        collectives=(Collective("all_reduce", 1 << 20, 40_000, after=1),),
    )
    wl, oracles = _write(tmp_path, sc)
    for o in oracles.values():
        w = o.whole
        assert (w.compute_ns, w.comm_ns, w.overlapped_ns, w.exposed_ns) == (170_000, 40_000, 20_000, 20_000)
        assert (w.busy_ns, w.span_ns, w.idle_ns) == (212_000, 212_000, 0)
        assert o.steps == {1: w}  # the GPU-side step window is exactly the step's GPU work
    (inst,) = wl.truth.instances
    assert inst.last_rank is None and inst.wait_ns == {0: 0, 1: 0}
    assert wl.truth.ranks[0].caused_wait_ns == 0


def test_truth_is_self_consistent() -> None:
    sc = Scenario(ranks=4, steps=3, late_ranks={2: (3 * MS, "compute")}, seed=7)
    t = build(sc).truth
    for i in t.instances:
        assert i.end_ns == max(i.start_ns.values()) + i.transfer_ns
        assert i.wait_ns == {r: max(i.start_ns.values()) - s for r, s in i.start_ns.items()}
    unique_last = sum(sum(i.wait_ns.values()) for i in t.instances if i.last_rank is not None)
    assert sum(rt.caused_wait_ns for rt in t.ranks.values()) == unique_last
    # 2 all-reduces per step, the compute straggler arrives last at the first of each: others wait ~3 ms each
    assert t.ranks[2].last_arrivals >= 3
    assert abs(t.ranks[2].caused_wait_ns - 3 * 3 * 3 * MS) <= 18 * sc.jitter_ns
    assert all(rt.instances == 6 and rt.steps == 3 for rt in t.ranks.values())


@pytest.mark.parametrize("style", ["float", "int"])
def test_waits_and_transfer_recovered_from_files(tmp_path: Path, style: str) -> None:
    sc = Scenario(
        ranks=4,
        steps=3,
        late_ranks={2: (3 * MS, "compute")},
        clock_offsets_ns={1: 3 * MS, 3: -2 * MS},
        ts_style=style,
        seed=3,
    )
    wl, oracles = _write(tmp_path, sc, gz=True)
    waits: dict[int, int] = defaultdict(int)
    caused: dict[int, int] = defaultdict(int)
    for truth, kernels in zip(wl.truth.instances, _instances_by_index(oracles), strict=True):
        d = {r: k.end_ns - k.start_ns for r, k in kernels.items()}
        transfer = min(d.values())
        assert transfer == truth.transfer_ns
        for r in d:
            waits[r] += d[r] - transfer
        shortest = [r for r in d if d[r] == transfer]
        if len(shortest) == 1:
            caused[shortest[0]] += sum(d.values()) - transfer * len(d)
        assert (shortest[0] if len(shortest) == 1 else None) == truth.last_rank
    for r, rt in wl.truth.ranks.items():
        assert waits[r] == rt.wait_ns
        assert caused[r] == rt.caused_wait_ns
    assert wl.truth.ranks[2].wait_ns < wl.truth.ranks[0].wait_ns - 8 * MS


def test_clock_offsets_are_applied_to_every_timestamp(tmp_path: Path) -> None:
    offsets = {0: 0, 1: 3 * MS, 2: 7 * MS + 123, 3: -2 * MS}
    wl, oracles = _write(tmp_path, Scenario(ranks=4, steps=2, clock_offsets_ns=offsets))
    for truth, kernels in zip(wl.truth.instances, _instances_by_index(oracles), strict=True):
        for r, k in kernels.items():
            assert k.start_ns == truth.start_ns[r] + offsets[r]
            assert k.end_ns - kernels[0].end_ns == offsets[r]  # collectives end together on the true clock
    assert wl.truth.offsets_us() == {0: 0.0, 1: 3000.0, 2: 7000.123, 3: -2000.0}


def test_float_style_writes_three_decimal_microseconds(tmp_path: Path) -> None:
    (path, *_) = write_kineto(build(Scenario(ranks=2, steps=1)), tmp_path)
    text = path.read_text()
    values = re.findall(r'"(?:ts|dur)": ([-0-9.e+]+)', text)
    assert values and all(re.fullmatch(r"\d+\.\d{3}", v) for v in values)
    doc = json.loads(text)
    assert doc["baseTimeNanoseconds"] == 1_790_857_026_000_000_000
    assert 4.7e12 < min(e["ts"] for e in doc["traceEvents"] if "ts" in e) < 4.9e12
    assert list(doc)[:4] == ["schemaVersion", "deviceProperties", "trace_id", "record_shapes"]


def test_int_style_timestamps_are_integers(tmp_path: Path) -> None:
    sc = Scenario(ranks=2, steps=2, ts_style="int", clock_offsets_ns={1: 5 * MS})
    paths = write_kineto(build(sc), tmp_path, gzip=True)
    with gzip.open(paths[1], "rt") as fh:
        doc = json.load(fh)
    timed = [e for e in doc["traceEvents"] if "ts" in e]
    assert all(type(e["ts"]) is int and type(e.get("dur", 0)) is int for e in timed)
    assert 1.6e15 < min(e["ts"] for e in timed) < 1.7e15
    assert "baseTimeNanoseconds" not in doc
    with pytest.raises(ValueError, match="1 us"):
        Scenario(ts_style="int", compute_ns=(100_500,))


def _step_gaps(path: Path) -> list[int]:
    """GPU idle between consecutive GPU-side ProfilerStep windows."""
    w = list(step_windows(load(path)).values())
    return [b[0] - a[1] for a, b in zip(w, w[1:], strict=False)]


def test_host_late_rank_leaves_gpu_idle_and_compute_late_does_not(tmp_path: Path) -> None:
    host_wl, host = _write(tmp_path / "h", Scenario(ranks=3, steps=3, jitter_ns=0, late_ranks={1: (2 * MS, "host")}))
    comp_wl, comp = _write(tmp_path / "c", Scenario(ranks=3, steps=3, jitter_ns=0, late_ranks={1: (2 * MS + 1, "compute")}))
    gaps = {(d, r): _step_gaps(tmp_path / d / f"rank{r}.pt.trace.json") for d in "hc" for r in range(3)}
    # host straggler: its GPU idles 2 ms longer before every step's work; same kernels, just later
    assert [late - on_time for on_time, late in zip(gaps["h", 0], gaps["h", 1], strict=True)] == [2 * MS, 2 * MS]
    assert gaps["h", 0] == gaps["h", 2]
    assert host[1].whole.compute_ns == host[0].whole.compute_ns
    assert host_wl.truth.ranks[1].caused_wait_ns == 3 * 2 * 2 * MS  # 3 steps x 2 peers x 2 ms
    # compute straggler: no extra idle, its kernels take 2 ms (+1 ns, an uneven split) longer per step instead
    assert gaps["c", 1] == gaps["c", 0] == gaps["h", 0]
    assert [s.span_ns for s in comp[1].steps.values()] == [s.span_ns for s in comp[0].steps.values()]
    assert comp[1].whole.compute_ns - comp[0].whole.compute_ns == 3 * (2 * MS + 1)
    assert comp[1].whole.idle_ns == comp[0].whole.idle_ns
    assert comp_wl.truth.ranks[1].caused_wait_ns == 3 * 2 * (2 * MS + 1)


def test_missing_meta_first_drops_host_side_of_first_kernels(tmp_path: Path) -> None:
    wl, oracles = _write(tmp_path, Scenario(ranks=2, steps=2, missing_meta_first=2))
    for r, o in oracles.items():
        events = load(tmp_path / f"rank{r}.pt.trace.json")["traceEvents"]
        rpc = [e for e in events if e.get("name") == "record_param_comms" and e["args"]["Collective name"] != "wait"]
        launches = {e["args"]["correlation"] for e in events if e.get("name") == "cuLaunchKernelEx"}
        assert len(o.comm) == 4 and len(rpc) == 2
        for k in o.comm[:2]:
            assert "Collective name" not in k.args and "External id" not in k.args
            assert k.args["correlation"] not in launches
        for k in o.comm[2:]:
            assert k.args["Collective name"] == "allreduce" and k.args["correlation"] in launches
        assert wl.truth.ranks[r].missing_meta == 2


def test_launches_link_to_kernels_like_real_traces(tmp_path: Path) -> None:
    sc = Scenario(ranks=2, steps=2, clock_offsets_ns={1: -4 * MS}, python_noise=5)
    write_kineto(build(sc), tmp_path)
    doc = load(tmp_path / "rank1.pt.trace.json")
    events = doc["traceEvents"]
    launch = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    flows = defaultdict(set)
    for e in events:
        if e.get("cat") == "ac2g":
            flows[e["id"]].add(e["ph"])
    rpcs = [e for e in events if e.get("name") == "record_param_comms"]
    for k in [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]:
        ln = launch[k["args"]["correlation"]]
        assert ln["ts"] + ln["dur"] <= k["ts"]  # launched before it runs, on the same (offset) clock
        assert flows[k["args"]["correlation"]] == {"s", "f"}
        if "nccl" in k["name"]:
            assert ln["name"] == "cuLaunchKernelEx" and ln["args"]["External id"] == k["args"]["External id"]
            (rpc,) = [p for p in rpcs if p["tid"] == ln["tid"] and p["ts"] <= ln["ts"] <= p["ts"] + p["dur"]]
            assert rpc["args"]["External id"] == k["args"]["External id"]
            assert rpc["args"]["Process Group Ranks"] == "[0, 1]" and rpc["args"]["Rank"] == 1
        else:
            assert ln["name"] in ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync")
    assert sum(e.get("cat") == "python_function" for e in events) == 2 * 5
    assert doc["distributedInfo"]["pg_config"] == [
        {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}
    ]
    streams = {e["args"]["stream"] for e in events if e.get("cat") == "kernel"}
    assert streams == {7, 16}


def test_ops_names_and_message_sizes(tmp_path: Path) -> None:
    cols = (
        Collective("all_gather", 4 << 20, 50_000),
        Collective("reduce_scatter", 4 << 20, 50_000),
        Collective("all_to_all", 4 << 20, 50_000),
        Collective("broadcast", 4 << 20, 50_000),
        Collective("send", 4 << 20, 30_000, peers=(0, 2)),
    )
    wl, oracles = _write(tmp_path, Scenario(ranks=4, steps=1, collectives=cols, compute_ns=(100_000,) * 6))
    got = [
        (k.name.split("(")[0], k.args["Collective name"], k.args["In msg nelems"], k.args["Out msg nelems"])
        for k in oracles[0].comm
    ]
    assert got == [
        ("ncclDevKernel_AllGather_RING_LL", "_allgather_base", 262144, 1 << 20),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "_reduce_scatter_base", 1 << 20, 262144),
        ("ncclDevKernel_SendRecv", "all_to_allv", 1 << 20, 1 << 20),
        ("ncclDevKernel_Broadcast_RING_LL", "broadcast", 1 << 20, 1 << 20),
        ("ncclDevKernel_SendRecv", "send", 1 << 20, 1 << 20),
    ]
    events = load(tmp_path / "rank2.pt.trace.json")["traceEvents"]
    (recv,) = [e for e in events if e.get("name") == "record_param_comms" and e["args"]["Collective name"] == "recv"]
    assert recv["args"]["Src Rank"] == 0 and recv["args"]["Rank"] == 0  # real traces put the peer in "Rank"
    assert len(oracles[1].comm) == 4  # rank 1 is not part of the send/recv pair
    p2p = wl.truth.instances[-1]
    assert (
        p2p.ranks == (0, 2)
        and min(k.end_ns - k.start_ns for k in (oracles[0].comm[-1], oracles[2].comm[-1])) == p2p.transfer_ns == 30_000
    )


def test_tp_dp_subgroups(tmp_path: Path) -> None:
    wl, oracles = _write(tmp_path, Scenario(ranks=4, steps=2, tp=2))
    doc = load(tmp_path / "rank0.pt.trace.json")
    info = doc["distributedInfo"]
    assert info["pg_count"] == 5
    assert [(p["pg_name"], p["ranks"]) for p in info["pg_config"]] == [("0", [0, 1, 2, 3]), ("1", [0, 1]), ("3", [0, 2])]
    by_key: dict[tuple[str, int], dict[int, Interval]] = defaultdict(dict)
    for r, o in oracles.items():
        seq: dict[str, int] = defaultdict(int)
        for k in o.comm:
            pg = k.args["Process Group Name"]
            by_key[(pg, seq[pg])][r] = k
            seq[pg] += 1
    assert len(by_key) == len(wl.truth.instances) == 2 * 4  # per step: 2 TP + 2 DP instances
    for inst in wl.truth.instances:
        kernels = by_key[(inst.pg, inst.seq[inst.ranks[0]])]
        assert sorted(kernels) == list(inst.ranks)
        assert min(k.end_ns - k.start_ns for k in kernels.values()) == inst.transfer_ns
    assert {k.stream for k in oracles[0].comm} == {20, 28}  # pg "1" and pg "3" get their own NCCL streams


def test_custom_groups_and_without_distributed_info(tmp_path: Path) -> None:
    pgs = (ProcessGroup("0", (0, 1, 2), "default_pg"), ProcessGroup("7", (0, 2)))
    sc = Scenario(
        ranks=3,
        steps=1,
        process_groups=pgs,
        distributed_info=False,
        collectives=(Collective("all_reduce", 1 << 20, 40_000, groups=("7",)),),
    )
    wl, oracles = _write(tmp_path, sc)
    assert "distributedInfo" not in load(tmp_path / "rank2.pt.trace.json")
    assert oracles[2].rank == 2  # from the file name
    assert [len(oracles[r].comm) for r in range(3)] == [1, 0, 1]
    assert wl.truth.ranks[1].instances == 0


def test_output_is_deterministic(tmp_path: Path) -> None:
    sc = Scenario(ranks=2, steps=2, seed=5, late_ranks={0: (1 * MS, "host")})
    a = [p.read_bytes() for p in write_kineto(build(sc), tmp_path / "a", gzip=True)]
    b = [p.read_bytes() for p in write_kineto(build(sc), tmp_path / "b", gzip=True)]
    assert a == b


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            str(tmp_path),
            "--ranks",
            "2",
            "--steps",
            "2",
            "--late-rank",
            "1:host:1ms",
            "--clock-offset",
            "1:-2.5ms",
            "--gzip",
            "--ts-style",
            "int",
            "--jitter",
            "0",
        ]
    )
    assert rc == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ground_truth.json",
        "rank0.pt.trace.json.gz",
        "rank1.pt.trace.json.gz",
    ]
    truth = json.loads((tmp_path / "ground_truth.json").read_text())
    assert truth["truth"]["ranks"][1]["caused_wait_ns"] == 2 * MS  # 2 steps x rank 0 waits 1 ms
    assert truth["offsets_us"] == {"0": 0.0, "1": -2500.0}
    assert comm_kernels(load(tmp_path / "rank1.pt.trace.json.gz"))
    assert parse_duration("300us") == 300_000 and parse_duration("-2.5ms") == -2_500_000
    assert main([str(tmp_path / "x"), "--ts-style", "int", "--jitter", "1500ns"]) == 2
    assert "1 us" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--late-rank", "1:cpu:1ms"])
