"""Readers: one per format, one signature: ``read(path, ReadOptions) -> list[RankTrace]``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .options import ReadOptions

if TYPE_CHECKING:  # the model imports polars (~0.2 s): the CLI imports this package before it needs polars
    from ..model import RankTrace

Reader = Callable[[Path, ReadOptions], "list[RankTrace]"]


def reader_for(fmt: str) -> Reader:
    """The registry: adding a format means adding one module and one line here."""
    if fmt == "kineto":
        from .kineto import reader as kineto

        return kineto.read
    if fmt == "nsys":
        from .nsys import reader as nsys

        return nsys.read
    if fmt == "optable":
        from .optable import reader as optable

        return optable.read
    raise ValueError(f"unknown trace format {fmt!r}")


__all__ = ["ReadOptions", "Reader", "reader_for"]
