"""One Flight Recorder dump file -> plain Python data, safely: no code runs, nothing nests without bound.

A pickle from a user's disk is code. It is read by an unpickler that resolves no global at all: a dump
holds only dicts, lists, tuples, strings, numbers, booleans and None, which pickle builds without
looking anything up, so any reference to a class or function (``os.system``) is refused before it runs.

Nesting is bounded (``max_depth``, the ``--max-json-depth`` limit; a real dump nests 6 deep): JSON is measured
before it is parsed (``kineto.json_depth``, at memory speed); a pickle is built by CPython's unpickler without
recursion (a 200,000-deep tuple loads), then walked with an explicit stack before anything else touches it:
a value nested that deep crashed the process further on (exit 139) where a reader, ``repr`` or a table
builder recursed into it.
"""

from __future__ import annotations

import io
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import msgspec

from ...errors import TraceError
from ..kineto import json_depth
from ..limits import DEFAULT
from ..source import GZIP_MAGIC, read_bytes

KNOWN_MAJOR = 2  # dump versions 2.0 .. 2.10 (torch 2.3 .. 2.13) share the fields read here
PICKLE_PROTO = b"\x80"
DEFAULT_DEPTH = DEFAULT.max_json_depth  # --max-json-depth's default (a dump nests 6 deep)
_CONTAINERS = frozenset((dict, list, tuple, set, frozenset))


class _NoGlobals(pickle.Unpickler):
    """Builds containers and scalars only: every global (class, function) lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name} (a Flight Recorder dump holds no objects)")


def _load(data: bytes) -> object:
    # a corrupt length in a bytearray opcode makes CPython's unpickler fail with MemoryError and print a
    # SystemError through sys.excepthook on the way out; the MemoryError is reported, the stray line is not
    hook = sys.excepthook
    sys.excepthook = lambda *_: None
    try:
        return _NoGlobals(io.BytesIO(data)).load()
    finally:
        sys.excepthook = hook


def is_pickle(start: bytes) -> bool:
    return start[:1] == PICKLE_PROTO and start[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")


def looks_like_dump(start: bytes) -> bool:
    """Flight Recorder by content: a pickle of the dump's keys, or JSON whose entries carry seq ids."""
    if is_pickle(start):  # torch pickles the dump dict with "version" as its first key
        return b"version" in start[:64] and (b"entries" in start or b"pg_config" in start)
    text = start.lstrip()
    return text[:1] == b"{" and b'"entries"' in text and (b'"collective_seq_id"' in text or b'"pg_config"' in text
                                                         or b'"profiling_name"' in text)


def depth_over(obj: object, limit: int) -> int | None:
    """The first nesting depth past ``limit`` found in ``obj`` (dict keys included), else None. An explicit stack:
    the file decides how deep this goes, so no recursion. (~0.2 ms for a dump of 15 entries with stacks.)"""
    if type(obj) not in _CONTAINERS:
        return None
    stack: list[tuple[object, int]] = [(obj, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        o, d = pop()
        if d > limit:
            return d
        if type(o) is dict:
            for v in o.values():
                if type(v) in _CONTAINERS:
                    push((v, d + 1))
            for k in o:
                if type(k) is not str and type(k) in _CONTAINERS:  # a tuple key can nest too
                    push((k, d + 1))
        else:
            for v in o:  # type: ignore[attr-defined]  # only containers are pushed
                if type(v) in _CONTAINERS:
                    push((v, d + 1))
    return None


def decode(path: Path, max_depth: int = DEFAULT_DEPTH) -> tuple[dict, str]:
    """The dump as plain Python data and its encoding; TraceError for anything that is not a readable dump."""
    data = read_bytes(path)
    encoding = "pickle" if data[:1] == PICKLE_PROTO else "json"
    if encoding == "pickle":
        try:
            doc = _load(data)
        except pickle.UnpicklingError as exc:
            raise TraceError(path, f"is not a plain Flight Recorder pickle: {exc}",
                             "it was not loaded; dumps from torch hold only dicts, lists and numbers") from None
        except Exception as exc:  # noqa: BLE001 - no code runs here (no globals): anything else is damaged data
            raise TraceError(path, f"is a truncated or corrupt pickle ({type(exc).__name__}: {str(exc)[:200]})",
                             "copy the dump again") from None
        found = depth_over(doc, max_depth)
    elif data[:2] == GZIP_MAGIC:
        raise TraceError(path, "could not be decompressed", "gunzip it first")
    else:
        try:
            json_depth.check(data, max_depth)
            found = None
        except json_depth.TooDeep as exc:
            found = int(exc.args[0])
        if found is None:
            try:
                doc = msgspec.json.decode(data)
            except (msgspec.DecodeError, ValueError) as exc:  # ValueError: bytes that are not UTF-8
                raise TraceError(path, f"is not valid JSON ({str(exc)[:200]}); truncated?",
                                 "copy the dump again") from None
    if found is not None:
        raise TraceError(path, f"nests deeper than {max_depth} levels (a Flight Recorder dump nests 6): damaged or "
                         "not a dump", "copy the dump again, or raise --max-json-depth") from None
    if not isinstance(doc, dict) or "entries" not in doc or "version" not in doc:
        raise TraceError(path, "is not a Flight Recorder dump (no 'version' and 'entries' keys)",
                         "pass the files torch's _dump_fr_trace / the NCCL watchdog wrote")
    return doc, encoding


def check_version(path: Path, version: object) -> str:
    text = version if isinstance(version, str) else repr(version)[:40] if isinstance(version, (int, float)) else "?"
    m = re.fullmatch(r"(\d{1,4})\.(\d{1,4})", text)
    if not m or int(m.group(1)) != KNOWN_MAJOR:
        raise TraceError(path, f"has Flight Recorder version {text[:40]!r}; commscope reads 2.x dumps",
                         "dump with torch 2.3 or later, or report the version")
    return text


__all__ = ["DEFAULT_DEPTH", "KNOWN_MAJOR", "check_version", "decode", "depth_over", "is_pickle", "looks_like_dump"]
