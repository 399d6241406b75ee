"""The native Kineto path (``ingest/kineto/native.py`` over the C scanner ``_kscan.c``).

Two promises are tested here; that its tables equal every other path's on every layout and real capture is
tested with the other paths in ``test_kineto_paths.py``:

- the scanner is never looser than msgspec: a document it accepts, msgspec accepts (planted invalid text in an
  event no table reads, where only a whole-document check can see it; random edits of a valid document);
- whatever it cannot judge from raw text (escapes, repeated keys, odd correlations) it offers to the decoder, so
  nothing a table reads is lost (compared with the exact path, which decodes every event).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest
from polars.testing import assert_frame_equal

from analyzer.errors import TraceError
from analyzer.ingest.kineto import native
from analyzer.ingest.kineto import reader as kineto
from analyzer.ingest.limits import Limits
from analyzer.ingest.options import ReadOptions
from sample_traces.generate import Scenario, build, kineto_text

pytestmark = pytest.mark.skipif(not native.available(), reason="the C scanner is not built (pip install -e .)")

TABLES = ("gpu", "cpu", "comm_calls", "steps")
MARK = "PLANTED_TEXT"


def _doc() -> dict:
    doc = json.loads(kineto_text(build(Scenario(ranks=2, steps=2, python_noise=3)), 0))
    # an event no table reads, to carry planted text where only a check of the whole document sees it
    doc["traceEvents"].append({"ph": "X", "cat": "python_function", "name": "noise", "pid": 1, "tid": 1, "ts": 1,
                               "dur": 1, "args": {"note": MARK}})
    return doc


def _scan(data: bytes, depth: int = 64) -> tuple | None:
    return native._kscan.scan(data, depth, native._cats(ReadOptions(), False), native._NAMES, native._PREFIXES, False)


def _msgspec_accepts(data: bytes) -> bool:
    """Whether msgspec's check of the whole document, as the other paths make it, passes."""
    try:
        kineto._HEADER.decode(data)
        return True
    except (msgspec.MsgspecError, UnicodeDecodeError):
        return False


def _same_as_exact(path: Path, options: ReadOptions | None = None, cpu_ops: bool = False) -> kineto.RankTrace:
    opts = options or ReadOptions()
    data = kineto._file_bytes(path)
    sel = native.native_select(data, opts, cpu_ops)
    assert sel is not None, "the native path declined"
    tables = sel.tables(kineto._number_times)
    if tables is None:  # a timestamp needs its text: read_tables takes the exact path, as on every path
        (got,) = kineto.read_tables(path, opts, cpu_ops=cpu_ops)
    else:
        got = kineto._rank_trace(path, kineto._rank_meta(path, sel.header, opts, sel.not_complete), tables)
    (ref,) = kineto.read_tables_exact(path, opts, cpu_ops=cpu_ops)
    assert got.meta == ref.meta and got.steps_on_gpu == ref.steps_on_gpu
    for t in TABLES:
        assert_frame_equal(getattr(got, t), getattr(ref, t), check_row_order=True)
    return got


# text planted in the noise event's args (raw JSON, replacing the "PLANTED_TEXT" string with its quotes)
INVALID = {
    "control character in a string": b'"a\x01b"',
    "tab in a string": b'"a\tb"',
    "unknown escape": b'"a\\xb"',
    "short unicode escape": b'"\\u12"',
    "lone high surrogate": b'"\\ud800x"',
    "lone low surrogate": b'"\\udc00"',
    "high surrogate then no low one": b'"\\ud800\\u0041"',
    "overlong UTF-8": b'"\xc0\x80"',
    "UTF-8 surrogate": b'"\xed\xa0\x80"',
    "UTF-8 past U+10FFFF": b'"\xf4\x90\x80\x80"',
    "stray continuation byte": b'"\x80"',
    "truncated UTF-8": b'"\xe2\x82"',
    "NaN": b"NaN",
    "Infinity": b"-Infinity",
    "leading zero": b"01",
    "dot without digits": b"1.",
    "exponent without digits": b"1e+",
    "lone minus": b"-",
    "plus sign": b"+1",
    "trailing comma in an array": b"[1, 2,]",
    "trailing comma in an object": b'{"a": 1,}',
    "missing comma": b"[1 2]",
    "single quotes": b"'x'",
    "bare word": b"nul",
    "vertical tab between tokens": b"[1,\x0b2]",
    "comment": b"[1 /* c */]",
}

VALID = {
    "escapes": b'"\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9"',
    "surrogate pair": b'"\\ud83d\\ude00"',
    "UTF-8 of every length": "\"é € 😀\"".encode(),
    "numbers": b"[0, -0, 1.5, -2.25e-3, 1E+9, 12345678901234567890123, 1e400, 1e-400]",  # out of range: unread
    "literals": b"[true, false, null]",
    "empty containers": b'[{}, [], {"a": []}]',
    "whitespace": b'[ 1 ,\r\n\t2 ]',
    "nesting within the limit": b"[[[[[[1]]]]]]",
}


def _outcome(path: Path) -> object:
    """What read_tables makes of a file: its tables, or its error's line."""
    try:
        (t,) = kineto.read_tables(path, ReadOptions(), cpu_ops=False)
        return t.meta, t.steps_on_gpu, *(getattr(t, name).to_dicts() for name in TABLES)
    except TraceError as exc:
        return str(exc)


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_text_in_an_unread_event_is_declined(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    """Invalid JSON where no table looks: the scanner declines, and the file reads exactly as it did without
    the scanner (an error line; or, for bytes that are not UTF-8 and NaN, which the old paths tolerate in
    unread events, the same tables)."""
    data = json.dumps(_doc()).encode().replace(f'"{MARK}"'.encode(), INVALID[name])
    assert _scan(data) is None
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    got = _outcome(path)
    monkeypatch.setenv("COMMSCOPE_NO_NATIVE", "1")
    assert got == _outcome(path)


@pytest.mark.parametrize("name", list(VALID))
def test_valid_text_in_an_unread_event_is_accepted(tmp_path: Path, name: str) -> None:
    data = json.dumps(_doc()).encode().replace(f'"{MARK}"'.encode(), VALID[name])
    assert _msgspec_accepts(data)
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    _same_as_exact(path)


@pytest.mark.parametrize("text", [b"", b"[]", b"{}", b'{"traceEvents": {}}', b'{"traceEvents": [1]}',
                                  b'{"traceEvents": [], "traceEvents": []}', b'{"trace\\u0045vents": []}',
                                  b'{"traceEvents": []} x', b'{"traceEvents": [', b'{"traceEvents": [{}]'])
def test_documents_it_does_not_take(text: bytes) -> None:
    """No events array, a repeated one, one behind an escaped key, elements that are not events, trailing
    text, truncation: declined (the other paths word them)."""
    assert _scan(text) is None


def test_depth_limit(tmp_path: Path) -> None:
    """Nesting past --max-json-depth is declined, so the old paths refuse it with their message; at the limit
    it is read."""
    doc = _doc()
    data = json.dumps(doc).encode().replace(f'"{MARK}"'.encode(), b"[[[1]]]")  # doc, array, event, args, 3 more
    assert _scan(data, depth=7) is not None and _scan(data, depth=6) is None
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    with pytest.raises(TraceError, match="levels deep"):
        kineto.read_tables(path, ReadOptions(limits=Limits(max_json_depth=6)), cpu_ops=False)


def test_what_raw_text_cannot_show_is_offered(tmp_path: Path) -> None:
    """Keys and values that only decoding reveals: an escaped "cat" key or value, a repeated "cat" (the last one
    counts), an escaped name, an escaped "correlation" key in a launch, a correlation written as a float. The
    tables equal the exact path's, which decodes every event."""
    doc = _doc()
    events = doc["traceEvents"]
    kernel = next(e for e in events if e.get("cat") == "kernel")
    t0, corr = kernel["ts"], kernel["args"]["correlation"]
    kern = '{"ph": "X", %s, "pid": 0, "tid": 7, "ts": TS, "dur": 1, "args": {"device": 0, "stream": 7, %s}}'
    launch = '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": TS, "dur": 1, %s}'
    plant = [
        (kern % ('"c\\u0061t": "kernel", "name": "escaped_key"', '"correlation": 123456'), t0 + 1),
        (kern % ('"cat": "ker\\u006eel", "name": "escaped_value"', '"correlation": 123457'), t0 + 2),
        (kern % ('"cat": "cpu_op", "name": "repeated", "cat": "kernel"', '"correlation": 123458'), t0 + 3),
        ('{"ph": "X", "cat": "cpu_op", "name": "record_param_comm\\u0073", "pid": 1, "tid": 1, "ts": TS, "dur": 1, '
         '"args": {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 4}}', t0 + 4),
        (launch % '"args": {"corr\\u0065lation": 123456}', t0),
        (launch % '"args": {"correlation": 123457.0}', t0),
        (launch % f'"args": {{"correlation": 1, "correlation": {corr}}}', t0),
    ]
    plant = [text.replace("TS", str(ts)) for text, ts in plant]
    text = json.dumps(doc).replace(f'"{MARK}"}}}}', f'"{MARK}"}}}}, ' + ", ".join(plant), 1)
    path = tmp_path / "rank0.json"
    path.write_text(text)
    got = _same_as_exact(path)
    names = got.gpu["name"].to_list()
    assert {"escaped_key", "escaped_value", "repeated"} <= set(names)
    assert got.comm_calls.height > 0


@pytest.mark.parametrize("cpu_ops", [False, True])
def test_custom_step_marker_and_cpu_ops(tmp_path: Path, cpu_ops: bool) -> None:
    path = tmp_path / "rank0.json"
    path.write_text(kineto_text(build(Scenario(ranks=2, steps=3, gpu_step_annotations=False, python_noise=3)), 0))
    got = _same_as_exact(path, ReadOptions(step_marker=r"ProfilerStep#\d+"), cpu_ops)
    assert got.steps.height == 3


def test_random_edits_never_pass_what_msgspec_rejects(tmp_path: Path) -> None:
    """Bytes replaced, dropped or doubled at random in a small document: whenever the scanner accepts the
    result, msgspec accepts it too, and the tables are the exact path's."""
    rng = random.Random(7)
    base = json.dumps(_doc(), indent=1).encode()
    alphabet = b'{}[]",:\\ \n\t0123456789.-+eEtrufalsn\x00\x1f\x7f\x80\xc3\xa9\xed\xff'
    accepted = declined = 0
    for i in range(300):
        data = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            pos = rng.randrange(len(data))
            op = rng.random()
            if op < 0.4:
                data[pos] = rng.choice(alphabet)
            elif op < 0.7:
                del data[pos]
            else:
                data.insert(pos, data[pos])
        data = bytes(data)
        if _scan(data) is None:
            declined += 1
            continue
        assert _msgspec_accepts(data), data
        path = tmp_path / f"rank{i}.json"
        path.write_bytes(data)
        try:
            kineto.read_tables_exact(path, ReadOptions(), cpu_ops=False)
        except TraceError:
            continue  # valid JSON, not a trace the exact path reads (a kernel's ts made a string): nothing to compare
        _same_as_exact(path)
        accepted += 1
    assert accepted >= 30 and declined >= 30, (accepted, declined)


def test_gather_refuses_spans_outside_the_buffer() -> None:
    import numpy as np

    buf = b'{"a": 1}, {"b": 2}'
    s, e = np.array([0, 10], dtype=np.int64), np.array([8, 18], dtype=np.int64)
    assert native._kscan.gather(buf, s, e) == b'[{"a": 1},{"b": 2}]'
    with pytest.raises(ValueError):
        native._kscan.gather(buf, s, np.array([8, 19], dtype=np.int64))
    with pytest.raises(ValueError):
        native._kscan.gather(buf, np.array([5], dtype=np.int64), np.array([4], dtype=np.int64))
