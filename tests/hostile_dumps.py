"""How the hostile-input corpus (``tests/hostile_corpus.py``) mutates a Flight Recorder dump: rank 0 of the real gloo
capture ``sample_traces/flight_recorder/skip/pickle`` (torch 2.13), rewritten with one hostile field (issue #42:
a 200,000-deep tuple, ``inf``, integers past int64, a rank number no job has). Each builder writes one dump into a
folder and returns its path; in folder mode the corpus puts the capture's three other ranks beside it."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FR = ROOT / "sample_traces" / "flight_recorder" / "skip" / "pickle"
FR_RANK0 = FR / "rank0.pkl"
_MARK = "@@commscope-deep@@"

Dump = dict[str, Any]


def base() -> Dump:
    """The real rank 0 dump (our own sample: plain pickle of dicts and lists, read with the restricted loader)."""
    from analyzer.ingest.flight_recorder.decode import decode

    return decode(FR_RANK0)[0]


def others() -> list[Path]:
    return sorted(p for p in FR.glob("rank*.pkl") if p.name != FR_RANK0.name)


def dump_case(mutate: Callable[[Dump], Any], name: str = "rank0.pkl") -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        d = base()
        mutate(d)
        path = folder / name
        path.write_bytes(pickle.dumps(d, protocol=2))
        return path
    return build


def entry_field(key: str, value: Any, index: int = 0) -> Callable[[Dump], None]:
    return lambda d: d["entries"][index].__setitem__(key, value)


def deep_case(place: Callable[[Dump, Any], None], depth: int) -> Callable[[Path], Path]:
    """A value nested ``depth`` tuples deep at ``place``: pickled as EMPTY_TUPLE then TUPLE1 ``depth`` times (what
    Python's own pickler cannot write: it recurses), spliced in where a marker string was pickled."""
    def build(folder: Path) -> Path:
        d = base()
        place(d, _MARK)
        raw = pickle.dumps(d, protocol=2)
        i = raw.index(_MARK.encode())
        start, end = i - 5, i + len(_MARK)  # BINUNICODE: b"X" + 4-byte length + the text
        assert raw[start:start + 1] == b"X"
        if raw[end:end + 1] == b"q":  # BINPUT n: memoize the value (now the tuple)
            end += 2
        elif raw[end:end + 1] == b"r":
            end += 5
        path = folder / "rank0.pkl"
        path.write_bytes(raw[:start] + b")" + b"\x85" * depth + raw[end:])
        return path
    return build


def in_entry(key: str, index: int = 0) -> Callable[[Dump, Any], None]:
    return lambda d, v: d["entries"][index].__setitem__(key, v)


def in_pg_ranks(d: Dump, v: Any) -> None:
    """gloo writes no pg_config: give the dump one whose member list is the hostile value."""
    d["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": v}}


def renamed(name: str) -> Callable[[Path], Path]:
    return dump_case(lambda d: None, name=name)


__all__ = ["FR", "FR_RANK0", "base", "deep_case", "dump_case", "entry_field", "in_entry", "in_pg_ranks", "others",
           "renamed"]
