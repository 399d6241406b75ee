"""Scale real Kineto captures up by replicating their steps in time (real event composition, any size).

Each copy of a rank's events is shifted by a whole number of microseconds (the capture's span plus a
gap) with exact decimal arithmetic, so timestamps stay what the profiler wrote; correlation, External
id, flow ids and step numbers are offset per copy so they stay unique and consistent within a rank (a
launch, its kernel and their ac2g flow keep one shared id). Metadata events (``ph: M``) appear once.

    python -m benchmarks.replicate SRC_DIR_OR_FILE OUT_DIR --mb 500
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

_ENC = msgspec.json.Encoder(decimal_format="number")
_ID_ARGS = ("correlation", "External id", "external id", "Ev Idx", "Python id", "Python parent id")
_STEP = re.compile(r"^(ProfilerStep#)(\d+)$")
_MIX = ("cuda_runtime", "ac2g", "cpu_op", "kernel", "python_function")


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw.decode("utf-8-sig"), parse_float=Decimal)


def _span_us(events: list[dict[str, Any]]) -> tuple[Decimal, Decimal]:
    starts = [e["ts"] for e in events if "ts" in e and e.get("ph") != "M"]
    ends = [e["ts"] + e.get("dur", 0) for e in events if "ts" in e and e.get("ph") != "M"]
    return min(starts), max(ends)


def _id_stride(events: list[dict[str, Any]]) -> int:
    top = 0
    for e in events:
        if isinstance(e.get("id"), int):
            top = max(top, e["id"])
        args = e.get("args")
        if isinstance(args, dict):
            for k in _ID_ARGS:
                if isinstance(args.get(k), int):
                    top = max(top, args[k])
    return 10 ** len(str(top + 1))  # round: copy k's ids read as k followed by the original id


def _step_stride(events: list[dict[str, Any]]) -> int:
    nums = [int(m.group(2)) for e in events if isinstance(e.get("name"), str) and (m := _STEP.match(e["name"]))]
    return (max(nums) - min(nums) + 1) if nums else 0


def _copy(e: dict[str, Any], k: int, shift: Decimal, ids: int, steps: int) -> dict[str, Any]:
    out = dict(e)
    if "ts" in out:
        out["ts"] = out["ts"] + shift
    if isinstance(out.get("id"), int):
        out["id"] = out["id"] + k * ids
    args = out.get("args")
    if isinstance(args, dict):
        args = out["args"] = dict(args)
        for key in _ID_ARGS:
            if isinstance(args.get(key), int) and args[key] >= 0:
                args[key] = args[key] + k * ids
    name = out.get("name")
    if steps and isinstance(name, str) and (m := _STEP.match(name)):
        out["name"] = f"{m.group(1)}{int(m.group(2)) + k * steps}"
    return out


def replicate_file(src: Path, dst: Path, mb: float, gap_us: int = 1000, copies: int | None = None,
                   heavy: bool = False) -> int:
    """Write ``dst`` (plain JSON) of about ``mb`` MB from ``src``'s events repeated in time (or ``copies``
    times); returns the copies.

    Each event keeps the text its writer wrote (Kineto's indented multi-line layout, json.dump's one line,
    the spacing) with only its numbers patched (``_templates``), and copies are joined as the source joins
    its events: a parser is measured on the bytes a real capture has. A source whose numbers cannot be
    patched so is re-encoded compactly, one event per line.

    ``heavy``: the issue #33 mix (a real H200 FSDP capture with ~40% ``cuda_runtime``, 43% ``ac2g``, 11%
    ``cpu_op``, 2% kernels, one compact event per line): events re-encoded one per line, and of the
    ``cpu_op`` events no table reads (not ``record_param_comms``, not a step) one in three kept.
    """
    raw = _text(src)
    doc = _load(src)
    events = doc.pop("traceEvents")
    if heavy:
        events = _thinned(events)
    body_at = [i for i, e in enumerate(events) if e.get("ph") != "M"]
    meta = [e for e in events if e.get("ph") == "M"]
    body = [events[i] for i in body_at]
    lo, hi = _span_us(body)
    period = int(math.ceil(hi - lo)) + gap_us
    ids, steps = _id_stride(body), _step_stride(body)
    cut = _event_texts(raw, events) if not heavy else _line_texts(doc, events)
    dst.parent.mkdir(parents=True, exist_ok=True)
    temps = None
    if cut is not None:
        head, texts, sep, tail = cut
        temps = _templates([texts[i] for i in body_at], body, ids, steps, period)
    if temps is None:  # compact, one event per line
        head = _ENC.encode(doc)[:-1] + (b", " if doc else b"") + b'"traceEvents": [\n'
        sep, tail = b",\n", b"\n]}\n"
        texts = [_ENC.encode(e) for e in events]
    meta_text = [texts[i] for i, e in enumerate(events) if e.get("ph") == "M"]
    one = sum(len(texts[i]) + len(sep) for i in body_at)
    copies = copies or max(1, round(mb * 1e6 / one))
    with open(dst, "wb") as fh:
        fh.write(head)
        fh.write(sep.join(meta_text))
        first = not meta
        for k in range(copies):
            if temps is None:
                text = sep.join(_ENC.encode(_copy(e, k, Decimal(k * period), ids, steps)) for e in body)
            else:
                text = sep.join(t.render(k) for t in temps)
            fh.write((b"" if first else sep) + text)
            first = False
        fh.write(tail)
    return copies


def _thinned(events: list[dict[str, Any]], keep: int = 3) -> list[dict[str, Any]]:
    """Every event but two in three ``cpu_op`` events that no table reads (the heavy mix has 11% ``cpu_op``)."""
    out, n = [], 0
    for e in events:
        name = e.get("name")
        if e.get("cat") == "cpu_op" and name != "record_param_comms" and not (
                isinstance(name, str) and _STEP.match(name)):
            n += 1
            if n % keep:
                continue
        out.append(e)
    return out


def _line_texts(doc: dict[str, Any], events: list[dict[str, Any]]) -> tuple[bytes, list[bytes], bytes, bytes]:
    """The cut of ``_event_texts`` for a compact document with one event per line."""
    head = _ENC.encode(doc)[:-1] + (b", " if doc else b"") + b'"traceEvents": [\n'
    return head, [_ENC.encode(e) for e in events], b",\n", b"\n]}\n"


def _text(path: Path) -> bytes:
    raw = path.read_bytes()
    raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return raw[3:] if raw[:3] == b"\xef\xbb\xbf" else raw


class _Events(msgspec.Struct):
    traceEvents: list[msgspec.Raw]  # noqa: N815 - Kineto's key


def _event_texts(raw: bytes, events: list[dict[str, Any]]) -> tuple[bytes, list[bytes], bytes, bytes] | None:
    """(text before the first event, each event's text as written, the separator between the first two
    events, text after the last); None where the events cannot be found in order."""
    try:
        texts = [bytes(r) for r in msgspec.json.decode(raw, type=_Events).traceEvents]
    except msgspec.MsgspecError:
        return None
    if len(texts) != len(events) or not texts:
        return None
    at, spans = raw.index(b'"traceEvents"'), []
    for t in texts:
        at = raw.find(t, at)
        if at < 0:
            return None
        spans.append((at, at + len(t)))
        at += len(t)
    sep = raw[spans[0][1] : spans[1][0]] if len(spans) > 1 else b",\n"
    return raw[: spans[0][0]], texts, sep, raw[spans[-1][1] :]


class _Template:
    """An event's text cut at the numbers a copy changes (``_copy``'s rules, checked against it)."""

    _SLOT = re.compile(rb'("(ts|id|correlation|External id|external id|Ev Idx|Python id|Python parent id)"\s*:\s*)'
                       rb'(-?\d+(?:\.\d+)?)|("name"\s*:\s*"ProfilerStep#)(\d+)')

    def __init__(self, text: bytes, ids: int, steps: int, period: int) -> None:
        self.parts: list[bytes] = []
        self.slots: list[tuple[str, Decimal]] = []
        at = 0
        for m in self._SLOT.finditer(text):
            if m[1] is not None:
                kind = "ts" if m[2] == b"ts" else "id"
                if kind == "id" and (b"." in m[3] or m[3].startswith(b"-")):
                    continue
                self.parts.append(text[at : m.start(3)])
                at = m.end(3)
                self.slots.append((kind, Decimal(m[3].decode())))
            else:
                self.parts.append(text[at : m.start(5)])
                at = m.end(5)
                self.slots.append(("step", Decimal(m[5].decode())))
        self.parts.append(text[at:])
        self.ids, self.steps, self.period = ids, steps, period

    def render(self, k: int) -> bytes:
        step = {"ts": k * self.period, "id": k * self.ids, "step": k * self.steps}
        out = [self.parts[0]]
        for (kind, value), part in zip(self.slots, self.parts[1:]):
            out.append(str(value + step[kind]).encode())
            out.append(part)
        return b"".join(out)


def _templates(texts: list[bytes], body: list[dict[str, Any]], ids: int, steps: int,
               period: int) -> list[_Template] | None:
    """A template per event, or None where one does not render what ``_copy`` makes of its event (an "id"
    key inside args, say): then the source is re-encoded."""
    temps = [_Template(t, ids, steps, period) for t in texts]
    for t, e in zip(temps, body):
        want = _copy(e, 1, Decimal(period), ids, steps)
        if json.loads(t.render(1), parse_float=Decimal) != want:
            return None
    return temps


def trace_files(folder: Path) -> list[Path]:
    """A capture folder's rank files (``.json`` or ``.json.gz``), sorted, without its ``ground_truth.json``."""
    return sorted(p for p in folder.glob("*")
                  if p.name.endswith((".json", ".json.gz")) and p.name != "ground_truth.json")


def replicate_dir(src: Path, dst: Path, mb: float, ranks: int | None = None, heavy: bool = False) -> list[Path]:
    """Every trace file of ``src`` (or ``src`` itself) scaled to ``mb`` MB each, into ``dst``.

    ``ranks``: take the first N files only; a single-file source is written once (one rank). ``heavy``:
    see ``replicate_file``.
    """
    files = (trace_files(src) if src.is_dir() else [src])[: ranks or None]
    out: list[Path] = []
    copies = None  # every rank gets as many copies as the first, so collectives still match across ranks
    for p in files:
        target = dst / p.name.removesuffix(".gz")
        copies = replicate_file(p, target, mb, copies=copies, heavy=heavy)
        out.append(target)
    return out


def event_mix(path: Path, sample_mb: float = 64) -> dict[str, float]:
    """Share of events by category (``ac2g`` flow ends included) in the first ``sample_mb`` MB of a file."""
    with open(path, "rb") as fh:
        data = fh.read(int(sample_mb * 1e6))
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(open(path, "rb").read())[: int(sample_mb * 1e6)]
    counts = Counter(m.group(1).decode() for m in re.finditer(rb'"cat"\s*:\s*"([^"]*)"', data))
    total = sum(counts.values()) or 1
    mix = {c: counts.get(c, 0) / total for c in _MIX}
    mix["other"] = 1.0 - sum(mix.values())
    return mix


def mix_text(mix: dict[str, float]) -> str:
    short = {"cuda_runtime": "rt", "ac2g": "ac2g", "cpu_op": "op", "kernel": "kern", "python_function": "py",
             "other": "other"}
    return " ".join(f"{short[k]} {100 * v:.0f}%" for k, v in mix.items())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, default=500)
    ap.add_argument("--ranks", type=int, default=None)
    ap.add_argument("--heavy", action="store_true", help="issue #33's mix: one event per line, 1/3 of cpu_op kept")
    a = ap.parse_args()
    for p in replicate_dir(a.src, a.out, a.mb, a.ranks, heavy=a.heavy):
        print(p, f"{p.stat().st_size / 1e6:.0f} MB", mix_text(event_mix(p)))


if __name__ == "__main__":
    main()
