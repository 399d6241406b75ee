"""Every whole-window number of ``ranks[]`` on every real trace set, pinned to the brute-force oracle.

Sets: every Kineto file under sample_traces/gpu_h200 and ../shared/traces (a folder of ``rank<N>`` files is
one multi-rank set, any other file is a single-rank set; byte-identical copies are run once) and every
Nsight Systems export. The oracle (tests/oracle.py) parses timestamps exactly and sweeps boundary points,
so the numbers must agree to 1e-5 ms. Which kernels count as communication is the analyzer's one
documented rule (the catalogue's kernel patterns, ``comm_catalogue.toml``; pinned on its own in test_comm_catalogue /
test_timeline): what is
checked here is every length computed from that classification.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from pathlib import Path

import pytest

from analyzer.comm_catalogue import catalogue
from analyzer.errors import TraceError
from tests import oracle
from tests.conftest import SAMPLES, SHARED
from tests.helpers import report

COMM = re.compile(catalogue().any_pattern("kernel") or "(?!)")
TOL_MS = 1e-5
# JSON field -> oracle field
WHOLE_FIELDS = {"compute_ms": "compute_ns", "compute_only_ms": "compute_only_ns", "comm_ms": "comm_ns",
                "overlapped_comm_ms": "overlapped_ns", "exposed_comm_ms": "exposed_ns", "memcpy_ms": "memcpy_ns",
                "idle_ms": "idle_ns", "busy_ms": "busy_ns", "span_ms": "span_ns"}
_RANK_FILE = re.compile(r"rank[-_]?\d+")
# files in the trees that hold no GPU activity (CPU-only, MTIA, an execution trace): the analyzer must
# refuse them with one clear error, never return numbers
NOT_GPU = ("has no GPU activity", "not a profiler")


def _digest(p: Path) -> str:
    return hashlib.sha1(p.read_bytes()).hexdigest()


def _kineto_files() -> list[Path]:
    roots = [SAMPLES / "gpu_h200", SHARED]
    return sorted(p for root in roots if root.is_dir() for p in root.rglob("*")
                  if p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name != "ground_truth.json")


def _sets() -> list[tuple[str, tuple[Path, ...]]]:
    """(id, files): one entry per distinct trace set."""
    by_folder: dict[Path, list[Path]] = {}
    for f in _kineto_files():
        by_folder.setdefault(f.parent, []).append(f)
    out, seen = [], set()
    for folder, files in sorted(by_folder.items()):
        ranked = [f for f in files if _RANK_FILE.search(f.name)]
        groups = [tuple(ranked)] if len(ranked) > 1 else []
        groups += [(f,) for f in files if not (len(ranked) > 1 and f in ranked)]
        for g in groups:
            key = tuple(sorted(_digest(f) for f in g))
            if key in seen:
                continue
            seen.add(key)
            base = SAMPLES if folder.is_relative_to(SAMPLES) else SHARED
            name = str(folder.relative_to(base)) if len(g) > 1 else str(g[0].relative_to(base))
            out.append((name, g))
    return out


SETS = _sets()
NSYS = sorted(SHARED.glob("nsys/*.sqlite")) if SHARED.is_dir() else []


@cache
def _oracle(path: Path) -> oracle.RankOracle:
    return oracle.analyze_file(path, COMM)


def _check_row(row: dict, want: oracle.Breakdown, label: str) -> None:
    for key, attr in WHOLE_FIELDS.items():
        assert row[key] == pytest.approx(getattr(want, attr) / 1e6, abs=TOL_MS), f"{label}: {key}"
    if want.comm_ns:
        assert row["overlap_pct"] == pytest.approx(100.0 * want.overlapped_ns / want.comm_ns, abs=1e-6), label
    else:
        assert row["overlap_pct"] is None, label


def test_the_globs_found_the_real_sets() -> None:
    ids = [name for name, _ in SETS]
    multi = [name for name, files in SETS if len(files) > 1]
    # the five 4-rank H200 captures ship with the project; the shared tree adds the HTA 2-rank sample
    h200 = {f"gpu_h200/{n}" for n in ("ddp_balanced", "fsdp_balanced", "hybrid_tp_dp", "compute_straggler",
                                       "host_straggler")}
    assert h200 <= set(multi) and all(len(files) == 4 for name, files in SETS if name in h200)
    if SHARED.is_dir():
        assert "hta/trace_filter" in multi and len(ids) >= 30 and len(NSYS) == 3
        assert "tracelens/b200_eager_trace.json.gz" in ids


@pytest.mark.parametrize(("name", "files"), SETS, ids=[name for name, _ in SETS])
def test_whole_window_fields_match_brute_force(name: str, files: tuple[Path, ...]) -> None:
    try:
        rep = report(list(files))
    except TraceError as exc:
        assert len(files) == 1 and any(s in str(exc) for s in NOT_GPU), f"{name}: {exc}"
        assert not oracle.gpu_events(oracle.load(files[0]))  # the oracle agrees: nothing to measure
        return
    rows = {r["rank"]: r for r in rep["ranks"]}
    assert len(rows) == len(files), name
    for f in files:
        ref = _oracle(f)
        row = rows[ref.rank] if len(files) > 1 else next(iter(rows.values()))
        _check_row(row, ref.whole, f"{name} rank {ref.rank}")


def test_some_real_set_has_overlap_so_compute_only_differs_from_compute() -> None:
    # fsdp_balanced overlaps its all-gathers with compute: compute-only must be far below compute there
    f = sorted((SAMPLES / "gpu_h200" / "fsdp_balanced").glob("rank*.json.gz"))[0]
    w = _oracle(f).whole
    assert w.overlapped_ns > 0 and w.compute_only_ns < 0.5 * w.compute_ns
    assert w.compute_only_ns + w.overlapped_ns + w.exposed_ns + w.memcpy_ns + w.idle_ns == w.span_ns


@pytest.mark.parametrize("path", NSYS, ids=[p.name for p in NSYS])
def test_nsys_exports_match_brute_force(path: Path) -> None:
    want = oracle.nsys_events(path, COMM)
    rep = report(path)
    rows = sorted(rep["ranks"], key=lambda r: r["rank"])
    assert len(rows) == len(want)  # one rank per GPU in these exports
    for row, (dev, events) in zip(rows, want.items(), strict=True):
        _check_row(row, oracle.breakdown(events), f"{path.name} device {dev}")
