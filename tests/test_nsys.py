"""Nsight Systems reader: hand-built exports with known answers, real exports, bad input, fuzzing."""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import struct
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from nsys_fixtures import (
    ALLREDUCE,
    FILL,
    kineto_trace,
    no_gpu_report,
    plain_sqlite,
    reduced_two_process,
    single_rank_report,
    two_process_report,
    write_kineto,
)

from analyzer.errors import TraceError, UsageError
from analyzer.ingest.nsys import reader as nsys
from analyzer.ingest.nsys import schema as nsys_schema
from analyzer.ingest.options import ReadOptions
from analyzer.model import COMM_CALL_SCHEMA, CPU_SCHEMA, GPU_SCHEMA, STEP_SCHEMA
from sample_traces.nsys_writer import NCCL_DOMAIN, NsysExport, kineto_to_nsys, kineto_to_nsys_old

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "nsys"
needs_shared = pytest.mark.skipif(not TRACES.is_dir(), reason="shared traces absent")


def union_ns(intervals: list[tuple[int, int]]) -> int:
    """Brute-force union length (independent of analyzer.timeline)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


def spans(gpu: pl.DataFrame, kind: str) -> list[tuple[int, int]]:
    return gpu.filter(pl.col("kind") == kind).select("start_ns", "end_ns").rows()


def read(path: Path, **kw) -> list:
    return nsys.read(path, ReadOptions(**kw))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- known answers


@pytest.mark.parametrize("variant", ["current", "2023.4"])
def test_two_process_report_tables(tmp_path: Path, variant: str) -> None:
    fx = two_process_report(tmp_path / "two.sqlite", variant)
    traces = read(fx.path)
    assert [t.meta.rank for t in traces] == [0, 1]
    for trace, want in zip(traces, fx.ranks, strict=True):
        gpu = trace.gpu
        assert dict(gpu.schema) == GPU_SCHEMA and dict(trace.cpu.schema) == CPU_SCHEMA
        assert dict(trace.comm_calls.schema) == COMM_CALL_SCHEMA and dict(trace.steps.schema) == STEP_SCHEMA
        kinds = {k: v for k, v in want.kinds.items() if k != "sync" or variant == "current"}  # no sync table
        assert dict(gpu.group_by("kind").len().rows()) == kinds
        assert gpu["device"].unique().to_list() == [want.device]
        comm, compute = spans(gpu, "comm"), spans(gpu, "compute")
        assert union_ns(comm) == want.comm_union_ns
        assert union_ns(compute) == want.compute_union_ns
        assert union_ns(comm) + union_ns(compute) - union_ns(comm + compute) == want.overlapped_ns
        assert trace.meta.rank_source == "process-order" and trace.meta.world_size == 2
        assert trace.meta.clock_base_ns == 1_779_782_330_176_752_435
        kinds = dict(trace.cpu.group_by("kind").len().rows())
        # API calls are kept when their correlation is on a GPU row or when they block the host on the GPU:
        # without the sync table (2023.4) cudaStreamSynchronize names no GPU row, and is kept by name
        assert kinds == {"runtime": want.runtime_rows, "annotation": want.annotation_rows}
        calls = trace.comm_calls.select("op", "start_ns", "end_ns", "in_bytes", "out_bytes", "pg", "group_size")
        assert calls.rows() == [tuple(c.__dict__.values()) for c in want.calls]
        assert trace.steps.select("step", "start_ns", "end_ns").rows() == list(want.steps)
        assert (trace.gpu["rank"] == trace.meta.rank).all() and (trace.cpu["rank"] == trace.meta.rank).all()
    a = traces[0]
    # Demangled name preferred over shortName; memcpy/memset named as Kineto names them.
    assert FILL in a.gpu["name"].to_list()
    assert {"Memcpy HtoD (Pageable -> Device)", "Memset (Device)"} <= set(a.gpu["name"])
    assert ("Stream Sync" in set(a.gpu["name"])) == (variant == "current")
    runtime = a.cpu.filter(pl.col("kind") == "runtime")
    assert set(runtime["name"]) == {"cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemsetAsync",
                                    "cudaStreamSynchronize"}
    assert set(runtime["tid"]) == {300} and set(traces[1].cpu["tid"]) == {201}
    assert a.meta.versions[0] == ("nsys", "2026.2.1.210")


def test_metadata_current_schema(tmp_path: Path) -> None:
    traces = read(two_process_report(tmp_path / "two.sqlite").path)
    assert traces[0].meta.devices == ("cuda:0 (NVIDIA H100 80GB HBM3)",)
    assert traces[1].meta.devices == ("cuda:1 (NVIDIA H100 80GB HBM3)",)
    assert traces[0].meta.host == "node-a" and traces[0].meta.format == "nsys"
    assert traces[0].meta.warnings == ()


def test_old_and_new_schema_agree(tmp_path: Path) -> None:
    new = read(two_process_report(tmp_path / "new.sqlite", "current").path)
    old = read(two_process_report(tmp_path / "old.sqlite", "2023.4").path)
    for a, b in zip(new, old, strict=True):
        # The old layout has no sync table (no sync GPU rows); the synchronize call itself is kept by name in
        # both (it blocks the host on the GPU); everything else must be identical.
        assert a.gpu.filter(pl.col("kind") != "sync").equals(b.gpu)
        assert a.cpu.equals(b.cpu)
        assert a.comm_calls.equals(b.comm_calls) and a.steps.equals(b.steps)


def test_comm_kernel_launches_fall_inside_their_nccl_call(tmp_path: Path) -> None:
    """What collectives.build relies on: the launch of each comm kernel is inside one call, same thread."""
    for trace in read(two_process_report(tmp_path / "two.sqlite").path):
        launches = trace.cpu.filter(pl.col("kind") == "runtime").select("tid", "start_ns", "correlation")
        comm = trace.gpu.filter(pl.col("kind") == "comm").join(launches, on="correlation", suffix="_l")
        assert comm.height == 2
        for name, tid, t in comm.select("name", "tid", "start_ns_l").rows():
            inside = trace.comm_calls.filter(
                (pl.col("tid") == tid) & (pl.col("start_ns") <= t) & (pl.col("end_ns") >= t))
            assert inside["op"].to_list() == ["all_reduce" if name == ALLREDUCE else "send_recv"]


def test_without_payloads_sizes_are_null(tmp_path: Path) -> None:
    fx = two_process_report(tmp_path / "two.sqlite", payload=False)
    calls = read(fx.path)[0].comm_calls
    assert calls["op"].to_list() == ["all_reduce", "send_recv"]
    assert calls.select("in_bytes", "out_bytes", "pg", "group_size").null_count().row(0) == (2, 2, 2, 2)


def test_message_size_semantics_and_group_edges(tmp_path: Path) -> None:
    db = NsysExport()
    db.kernel(1, 0, 10, ALLREDUCE, correlation=1)
    comm, n = {"NCCL communicator ID": 7}, NCCL_DOMAIN
    db.nvtx(1, 1, 0, 1, "ncclGroupEnd", n)  # its ncclGroupStart fell before the capture: ignored
    db.nvtx(1, 1, 2, 3, "ncclCommInitRankConfig", n, {**comm, "No. of ranks": 4})
    db.nvtx(1, 1, 10, 20, "ncclAllGather", n, {**comm, "Message size [bytes]": 1024})
    db.nvtx(1, 1, 30, 40, "ncclReduceScatter", n, {**comm, "Message size [bytes]": 1024})
    db.nvtx(1, 1, 50, 60, "ncclBcast", n, {**comm, "Message size [bytes]": 8})
    db.nvtx(1, 1, 70, 71, "ncclGroupStart", n)
    db.nvtx(1, 1, 72, 73, "ncclAllGather", n, {**comm, "Message size [bytes]": 10})
    db.nvtx(1, 1, 74, 75, "ncclReduceScatter", n, {**comm, "Message size [bytes]": 10})
    db.nvtx(1, 1, 76, 80, "ncclGroupEnd", n)
    db.nvtx(1, 1, 90, 91, "ncclGroupStart", n)  # never closed: ends with its last member
    db.nvtx(1, 1, 92, 95, "ncclSend", n, {**comm, "Message size [bytes]": 5})
    calls = read(db.write(tmp_path / "x.sqlite"))[0].comm_calls
    assert calls.select("op", "start_ns", "end_ns", "in_bytes", "out_bytes", "group_size").rows() == [
        ("all_gather", 10, 20, 1024, 4096, 4),
        ("reduce_scatter", 30, 40, 4096, 1024, 4),
        ("broadcast", 50, 60, 8, 8, 4),
        ("coalesced", 70, 80, 10 + 40, 40 + 10, 4),
        ("send", 90, 95, 5, 5, 4),
    ]


def test_torch_nccl_ranges_are_the_fallback(tmp_path: Path) -> None:
    db = NsysExport()
    db.kernel(1, 0, 10, ALLREDUCE, correlation=1)
    db.nvtx(1, 3, 0, 20, "nccl:all_reduce, op_id = 12")
    db.nvtx(1, 3, 30, 40, "nccl:_allgather_base")
    calls = read(db.write(tmp_path / "x.sqlite"))[0].comm_calls
    assert calls.select("tid", "op", "start_ns").rows() == [(3, "all_reduce", 0), (3, "all_gather", 30)]


def test_step_markers(tmp_path: Path) -> None:
    path = two_process_report(tmp_path / "two.sqlite").path
    assert read(path, step_marker=r"forward")[0].steps.select("step", "start_ns").rows() == [(0, 1_000)]
    assert read(path, step_marker=r"Step#")[0].steps["step"].to_list() == [7, 8]
    db = NsysExport()
    db.kernel(1, 0, 10, FILL)
    for i, t in enumerate((100, 300, 200)):
        db.nvtx(1, 1, t, t + 50, f"iter-{9 - i} of run 2")
    for t in (400, 600, 500):
        db.nvtx(1, 1, t, t + 50, "train_step")
    p = db.write(tmp_path / "s.sqlite")
    # The capture group wins over the first integer; repeated numbers merge; no numbers: ordinals.
    steps = read(p, step_marker=r"iter-(\d+)")[0].steps
    assert steps.select("step", "start_ns").rows() == [(7, 200), (8, 300), (9, 100)]
    assert read(p, step_marker=r"iter")[0].steps["step"].to_list() == [7, 8, 9]
    assert read(p, step_marker=r"of run (\d+)")[0].steps.select("step", "start_ns", "end_ns").rows() == [
        (2, 100, 350)]
    assert read(p, step_marker=r"train_step")[0].steps.select("step", "start_ns").rows() == [
        (0, 400), (1, 500), (2, 600)]
    # Look-around needs a backtracking engine (issue #42: user patterns run in linear time): refused in one line,
    # as a broken regex is.
    with pytest.raises(UsageError, match="look-around"):
        read(p, step_marker=r"(?<=iter-)(\d+)")
    with pytest.raises(UsageError):
        read(p, step_marker=r"iter-(")
    none = read(p, step_marker=r"nomatch")[0]
    assert none.steps.height == 0 and any("nomatch" in w for w in none.meta.warnings)


def test_rank_assignment(tmp_path: Path) -> None:
    path = two_process_report(tmp_path / "two.sqlite").path
    by_dev = {t.meta.devices[0][:6]: t for t in read(path, rank_map={"two.sqlite:200": 0, "two.sqlite:300": 1})}
    assert (by_dev["cuda:1"].meta.rank, by_dev["cuda:1"].meta.rank_source) == (0, "rank-map")
    assert by_dev["cuda:0"].meta.rank == 1
    single = single_rank_report(tmp_path / "r.sqlite").path
    assert (read(single)[0].meta.rank, read(single)[0].meta.rank_source) == (-1, "unknown")  # loader decides
    assert (read(single, rank_hint=5)[0].meta.rank, read(single, rank_hint=5)[0].meta.rank_source) == (
        5, "filename")
    mapped = read(single, rank_hint=5, rank_map={"r.sqlite": 2})[0].meta
    assert (mapped.rank, mapped.rank_source) == (2, "rank-map")


def test_reduced_export(tmp_path: Path) -> None:
    fx = single_rank_report(tmp_path / "red.sqlite", "reduced")
    (trace,) = read(fx.path, rank_hint=1)
    want = fx.ranks[0]
    assert union_ns(spans(trace.gpu, "comm")) == want.comm_union_ns
    assert dict(trace.gpu.group_by("kind").len().rows()) == want.kinds
    assert trace.comm_calls.height == 0 and trace.steps.height == 0 and trace.meta.clock_base_ns is None
    assert any("globalPid" in w for w in trace.meta.warnings)
    assert any("NVTX" in w for w in trace.meta.warnings)


def test_reduced_multi_process_owner_inference(tmp_path: Path) -> None:
    fx = reduced_two_process(tmp_path / "red2.sqlite")
    traces = read(fx.path)
    assert [t.gpu.height for t in traces] == [3, 4]
    assert [t.gpu["device"].unique().to_list() for t in traces] == [[0], [1]]
    assert sorted(traces[1].gpu["correlation"].to_list()) == [7, 200, 201, 202]


# ----------------------------------------------------------------------------- real exports


@needs_shared
def test_real_two_gpu_report() -> None:
    path = TRACES / "mfu_2gpu_before.sqlite"
    before = digest(path)
    traces = read(path)
    assert [t.meta.rank for t in traces] == [0, 1]
    assert [t.meta.devices for t in traces] == [("cuda:0",), ("cuda:1",)]
    for trace, want_ms in zip(traces, (17.173, 8.229), strict=True):
        gpu = trace.gpu
        comm_rows = gpu.filter(pl.col("name").str.contains("nccl"))
        assert comm_rows.height == gpu.filter(pl.col("kind") == "comm").height == 33
        comm, compute = spans(gpu, "comm"), spans(gpu, "compute")
        assert round(union_ns(comm) / 1e6, 3) == want_ms
        exposed = union_ns(comm + compute) - union_ns(compute)
        assert round(exposed / 1e6, 3) == want_ms  # all of it exposed
        assert set(trace.comm_calls["op"]) == {"send_recv"}
        assert trace.meta.versions[0] == ("nsys", "2026.2.1.210") and trace.meta.host == "modal"
    assert [t.comm_calls.height for t in traces] == [32, 34]
    assert digest(path) == before


@needs_shared
def test_real_small_exports() -> None:
    (mock,) = read(TRACES / "mock.sqlite")
    assert dict(mock.gpu.group_by("kind").len().rows()) == {"compute": 2, "memcpy": 1, "sync": 1}
    assert mock.meta.devices == ("cuda:0 (NVIDIA GeForce RTX 3080)",)
    (healthy,) = read(TRACES / "healthy_1pct.sqlite", rank_hint=0)
    assert healthy.gpu.height == 400 and union_ns(spans(healthy.gpu, "compute")) > 0
    assert any("globalPid" in w for w in healthy.meta.warnings)
    exports = sorted(TRACES.glob("*.sqlite"))
    assert {p.name for p in exports} >= {"mock.sqlite", "healthy_1pct.sqlite", "mfu_2gpu_before.sqlite"}  # not vacuous
    assert all(nsys.looks_like(p) for p in exports)


# ----------------------------------------------------------------------------- bad input


def test_bad_inputs_raise_trace_error_naming_the_file(tmp_path: Path) -> None:
    good = two_process_report(tmp_path / "good.sqlite").path
    size = good.stat().st_size
    cases = {
        "plain.sqlite": (plain_sqlite(tmp_path / "plain.sqlite"), "not an Nsight"),
        "nogpu.sqlite": (no_gpu_report(tmp_path / "nogpu.sqlite"), "no GPU activity"),
        "random.sqlite": (tmp_path / "random.sqlite", "not a SQLite"),
        "half.sqlite": (tmp_path / "half.sqlite", "truncated"),
        "empty.sqlite": (tmp_path / "empty.sqlite", "not a SQLite"),
        "missing.sqlite": (tmp_path / "missing.sqlite", "not found"),
    }
    (tmp_path / "random.sqlite").write_bytes(random.Random(1).randbytes(5000))
    (tmp_path / "half.sqlite").write_bytes(good.read_bytes()[: size // 2])
    (tmp_path / "empty.sqlite").write_bytes(b"")
    for path, problem in cases.values():
        with pytest.raises(TraceError) as err:
            read(path)
        assert str(path) in str(err.value) and problem in str(err.value), str(err.value)
    assert not nsys.looks_like(tmp_path / "plain.sqlite") and not nsys.looks_like(tmp_path / "random.sqlite")
    assert nsys.looks_like(good) and nsys.looks_like(tmp_path / "nogpu.sqlite")


def test_truncated_with_consistent_header_is_corrupt(tmp_path: Path) -> None:
    data = bytearray(two_process_report(tmp_path / "good.sqlite").path.read_bytes())
    page = struct.unpack(">H", data[16:18])[0]
    keep = 3  # schema pages survive, table pages are gone: only SQLite itself can tell
    cut = bytearray(data[: keep * page])
    cut[28:32] = struct.pack(">I", keep)
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes(bytes(cut))
    with pytest.raises(TraceError, match="cut.sqlite"):
        read(bad)


def test_locked_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = two_process_report(tmp_path / "busy.sqlite").path
    monkeypatch.setattr(nsys_schema, "BUSY_TIMEOUT_S", 0.05)
    writer = sqlite3.connect(path)
    try:
        writer.execute("BEGIN EXCLUSIVE")
        with pytest.raises(TraceError, match="locked"):
            read(path)
    finally:
        writer.rollback()
        writer.close()
    assert len(read(path)) == 2


def test_input_is_left_untouched(tmp_path: Path) -> None:
    path = two_process_report(tmp_path / "keep.sqlite").path
    before, listing = digest(path), sorted(os.listdir(tmp_path))
    mtime = path.stat().st_mtime_ns
    read(path)
    nsys.looks_like(path)
    path.chmod(0o444)  # a read-only file is opened immutable: still nothing written
    read(path)
    assert digest(path) == before and sorted(os.listdir(tmp_path)) == listing and path.stat().st_mtime_ns == mtime


def test_fuzzed_files_return_or_raise_trace_error(tmp_path: Path) -> None:
    data = two_process_report(tmp_path / "seed.sqlite").path.read_bytes()
    rng = random.Random(20240601)
    outcomes = {"ok": 0, "error": 0}
    for i in range(80):
        buf = bytearray(data)
        if i % 3 == 0:
            buf = buf[: rng.randrange(1, len(buf))]
        else:
            for _ in range(rng.choice((1, 4, 32, 256))):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        path = tmp_path / f"fuzz{i}.sqlite"
        path.write_bytes(bytes(buf))
        try:
            traces = read(path)
        except TraceError as exc:
            assert str(path) in str(exc)
            outcomes["error"] += 1
        else:
            assert isinstance(traces, list)
            outcomes["ok"] += 1
    assert outcomes["ok"] and outcomes["error"]  # both paths exercised


# ----------------------------------------------------------------------------- .nsys-rep


def test_report_without_nsys_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00NSYS-REPORT")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert nsys.looks_like(rep)
    with pytest.raises(TraceError) as err:
        read(rep)
    assert "nsys export --type sqlite --output" in err.value.hint and str(rep) in err.value.hint


def test_report_is_exported_to_a_temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = two_process_report(tmp_path / "src.sqlite").path
    user = tmp_path / "user"
    user.mkdir()
    rep = user / "run.nsys-rep"
    rep.write_bytes(b"\x00NSYS-REPORT")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        'echo "$@" > "$FAKE_NSYS_ARGS"\n'
        'while [ $# -gt 0 ]; do [ "$1" = "--output" ] && out="$2"; shift; done\n'
        'cp "$FAKE_NSYS_SOURCE" "$out"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NSYS_SOURCE", str(src))
    monkeypatch.setenv("FAKE_NSYS_ARGS", str(tmp_path / "args.txt"))
    traces = read(rep)
    assert [t.meta.source for t in traces] == [str(rep)] * 2
    args = (tmp_path / "args.txt").read_text().split()
    assert args[:4] == ["export", "--type", "sqlite", "--output"] and args[-1] == str(rep)
    assert not args[4].startswith(str(user)) and os.listdir(user) == ["run.nsys-rep"]
    monkeypatch.setenv("FAKE_NSYS_SOURCE", str(tmp_path / "nonexistent"))
    with pytest.raises(TraceError, match="nsys export failed"):
        read(rep)


# ----------------------------------------------------------------------------- Kineto -> nsys writer


def _expected_ns(trace: dict, cat: str) -> list[tuple[int, int, str]]:
    out = []
    for ev in trace["traceEvents"]:
        if ev["cat"] == cat:
            s = int(Decimal(repr(ev["ts"])) * 1000)
            out.append((s, s + int(Decimal(repr(ev["dur"])) * 1000), ev["name"]))
    return sorted(out)


@pytest.mark.parametrize("old", [False, True])
def test_kineto_round_trip_single_report(tmp_path: Path, old: bool) -> None:
    k = [kineto_trace(r) for r in (0, 1)]
    files = [write_kineto(tmp_path / "r1.json.gz", k[1], gz=True), write_kineto(tmp_path / "r0.json", k[0])]
    out = tmp_path / "job.sqlite"
    if old:
        kineto_to_nsys_old(files, out)
    else:
        kineto_to_nsys(files, out, nccl_payload=True)
    traces = read(out)
    assert [t.meta.rank for t in traces] == [0, 1] and traces[0].meta.world_size == 2
    for rank, trace in enumerate(traces):
        gpu = trace.gpu
        for kind, cat in (("compute", "kernel"), ("memcpy", "gpu_memcpy"), ("memset", "gpu_memset")):
            got = gpu.filter(pl.col("kind").is_in([kind, "comm"] if cat == "kernel" else [kind]))
            assert sorted(got.select("start_ns", "end_ns", "name").rows()) == _expected_ns(k[rank], cat)
        assert gpu["kind"].to_list().count("comm") == 1 and set(gpu["device"]) == {rank}
        runtime = trace.cpu.filter(pl.col("kind") == "runtime")
        assert sorted(runtime["name"]) == ["cuLaunchKernelEx", "cudaLaunchKernel"]
        (rpc,) = [e for e in k[rank]["traceEvents"] if e["name"] == "record_param_comms"]
        start = int(Decimal(repr(rpc["ts"])) * 1000)
        call = trace.comm_calls.select("op", "start_ns", "end_ns", "in_bytes").row(0)
        assert call == ("all_reduce", start, start + 20_500, None if old else 4096)
        steps = _expected_ns(k[rank], "user_annotation")
        assert trace.steps.select("start_ns", "end_ns").rows() == [(s, e) for s, e, _ in steps]
        assert trace.steps["step"].to_list() == [3, 4]
        # Exactness: 1700000000143.460 us is 1700000000143460 ns, not a float neighbour of it.
        assert gpu.filter(pl.col("kind") == "compute")["start_ns"][0] == 1_700_000_000_143_460 + rank * 500


def test_kineto_one_report_per_rank(tmp_path: Path) -> None:
    files = [write_kineto(tmp_path / f"k{r}.json", kineto_trace(r)) for r in (0, 1)]
    written = kineto_to_nsys(files, tmp_path / "out", single_report=False)
    assert [p.name for p in written] == ["rank0.sqlite", "rank1.sqlite"]
    for rank, path in enumerate(written):
        (trace,) = read(path, rank_hint=rank)
        assert trace.meta.rank == rank and trace.meta.rank_source == "filename"
        assert trace.gpu.height == 4 and trace.comm_calls["op"].to_list() == ["all_reduce"]


SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_h200"


@pytest.mark.skipif(not (SAMPLES / "fsdp_balanced").is_dir(), reason="sample traces absent")
def test_same_workload_reads_the_same_in_both_formats(tmp_path: Path) -> None:
    """Kineto files -> nsys export -> nsys reader gives the Kineto reader's tables (ns-exact)."""
    from analyzer.ingest.kineto import reader as kineto

    files = sorted((SAMPLES / "fsdp_balanced").glob("*.json.gz"))
    (out,) = kineto_to_nsys(files, tmp_path / "fsdp.sqlite", nccl_payload=True)
    ref = {t.meta.rank: t for f in files for t in kineto.read(f, ReadOptions())}
    got = {t.meta.rank: t for t in read(out)}
    assert sorted(got) == sorted(ref) == [0, 1, 2, 3]
    order = ["start_ns", "device", "stream", "end_ns", "name"]
    for rank, k in ref.items():
        n = got[rank]
        cols = ["start_ns", "end_ns", "name", "kind", "stream", "correlation"]
        assert n.gpu.sort(order).select(cols).equals(k.gpu.sort(order).select(cols))
        runtime = [pl.col("kind") == "runtime"]
        assert n.cpu.filter(*runtime).select("start_ns", "end_ns", "name", "correlation").sort("start_ns").equals(
            k.cpu.filter(*runtime).select("start_ns", "end_ns", "name", "correlation").sort("start_ns"))
        calls = ["op", "start_ns", "end_ns", "in_bytes", "out_bytes", "group_size"]
        # work.wait() is not an NCCL call; Kineto's nccl:<op> ranges (catalogue launchers) have no NVTX twin
        want = k.comm_calls.filter((pl.col("op") != "wait") & pl.col("launcher").is_null()).select(calls)
        assert n.comm_calls.select(calls).equals(want)
        assert set(want["op"]) >= {"all_gather", "reduce_scatter"}
