"""Capture real multi-rank PyTorch profiler traces on one GPU (how sample_traces/gpu_* were made).

Every rank is its own process with its own ``NCCL_HOSTID`` and ``NCCL_NET=Socket``, so NCCL runs over
loopback sockets and the ranks time-share the GPU. A straggler is injected on purpose:

    python3 sample_traces/capture_torch.py OUT_DIR --ranks 4 --late-rank 2 --kind compute --delay-ms 40

``--kind compute``: the late rank runs extra matrix products before its backward pass (its GPU is busy);
``--kind host``: it sleeps on the CPU before the step (its GPU is idle). Needs PyTorch with CUDA and NCCL.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import time
from pathlib import Path


def _worker(rank: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["NCCL_HOSTID"] = f"commscope-host-{rank}"
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.ranks)
    dim = 1024
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.GELU()) for _ in range(8)])
    model = DDP(model.cuda(), bucket_cap_mb=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(1024, dim, device="cuda")
    extra = torch.randn(4096, 4096, device="cuda")
    late = rank == args.late_rank

    def step() -> None:
        if late and args.kind == "host":
            time.sleep(args.delay_ms / 1000)
        loss = model(x).pow(2).mean()
        if late and args.kind == "compute":
            # ~delay_ms of extra GPU work before the gradients' all-reduces start
            t0 = time.perf_counter()
            y = extra
            while (time.perf_counter() - t0) * 1000 < args.delay_ms:
                y = (y @ extra).tanh()
                torch.cuda.synchronize()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dist.barrier()

    sched = torch.profiler.schedule(wait=1, warmup=2, active=args.steps)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True) as prof:
        for _ in range(3 + args.steps):
            step()
            prof.step()
    raw = Path(args.out) / f"rank{rank}.pt.trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--late-rank", type=int, default=-1)
    ap.add_argument("--kind", choices=("compute", "host"), default="compute")
    ap.add_argument("--delay-ms", type=float, default=40.0)
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NET", "Socket")
    os.environ.setdefault("NCCL_P2P_DISABLE", "1")
    os.environ.setdefault("NCCL_SHM_DISABLE", "1")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    import torch.multiprocessing as mp

    t0 = time.time()
    mp.spawn(_worker, args=(args,), nprocs=args.ranks, join=True)
    truth = {"world_size": args.ranks, "straggler_rank": args.late_rank if args.late_rank >= 0 else None,
             "straggler_kind": args.kind if args.late_rank >= 0 else None, "delay_ms": args.delay_ms,
             "profiled_steps": args.steps, "seconds": round(time.time() - t0, 1),
             "transport": "NCCL NET/Socket over loopback, all ranks time-share one GPU"}
    (Path(args.out) / "ground_truth.json").write_text(json.dumps(truth, indent=1))


if __name__ == "__main__":
    main()
