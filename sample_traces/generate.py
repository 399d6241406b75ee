"""Synthetic multi-rank PyTorch profiler (Kineto) traces whose answers are known exactly: the command line.

The job model and its builder are in ``job.py``, the writers in ``kineto_writer.py`` and ``pipeline_job.py``;
their public names are re-exported here, where callers import them from.

    python -m sample_traces.generate OUT_DIR --ranks 4 --steps 3 --late-rank 2:host:5ms --gzip
"""

from __future__ import annotations

import argparse
import re
import sys
from decimal import Decimal
from pathlib import Path

from .job import (  # noqa: F401 (re-exported)
    COMM_SLOT_NS,
    COMPUTE_STREAM,
    LATE_KINDS,
    MARGIN_NS,
    NCCL_STREAM_BASE,
    OPS,
    SLOT_NS,
    SPLIT_ROW_ELEMS,
    SYNC_TAIL_NS,
    Collective,
    InstanceTruth,
    ProcessGroup,
    RankTruth,
    Scenario,
    Truth,
    Workload,
    build,
    default_collectives,
    default_groups,
    host_offsets,
)
from .kineto_writer import kineto_text as kineto_text  # re-exported: callers import the writer from here
from .kineto_writer import write_kineto, write_truth
from .pipeline_job import PipelineScenario, build_pipeline, write_pipeline_truth

_UNITS = {"ns": 1, "us": 1000, "µs": 1000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_duration(text: str) -> int:
    """'5ms', '300us', '-2.5ms', '1500' (ns) -> integer nanoseconds."""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 5ms, 300us, 1500ns)")
    return int(Decimal(m.group(1)) * _UNITS[m.group(2) or "ns"])


def _late(text: str) -> tuple[int, int, str]:
    try:
        r, kind, dur = text.split(":")
        if kind not in LATE_KINDS:
            raise ValueError
        return int(r), parse_duration(dur), kind
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--late-rank wants RANK:host|compute:DURATION, got {text!r}") from exc


def _offset(text: str) -> tuple[int, int]:
    try:
        r, dur = text.split(":", 1)
        return int(r), parse_duration(dur)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--clock-offset wants RANK:DURATION, got {text!r}") from exc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sample_traces.generate", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size: adds TP and DP subgroups")
    p.add_argument("--overlap", type=float, default=0.5, help="compute beside each comm kernel, x transfer")
    p.add_argument("--late-rank", type=_late, action="append", default=[], metavar="R:host|compute:DUR")
    p.add_argument("--clock-offset", type=_offset, action="append", default=[], metavar="R:DUR")
    p.add_argument(
        "--host-offset",
        type=parse_duration,
        default=0,
        metavar="DUR",
        help="host h's clock runs h x DUR ahead (hosts of --gpus-per-host ranks)",
    )
    p.add_argument("--gpus-per-host", type=int, default=8)
    p.add_argument(
        "--missing-meta",
        type=int,
        default=0,
        metavar="K",
        help="first K comm kernels of each rank lack record_param_comms",
    )
    p.add_argument("--jitter", type=parse_duration, default=8_000, metavar="DUR")
    p.add_argument("--python-noise", type=int, default=0, metavar="N", help="python_function events per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ts-style", choices=("float", "int"), default="float")
    p.add_argument("--gzip", action="store_true")
    p.add_argument("--no-distributed-info", action="store_true")
    p.add_argument("--no-gpu-step-annotations", action="store_true")
    p.add_argument("--no-truth", action="store_true", help="do not write ground_truth.json")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages: a TP x DP x PP 1F1B job (sample_traces.pipeline_job)")
    p.add_argument("--microbatches", type=int, default=8, help="micro-batches per step with --pp")
    a = p.parse_args(argv)
    if a.pp > 1:
        return _pipeline_main(a)
    offsets = host_offsets(a.ranks, a.gpus_per_host, a.host_offset) if a.host_offset else {}
    for r, d in a.clock_offset:
        offsets[r] = offsets.get(r, 0) + d
    try:
        sc = Scenario(
            ranks=a.ranks,
            steps=a.steps,
            tp=a.tp,
            overlap=a.overlap,
            late_ranks={r: (d, k) for r, d, k in a.late_rank},
            clock_offsets_ns=offsets,
            missing_meta_first=a.missing_meta,
            jitter_ns=a.jitter,
            python_noise=a.python_noise,
            seed=a.seed,
            ts_style=a.ts_style,
            distributed_info=not a.no_distributed_info,
            gpu_step_annotations=not a.no_gpu_step_annotations,
            gpus_per_host=a.gpus_per_host,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wl = build(sc)
    paths = write_kineto(wl, a.out_dir, gzip=a.gzip)
    if not a.no_truth:
        paths.append(write_truth(wl, a.out_dir / "ground_truth.json"))
    for path in paths:
        print(path)
    return 0


def _pipeline_main(a: argparse.Namespace) -> int:
    if a.ranks % (a.tp * a.pp):
        print(f"error: ranks ({a.ranks}) must be a multiple of tp x pp ({a.tp * a.pp})", file=sys.stderr)
        return 2
    ps = PipelineScenario(tp=a.tp, dp=a.ranks // (a.tp * a.pp), pp=a.pp, microbatches=a.microbatches, steps=a.steps)
    wl, truth = build_pipeline(ps)
    paths = write_kineto(wl, a.out_dir, gzip=a.gzip)
    if not a.no_truth:
        paths.append(write_pipeline_truth(ps, truth, a.out_dir / "ground_truth.json"))
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
