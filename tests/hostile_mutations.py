"""How the hostile-input corpus (``tests/hostile_corpus.py``) mutates rank 0 of ``gpu_h200/hybrid_tp_dp``: the base
document, the writer in Kineto's layout, event pickers, and one builder per kind of mutation. A builder takes a
folder and writes one input file into it (named as rank 0), or returns a function that does."""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HYBRID = ROOT / "sample_traces" / "gpu_h200" / "hybrid_tp_dp"
RANK0 = next(HYBRID.glob("rank0.*.pt.trace.json.gz"))
STEM = RANK0.name[: -len(".pt.trace.json.gz")]  # rank0.<id>

Doc = dict[str, Any]


# ------------------------------------------------------------------------------------------ the base document


_BASE: Doc | None = None


def base() -> Doc:
    global _BASE
    if _BASE is None:
        _BASE = json.loads(gzip.decompress(RANK0.read_bytes()))
    return copy.deepcopy(_BASE)


def kineto_text(doc: Doc) -> str:
    """Kineto's layout: header keys, then one event per line block opened by ``\\n  {`` (the block path's shape)."""
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    inner = json.dumps(head)[1:-1]
    if "traceEvents" not in doc:
        return "{" + inner + "}"
    events = doc["traceEvents"]
    if not isinstance(events, list):
        return "{" + inner + (", " if inner else "") + '"traceEvents": ' + json.dumps(events) + "}"
    body = ",\n".join("  " + json.dumps(e) for e in events)
    return "{" + inner + (", " if inner else "") + '"traceEvents": [\n' + body + "\n]}"


def write(folder: Path, data: bytes | str, gz: bool = True, name: str | None = None) -> Path:
    raw = data.encode() if isinstance(data, str) else data
    path = folder / (name or STEM + (".pt.trace.json.gz" if gz else ".pt.trace.json"))
    path.write_bytes(gzip.compress(raw, compresslevel=1) if gz else raw)
    return path


def doc_case(mutate: Callable[[Doc], Any], gz: bool = True, then: Callable[[str], str] | None = None
             ) -> Callable[[Path], Path]:
    """``mutate`` edits the document in place (or returns a new one); ``then`` edits the written text."""
    def build(folder: Path) -> Path:
        d = base()
        out = mutate(d)
        text = kineto_text(out if isinstance(out, dict) else d)
        return write(folder, then(text) if then else text, gz)
    return build


def text_case(mutate: Callable[[str], str], gz: bool = True) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        return write(folder, mutate(gzip.decompress(RANK0.read_bytes()).decode()), gz)
    return build


def bytes_case(make: Callable[[], bytes], gz: bool = False, name: str | None = None) -> Callable[[Path], Path]:
    return lambda folder: write(folder, make(), gz, name)


# ------------------------------------------------------------------------------------------ picking events


def kernels(d: Doc) -> list[dict]:
    return [e for e in d["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel"]


def compute_kernel(d: Doc) -> dict:
    return next(e for e in kernels(d) if "nccl" not in e["name"].lower())


def nccl_kernel(d: Doc) -> dict:
    return next(e for e in kernels(d) if "nccl" in e["name"].lower())


def _next_on_stream(d: Doc, e: dict, n: int = 1) -> dict:
    same = sorted((k for k in kernels(d) if k["args"]["stream"] == e["args"]["stream"] and k["ts"] > e["ts"]),
                  key=lambda k: k["ts"])
    return same[n - 1]


def set_field(pick: Callable[[Doc], dict], key: str, value: Any, in_args: bool = False) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        e = pick(d)
        target = e["args"] if in_args else e
        if value is DELETE:
            target.pop(key, None)
        else:
            target[key] = value
    return mutate


DELETE = object()


def set_all(d: Doc, key: str, value: Any) -> None:
    for e in kernels(d):
        e[key] = value


def stretch_over_next(d: Doc, pick: Callable[[Doc], dict], n: int) -> None:
    """The kernel ends after the n-th next kernel on its stream has ended (an impossible overlap)."""
    e = pick(d)
    nxt = _next_on_stream(d, e, n)
    e["dur"] = round(nxt["ts"] + nxt["dur"] - e["ts"] + 1.0, 3)


def info(**kv: Any) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        for k, v in kv.items():
            d["distributedInfo"][k] = v
    return mutate


def whitespace_after_bracket(n: int) -> Callable[[str], str]:
    return lambda t: t.replace('"traceEvents": [', '"traceEvents": [' + " " * n, 1)


def truncate(frac: float) -> Callable[[], bytes]:
    def make() -> bytes:
        raw = gzip.decompress(RANK0.read_bytes())
        return raw[: int(len(raw) * frac)]
    return make


def gz_truncated() -> bytes:
    data = RANK0.read_bytes()
    return data[: len(data) // 2]


def gz_corrupt() -> bytes:
    data = bytearray(RANK0.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0x5A
    return bytes(data)


def bomb_file(scratch: Path, n_bytes: int) -> Path:
    kept = scratch / f"bomb-{n_bytes}.gz"
    if not kept.exists():
        _write_bomb(kept, n_bytes)
    return kept


def gz_bomb(n_bytes: int) -> Callable[[Path], Path]:
    """A few MB of gzip that inflate to ``n_bytes`` of whitespace after ``"traceEvents": [`` (streamed: the
    builder never holds the inflated text)."""
    def build(folder: Path) -> Path:
        path = folder / (STEM + ".pt.trace.json.gz")
        path.symlink_to(bomb_file(folder.parent, n_bytes))  # built once per corpus run (~7-30 s for 2.4 GiB)
        return path
    return build


def _write_bomb(dest: Path, n_bytes: int) -> None:
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}")
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    block = b" " * (16 << 20)
    with open(tmp, "wb") as f:
        f.write(comp.compress(b'{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 4}, '
                              b'"traceEvents": ['))
        left = n_bytes
        while left > 0:
            f.write(comp.compress(block[: min(left, len(block))]))
            left -= len(block)
        f.write(comp.compress(b"]}") + comp.flush())
    tmp.replace(dest)


def gz_multimember(folder: Path) -> Path:
    raw = gzip.decompress(RANK0.read_bytes())
    cut = len(raw) // 3
    path = folder / (STEM + ".pt.trace.json.gz")
    path.write_bytes(gzip.compress(raw[:cut]) + gzip.compress(raw[cut:]))
    return path


def nested_args(depth: int) -> Callable[[Path], Path]:
    """The first compute kernel's args get a value nested ``depth`` arrays deep (written as text: json.dumps
    itself recurses)."""
    def mark(d: Doc) -> None:
        compute_kernel(d)["args"]["deep"] = "DEEP"

    return doc_case(mark, then=lambda t: t.replace('"DEEP"', "[" * depth + "1" + "]" * depth, 1))


def deep_document(depth: int) -> bytes:
    return b'{"traceEvents": [' + b"[" * depth + b"]" * depth + b"]}"


def special(kind: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        path = folder / (STEM + ".pt.trace.json")
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "devzero":
            path.symlink_to("/dev/zero")
        elif kind == "dangling":
            path.symlink_to(folder / "nowhere.json")
        elif kind == "dir":
            path.mkdir()
            (path / "x.txt").write_text("not a trace")
        return path
    return build


def nsight_of_another_job(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.nsys_fixtures import single_rank_report

    path = folder / "rank0.sqlite"
    single_rank_report(path)
    return path


def shuffled(d: Doc) -> None:
    random.Random(32).shuffle(d["traceEvents"])


def reorder_keys(d: Doc) -> Doc:
    d["traceEvents"] = [dict(sorted(e.items())) for e in d["traceEvents"]]
    return dict(sorted(d.items()))


def duplicate(which: str) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        ev = d["traceEvents"]
        if which == "one":
            ev.append(copy.deepcopy(compute_kernel(d)))
        elif which == "kernels":
            ev.extend(copy.deepcopy(kernels(d)))
        elif which == "gpu":
            ev.extend(copy.deepcopy([e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]))
    return mutate


def shift_days(days: float) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        d["baseTimeNanoseconds"] = int(d["baseTimeNanoseconds"] + days * 86400e9)
    return mutate


def pg_disagree(d: Doc) -> None:
    for pg in d["distributedInfo"]["pg_config"]:
        if pg["pg_name"] == "1":
            pg["ranks"] = [0, 3]


def minified(gz: bool) -> Callable[[Path], Path]:
    return lambda folder: write(folder, json.dumps(base(), separators=(",", ":")), gz)


def pretty(gz: bool) -> Callable[[Path], Path]:
    return lambda folder: write(folder, json.dumps(base(), indent=1), gz)


def with_bom(gz: bool) -> Callable[[Path], Path]:
    return lambda folder: write(folder, b"\xef\xbb\xbf" + gzip.decompress(RANK0.read_bytes()), gz)


def crlf(t: str) -> str:
    return t.replace("\n", "\r\n")


def extra_keys(d: Doc) -> None:
    for e in d["traceEvents"]:
        if isinstance(e, dict):
            e["zz_unknown"] = {"a": [1, 2, {"b": None}]}
    d["zz_top"] = ["x"] * 10


def metadata_events(d: Doc) -> None:
    d["traceEvents"][:0] = [{"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "x"}},
                            {"ph": "i", "cat": "instant", "name": "mark", "pid": 9, "tid": 9, "ts": 1.0, "s": "g"}]


def giant_name(d: Doc) -> None:
    e = compute_kernel(d)
    e["name"] = e["name"] + "_" + "x" * (8 << 20)


def drop_key(key: str) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        d.pop(key, None)
    return mutate


def events_are(value: Any) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        d["traceEvents"] = value
    return mutate


def insert_event(value: Any) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        d["traceEvents"].insert(5, value)
    return mutate


# ------------------------------------------------------------------------------------------ issue #42


def long_annotation(d: Doc) -> None:
    """One more host annotation, named with 41 'a's and a '!': Python's backtracking ``re`` never finishes
    ``(a+)+$`` on it."""
    ev = next(e for e in d["traceEvents"] if e.get("cat") == "user_annotation")
    d["traceEvents"].append({**ev, "name": "a" * 41 + "!"})


def rank_in_name(rank: int) -> Callable[[Path], Path]:
    """Rank 0 without distributedInfo, named ``rank<rank>``: the rank comes from the file name."""
    def build(folder: Path) -> Path:
        d = base()
        d.pop("distributedInfo", None)
        return write(folder, kineto_text(d), True, f"rank{rank}.pt.trace.json.gz")
    return build
