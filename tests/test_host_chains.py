"""The host in the replay (analyzer/crossrank/host.py, analyzer/whatif/replay.py): hand-built one-rank jobs with
their host runtime calls, and the replayed start of every operation worked out by hand. A host-bound rank, a
GPU-bound rank, a blocking synchronize and a cross-stream event wait; times in microseconds."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analyzer.crossrank import graph
from analyzer.crossrank.host import SYNC_CALL_NS
from analyzer.model import CPU_SCHEMA, GPU_SCHEMA, STEP_SCHEMA, conform
from analyzer.whatif import replay

US = 1_000


def _job(kernels: list[tuple], calls: list[tuple]) -> tuple[graph.Graph, dict[str, int]]:
    """kernels: (name, stream, start_us, end_us, correlation); calls: (name, start_us, end_us, correlation or None),
    one host thread. Returns the graph and each kernel's node id by name."""
    gpu = conform(pl.DataFrame([(0, s, a * US, b * US, n, "compute", c) for n, s, a, b, c in kernels],
                               schema=["rank", "stream", "start_ns", "end_ns", "name", "kind", "correlation"],
                               orient="row"), GPU_SCHEMA)
    cpu = conform(pl.DataFrame([(0, 1, a * US, b * US, n, "runtime", c) for n, a, b, c in calls],
                               schema=["rank", "tid", "start_ns", "end_ns", "name", "kind", "correlation"],
                               orient="row"), CPU_SCHEMA)
    end = max(b for _, _, _, b, _ in kernels) * US
    steps = conform(pl.DataFrame({"rank": [0], "step": [1], "start_ns": [0], "end_ns": [end]}), STEP_SCHEMA)
    rows = pl.DataFrame(schema={"rank": pl.Int32, "stream": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                "name": pl.Utf8})
    g = graph.build(gpu, rows, steps, cpu=cpu)
    return g, dict(zip(g.nodes["name"].to_list(), g.nodes["node"].to_list()))


def _replay(g: graph.Graph, changes: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Δs, Δe in us of every event, one scenario per ``changes`` entry: {"dur": {node: us}, "gap": {event: us}}."""
    arr = replay.Arrays.of(g)
    m = replay.Mods.zeros(len(changes) + 1, arr.rank.size, arr.n_graph_instances)
    for i, ch in enumerate(changes, start=1):
        for node, d in ch.get("dur", {}).items():
            m.ddur[i, node] = d * US
        for node, d in ch.get("gap", {}).items():
            m.dgap[i, node] = d * US
    ds, de = replay.run(arr, replay.schedule(arr), m)
    assert not ds[0].any() and not de[0].any()  # the measured run, replayed: every start explained, nothing moves
    return ds[1:] / US, de[1:] / US


def _host_event(g: graph.Graph, prefix: str) -> int:
    ev = g.events.filter(pl.col("kind") == "host")
    return int(ev.filter(pl.col("name").cast(pl.Utf8).str.starts_with(prefix))["node"][0])


def test_a_host_bound_rank_moves_with_its_host_not_with_its_kernels() -> None:
    # the host launches a kernel every 100 us, each runs 20 us as soon as its launch returns: the GPU waits for
    # its host. Halving the kernels saves only the last one's 10 us (the old replay kept each kernel's gap to the
    # previous kernel's end, 80 us, and moved every kernel up: 30 us); cutting 50 us of host time before the
    # second and third launches moves their kernels 50 and 100 us earlier
    g, k = _job([("k1", 7, 10, 30, 1), ("k2", 7, 110, 130, 2), ("k3", 7, 210, 230, 3)],
                [("cudaLaunchKernel", 0, 10, 1), ("cudaLaunchKernel", 100, 110, 2), ("cudaLaunchKernel", 200, 210, 3)])
    launch2, launch3 = _host_event(g, "cudaLaunchKernel>k2"), _host_event(g, "cudaLaunchKernel>k3")
    ds, de = _replay(g, [{"dur": {k["k1"]: -10, k["k2"]: -10, k["k3"]: -10}},
                         {"gap": {launch2: -50, launch3: -50}}])
    assert (ds[0, k["k2"]], ds[0, k["k3"]], de[0, k["k3"]]) == (0, 0, -10)
    assert (ds[1, k["k2"]], ds[1, k["k3"]], de[1, k["k3"]]) == (-50, -100, -100)


def test_a_gpu_bound_rank_moves_with_its_kernels_until_its_host_binds() -> None:
    # the host launches three 100 us kernels early (the third after 90 us of host time); they run back to back.
    # Removing the host time changes nothing (the GPU was the bound); halving the kernels moves the second up
    # 50 us, but the third cannot start before its launch returns at 130: 80 us earlier, not 100
    g, k = _job([("k1", 7, 10, 110, 1), ("k2", 7, 110, 210, 2), ("k3", 7, 210, 310, 3)],
                [("cudaLaunchKernel", 0, 10, 1), ("cudaLaunchKernel", 10, 20, 2), ("cudaLaunchKernel", 120, 130, 3)])
    launch3 = _host_event(g, "cudaLaunchKernel>k3")
    ds, de = _replay(g, [{"gap": {launch3: -90}}, {"dur": {k["k1"]: -50, k["k2"]: -50, k["k3"]: -50}}])
    assert not ds[0, :g.n_nodes].any() and not de[0, :g.n_nodes].any() and ds[0, launch3] == -90
    assert (ds[1, k["k2"]], ds[1, k["k3"]], de[1, k["k3"]]) == (-50, -80, -130)


def test_a_blocking_sync_returns_when_the_gpu_work_it_waits_for_ends() -> None:
    # k1 runs [10, 110]; the host synchronizes from 20 and resumes at 110, 20 us later launches k2. A k1 50 us
    # shorter returns the sync 50 us earlier and k2 with it (its blocked time recomputed: 35 us, not 85); a k1
    # 100 us shorter cannot return the sync before the call's own cost: k2 moves 85 us, not 100
    g, k = _job([("k1", 7, 10, 110, 1), ("k2", 7, 140, 160, 2)],
                [("cudaLaunchKernel", 0, 10, 1), ("cudaDeviceSynchronize", 20, 110, None),
                 ("cudaLaunchKernel", 130, 140, 2)])
    ret = _host_event(g, "cudaDeviceSynchronize (return)")
    ds, _ = _replay(g, [{"dur": {k["k1"]: -50}}, {"dur": {k["k1"]: -100}}])
    assert (ds[0, ret], ds[0, k["k2"]]) == (-50, -50)
    call_end = 20 + SYNC_CALL_NS / US
    assert (ds[1, ret], ds[1, k["k2"]]) == (call_end - 110, call_end - 110)


def test_a_cross_stream_wait_holds_the_kernel_until_its_event_and_its_launch() -> None:
    # k2 (stream 8) was launched at 30 but waited for k1 on stream 7 to end at 110 (cudaStreamWaitEvent: the
    # traces say it by timing alone). A k1 60 us shorter starts k2 60 us earlier; 100 us shorter, k2 waits for its
    # own launch instead (ready at 30): 80 us earlier
    g, k = _job([("k1", 7, 10, 110, 1), ("k2", 8, 110, 150, 2)],
                [("cudaLaunchKernel", 0, 10, 1), ("cudaLaunchKernel", 20, 30, 2)])
    deps = g.host_deps.filter((pl.col("src") == k["k1"]) & (pl.col("dst") == k["k2"]))
    assert deps["slack_ns"].to_list() == [0]  # the wait, found by timing: k1's end is k2's start
    ds, _ = _replay(g, [{"dur": {k["k1"]: -60}}, {"dur": {k["k1"]: -100}}])
    assert ds[0, k["k2"]] == -60 and ds[1, k["k2"]] == -80


def test_a_start_nothing_recorded_explains_is_the_replays_error() -> None:
    # k2 starts 500 us after its launch returned on an idle stream (a GPU shared with another process): the
    # replay starts it when its launch lets it, 500 us earlier, and that is the error of the replayed run
    g, k = _job([("k1", 7, 10, 30, 1), ("k2", 7, 620, 640, 2)],
                [("cudaLaunchKernel", 0, 10, 1), ("cudaLaunchKernel", 110, 120, 2)])
    arr = replay.Arrays.of(g)
    ds, de = replay.run(arr, replay.schedule(arr), replay.Mods.zeros(1, arr.rank.size, 0))
    assert ds[0, k["k2"]] / US == pytest.approx(-500) and de[0, k["k2"]] / US == pytest.approx(-500)
