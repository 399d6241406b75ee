"""Fast bulk Kineto workloads for the benchmarks: real events from ``sample_traces.generate`` plus profiler noise.

``sample_traces.generate`` builds every event as a Python object, which is right for exact answers but
too slow for 500 MB files. Here the generator lays out the steps (kernels, launches, collectives with
known waits) and the bulk of each file -- ``python_function`` and ``cpu_op`` events that real traces are
mostly made of and the analysis never reads -- is streamed as text, so a 500 MB rank takes seconds.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from sample_traces.generate import Scenario, build, kineto_text

_PY_NAMES = (
    "torch/nn/modules/module.py(1762): _call_impl",
    "torch/nn/modules/module.py(1751): _wrapped_call_impl",
    "torch/nn/modules/linear.py(125): forward",
    "torch/autograd/graph.py(824): _engine_run_backward",
    "torch/optim/optimizer.py(485): wrapper",
    "<built-in method apply_ of Tensor object at 0x7f3a2c1b5e40>",
    "torch/_tensor.py(626): backward",
    "train.py(88): train_step",
)
_OPS = ("aten::view", "aten::empty", "aten::as_strided", "aten::t", "aten::transpose", "aten::zeros",
        "aten::detach", "aten::resize_", "aten::expand", "aten::slice")
_BYTES_PER_STEP_PER_KERNEL = 1_150  # measured: real events of one compute kernel in one step, as text


def _noise_lines(n: int, t0_ns: int, t1_ns: int, pid: int, rng: random.Random) -> list[str]:
    """``n`` noise events spread over [t0, t1): 3 python_function per cpu_op, like real traces."""
    span = max(1, t1_ns - t0_ns)
    out = []
    for i in range(n):
        ts = t0_ns + (span * i) // n
        dur = 500 + rng.randrange(20_000)
        tsx = f"{ts // 1000}.{ts % 1000:03d}"
        dx = f"{dur // 1000}.{dur % 1000:03d}"
        if i & 3:
            out.append(
                f'{{"ph": "X", "cat": "python_function", "name": "{_PY_NAMES[i & 7]}", "pid": {pid}, '
                f'"tid": {pid}, "ts": {tsx}, "dur": {dx}, "args": {{"Python parent id": {i + 1}, '
                f'"Python id": {i + 2}, "Python thread": 0}}}}'
            )
        else:
            out.append(
                f'{{"ph": "X", "cat": "cpu_op", "name": "{_OPS[(i >> 2) % len(_OPS)]}", "pid": {pid}, '
                f'"tid": {pid}, "ts": {tsx}, "dur": {dx}, "args": {{"External id": {10_000_000 + i}, '
                f'"Record function id": 0, "Ev Idx": {i}}}}}'
            )
    return out


def write_workload(out_dir: Path, ranks: int, mb_per_rank: float, kernels: int = 1000, real_share: float = 0.15,
                   seed: int = 0) -> list[Path]:
    """Write ``ranks`` Kineto files of about ``mb_per_rank`` MB each; ``real_share`` of the bytes are
    the events the analysis reads (steps of ``kernels`` compute kernels + 2 all-reduces), the rest noise."""
    target = int(mb_per_rank * 1e6)
    steps = max(2, int(target * real_share / (_BYTES_PER_STEP_PER_KERNEL * (kernels + 6))))
    sc = Scenario(ranks=ranks, steps=steps, compute_ns=tuple([40_000] * kernels), seed=seed)
    wl = build(sc)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    marker = '"traceEvents": [\n'
    for r in sorted(wl.events):
        text = kineto_text(wl, r)
        head, _, tail = text.partition(marker)
        events = wl.events[r]
        off = sc.clock_offsets_ns.get(r, 0)
        t0 = off + min(e.ts for e in events)  # build() times already include T0
        t1 = off + max(e.ts + e.dur for e in events)
        pid = 1000 + 37 * r
        n_noise = max(0, (target - len(text)) // 205)
        path = out_dir / f"rank{r}.pt.trace.json"
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(head + marker)
            chunk = 200_000
            for start in range(0, n_noise, chunk):
                lines = _noise_lines(min(chunk, n_noise - start), t0 + (t1 - t0) * start // max(n_noise, 1),
                                     t0 + (t1 - t0) * min(n_noise, start + chunk) // max(n_noise, 1), pid, rng)
                fh.write(",\n".join(lines) + ",\n")
            fh.write(tail)
        paths.append(path)
    # beside, not inside, the folder: a JSON file inside would be taken for a rank
    meta = {"ranks": ranks, "mb_per_rank": mb_per_rank, "steps": steps, "kernels": kernels, "seed": seed}
    (out_dir.parent / f"{out_dir.name}.json").write_text(json.dumps(meta))
    return paths
