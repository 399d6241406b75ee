"""Acceptance sweep for the straggler verdict on generated hybrid TP x DP jobs (not a test: minutes).

For each job size, seeds x {host, compute} runs with one late rank at a random position and a random
delay of 1-5 ms, plus balanced runs (jitter on, no late rank). Prints, per size, how often the verdict
names the right rank and kind, and how often a balanced run gets no verdict.

    python -m benchmarks.verdict_sweep --sizes 32,256,1024 --seeds 10 [--twin] [--vary]

``--twin`` also generates each late run's job without the late rank and prints how far ``no_straggler`` is from it.
``--vary``: steps that differ by design (each compute kernel 300, 250, 200, 150 us in steps 1-4, cycled).
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from analyzer.analysis import analyze
from analyzer.ingest.loader import LoadOptions, load
from sample_traces.generate import Scenario, build, write_kineto


def one(ranks: int, tp: int, late: tuple[int, int, str] | None, seed: int, steps: int, jitter_ns: int,
        step_compute: tuple[int, ...] = ()) -> tuple:
    sc = Scenario(ranks=ranks, tp=tp, steps=steps, seed=seed, jitter_ns=jitter_ns, step_compute_ns=step_compute,
                  late_ranks={late[0]: (late[1], late[2])} if late else {})
    folder = Path(tempfile.mkdtemp(prefix="sweep-"))
    try:
        write_kineto(build(sc), folder)
        a = analyze(load([folder], LoadOptions(jobs=1, cache=False)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    v = a.verdict
    ns = a.whatif.scenarios.filter(a.whatif.scenarios["name"] == "no_straggler")["step_time_ns"] if a.whatif else []
    one.last = (float(ns[0]) if len(ns) else None, a.whatif.measured_step_time_ns if a.whatif else None)
    return (v.rank, v.kind) if v else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="32,256,1024")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--jitter-us", type=int, default=8)
    p.add_argument("--twin", action="store_true", help="also replay no_straggler against the job without the late rank")
    p.add_argument("--vary", action="store_true",
                   help="steps that differ by design: compute 300, 250, 200, 150 us a kernel in steps 1-4 (cycled)")
    a = p.parse_args(argv)
    vary = (300_000, 250_000, 200_000, 150_000) if a.vary else ()
    for ranks in (int(x) for x in a.sizes.split(",")):
        tp = 4 if ranks < 64 else 8
        ok = total = null_ok = null_total = 0
        misses = []
        errs: list[float] = []
        t0 = time.perf_counter()
        for seed in range(a.seeds):
            rng = random.Random(1000 * ranks + seed)
            for kind in ("host", "compute"):
                r, delay = rng.randrange(ranks), rng.randint(1, 5) * 1_000_000
                got = one(ranks, tp, (r, delay, kind), seed, a.steps, a.jitter_us * 1000, vary)
                pred = one.last[0]
                if a.twin and pred is not None:  # the same job generated without the late rank
                    one(ranks, tp, None, seed, a.steps, a.jitter_us * 1000, vary)
                    errs.append(100.0 * (pred - one.last[1]) / one.last[1])
                total += 1
                if got == (r, kind):
                    ok += 1
                else:
                    misses.append(f"seed {seed} rank {r} {kind} {delay // 1_000_000} ms -> {got}")
            got = one(ranks, tp, None, seed, a.steps, a.jitter_us * 1000, vary)
            null_total += 1
            null_ok += got is None
            if got is not None:
                misses.append(f"seed {seed} balanced -> {got}")
        vary_said = ", steps vary" if a.vary else ""
        print(f"{ranks} ranks (tp {tp}, {a.steps} steps, jitter {a.jitter_us} us{vary_said}): right rank and kind "
              f"{ok}/{total}, balanced -> null {null_ok}/{null_total} ({time.perf_counter() - t0:.0f} s)", flush=True)
        if errs:
            print(f"    no_straggler vs the twin without the late rank: max |error| {max(map(abs, errs)):.1f}%, "
                  f"within 5% in {sum(abs(e) <= 5 for e in errs)}/{len(errs)}", flush=True)
        for m in misses:
            print("   ", m, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
