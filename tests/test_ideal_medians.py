"""The ideal run's typical durations and gaps (analyzer/whatif/ideal.py, numpy since issue #33's follow-up) against
the definition worked out in plain Python: per (role, step, name, occurrence, first) the lower median over the role's
ranks in that step (peers in the same step: steps that differ by design stay different; with replicas, peers that
do not run it count as zero), never more than measured; over every replay event, the host's runtime calls too.
Real multi-step graphs, each under several role sets, and one with nulls in names, durations and gaps."""

from __future__ import annotations

import statistics

import numpy as np
import polars as pl
import pytest

from analyzer.crossrank.graph import Graph
from analyzer.whatif import ideal as idl
from tests.conftest import SAMPLES
from tests.helpers import run


def _brute(g: Graph, rl: idl.Roles) -> tuple[list[float], list[float]]:
    rows = g.events.select("rank", "kind", "name", "step", "occurrence", "bind_pred", "dur_ns", "gap_ns").to_dicts()
    per: dict[tuple, dict[str, list]] = {}
    for r in rows:
        key = (rl.role.get(r["rank"], -1), r["step"], r["name"], r["occurrence"], r["bind_pred"] is None)
        gap = None if r["gap_ns"] is None else max(float(r["gap_ns"]), 0.0)
        got = per.setdefault(key, {}).setdefault(r["rank"], [[], []])
        got[0].append(None if r["dur_ns"] is None else float(r["dur_ns"]))
        got[1].append(gap)
    present = {r["rank"] for r in rows}
    size: dict[int, int] = {}
    for rank in present:
        if rank in rl.role:
            size[rl.role[rank]] = size.get(rl.role[rank], 0) + 1

    def median(v: list) -> float | None:
        v = [x for x in v if x is not None]
        return statistics.median(v) if v else None

    typical: dict[tuple, tuple] = {}
    for key, ranks in per.items():
        out = []
        for col in (0, 1):
            vals = [median(v[col]) for v in ranks.values()]
            vals = sorted(vals, key=lambda x: (x is not None, x if x is not None else 0.0))  # nulls first
            c = len(vals)
            if rl.replicated:
                n = size.get(key[0])
                at = (n - 1) // 2 - (n - c) if n is not None else -1
            else:
                at = (c - 1) // 2
            out.append(vals[at] if at >= 0 else 0.0)
        typical[key] = tuple(out)
    dd, dg = [], []
    for r in rows:
        td, tg = typical[(rl.role.get(r["rank"], -1), r["step"], r["name"], r["occurrence"], r["bind_pred"] is None)]
        dur = None if r["dur_ns"] is None else float(r["dur_ns"])
        gap = None if r["gap_ns"] is None else max(float(r["gap_ns"]), 0.0)
        work = r["kind"] in idl.WORK_KINDS
        dd.append(0.0 if dur is None or not work else min(dur if td is None else td, dur) - dur)
        dg.append(0.0 if gap is None else min(gap if tg is None else tg, gap) - gap)
    return dd, dg


def _roles(ranks: list[int]) -> list[idl.Roles]:
    half = {r: i % 2 for i, r in enumerate(ranks)}
    return [idl.Roles({r: 0 for r in ranks}, True, {}, {}), idl.Roles({r: 0 for r in ranks}, False, {}, {}),
            idl.Roles(half, True, {}, {}), idl.Roles({r: 0 for r in ranks[1:]}, True, {}, {})]


@pytest.mark.parametrize("folder", [SAMPLES / "gpu_h200" / "compute_straggler",
                                    SAMPLES / "real_parallel" / "pp4_1f1b_mps_host_slow"],
                         ids=lambda p: p.name)
def test_typical_durations_and_gaps_by_definition(folder) -> None:
    g = run(folder).graph
    assert g.nodes.select("rank", "step").unique().height > g.nodes["rank"].n_unique()  # several steps a rank
    # the same graph with nulls: every 7th name, 11th gap and 13th duration
    i = pl.col("node")
    nulls = Graph(nodes=g.nodes.with_columns(
        pl.when(i % 7 == 0).then(None).otherwise(pl.col("name")).alias("name"),
        pl.when(i % 11 == 0).then(None).otherwise(pl.col("gap_ns")).alias("gap_ns"),
        pl.when(i % 13 == 0).then(None).otherwise(pl.col("dur_ns")).alias("dur_ns")),
        instances=g.instances, edges=g.edges, declared=g.declared, deps=g.deps)
    # and as one step a rank (occurrences numbered over the whole rank, as the graph numbers them then)
    one_step = Graph(nodes=g.nodes.sort("node").with_columns(
        pl.lit(None, pl.Int64).alias("step"), pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "name")
        .alias("occurrence")), instances=g.instances, edges=g.edges, declared=g.declared, deps=g.deps)
    ranks = sorted(g.nodes["rank"].unique().to_list())
    seen = 0
    for gg in (g, nulls, one_step):
        for rl in _roles(ranks):
            got = idl.ideal(gg, rl)
            dd, dg = _brute(gg, rl)
            assert got.ddur == pytest.approx(dd, rel=1e-12, abs=1e-6)
            assert got.dgap == pytest.approx(dg, rel=1e-12, abs=1e-6)
            seen += int(np.count_nonzero(got.ddur)) + int(np.count_nonzero(got.dgap))
    assert seen > 1000  # the medians move many operations
