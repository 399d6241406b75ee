"""Capture real NCCL Inspector logs beside Kineto traces of the same run (needs a GPU; not yet run).

Builds the plugin from an NVIDIA/nccl checkout (``make`` in ``plugins/profiler/inspector``, seconds) and runs
``capture_torch.py``'s DDP job twice with it loaded: once with a slow rank, once balanced. Each run writes

    OUT/<name>/kineto/rank*.pt.trace.json.gz     the profiler traces (capture_torch.py)
    OUT/<name>/inspector/<host>-pid<pid>.log     the Inspector logs (verbose: kernel timestamps)
    OUT/<name>/ground_truth.json

so ``commscope analyze OUT/<name>/inspector`` and ``commscope analyze OUT/<name>/kineto`` can be checked
against each other and against the truth:

    python3 sample_traces/capture_inspector.py OUT --nccl-src ~/nccl --ranks 4 --late-rank 2 --delay-ms 40

The plugin must match the NCCL that PyTorch loads (its profiler API version); set ``NCCL_HOME`` for ``make``
where NCCL's headers are not found. The dump interval matters: without one the plugin writes only at
communicator teardown, which torch's process exit may skip.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(nccl_src: Path) -> Path:
    folder = nccl_src / "plugins" / "profiler" / "inspector"
    subprocess.run(["make", "-C", str(folder)], check=True)
    lib = folder / "libnccl-profiler-inspector.so"
    if not lib.is_file():
        raise SystemExit(f"{lib} was not built")
    return lib


def capture(out: Path, lib: Path, ranks: int, late_rank: int, kind: str, delay_ms: float, steps: int) -> None:
    (out / "inspector").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NCCL_PROFILER_PLUGIN": str(lib), "NCCL_INSPECTOR_ENABLE": "1",
           "NCCL_INSPECTOR_DUMP_VERBOSE": "1", "NCCL_INSPECTOR_DUMP_DIR": str(out / "inspector"),
           "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS": "200000"}
    cmd = [sys.executable, str(HERE / "capture_torch.py"), str(out / "kineto"), "--ranks", str(ranks),
           "--late-rank", str(late_rank), "--kind", kind, "--delay-ms", str(delay_ms), "--steps", str(steps)]
    subprocess.run(cmd, env=env, check=True)
    truth = json.loads((out / "kineto" / "ground_truth.json").read_text())
    truth["inspector"] = {"plugin": str(lib), "verbose": True, "dump_interval_us": 200000,
                          "logs": sorted(p.name for p in (out / "inspector").glob("*.log"))}
    (out / "ground_truth.json").write_text(json.dumps(truth, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--nccl-src", type=Path, required=True, help="an NVIDIA/nccl checkout")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--late-rank", type=int, default=2)
    ap.add_argument("--kind", choices=("compute", "host"), default="compute")
    ap.add_argument("--delay-ms", type=float, default=40.0)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    lib = build(a.nccl_src)
    capture(a.out / "inspector_straggler", lib, a.ranks, a.late_rank, a.kind, a.delay_ms, a.steps)
    capture(a.out / "inspector_balanced", lib, a.ranks, -1, a.kind, a.delay_ms, a.steps)


if __name__ == "__main__":
    main()
