"""The ground floor of rules (analyzer/rules.py): defined once, and right.

The restatement checks grep the source tree the way a reviewer would; the parser and bus-factor
checks compare against hand-written expectations and the nccl-tests formulas (doc/PERFORMANCE.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from analyzer import ranklist, rules
from analyzer.rules import bus_factor_expr

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for d in ("analyzer", "dashboards") for p in (ROOT / d).rglob("*.py") if p.name != "rules.py")

_P2P = r'"(?:send|recv|send_recv)"'
RESTATEMENTS = {
    # two or more p2p op names written side by side: a p2p set literal (("send", "recv"), [.., "send_recv"])
    "p2p op set": re.compile(rf"{_P2P}\s*,\s*{_P2P}"),
    # ns <-> ms by literal: / 1e6, * 1e6, 1_000_000, 1000000
    "ns<->ms literal": re.compile(r"(?<![\w.])(?:1e6|1_000_000|1000000)(?![\w.])"),
    # the default step marker's regex
    "step marker": re.compile(r"ProfilerStep#\s*\(|ProfilerStep#\\d"),
}


def _code(line: str) -> str:
    return line.split("#", 1)[0] if "ProfilerStep#" not in line else line  # comments may mention numbers


@pytest.mark.parametrize("rule", sorted(RESTATEMENTS))
def test_no_module_restates_a_rule(rule: str) -> None:
    rx = RESTATEMENTS[rule]
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in SOURCES for i, line in enumerate(p.read_text().splitlines(), 1) if rx.search(_code(line))]
    assert found == [], f"{rule} restated outside analyzer/rules.py:\n" + "\n".join(found)


def test_the_grep_catches_what_it_looks_for() -> None:
    # the checks above pass vacuously if the patterns match nothing: they must match the old spellings
    assert RESTATEMENTS["p2p op set"].search('pl.col("op").is_in(["send", "recv", "send_recv"])')
    assert RESTATEMENTS["p2p op set"].search('p2p = op in ("send", "recv")')
    assert not RESTATEMENTS["p2p op set"].search('pl.lit("send_recv").alias("op")')
    assert RESTATEMENTS["ns<->ms literal"].search('(pl.col("wait_ns") / 1e6).alias("wait_ms")')
    assert RESTATEMENTS["ns<->ms literal"].search('"ms": 1_000_000')
    assert not RESTATEMENTS["ns<->ms literal"].search("max(sigma, 1e-6)")
    assert RESTATEMENTS["step marker"].search(r'_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")')


@pytest.mark.parametrize(("text", "want"), [
    ("0,2,4-7", (0, 2, 4, 5, 6, 7)),
    ("7", (7,)),
    (" 3 , 1-2 ", (1, 2, 3)),  # spaces around items, out of order
    ("4-7,5,0-1", (0, 1, 4, 5, 6, 7)),  # overlaps counted once
    ("2-2", (2,)),
])
def test_ranklist_parse(text: str, want: tuple[int, ...]) -> None:
    assert ranklist.parse(text) == want


@pytest.mark.parametrize("text", ["5-3", "-1", "a", "1,,2", "1-", "", "1-2-3", "²", "1.5"])
def test_ranklist_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        ranklist.parse(text)


def test_ranklist_round_trip() -> None:
    ranks = [0, 1, 2, 3, 7, 9, 10]
    assert ranklist.parse(ranklist.compact(ranks).replace(" ", "")) == tuple(ranks)


def _nccl_tests(op: str, n: int) -> float:
    # nccl-tests src/*.cc getBw: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; else 1
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_to_all": (n - 1) / n}.get(op, 1.0)


def test_bus_factors_match_nccl_tests() -> None:
    ops = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send", "recv",
           "send_recv", "barrier"]
    cases = [(op, n) for op in ops for n in (1, 2, 3, 8, 64, 1024)]
    df = pl.DataFrame({"op": [c[0] for c in cases], "n": [c[1] for c in cases]})
    got = df.select(bus_factor_expr(pl.col("op"), pl.col("n")).alias("f"))["f"].to_list()
    for (op, n), f in zip(cases, got, strict=True):
        assert f == pytest.approx(_nccl_tests(op, n), abs=1e-15), (op, n)
    assert got[ops.index("all_reduce") * 6 + 3] == 1.75 and got[ops.index("all_gather") * 6 + 3] == 0.875  # n = 8


def test_step_marker() -> None:
    rx, nvtx = re.compile(rules.STEP_MARKER), re.compile(rules.NVTX_STEP_MARKER)
    assert rx.search("ProfilerStep#12").group(1) == "12"
    assert rx.search("ProfilerStep#12, seq = 3") is None  # Kineto: the exact name
    assert nvtx.search("ProfilerStep#12, seq = 3").group(1) == "12"  # NVTX ranges may carry suffixes
    assert rx.search("Step#12") is None and nvtx.search("Step#12") is None

