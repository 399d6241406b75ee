"""What-if acceptance and scale (not a test: minutes).

For random hybrid TP x DP jobs with one late rank (host or compute, 1-5 ms, random position), the
``no_straggler`` replay of the late run (given the injected rank and kind, so independent of the verdict)
against the measured step time of the same scenario generated without the late rank; and the time the
dependency graph, the critical path and the replay take.

    python -m benchmarks.whatif_sweep --sizes 32,64 --runs 10
    python -m benchmarks.whatif_sweep --sizes 1024 --runs 1
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

import polars as pl

from analyzer.crossrank import align, graph, match
from analyzer.ingest.loader import LoadOptions, load
from analyzer.metrics import critical_path, waits
from analyzer.whatif import scenarios as whatif
from sample_traces.generate import Scenario, build, write_kineto


def _step_time(sc: Scenario, straggler: tuple[int, str] | None) -> tuple[float, float | None, dict[str, float]]:
    folder = Path(tempfile.mkdtemp(prefix="whatif-"))
    try:
        write_kineto(build(sc), folder)
        ts = load([folder], LoadOptions(jobs=1, cache=False))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    inst = match.instances(ts.collectives)
    fit = align.fit_offsets(inst, ts.rank_ids)
    clock = graph.Clock.of(fit)
    aligned = clock.to_reference(inst.select("rank", "start_ns", "end_ns"))
    rows = waits.per_row(inst, aligned["start_ns"], aligned["end_ns"])
    t = {}
    t0 = time.perf_counter()
    g = graph.build(ts.gpu, rows, ts.steps, clock, ts.cpu)  # the host chains too (the replay places launches)
    t["graph_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    critical_path.critical_path(g)
    t["critical_path_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    w = whatif.analyze(g, ts.steps, straggler)
    t["replay_s"] = time.perf_counter() - t0
    t["nodes"] = g.n_nodes
    pred = None
    if straggler is not None:
        pred = float(w.scenarios.filter(pl.col("name") == "no_straggler")["step_time_ns"][0])
    return w.measured_step_time_ns, pred, t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="32,64")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    for n in (int(x) for x in args.sizes.split(",")):
        tp = 8 if n >= 64 else 4
        errs = []
        for i in range(args.runs):
            kind = rng.choice(["host", "compute"])
            rank, delay = rng.randrange(n), rng.randint(1, 5) * 1_000_000
            base = dict(ranks=n, tp=tp, steps=args.steps, seed=i)
            late, pred, t = _step_time(Scenario(**base, late_ranks={rank: (delay, kind)}), (rank, kind))
            clean, _, _ = _step_time(Scenario(**base), None)
            errs.append(100.0 * (pred - clean) / clean)
            print(f"{n} ranks tp={tp} rank {rank} {kind} {delay / 1e6:.0f} ms: late {late / 1e6:.3f} ms, "
                  f"without it {clean / 1e6:.3f} ms, no_straggler predicts {pred / 1e6:.3f} ms ({errs[-1]:+.2f}%); "
                  f"{t['nodes']} operations: graph {t['graph_s']:.2f} s, critical path {t['critical_path_s']:.2f} s, "
                  f"replay {t['replay_s']:.2f} s", flush=True)
        print(f"{n} ranks: largest prediction error {max(abs(e) for e in errs):.2f}% over {len(errs)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
