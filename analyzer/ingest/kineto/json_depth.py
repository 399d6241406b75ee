"""How deeply a JSON document nests, without parsing it: the ``max_json_depth`` limit.

msgspec recurses once per level (Python's recursion limit stops it near 1,000 with a RecursionError), and an event
nested deep in ``args`` costs a Python object per level. This check runs at memory speed instead: per 32 MiB,
escapes are removed (``\\\\`` then ``\\"``), ``bytes.translate`` keeps only ``{}[]"`` (~15% of a Kineto file),
empty strings (all but a few, once their text is gone) are dropped, and on what is left (~3% of the file) numpy
tells brackets inside strings by the parity of the quotes before them and takes the maximum running depth. That is
~1 ms per MB, so the block path (``kineto_blocks``) checks only the header and the few events whose count of
'[' and '{' could exceed the limit; the other paths check the whole document.
"""

from __future__ import annotations

import numpy as np

_KEEP = b'{}[]"'
_DROP = bytes(b for b in range(256) if b not in _KEEP)
_PIECE = 32 << 20


def _brackets_and_quotes(data: bytes | memoryview) -> bytes:
    """The document's brackets and string quotes, escapes removed, with empty strings (``""``) dropped:
    removing two adjacent quotes keeps every other character inside or outside a string as it was."""
    pieces = []
    pos, n = 0, len(data)
    while pos < n:
        cut = min(n, pos + _PIECE)
        while cut < n and data[cut - 1] == 0x5C:  # never split an escape between pieces
            cut += 1
        chunk = bytes(data[pos:cut])
        if b"\\" in chunk:
            chunk = chunk.replace(b"\\\\", b"").replace(b'\\"', b"")
        pieces.append(chunk.translate(None, _DROP).replace(b'""', b""))
        pos = cut
    return b"".join(pieces)


def depth(data: bytes | memoryview) -> int:
    """The deepest nesting of arrays and objects (a top-level object is 1); brackets inside strings do not count."""
    s = np.frombuffer(_brackets_and_quotes(data), dtype=np.uint8)
    if s.size == 0:
        return 0
    outside = (np.cumsum(s == 0x22, dtype=np.int64) & 1) == 0  # a quote itself flips: brackets never are quotes
    step = ((s == 0x7B) | (s == 0x5B)).astype(np.int8) - ((s == 0x7D) | (s == 0x5D)).astype(np.int8)
    return int(np.cumsum(np.where(outside, step, 0), dtype=np.int64).max())


class TooDeep(Exception):
    """Nesting past the limit; ``args[0]`` is the depth found (the reader words it with the file's name)."""


def check(data: bytes | memoryview, limit: int, outer: int = 0) -> None:
    """Raise ``TooDeep`` where ``data`` nests deeper than ``limit`` when it sits ``outer`` levels deep."""
    found = depth(data) + outer
    if found > limit:
        raise TooDeep(found)


__all__ = ["TooDeep", "check", "depth"]
