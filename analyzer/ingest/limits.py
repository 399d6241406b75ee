"""Limits on what one input may cost: past one, a reader refuses the file in one line, in seconds, with bounded memory.

Each has a default that real captures stay far below and a CLI flag to raise it (README, "Input limits"):

- ``max_inflated_bytes`` (``--max-inflated-size``): what a ``.gz`` may inflate to. Checked while inflating, so a
  bomb stops at the limit, not at the end of its stream.
- ``max_inflate_ratio`` (``--max-inflate-ratio``): inflated / compressed size, checked once the output passes
  ``RATIO_FLOOR``. Real Kineto JSON compresses 10-30x; deflate's ceiling is ~1030x, which only a file of one
  repeated byte reaches (a 2.3 MB .gz of 2.24 GiB of whitespace): refused after ~240 MB instead of 2.24 GiB.
- ``max_events`` (``--max-events``): events one rank contributes to the tables (GPU activity, runtime calls,
  annotations): bounds the decoded objects and tables.
- ``max_json_depth`` (``--max-json-depth``): nesting of arrays and objects anywhere in a Kineto document (a
  real one nests 6 deep). The parser recurses per level; the check runs before it, at memory-bandwidth speed.
- ``max_ranks`` (``--max-ranks``): the largest world a job may have: a rank number (from a file name, a trace,
  ``--rank-map``) must be below it, and a declared world size or a layout at most it. Tables and groups grow
  with the world (a world group lists every rank), so a file named ``rank3000000000`` must not make one of 3
  billion. The default is past the largest jobs trained today (~100 k GPUs); memory stays O(max_ranks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 1 << 30
RATIO_FLOOR = 64 << 20  # below this much output any ratio is fine (tiny, repetitive files compress very well)


@dataclass(frozen=True)
class Limits:
    max_inflated_bytes: int = 8 * GIB
    max_inflate_ratio: int = 100
    max_events: int = 50_000_000
    max_json_depth: int = 64
    max_ranks: int = 1 << 20


DEFAULT = Limits()

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int | None:
    """``"8G"``, ``"512MiB"``, ``"1048576"`` -> bytes; None when it is not a size."""
    m = _SIZE.match(str(text))
    if m is None:
        return None
    return int(float(m[1]) * _UNIT[m[2].lower()])


def rank_problem(rank: object, limit: int) -> str | None:
    """Why ``rank`` cannot be a rank number under ``max_ranks = limit`` (None: it can)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        return f"rank {rank!r} is not a rank number (0, 1, 2, ...)"
    if rank >= limit:
        return f"rank {rank:,} is past --max-ranks {limit:,} (raise it if the job really has that many ranks)"
    return None


def world_problem(world: object, limit: int) -> str | None:
    """Why a declared world size or a layout's product cannot be one under ``max_ranks = limit``."""
    if isinstance(world, int) and not isinstance(world, bool) and world > limit:
        return f"a world of {world:,} ranks is past --max-ranks {limit:,} (raise it if the job really has that many)"
    return None


def ascii_int(text: str) -> int | None:
    """A non-negative integer written in ASCII digits (``int`` also takes '²'-like digits it then fails on, and
    '٣'), at most 18 of them; None otherwise."""
    t = text.strip()
    return int(t) if t.isascii() and t.isdigit() and len(t) <= 18 else None


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


__all__ = ["DEFAULT", "GIB", "Limits", "RATIO_FLOOR", "ascii_int", "parse_size", "rank_problem", "size_text",
           "world_problem"]
