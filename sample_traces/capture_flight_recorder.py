"""Capture real PyTorch Flight Recorder dumps of small CPU (gloo) jobs that hang on purpose.

How ``sample_traces/flight_recorder/`` was made. Four ranks, each its own process, gloo on the CPU,
``TORCH_FR_BUFFER_SIZE`` set so Flight Recorder records gloo's collectives; a 2 x 2 DeviceMesh
("dp", "tp") gives two tensor-parallel groups ({0, 1}, {2, 3}) and two data-parallel groups
({0, 2}, {1, 3}) besides the world group. Every rank runs a few healthy steps (an all-reduce and an
all-gather on tp, an all-reduce on dp), then one scenario breaks the next tp all-reduce:

- ``skip``: rank 3 never calls it (rank 2 enters it and waits).
- ``wrong_op``: rank 3 calls an all-gather where rank 2 calls the all-reduce.
- ``wrong_size``: rank 3's all-reduce has half the elements of rank 2's. Gloo aborts the process that
  receives more bytes than it posted as soon as data flows (NCCL would hang silently), so here rank 3
  enters first, dumps and stops itself (SIGSTOP), and only then rank 2 enters and dumps.

Every rank exits only once all have dumped: an exiting rank closes its sockets, gloo then fails its
peers' pending work and retires it, and a retired entry reads as finished.

The hanging collective is issued with ``async_op=True`` and waited on from a side thread (the main
thread stays free, as the watchdog's would be); after a pause every rank writes its dump with
``torch._C._distributed_c10d._dump_fr_trace()`` (pickle, ``OUT/<scenario>/pickle/rank<N>.pkl``) and
``_dump_fr_trace_json()`` (``OUT/<scenario>/json/rank<N>.json``), then leaves with ``os._exit`` (the hung work would
otherwise block the teardown). ``ground_truth.json`` says which group, seq, op and ranks.

Needs torch (not a commscope dependency): run it from its own venv, e.g.

    python3 -m venv /tmp/frvenv && /tmp/frvenv/bin/pip install torch==2.13.0
    /tmp/frvenv/bin/python sample_traces/capture_flight_recorder.py OUT_DIR [--scenarios skip wrong_op wrong_size]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

WORLD = 4
CULPRIT = 3
HEALTHY_STEPS = 3
SCENARIOS = ("skip", "wrong_op", "wrong_size")
NUMEL = 1024  # float32 elements of the tp all-reduce (4 KiB)


def _rank_main(rank: int, args: argparse.Namespace, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=__import__("datetime").timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    x = torch.full((NUMEL,), float(rank + 1))
    for _ in range(HEALTHY_STEPS):
        dist.all_reduce(x, group=tp)
        out = [torch.empty(NUMEL // 4) for _ in range(2)]
        dist.all_gather(out, x[: NUMEL // 4].contiguous(), group=tp)
        dist.all_reduce(x, group=dp)
        x.div_(8.0)
    dist.barrier()

    culprit = rank == CULPRIT
    work = None
    if args.scenario == "skip":
        if not culprit:
            work = dist.all_reduce(x, group=tp, async_op=True)
    elif args.scenario == "wrong_op":
        if culprit:
            out = [torch.empty(NUMEL) for _ in range(2)]
            work = dist.all_gather(out, x, group=tp, async_op=True)
        else:
            work = dist.all_reduce(x, group=tp, async_op=True)
    elif args.scenario == "wrong_size":
        # gloo aborts the rank that receives more bytes than it posted the moment data flows (NCCL would say
        # nothing and hang): the short rank enters first, dumps and stops itself (SIGSTOP: its threads freeze,
        # so it neither aborts nor closes its sockets), and only then its peer enters and dumps
        store = dist.distributed_c10d._get_default_store()
        if culprit:
            time.sleep(0.5)  # let the barrier retire: a dump right after it would still show it pending
            work = dist.all_reduce(x[: NUMEL // 2].contiguous(), group=tp, async_op=True)
            _dump(args, rank)
            store.set(f"dumped{rank}", "1")
            os.kill(os.getpid(), signal.SIGSTOP)  # the parent kills it once the others have dumped
        store.wait([f"dumped{CULPRIT}"])
        work = dist.all_reduce(x, group=tp, async_op=True)
        if rank != CULPRIT - 1:
            work.wait()  # the healthy tp group finishes it
        time.sleep(args.pause / 3)
        _dump(args, rank)
        _leave_together(store, rank)
    if work is not None:
        threading.Thread(target=_wait_quietly, args=(work,), daemon=True).start()
    time.sleep(args.pause)
    _dump(args, rank)
    _leave_together(dist.distributed_c10d._get_default_store(), rank)


def _leave_together(store, rank: int) -> None:
    """Exit only when every rank has dumped: a rank that exits closes its sockets, and gloo then fails (and
    retires) its peers' pending work, which would show in their dumps as finished."""
    store.set(f"dumped{rank}", "1")
    store.wait([f"dumped{r}" for r in range(WORLD)])
    time.sleep(0.5)
    os._exit(0)  # the hung work would block the process group's teardown


def _dump(args: argparse.Namespace, rank: int) -> None:
    import torch._C._distributed_c10d as c10d

    out_dir = Path(args.out) / args.scenario
    for sub in ("pickle", "json"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    (out_dir / "pickle" / f"rank{rank}.pkl").write_bytes(c10d._dump_fr_trace())
    (out_dir / "json" / f"rank{rank}.json").write_bytes(c10d._dump_fr_trace_json())


def _wait_quietly(work) -> None:
    try:
        work.wait()
    except Exception:  # noqa: BLE001 - gloo reports the mismatch or the timeout here; the dump is what we want
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def truth(scenario: str) -> dict:
    """What a correct hang analysis must say: the tp group {2, 3}, its seq after the healthy steps."""
    # per healthy step: one all-reduce and one all-gather on tp; seq ids start at 1 (gloo and NCCL alike)
    seq = 2 * HEALTHY_STEPS + 1
    base = {"scenario": scenario, "world_size": WORLD, "group_ranks": [2, 3], "dimension": "tp", "seq": seq,
            "op": "all_reduce", "culprit": CULPRIT}
    if scenario == "skip":
        return {**base, "waiting": [2], "missing": [CULPRIT], "mismatched": []}
    if scenario == "wrong_op":
        return {**base, "mismatched": [{"rank": CULPRIT, "op": "all_gather"}]}
    return {**base, "mismatched": [{"rank": CULPRIT, "op": "all_reduce", "bytes": NUMEL // 2 * 4}],
            "bytes": NUMEL * 4, "dtype": "Float"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    ap.add_argument("--pause", type=float, default=3.0, help="Seconds between the hang and the dump.")
    ap.add_argument("--buffer", type=int, default=2000, help="TORCH_FR_BUFFER_SIZE (entries per rank).")
    args = ap.parse_args()
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(args.buffer)
    import torch.multiprocessing as mp

    for scenario in args.scenarios:
        args.scenario = scenario
        # join each process ourselves: torch's join kills the others when one dies (wrong_size's rank 3 does)
        ctx = mp.start_processes(_rank_main, args=(args, _free_port()), nprocs=WORLD, join=False,
                                 start_method="spawn")
        for p in ctx.processes[:CULPRIT] + ctx.processes[CULPRIT + 1:]:
            p.join(timeout=120)
        culprit = ctx.processes[CULPRIT]
        if culprit.is_alive():  # wrong_size's culprit stopped itself after dumping
            os.kill(culprit.pid, signal.SIGKILL)
        culprit.join(timeout=30)
        missing = [r for r in range(WORLD) if not (Path(args.out) / scenario / "pickle" / f"rank{r}.pkl").exists()]
        if missing:
            raise SystemExit(f"{scenario}: ranks {missing} wrote no dump")
        gt = Path(args.out) / scenario / "ground_truth.json"
        gt.write_text(json.dumps(truth(scenario), indent=2) + "\n")
        print(f"wrote {gt.parent}")


if __name__ == "__main__":
    main()
