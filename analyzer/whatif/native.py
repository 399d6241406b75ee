"""The replay's two loops compiled ahead of time (``_waves.c``, an optional extension setuptools builds at install).

The wave schedule's levels (levels.py: Kahn's algorithm by rounds) and the wave loop of a replay (replay.py) cost
one numpy pass per round or wave: tens of thousands of small passes on a big job (4 x 200 MB FSDP ranks: 46 k
rounds, 11.7 k waves). The extension runs the same steps in plain loops, with the same arithmetic in the same
order, so its results are the numpy paths' bits (tests/test_replay_native.py). Nothing is compiled on a user's
run: where the extension was not built (an install without a C compiler) or ``COMMSCOPE_NO_NATIVE=1`` is set, the
numpy paths run, with the same results.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

try:
    from . import _waves
except ImportError:  # pragma: no cover - an install without a C compiler: the numpy paths
    _waves = None

if TYPE_CHECKING:
    from .events import Arrays, Mods, Schedule


def available() -> bool:
    """Whether the compiled loops are there (``COMMSCOPE_NO_NATIVE=1`` turns them off, to run the numpy paths)."""
    return _waves is not None and not os.environ.get("COMMSCOPE_NO_NATIVE")


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _f64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def _bool(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.bool_)


def levels(succ_ptr: np.ndarray, succ_val: np.ndarray, indeg: np.ndarray, arr_inst: np.ndarray,
           arr_also: np.ndarray, need: np.ndarray, ends_ptr: np.ndarray, ends_val: np.ndarray,
           end_group: np.ndarray, own_start: np.ndarray, end_rank: np.ndarray, end_end: np.ndarray,
           end_node: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Each event's wave and level (starts, then ends) and the forced ends: levels._levels's loop (its doc)."""
    codes, rank_code = np.unique(end_rank, return_inverse=True)
    n_ev = indeg.size + end_group.size
    wave = np.zeros(n_ev, dtype=np.int64)
    lev = np.full(n_ev, -1, dtype=np.int64)
    forced = _waves.levels(need.size, codes.size, (
        _i64(succ_ptr), _i64(succ_val), np.array(indeg, dtype=np.int64), _i64(arr_inst), _i64(arr_also),
        _i64(need), _i64(ends_ptr), _i64(ends_val), _i64(end_group), _i64(own_start), _i64(rank_code.ravel()),
        _i64(end_end), _i64(end_node), wave, lev))
    return wave, lev, int(forced)


def run(a: Arrays, sch: Schedule, mods: Mods) -> tuple[np.ndarray, np.ndarray]:
    """Δs, Δe (S, events): replay.run's wave loop (its doc), a zero as +0.0."""
    s, n = mods.ddur.shape
    n_inst = mods.dtr.shape[1]
    ds, de = np.empty((s, n)), np.empty((s, n))
    _waves.run(s, n_inst, (
        _i64(sch.x), _i64(sch.s_off), _i64(sch.brow), _i64(sch.srow), _bool(sch.head), _i64(sch.run_first),
        _bool(sch.bind_is_stream), _i64(sch.h_off), _i64(sch.h_pos), _bool(sch.scan), _i64(sch.d_off),
        _i64(sch.d_src), _f64(sch.d_slack), _i64(sch.d_first), _i64(sch.d_pos), _i64(sch.dg_off), _i64(sch.v_off),
        _i64(sch.v_arr_off), _i64(sch.v_arr), _f64(sch.v_wait), _i64(sch.v_dtr), _i64(sch.e_off), _i64(sch.e_node),
        _i64(sch.e_view), _i64(a.slack), _i64(a.dur),
        # the changes event-major (Mods.zeros lays them out so: no copy), the transfers scenario-major
        _f64(mods.ddur.T), _f64(mods.dgap.T), _bool(mods.hide.T), _f64(mods.dtr), ds, de))
    return ds, de
