"""benchmarks.replicate: scaled copies keep the profiler's bytes, and shift only what makes copies distinct."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

from benchmarks.replicate import replicate_file

SRC = sorted((Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_h200" / "host_straggler").glob("rank0*"))[0]
IDS = ("correlation", "External id")


def test_copies_keep_the_source_layout_and_shift_times_and_ids(tmp_path: Path) -> None:
    raw = gzip.decompress(SRC.read_bytes())
    out = tmp_path / "rank0.json"
    assert replicate_file(SRC, out, mb=0, copies=2) == 2
    text = out.read_bytes()
    src = json.loads(raw, parse_float=Decimal)["traceEvents"]
    got = json.loads(text, parse_float=Decimal)["traceEvents"]
    meta = [e for e in src if e.get("ph") == "M"]
    body = [e for e in src if e.get("ph") != "M"]
    assert len(got) == len(meta) + 2 * len(body)
    first, second = got[len(meta) : len(meta) + len(body)], got[len(meta) + len(body) :]
    assert first == body  # copy 0 is the source
    # every event of copy 1 is its source event with one time shift and one id stride for all
    shift = {b["ts"] - a["ts"] for a, b in zip(body, second) if "ts" in a}
    stride = {b["args"][k] - a["args"][k] for a, b in zip(body, second) for k in IDS if k in a.get("args", {})}
    assert len(shift) == 1 and len(stride) == 1
    (d,) = shift
    assert d > max(e["ts"] + e.get("dur", 0) for e in body) - min(e["ts"] for e in body) and d == int(d)
    for a, b in zip(body, second):
        rest = {k: v for k, v in b.items() if k not in ("ts", "args", "name", "id")}
        assert rest == {k: v for k, v in a.items() if k not in ("ts", "args", "name", "id")}
    steps = [(e["cat"], e["name"]) for e in got if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(steps) == len(set(steps)) > 0  # each marker's step number stays unique across copies
    # the bytes: each source event's text appears as written, Kineto's indentation included
    kernel = next(e for e in body if e.get("cat") == "kernel")
    at = raw.index(json.dumps(kernel["name"]).encode())
    block = raw[raw.rindex(b"\n  {", 0, at) : raw.index(b"\n  }", at) + 4]
    assert block.count(b"\n") >= 3 and text.count(block) == 1  # copy 0 verbatim; copy 1's numbers differ


def test_a_one_line_source_stays_one_line(tmp_path: Path) -> None:
    """json.dump's layout (HTA's samples): the whole event array on one line, events joined by ', '."""
    doc = json.loads(gzip.decompress(SRC.read_bytes()))
    src = tmp_path / "src.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "rank0.json"
    replicate_file(src, out, mb=0, copies=3)
    text = out.read_bytes()
    assert text.count(b"\n") == 0 and b'}, {"ph": ' in text
    assert len(json.loads(text)["traceEvents"]) == 3 * len(doc["traceEvents"]) - 2 * sum(
        e.get("ph") == "M" for e in doc["traceEvents"])


def test_the_heavy_mix_is_one_event_per_line_and_drops_only_events_no_table_reads(tmp_path: Path) -> None:
    """``--heavy`` (issue #33's mix): compact events one per line, two in three unread cpu_op events left out;
    the tables commscope reads are those of a plain copy."""
    from analyzer.ingest.kineto.reader import read_tables
    from analyzer.ingest.options import ReadOptions

    plain, heavy = tmp_path / "plain" / "rank0.json", tmp_path / "heavy" / "rank0.json"
    replicate_file(SRC, plain, mb=0, copies=2)
    replicate_file(SRC, heavy, mb=0, copies=2, heavy=True)
    lines = heavy.read_bytes().split(b"\n")
    src = json.loads(gzip.decompress(SRC.read_bytes()), parse_float=Decimal)["traceEvents"]
    got = json.loads(heavy.read_bytes(), parse_float=Decimal)["traceEvents"]
    assert len(lines) == len(got) + 3  # the header line, one line per event, "]}" and the final newline
    assert all(json.loads(line.rstrip(b","), parse_float=Decimal) == e for line, e in zip(lines[1:], got))

    def unread(e: dict) -> bool:
        return e.get("cat") == "cpu_op" and e["name"] != "record_param_comms" and not e["name"].startswith("ProfilerStep#")

    n_src, n_got = sum(map(unread, src)), sum(map(unread, got))
    assert n_got == 2 * (n_src // 3)  # one in three, per copy
    assert sum(not unread(e) and e.get("ph") != "M" for e in got) == 2 * sum(
        not unread(e) and e.get("ph") != "M" for e in src)
    a, b = (read_tables(p, ReadOptions(), cpu_ops=False)[0] for p in (plain, heavy))
    for x, y in ((a.gpu, b.gpu), (a.cpu, b.cpu), (a.comm_calls, b.comm_calls), (a.steps, b.steps)):
        assert x.equals(y)
