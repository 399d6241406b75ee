"""Capture real multi-rank PyTorch profiler traces of hybrid parallel jobs, each with a balanced twin.

How ``sample_traces/real_parallel/`` was made: every rank is its own process with its own
``NCCL_HOSTID`` and ``NCCL_NET=Socket``, so NCCL runs over loopback sockets and the ranks time-share
one GPU (start times are noisy, kernel durations carry the waits). Scenarios:

- ``pp_1f1b``: 4 ranks, DeviceMesh ("dp", "pp") = (2, 2); two pipeline stages, 1F1B over micro-batches
  with batched send/recv (Megatron's schedule), then a DP all-reduce of the gradients. Slow rank: the
  last stage of pipeline 1 runs extra GPU work in every micro-batch's forward.
- ``tp_dp``: 8 ranks, DeviceMesh ("dp", "tp") = (4, 2); tensor-parallel layers (all-reduce in the forward
  and the backward), then bucketed DP all-reduces. Slow rank: one rank of one TP group runs extra GPU work
  before each step's forward.
- ``moe_a2a``: 4 ranks, expert parallel; dispatch and combine all-to-alls with uneven splits (every rank
  sends most tokens to one hot expert), then a dense all-reduce. The twin splits evenly.
- ``fsdp_threads``: 4 ranks, FSDP2 (``fully_shard``); the backward's kernels come from autograd's thread
  and a side thread launches its own kernels on its own stream each step. Slow rank: sleeps on the CPU
  before each step (a slow data loader).
- ``tp_pp_dp``: 8 ranks, DeviceMesh ("dp", "pp", "tp") = (2, 2, 2) (not Megatron's rank order); each of the
  two pipeline stages is two tensor-parallel layers, 1F1B between the stages, DP all-reduce. Slow rank: rank 1
  (tp 1 of stage 0 of replica 0), extra time in every micro-batch's forward.
- ``pp4_1f1b``: 8 ranks, DeviceMesh ("dp", "pp") = (2, 4): the 1F1B pipeline above with four stages, so a
  middle stage's batches go to its previous stage and to its next. Slow rank: rank 1 (stage 1 of replica 0).
- ``cp_ring``: 8 ranks, DeviceMesh ("dp", "cp") = (2, 4); ring attention, the key/value blocks passed round
  each context-parallel ring with batched send/recv while the current block's attention runs, then a DP
  all-reduce. Slow rank: rank 2, extra time before each step's forward.

    python3 sample_traces/capture_parallel.py OUT_DIR [--scenarios pp_1f1b tp_dp ...] [--device cpu] [--with-stack]

``--device cpu`` runs the same programs with gloo on the CPU (to check the script without a GPU);
``--with-stack`` records Python stacks (``python_function`` events), as many users profile.
Each run writes ``OUT_DIR/<scenario>_<slow|balanced>/rank<N>.pt.trace.json.gz`` and ``ground_truth.json``
with the mesh's groups, the injected delay, each rank's measured step times and the all-to-all splits.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import threading
import time
import traceback
from pathlib import Path

WORLD = {"pp_1f1b": 4, "tp_dp": 8, "moe_a2a": 4, "fsdp_threads": 4, "tp_pp_dp": 8, "cp_ring": 8, "pp4_1f1b": 8}
SLOW_RANK = {"pp_1f1b": 3, "tp_dp": 5, "moe_a2a": 2, "fsdp_threads": 1, "tp_pp_dp": 1, "cp_ring": 2, "pp4_1f1b": 1}
WAIT, WARMUP = 1, 2


def _profile(args: argparse.Namespace, rank: int, step, dist, torch) -> list[float]:
    """Run warm-up and profiled steps; returns the wall time of each profiled step (ms)."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if args.device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    sched = torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=args.steps)
    times: list[float] = []
    with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True,
                                with_stack=args.with_stack) as prof:
        for i in range(WAIT + WARMUP + args.steps):
            _sync(args, torch)
            t0 = time.perf_counter()
            step()
            _sync(args, torch)
            if i >= WAIT + WARMUP:
                times.append((time.perf_counter() - t0) * 1000)
            dist.barrier()
            prof.step()
    raw = Path(args.run_dir) / f"rank{rank}.pt.trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return times


def _sync(args: argparse.Namespace, torch) -> None:
    if args.device == "cuda":
        torch.cuda.synchronize()


def _straggler(args: argparse.Namespace, rank: int, torch, dev):
    """``delay(ms)``: the slow rank's extra time (nothing on the other ranks), its matrix made here."""
    extra = torch.randn(2048, 2048, device=dev)

    def delay(ms: float) -> None:
        if rank == args.slow_rank:
            _delay(args, torch, extra, ms)

    return delay


def _delay(args: argparse.Namespace, torch, mat, ms: float) -> None:
    """The slow rank's extra time: GPU work (``--kind compute``) or a sleep on the CPU (``--kind host``)."""
    if args.kind == "host":
        time.sleep(ms / 1000)
    else:
        _busy(args, torch, mat, ms)


def _busy(args: argparse.Namespace, torch, mat, ms: float) -> None:
    """About ``ms`` of extra device work: matrix products enqueued back to back (the GPU is busy, the host
    is not), their number calibrated once per process; on the CPU, a timed loop."""
    if args.device != "cuda":
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1000 < ms:
            (mat @ mat).tanh_()
        return
    if not hasattr(_busy, "per_ms"):
        (mat @ mat).tanh_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            (mat @ mat).tanh_()
        torch.cuda.synchronize()
        _busy.per_ms = 20 / ((time.perf_counter() - t0) * 1000)
    for _ in range(max(1, round(ms * _busy.per_ms))):
        (mat @ mat).tanh_()


def _pipeline(args, rank, torch, dist, mesh, dev, stage, params):
    """1F1B over micro-batches between the stages of this rank's "pp" group, with batched send/recv
    (Megatron's schedule), then a DP all-reduce of the gradients. ``stage`` maps a micro-batch
    (mb, 1024) to the stage's output."""
    from torch.distributed import P2POp, batch_isend_irecv, irecv, isend

    pp = mesh["pp"].get_group()
    dp = mesh["dp"].get_group()
    ranks_pp = dist.get_process_group_ranks(pp)
    s, S = ranks_pp.index(rank), len(ranks_pp)
    prev = ranks_pp[s - 1] if s > 0 else None
    nxt = ranks_pp[s + 1] if s < S - 1 else None
    dim, mb, M = 1024, 256, args.microbatches
    data = [torch.randn(mb, dim, device=dev) for _ in range(M)]
    delay = _straggler(args, rank, torch, dev)

    def p2p(send_to=None, t=None, recv_from=None):
        ops = []
        buf = None
        if send_to is not None:
            ops.append(P2POp(isend, t.contiguous(), send_to, group=pp))
        if recv_from is not None:
            buf = torch.empty(mb, dim, device=dev)
            ops.append(P2POp(irecv, buf, recv_from, group=pp))
        if ops:
            for w in batch_isend_irecv(ops):
                w.wait()
        return buf

    def fwd(inp):
        if prev is not None:
            inp.requires_grad_()
        delay(args.delay_ms / M)
        out = stage(inp)
        return out.pow(2).mean() if nxt is None else out

    def bwd(inp, out, og):
        torch.autograd.backward(out, grad_tensors=og)
        return inp.grad if prev is not None else None

    def step():
        feed = iter(data)
        recv_fwd = (lambda: next(feed)) if prev is None else (lambda: p2p(recv_from=prev))
        warm = min(S - s - 1, M)
        inputs, outputs = [], []
        for _ in range(warm):
            inp = recv_fwd()
            out = fwd(inp)
            p2p(send_to=nxt, t=out)
            inputs.append(inp)
            outputs.append(out)
        inp = recv_fwd() if M - warm > 0 else None
        for i in range(M - warm):
            out = fwd(inp)
            og = p2p(send_to=nxt, t=out.detach(), recv_from=nxt) if nxt is not None else None
            inputs.append(inp)
            outputs.append(out)
            ig = bwd(inputs.pop(0), outputs.pop(0), og)
            if i == M - warm - 1:
                if prev is not None:
                    p2p(send_to=prev, t=ig)
            elif prev is not None:
                inp = p2p(send_to=prev, t=ig, recv_from=prev)
            else:
                inp = recv_fwd()
        for _ in range(warm):
            og = p2p(recv_from=nxt)
            ig = bwd(inputs.pop(0), outputs.pop(0), og)
            if prev is not None:
                p2p(send_to=prev, t=ig)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, group=dp)
        for p in params:
            p.grad = None

    return step, {"stages": S, "microbatches": M, "schedule": "1F1B",
                  "stage_of_rank": s, "pp_groups": _groups(mesh, "pp", dist),
                  "dp_groups": _groups(mesh, "dp", dist)}


def _pp_1f1b(args, rank, torch, dist, mesh, dev):
    dim = 1024
    stage = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.GELU())
                                  for _ in range(4)]).to(dev)
    return _pipeline(args, rank, torch, dist, mesh, dev, stage, list(stage.parameters()))


def _tp_functions(torch, dist, tp):
    """Megatron's column-parallel copy (all-reduce in the backward) and row-parallel reduce (all-reduce
    in the forward) over the group ``tp``."""

    class Reduce(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x = x.clone()
            dist.all_reduce(x, group=tp)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    class Copy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            g = g.clone()
            dist.all_reduce(g, group=tp)
            return g

    return Copy, Reduce


def _tp_pp_dp(args, rank, torch, dist, mesh, dev):
    """Two pipeline stages, each two tensor-parallel layers, replicated twice for data parallelism."""
    tp = mesh["tp"].get_group()
    tp_size = dist.get_world_size(tp)
    Copy, Reduce = _tp_functions(torch, dist, tp)
    dim, hidden, layers = 1024, 4096, 2
    w1 = [torch.nn.Parameter(torch.randn(dim, hidden // tp_size, device=dev) * 0.02) for _ in range(layers)]
    w2 = [torch.nn.Parameter(torch.randn(hidden // tp_size, dim, device=dev) * 0.02) for _ in range(layers)]

    def stage(h):
        for a, b in zip(w1, w2):
            h = h + Reduce.apply(torch.nn.functional.gelu(Copy.apply(h) @ a) @ b)
        return h

    step, info = _pipeline(args, rank, torch, dist, mesh, dev, stage, w1 + w2)
    return step, {**info, "tp_groups": _groups(mesh, "tp", dist)}


def _cp_ring(args, rank, torch, dist, mesh, dev):
    """Ring attention: each rank holds one chunk of the sequence; the key/value blocks go round the
    context-parallel ring with batched send/recv while the current block's attention runs, then a DP
    all-reduce of the projection gradients."""
    from torch.distributed import P2POp, batch_isend_irecv, irecv, isend

    cp = mesh["cp"].get_group()
    dp = mesh["dp"].get_group()
    ring = dist.get_process_group_ranks(cp)
    i, n = ring.index(rank), len(ring)
    nxt, prev = ring[(i + 1) % n], ring[(i - 1) % n]
    seq, heads, hd = 1024, 8, 64
    dim = heads * hd
    ws = [torch.nn.Parameter(torch.randn(dim, dim, device=dev) * 0.02) for _ in range(4)]
    x = torch.randn(seq, dim, device=dev)
    delay = _straggler(args, rank, torch, dev)

    def step():
        delay(args.delay_ms)
        wq, wk, wv, wo = ws
        q = (x @ wq).view(seq, heads, hd).transpose(0, 1)
        k = (x @ wk).view(seq, heads, hd).transpose(0, 1)
        v = (x @ wv).view(seq, heads, hd).transpose(0, 1)
        cur = torch.stack([k, v]).detach().contiguous()
        out = 0
        for r in range(n):
            works = []
            if r < n - 1:
                nbuf = torch.empty_like(cur)
                works = batch_isend_irecv([P2POp(isend, cur, nxt, group=cp), P2POp(irecv, nbuf, prev, group=cp)])
            kk, vv = (k, v) if r == 0 else (cur[0], cur[1])
            out = out + torch.softmax(q @ kk.transpose(1, 2) / hd ** 0.5, dim=-1) @ vv
            for w in works:
                w.wait()
            if r < n - 1:
                cur = nbuf
        loss = (out.transpose(0, 1).reshape(seq, dim) @ wo).pow(2).mean()
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in ws])
        dist.all_reduce(flat, group=dp)
        for p in ws:
            p.grad = None

    return step, {"cp_groups": _groups(mesh, "cp", dist), "dp_groups": _groups(mesh, "dp", dist),
                  "ring_hops_per_step": n - 1, "sequence_per_rank": seq}


def _tp_dp(args, rank, torch, dist, mesh, dev):
    tp = mesh["tp"].get_group()
    dp = mesh["dp"].get_group()
    tp_size = dist.get_world_size(tp)

    Copy, Reduce = _tp_functions(torch, dist, tp)

    dim, hidden, batch, layers = 1024, 4096, 512, 4
    w1 = [torch.nn.Parameter(torch.randn(dim, hidden // tp_size, device=dev) * 0.02) for _ in range(layers)]
    w2 = [torch.nn.Parameter(torch.randn(hidden // tp_size, dim, device=dev) * 0.02) for _ in range(layers)]
    params = w1 + w2
    x = torch.randn(batch, dim, device=dev)
    delay = _straggler(args, rank, torch, dev)

    def step():
        delay(args.delay_ms)
        h = x
        for a, b in zip(w1, w2):
            h = h + Reduce.apply(torch.nn.functional.gelu(Copy.apply(h) @ a) @ b)
        h.pow(2).mean().backward()
        # two DP buckets, like DDP's
        half = len(params) // 2
        for bucket in (params[:half], params[half:]):
            flat = torch.cat([p.grad.reshape(-1) for p in bucket])
            dist.all_reduce(flat, group=dp)
        for p in params:
            p.grad = None

    return step, {"tp_groups": _groups(mesh, "tp", dist), "dp_groups": _groups(mesh, "dp", dist)}


def _moe_a2a(args, rank, torch, dist, mesh, dev):
    world = dist.get_world_size()
    dim, tokens = 1024, 4096
    hot = args.slow_rank
    if args.variant == "slow":
        # every rank sends 5/8 of its tokens to the hot expert, the rest evenly
        to_hot = tokens * 5 // 8
        rest = (tokens - to_hot) // (world - 1)
        splits = [[to_hot if dst == hot else rest for dst in range(world)] for _ in range(world)]
        for row in splits:
            row[hot] += tokens - sum(row)
    else:
        splits = [[tokens // world] * world for _ in range(world)]
    send = splits[rank]
    recv = [splits[src][rank] for src in range(world)]
    expert = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                 torch.nn.Linear(4 * dim, dim)).to(dev)
    dense = torch.nn.Linear(dim, dim).to(dev)
    x = torch.randn(tokens, dim, device=dev)

    def step():
        h = dense(x)
        got = torch.empty(sum(recv), dim, device=dev)
        dist.all_to_all_single(got, h.detach().contiguous(), output_split_sizes=recv, input_split_sizes=send)
        y = expert(got.requires_grad_())
        back = torch.empty(tokens, dim, device=dev)
        dist.all_to_all_single(back, y.detach().contiguous(), output_split_sizes=send, input_split_sizes=recv)
        (h * back).mean().backward()
        y.backward(torch.ones_like(y) / y.numel())
        flat = torch.cat([p.grad.reshape(-1) for p in dense.parameters()])
        dist.all_reduce(flat)
        for p in list(dense.parameters()) + list(expert.parameters()):
            p.grad = None

    return step, {"splits": splits, "hot_expert_rank": hot if args.variant == "slow" else None,
                  "tokens_per_rank": tokens}


def _fsdp_threads(args, rank, torch, dist, mesh, dev):
    from torch.distributed.fsdp import fully_shard

    dim = 1024
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.GELU())
                                  for _ in range(6)]).to(dev)
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(1024, dim, device=dev)
    side_in = torch.randn(1024, 1024, device=dev)
    side_stream = torch.cuda.Stream() if args.device == "cuda" else None
    slow = rank == args.slow_rank

    def side_work():
        # another thread launching its own kernels on its own stream (a prefetcher, say)
        if side_stream is not None:
            with torch.cuda.stream(side_stream):
                for _ in range(4):
                    (side_in @ side_in).relu_()
            side_stream.synchronize()
        else:
            for _ in range(4):
                (side_in @ side_in).relu_()

    def step():
        if slow:
            time.sleep(args.delay_ms / 1000)
        th = threading.Thread(target=side_work, name="prefetch")
        th.start()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        th.join()

    return step, {"threads": ["main", "autograd backward", "prefetch"]}


def _groups(mesh, name, dist) -> list[list[int]]:
    """Every group of one mesh dimension, as global ranks."""
    t = mesh.mesh
    dim = mesh.mesh_dim_names.index(name)
    moved = t.movedim(dim, -1).reshape(-1, t.shape[dim])
    return [row.tolist() for row in moved]


BUILD = {"pp_1f1b": _pp_1f1b, "tp_dp": _tp_dp, "moe_a2a": _moe_a2a, "fsdp_threads": _fsdp_threads,
         "tp_pp_dp": _tp_pp_dp, "cp_ring": _cp_ring, "pp4_1f1b": _pp_1f1b}
# tp_pp_dp's mesh is not in Megatron's rank order (there pp would be outermost), so only the groups'
# DeviceMesh names can say which dimension each group is
MESH = {"pp_1f1b": (("dp", "pp"), (2, 2)), "tp_dp": (("dp", "tp"), (4, 2)),
        "moe_a2a": (("ep",), (4,)), "fsdp_threads": (("dp",), (4,)),
        "tp_pp_dp": (("dp", "pp", "tp"), (2, 2, 2)), "cp_ring": (("dp", "cp"), (2, 4)),
        "pp4_1f1b": (("dp", "pp"), (2, 4))}


def _worker(rank: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ["NCCL_HOSTID"] = f"commscope-host-{rank}"
    world = WORLD[args.scenario]
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    if args.device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    names, shape = MESH[args.scenario]
    mesh = init_device_mesh(args.device, shape, mesh_dim_names=names)
    dev = torch.device(args.device)
    step, info = BUILD[args.scenario](args, rank, torch, dist, mesh, dev)
    times = _profile(args, rank, step, dist, torch)
    every = [None] * world
    dist.all_gather_object(every, times)
    if rank == 0:
        truth = {"scenario": args.scenario, "variant": args.variant, "world_size": world,
                 "mesh": {"dims": list(names), "shape": list(shape)},
                 "straggler_rank": args.slow_rank if args.variant == "slow" else None,
                 "straggler_kind": ({"moe_a2a": "hot_expert", "fsdp_threads": "host"}.get(args.scenario, args.kind)
                                    if args.variant == "slow" else None),
                 "delay_ms": args.delay_ms if args.variant == "slow" else 0.0,
                 "profiled_steps": args.steps, "step_ms_by_rank": every, "with_stack": args.with_stack,
                 "torch": torch.__version__,
                 "nccl": ".".join(map(str, torch.cuda.nccl.version())) if args.device == "cuda" else None,
                 "transport": ("NCCL NET/Socket over loopback, all ranks share one GPU"
                               + (" through CUDA MPS (kernels of different ranks run concurrently)" if args.mps
                                  else " by time slicing")) if args.device == "cuda" else "gloo on the CPU",
                 **info}
        (Path(args.run_dir) / "ground_truth.json").write_text(json.dumps(truth, indent=1))
    dist.destroy_process_group()


def _run(args: argparse.Namespace) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(args,), nprocs=WORLD[args.scenario], join=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--scenarios", nargs="+", default=list(BUILD), choices=list(BUILD))
    ap.add_argument("--variants", nargs="+", default=["slow", "balanced"], choices=["slow", "balanced"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--delay-ms", type=float, default=40.0)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--port", type=int, default=29611)
    ap.add_argument("--kind", choices=("compute", "host"), default="compute",
                    help="pp_1f1b and tp_dp: the slow rank's extra time is GPU work or a CPU sleep")
    ap.add_argument("--mps", action="store_true", help="record that the CUDA MPS daemon ran (started outside)")
    ap.add_argument("--with-stack", action="store_true",
                    help="record Python stacks (python_function events), as many users profile")
    ap.add_argument("--tag", default="", help="suffix of each run's folder name")
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NET", "Socket")
    os.environ.setdefault("NCCL_P2P_DISABLE", "1")
    os.environ.setdefault("NCCL_SHM_DISABLE", "1")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    port = args.port
    for scenario in args.scenarios:
        for variant in args.variants:
            run_dir = Path(args.out) / f"{scenario}{args.tag}_{variant}"
            run_dir.mkdir(parents=True, exist_ok=True)
            port += 1
            run = argparse.Namespace(**vars(args), scenario=scenario, variant=variant, run_dir=str(run_dir),
                                     slow_rank=SLOW_RANK[scenario] if variant == "slow" else -1)
            run.port = port
            if scenario == "moe_a2a":
                run.slow_rank = SLOW_RANK[scenario]  # the hot expert; the twin sends evenly
            t0 = time.time()
            try:
                _run(run)
                print(f"{run_dir.name}: ok in {time.time() - t0:.1f} s", flush=True)
            except Exception:  # one broken scenario must not lose the others' traces
                print(f"{run_dir.name}: FAILED after {time.time() - t0:.1f} s", flush=True)
                traceback.print_exc()


if __name__ == "__main__":
    main()
