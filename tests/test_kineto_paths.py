"""The three Kineto decode paths (scan, chunks, exact text) give identical tables on every layout.

The scan path decodes only the events it finds by a byte scan; these tests rewrite one generated
trace in layouts a JSON writer may produce (compact, indented, sorted keys, odd spacing) and plant
the text that could fool a byte scan (kernel names holding '}, {', record_param_comms inside another
event's args, a nested "cat" key, cpu_op step markers), then require all paths to agree.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from analyzer.errors import TraceError
from analyzer.ingest.kineto import blocks as kineto_blocks
from analyzer.ingest.kineto import links as kineto_links
from analyzer.ingest.kineto import native as kineto_native
from analyzer.ingest.kineto import reader as kineto
from analyzer.ingest.kineto import scan as kineto_scan
from analyzer.ingest.options import ReadOptions
from analyzer.model import RankTrace
from sample_traces.generate import Scenario, build, kineto_text

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
TABLES = ("gpu", "cpu", "comm_calls", "steps")

def _dumps(**kwargs: object) -> Callable[[dict], str]:
    return lambda doc: json.dumps(doc, **kwargs)


def _kineto_layout(doc: dict) -> str:
    """PyTorch's own layout: each event a block of lines opened by '  {', its args on lines of their own."""
    def pairs(d: dict) -> str:
        return ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in d.items())

    blocks = []
    for e in doc["traceEvents"]:
        top = {k: v for k, v in e.items() if k != "args"}
        lines = ["  {", "    " + pairs(top) + ("," if "args" in e else "")]
        if "args" in e:
            lines += ['    "args": {', "      " + pairs(e["args"]), "    }"]
        blocks.append("\n".join([*lines, "  }"]))
    head = "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in doc.items() if k != "traceEvents")
    return "\n{\n" + head + '  "traceEvents": [\n' + ",\n".join(blocks) + '\n  ],\n  "traceName": "t.json"\n}'


def _lines_layout(doc: dict) -> str:
    """One event per line (what benchmarks.replicate writes where it cannot keep the source's layout)."""
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    return json.dumps(head)[:-1] + ', "traceEvents": [\n' + ",\n".join(map(json.dumps, doc["traceEvents"])) + "\n]}"


# Layouts: (writer, must the scan path handle it?, must the block path?). The block path needs events that
# open lines; json.dumps without indent writes the whole array on one line.
LAYOUTS: dict[str, tuple[Callable[[dict], str], bool, bool]] = {
    "compact": (_dumps(separators=(",", ":")), True, False),
    "indented": (_dumps(indent=2), True, True),
    "spaced": (_dumps(separators=(" , ", " : ")), True, False),
    "sorted_keys": (_dumps(sort_keys=True), True, False),  # args before cat: the nearest '{' is args'
    "sorted_indented": (_dumps(sort_keys=True, indent=1), True, True),
    "kineto": (_kineto_layout, True, True),
    "lines": (_lines_layout, True, True),
}


def _doc(tricky: bool) -> dict:
    # host-side steps when tricky, so the planted cpu_op ProfilerStep#99 must reach the steps table
    sc = Scenario(ranks=2, steps=3, python_noise=5, gpu_step_annotations=not tricky)
    doc = json.loads(kineto_text(build(sc), 0))
    if not tricky:
        return doc
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels[0]["name"] = "void at::native::f<{lambda(float)#1}, {x}, std::array<char*, 2ul> >(int)"
    kernels[1]["name"] = 'g<"}, {">'  # an escaped quote and a fake separator inside a name
    t0 = kernels[0]["ts"]
    events += [
        # text of a kept event inside other events: must not add or hide anything
        {"ph": "X", "cat": "python_function", "name": "wrap", "pid": 1, "tid": 1, "ts": t0, "dur": 1.0,
         "args": {"note": "record_param_comms ProfilerStep#9", "cat": "kernel"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": t0, "dur": 1.0,
         "args": {"inner": {"cat": "kernel", "ph": "X", "ts": 5, "dur": 5}}},
        # an old-style (cpu_op) step marker and a kept category with a nested object before "cat"
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#99", "pid": 1, "tid": 1, "ts": t0 + 1, "dur": 2.0},
        {"args": {"device": 0, "stream": 7, "correlation": 1}, "ph": "X", "cat": "kernel", "name": "late_args",
         "pid": 0, "tid": 7, "ts": t0 + 2, "dur": 3.0},
        # runtime calls: one whose correlation is on no GPU event (dropped), one on late_args' (kept)
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventQuery", "pid": 1, "tid": 1, "ts": t0, "dur": 1.0,
         "args": {"cbid": 1, "correlation": 987654321}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0, "dur": 1.0,
         "args": {"External id": 5, "cbid": 211, "correlation": 1}},
        # a comm catalogue launcher (found by name, as record_param_comms is) and a peer copy (its size kept)
        {"ph": "X", "cat": "cpu_op", "name": "symm_mem::multimem_all_reduce_", "pid": 1, "tid": 1, "ts": t0 + 3,
         "dur": 4.0, "args": {"Sequence number": 5}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP (Device -> Device)", "pid": 0, "tid": 31, "ts": t0 + 9,
         "dur": 3.0, "args": {"device": 0, "stream": 31, "correlation": 2, "bytes": 4096,
                              "memory bandwidth (GB/s)": 1.4}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": t0 + 4, "dur": 1.0,
         "args": {"cbid": 41, "correlation": 2}},
    ]
    return doc


def _paths(path: Path) -> dict[str, RankTrace]:
    data = kineto._file_bytes(path)
    header = kineto._HEADER.decode(data)
    opts = ReadOptions()
    out = {}
    paths = (("native", lambda: kineto_native.native_select(data, opts, False)),
             ("native_small", lambda: kineto_native.native_select(data, opts, False)),
             ("blocks", lambda: kineto_blocks.block_select(data, header, opts, False)),
             ("blocks_small", lambda: kineto_blocks.block_select(data, header, opts, False)),
             ("scan", lambda: kineto_scan.scan_select(data, header, opts, False)),
             ("scan_windows", lambda: kineto_scan.scan_select(data, header, opts, False)),
             ("chunks", lambda: kineto._fast_select(header, opts, False)))
    for name, select in paths:
        saved = kineto._CHUNK_BYTES, kineto_scan._WINDOW, kineto_scan._BEHIND, kineto_blocks._CHUNK, kineto_native._PART
        kineto._CHUNK_BYTES = 2048  # many chunks
        if name == "native_small":  # the runtime calls decoded in many parts, pages dropped one page behind
            kineto_native._PART, kineto_scan._BEHIND = 256, 1
        if name == "scan_windows":  # windows of ~64 bytes, pages dropped one page behind the passes
            kineto_scan._WINDOW, kineto_scan._BEHIND = 64, 1
        if name == "blocks_small":  # ~40 Arrow columns and decodes (a few blocks each in the small documents),
            # pages dropped one page behind
            kineto_blocks._CHUNK, kineto_scan._BEHIND = max(300, len(data) // 40), 1
        try:
            sel = select()
        finally:
            kineto._CHUNK_BYTES, kineto_scan._WINDOW, kineto_scan._BEHIND, kineto_blocks._CHUNK, kineto_native._PART = saved
        if sel is not None:
            tables = sel.tables(kineto._number_times)
            if tables is not None:
                out[name] = kineto._rank_trace(path, kineto._rank_meta(path, sel.header, opts), tables)
    (out["exact"],) = kineto.read_tables_exact(path, opts, cpu_ops=False)
    return out


def _assert_same(traces: dict[str, RankTrace]) -> None:
    ref = traces["exact"]
    for name, t in traces.items():
        assert t.meta == ref.meta and t.steps_on_gpu == ref.steps_on_gpu, name
        for table in TABLES:
            assert_frame_equal(getattr(t, table), getattr(ref, table), check_row_order=True), (name, table)


@pytest.mark.parametrize("tricky", [False, True])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_all_paths_agree_on_every_layout(tmp_path: Path, layout: str, tricky: bool) -> None:
    write, scans, blocks = LAYOUTS[layout]
    path = tmp_path / "rank0.json"
    path.write_text(write(_doc(tricky)))
    traces = _paths(path)
    if kineto_native.available():  # any layout: the C scanner does not depend on lines
        assert "native" in traces and "native_small" in traces, "the native path declined"
    if scans:
        assert "scan" in traces and "scan_windows" in traces, "the scan path fell back"
    assert ("blocks" in traces and "blocks_small" in traces) == blocks
    assert "chunks" in traces
    _assert_same(traces)
    if tricky:
        gpu = traces["exact"].gpu
        assert "late_args" in gpu["name"].to_list()
        assert gpu["name"].str.contains("lambda").sum() == 1
        assert 99 in traces["exact"].steps["step"].to_list()
        cpu = traces["exact"].cpu
        assert "cudaEventQuery" not in cpu["name"].to_list()
        calls = traces["exact"].comm_calls
        launchers = calls.filter(pl.col("launcher").is_not_null())["launcher"].to_list()
        assert "symm_mem::multimem_all_reduce_" in launchers and "nccl:all_reduce" in launchers
        copies = gpu.filter(pl.col("kind") == "comm").filter(pl.col("name").str.starts_with("Memcpy PtoP"))
        assert copies["bytes"].to_list() == [4096]
        assert 1 in cpu.filter(pl.col("name") == "cudaLaunchKernel")["correlation"].to_list()


def test_runtime_calls_kept_are_the_launches_of_gpu_work(tmp_path: Path) -> None:
    """Every kept runtime call names a GPU event or blocks the host on the GPU (a synchronize: the host-aware replay
    ends it when the GPU work it waits for ends), and every GPU event's runtime call is kept (counted independently
    from the document)."""
    doc = _doc(False)
    events = doc["traceEvents"]
    gpu_cats = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
    gpu_corr = {e["args"]["correlation"] for e in events if e.get("cat") in gpu_cats}
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamIsCapturing", "pid": 1, "tid": 1,
                   "ts": runtime[0]["ts"], "dur": 1.0, "args": {"cbid": 317, "correlation": 10**9}})
    syncs = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"}
    want = sorted(e["args"]["correlation"] for e in runtime
                  if e["args"].get("correlation") in gpu_corr or e["name"] in syncs)
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    traces = _paths(path)
    assert "scan" in traces
    _assert_same(traces)
    got = traces["scan"].cpu.filter(pl.col("kind") == "runtime")["correlation"].sort().to_list()
    assert got == want and len(want) >= len(gpu_corr) > 0


@pytest.mark.parametrize("style", ["float", "int"])
def test_all_paths_agree_on_timestamp_styles_gzipped(tmp_path: Path, style: str) -> None:
    from sample_traces.generate import write_kineto

    (path, *_) = write_kineto(build(Scenario(ranks=2, steps=3, ts_style=style, python_noise=20)), tmp_path, gzip=True)
    traces = _paths(path)
    assert {"scan", "chunks", "exact"} <= set(traces)
    _assert_same(traces)


def test_read_uses_the_scan_path_and_matches_exact(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(_doc(True)))
    (t,) = kineto.read_tables(path, ReadOptions(), cpu_ops=False)
    _assert_same({"read": t, "exact": kineto.read_tables_exact(path, ReadOptions(), cpu_ops=False)[0]})


def _real_kineto_files() -> list[Path]:
    files = [p for p in SAMPLES.rglob("rank*.json.gz")]
    if SHARED.is_dir():
        files += [p for p in SHARED.rglob("*") if p.name.endswith((".json", ".json.gz"))]
    return sorted(files)


def test_the_real_trace_glob_finds_the_shipped_captures() -> None:
    """An empty parameter list would skip the test below instead of failing it."""
    files = _real_kineto_files()
    shipped = [p for p in files if p.is_relative_to(SAMPLES / "gpu_h200")]
    assert len(shipped) == 20  # five 4-rank H200 captures ship with the project
    if SHARED.is_dir():
        assert len(files) >= 60


@pytest.mark.parametrize("path", _real_kineto_files(), ids=lambda p: p.name)
def test_all_paths_agree_on_real_traces(path: Path) -> None:
    try:
        kineto.read_tables_exact(path, ReadOptions(), cpu_ops=False)
    except TraceError as exc:  # answer keys, execution traces, CPU-only ranks: the fast paths say the same
        with pytest.raises(TraceError) as fast:
            kineto.read_tables(path, ReadOptions(), cpu_ops=False)
        assert str(fast.value) == str(exc)
        return
    traces = _paths(path)
    # a float timestamp past 2^43 us on a kept event (HTA's ns_resolution_trace keeps a cudaDeviceSynchronize at
    # 1712195495896449.8) needs the raw text on every path: then only the exact path reads it
    if kineto_native.available() and len(traces) > 1:
        assert "native" in traces, "the native path declined a real trace"
    if "gpu_h200" in path.parts and "sample_traces" in path.parts:
        assert "scan" in traces, "the scan path fell back on a real PyTorch trace"
    if "sample_traces" in path.parts or "gpu_h200" in path.parts:  # PyTorch wrote these: events open lines
        assert "blocks" in traces and "blocks_small" in traces, "the block path fell back on a real PyTorch trace"
    _assert_same(traces)


def _mutate(text: str, rng: random.Random) -> str:
    """A few edits: letters swapped and whitespace added (valid JSON), or a structural byte dropped."""
    chars = list(text)
    for _ in range(rng.randrange(1, 4)):
        pos = rng.randrange(len(chars))
        kind = rng.random()
        if kind < 0.5 and chars[pos].isalpha():
            chars[pos] = rng.choice(string.ascii_letters)
        elif kind < 0.8 and chars[pos] in ",:[{":
            chars[pos] += rng.choice([" ", "\n", "\t "])
        elif kind >= 0.8:
            while chars[pos] not in '{}[]",:':
                pos = (pos + 1) % len(chars)
            chars[pos] = ""
    return "".join(chars)


def test_fuzzed_documents_read_exactly_like_the_exact_path(tmp_path: Path) -> None:
    """Whatever the edits, the scan path gives the exact path's tables, or both reject the file."""
    rng = random.Random(11)
    text = json.dumps(_doc(True), indent=1)
    agreed = rejected = 0
    for i in range(80):
        path = tmp_path / f"rank{i}.json"
        path.write_text(_mutate(text, rng))
        try:
            (ref,) = kineto.read_tables_exact(path, ReadOptions(), cpu_ops=False)
        except TraceError:
            with pytest.raises(TraceError):
                kineto.read_tables(path, ReadOptions(), cpu_ops=False)
            rejected += 1
            continue
        (got,) = kineto.read_tables(path, ReadOptions(), cpu_ops=False)
        _assert_same({"read": got, "exact": ref})
        agreed += 1
    assert agreed >= 20 and rejected >= 5, (agreed, rejected)  # both outcomes were exercised


def test_scan_pattern_finds_categories_and_correlation_digits() -> None:
    """One pattern, two kinds of hit: a listed category (no digits) or a correlation key (its digits)."""
    pat = kineto_scan._scan_pattern(("kernel", "gpu_memcpy"))
    text = (b'{"cat": "kernel", "x": 1}, {"cat":"gpu_memcpy"}, {"cat": "kernel_x"}, {"cat": "cpu_op"}, '
            b'{"args": {"correlation" :  -42}}, {"args": {"correlation": 7.0}}, {"name": "cat"}')
    got = [(m.start(), m[1]) for m in pat.finditer(text)]
    assert got == [(text.index(b'"cat": "kernel"'), None), (text.index(b'"cat":"gpu_memcpy"'), None),
                   (text.index(b'"correlation" :'), b"-42"), (text.index(b'"correlation": 7'), b"7")]


@pytest.mark.parametrize("layout", ["compact", "kineto"])
def test_odd_correlations_read_like_the_exact_path(tmp_path: Path, layout: str) -> None:
    """A GPU event without args, a negative correlation and one of 19 digits (inside int64, too long for the
    scan's fast number): their launches are kept exactly as the exact path keeps them."""
    doc = _doc(False)
    events = doc["traceEvents"]
    t0 = next(e for e in events if e.get("cat") == "kernel")["ts"]
    big = 10**18 + 7  # 19 digits, < 2^63
    huge = 10**19 - 1  # 19 digits, >= 2^63: no int64 holds it (both paths read it as null)
    for corr, name in ((-7, "neg_corr"), (big, "big_corr"), (huge, "huge_corr")):
        events += [
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t0 + 3, "dur": 1.0,
             "args": {"device": 0, "stream": 7, "correlation": corr}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 2,
             "dur": 1.0, "args": {"cbid": 211, "correlation": corr}},
        ]
    events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset", "pid": 0, "tid": 7, "ts": t0 + 4, "dur": 1.0})
    events.append({"ph": "X", "cat": "kernel", "name": "no_corr", "pid": 0, "tid": 7, "ts": t0 + 5, "dur": 1.0,
                   "args": {"device": 0, "stream": 7}})
    path = tmp_path / "rank0.json"
    path.write_text(LAYOUTS[layout][0](doc))
    traces = _paths(path)
    assert "scan" in traces and ("blocks" in traces) == (layout == "kineto")
    _assert_same(traces)
    launches = traces["scan"].cpu.filter(pl.col("kind") == "runtime")["correlation"].to_list()
    assert -7 in launches and big in launches


def test_scan_with_cpu_ops_matches_the_exact_path(tmp_path: Path) -> None:
    """``cpu_ops=True`` scans for the cpu_op category as well; the tables equal the exact path's."""
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(_doc(True)))
    data = kineto._file_bytes(path)
    header = kineto._HEADER.decode(data)
    sel = kineto_scan.scan_select(data, header, ReadOptions(), True)
    assert sel is not None
    scan = kineto._rank_trace(path, kineto._rank_meta(path, sel.header, ReadOptions()), sel.tables(kineto._number_times))
    (exact,) = kineto.read_tables_exact(path, ReadOptions(), cpu_ops=True)
    _assert_same({"scan": scan, "exact": exact})
    assert (exact.cpu["kind"] == "op").sum() > 0


def _mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isdigit() or line[:1] in "abcdef" and "-" in line.split()[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_pages_behind_a_pass_leave_the_process(tmp_path: Path) -> None:
    """The scan's page dropping, measured on a real mapping: what a pass left behind is no longer resident,
    what lies ahead and the last ``_BEHIND`` bytes still are, and a restart drops everything."""
    import mmap

    size = 16 << 20  # big enough that huge-page mappings (2 MB, dropped whole) leave a margin
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(size))
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        assert sum(data[i] for i in range(0, size, mmap.PAGESIZE)) == 0  # touch every page
        full = _mapped_rss_kb(path)
        assert full * 1024 >= size * 0.9
        saved = kineto_scan._BEHIND
        kineto_scan._BEHIND = 8 * mmap.PAGESIZE
        try:
            pages = kineto_scan._Resident(data)
            pages.behind(10 * mmap.PAGESIZE)  # less than 2 x _BEHIND ahead of what was dropped: nothing yet
            assert pages.done == 0
            pos = size // 2 + 123
            pages.behind(pos)
            done = (pos - kineto_scan._BEHIND) // mmap.PAGESIZE * mmap.PAGESIZE
            assert pages.done == done
            behind = 2 * kineto_scan._BEHIND  # the next drop waits until the pass is this far past it
            pages.behind(done + behind - mmap.PAGESIZE)
            assert pages.done == done
            pages.behind(done + behind)
            assert pages.done == done + kineto_scan._BEHIND
            left = _mapped_rss_kb(path) * 1024  # dropped: at least the pages asked; kept: the rest, less
            assert size - pages.done - (2 << 20) <= left <= size - pages.done  # one huge page at most
            pages.restart()
            assert pages.done == 0 and _mapped_rss_kb(path) == 0
        finally:
            kineto_scan._BEHIND = saved
    assert kineto_scan._Resident(b"bytes are left alone").data is None


def test_an_event_the_scan_cannot_place_sends_the_file_down_another_path(tmp_path: Path) -> None:
    """A kernel name with more false event ends ('}, {') than the scan tries: the scan gives up (None), and
    read_tables still returns the exact path's tables, that kernel included."""
    doc = _doc(False)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["name"] = "f<" + "{a}, {b}, " * 80 + ">"
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))
    data = kineto._file_bytes(path)
    assert kineto_scan.scan_select(data, kineto._HEADER.decode(data), ReadOptions(), False) is None
    (t,) = kineto.read_tables(path, ReadOptions(), cpu_ops=False)
    (exact,) = kineto.read_tables_exact(path, ReadOptions(), cpu_ops=False)
    _assert_same({"read": t, "exact": exact})
    assert kernel["name"] in t.gpu["name"].to_list()


def _kineto_file(tmp_path: Path, doc: dict, edit: Callable[[str], str] = lambda t: t) -> Path:
    path = tmp_path / "rank0.json"
    path.write_text(edit(_kineto_layout(doc)))
    return path


def _blocks(path: Path) -> kineto._Selection | None:
    data = kineto._file_bytes(path)
    return kineto_blocks.block_select(data, kineto._HEADER.decode(data), ReadOptions(), False)


def test_an_array_of_objects_opening_lines_inside_an_event_is_not_read_as_events(tmp_path: Path) -> None:
    """A nested array whose objects open lines at the events' indentation: the lines split one event into
    blocks, and one of them, a whole object with "cat": "kernel", would be decoded as a kernel. The block
    before ends with '[' instead of '}': the block path declines the file."""
    doc = _doc(False)
    op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    op["args"] = {"marker": "NESTED"}
    fake = '{"ph": "X", "cat": "kernel", "name": "fake", "pid": 0, "tid": 7, "ts": 5, "dur": 5}'
    path = _kineto_file(tmp_path, doc, lambda t: t.replace('"marker": "NESTED"', f'"list": [\n  {fake},\n  {{"y": 1}}]'))
    assert json.loads(path.read_text())  # still valid JSON, the fake kernel inside the cpu_op's args
    assert _blocks(path) is None
    assert "fake" not in kineto.read_tables_exact(path, ReadOptions(), cpu_ops=False)[0].gpu["name"].to_list()


def test_two_events_on_one_line_keep_the_second_ones_launch(tmp_path: Path) -> None:
    """One event per line except one line holding an unlinked runtime call and then a launch: the block's
    correlation read is the first event's, so the block is offered anyway, does not decode as one object,
    and the file goes down the scan path, which keeps the launch."""
    doc = _doc(False)
    events = doc["traceEvents"]
    kernel = next(e for e in events if e.get("cat") == "kernel")
    corr = kernel["args"]["correlation"]
    launch = next(e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == corr)
    events.remove(launch)
    noise = {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventQuery", "pid": 1, "tid": 1, "ts": launch["ts"],
             "dur": 1.0, "args": {"cbid": 1, "correlation": 10**9}}
    text = _lines_layout(doc)
    last = json.dumps(events[-1])
    text = text.replace(last, f"{last},\n{json.dumps(noise)}, {json.dumps(launch)}")
    path = tmp_path / "rank0.json"
    path.write_text(text)
    assert _blocks(path) is None
    (got,) = kineto.read_tables(path, ReadOptions(), cpu_ops=False)
    (exact,) = kineto.read_tables_exact(path, ReadOptions(), cpu_ops=False)
    _assert_same({"read": got, "exact": exact})
    assert corr in got.cpu.filter(pl.col("kind") == "runtime")["correlation"].to_list()


def test_a_name_with_a_false_separator_is_decoded_on_its_own(tmp_path: Path) -> None:
    """A kernel whose name holds '}, {' marks its block: that block is decoded alone, the rest together."""
    doc = _doc(False)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[2]["name"] = "f<{lambda(float)#1}, {lambda(int)#2}>"
    path = _kineto_file(tmp_path, doc)
    sel = _blocks(path)
    assert sel is not None and kernels[2]["name"] in [e.name for e in sel.gpu]
    assert len(sel.gpu) == len([e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")])


@pytest.mark.parametrize("values", [[5, -7, 0, 10**18 + 7], [3, 2**63, -1], [1.0, 2, "x", None, float("nan")],
                                    [10**19 - 1], []])
def test_the_block_paths_links_are_the_scan_paths(values: list) -> None:
    """The correlations a GPU event links, taken all at once (numpy) where the scan path takes them one by one."""
    want = {kineto_scan._number(v) for v in values} - {None}
    assert set(kineto_links._numbers(values).tolist()) == want


def test_bytes_that_are_not_utf8_send_the_block_path_away(tmp_path: Path) -> None:
    """msgspec's check of the document skips strings no one decodes, so a noise event's name may hold bytes
    that are not UTF-8: the block path declines the file (its Arrow column would not be text), and the file
    reads as the scan path reads it, byte for byte the same tables."""
    doc = _doc(False)
    op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    op["name"] = "NOT_UTF8"
    path = tmp_path / "rank0.json"
    path.write_bytes(_kineto_layout(doc).encode().replace(b"NOT_UTF8", b"bad\xff\xfename"))
    assert _blocks(path) is None
    data = kineto._file_bytes(path)
    sel = kineto_scan.scan_select(data, kineto._HEADER.decode(data), ReadOptions(), False)
    assert sel is not None
    (got,) = kineto.read_tables(path, ReadOptions(), cpu_ops=False)
    want = kineto._rank_trace(path, kineto._rank_meta(path, sel.header, ReadOptions()), sel.tables(kineto._number_times))
    _assert_same({"read": got, "exact": want})
    assert got.gpu.height > 0
