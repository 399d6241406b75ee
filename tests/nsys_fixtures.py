"""Hand-built Nsight Systems exports with known answers (reusable by end-to-end tests).

Every builder writes a SQLite file and returns what a correct reader must find in it. Times are ns.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # sample_traces is not an installed package
    sys.path.insert(0, str(_ROOT))

from sample_traces.nsys_writer import NCCL_DOMAIN, NsysExport  # noqa: E402

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
COMM_HASH = 0xABC123


@dataclass(frozen=True)
class Call:
    op: str
    start_ns: int
    end_ns: int
    in_bytes: int | None = None
    out_bytes: int | None = None
    pg: str | None = None
    group_size: int | None = None


@dataclass(frozen=True)
class RankExpect:
    """What one rank of a fixture must contain."""

    pid: int
    device: int
    comm_union_ns: int
    compute_union_ns: int
    overlapped_ns: int
    kinds: dict[str, int]  # GPU rows per kind
    calls: tuple[Call, ...] = ()
    steps: tuple[tuple[int, int, int], ...] = ()  # (step, start_ns, end_ns)
    runtime_rows: int = 0
    annotation_rows: int = 0

    @property
    def exposed_ns(self) -> int:
        return self.comm_union_ns - self.overlapped_ns


@dataclass(frozen=True)
class Fixture:
    path: Path
    ranks: tuple[RankExpect, ...]  # in rank order
    variant: str = "current"
    extra: dict = field(default_factory=dict)


def _rank_a(db: NsysExport, payload: bool) -> RankExpect:
    """pid 300 on device 0: comm [51,201]+[251,401] us, compute [1,101]+[151,301] us."""
    pid, tid, dev = 300, 300, 0
    p = (lambda **kw: kw) if payload else (lambda **kw: None)
    db.process(pid)
    db.gpu(dev, "NVIDIA H100 80GB HBM3")
    db.kernel(pid, 1_000, 101_000, FILL, dev, stream=7, correlation=11)
    db.kernel(pid, 151_000, 301_000, GEMM, dev, stream=7, correlation=12)
    db.kernel(pid, 51_000, 201_000, ALLREDUCE, dev, stream=20, correlation=13)
    db.kernel(pid, 251_000, 401_000, SENDRECV, dev, stream=20, correlation=14)
    db.memcpy(pid, 401_000, 411_000, "HtoD", "Pageable", "Device", dev, stream=7, nbytes=4096, correlation=15)
    db.memset(pid, 411_000, 412_000, "Device", dev, stream=7, nbytes=64, correlation=16)
    db.sync(pid, 412_000, 413_000, "Stream Sync", dev, stream=7, correlation=17)
    db.runtime(pid, tid, 500, 900, "cudaLaunchKernel_v7000", 11)
    db.runtime(pid, tid, 1_000, 1_400, "cudaLaunchKernel_v7000", 12)
    db.runtime(pid, tid, 40_000, 45_000, "cuLaunchKernelEx", 13)
    db.runtime(pid, tid, 240_000, 245_000, "cuLaunchKernelEx", 14)
    db.runtime(pid, tid, 300_000, 300_500, "cudaMemcpyAsync_v3020", 15)
    db.runtime(pid, tid, 300_600, 300_900, "cudaMemsetAsync_v3020", 16)
    db.runtime(pid, tid, 301_000, 412_500, "cudaStreamSynchronize_v3020", 17)
    comm = {"NCCL communicator ID": COMM_HASH}
    n = NCCL_DOMAIN
    db.nvtx(pid, tid, 10, 20, "ncclCommInitRank", n,
            p(**comm, **{"No. of ranks": 2, "Rank": 0, "CUDA device": dev}))
    db.nvtx(pid, tid, 38_000, 38_500, "ncclCommCount", n)
    db.nvtx(pid, tid, 39_000, 46_000, "ncclAllReduce", n, p(**comm, **{"Message size [bytes]": 4096}))
    db.nvtx(pid, tid, 230_000, 231_000, "ncclGroupStart", n)
    db.nvtx(pid, tid, 232_000, 233_000, "ncclSend", n, p(**comm, **{"Message size [bytes]": 1024, "Peer rank": 1}))
    db.nvtx(pid, tid, 234_000, 235_000, "ncclRecv", n, p(**comm, **{"Message size [bytes]": 2048, "Peer rank": 1}))
    db.nvtx(pid, tid, 236_000, 246_000, "ncclGroupEnd", n)
    db.nvtx(pid, tid, 0, 250_000, "ProfilerStep#7")
    db.nvtx(pid, tid, 250_000, 500_000, "ProfilerStep#8")
    db.nvtx(pid, tid, 1_000, 100_000, "forward")
    pg, size = (f"{COMM_HASH:#x}", 2) if payload else (None, None)
    b1, b2 = (4096, 3072) if payload else (None, None)
    return RankExpect(
        pid=pid, device=dev, comm_union_ns=300_000, compute_union_ns=250_000, overlapped_ns=150_000,
        kinds={"compute": 2, "comm": 2, "memcpy": 1, "memset": 1, "sync": 1},
        calls=(Call("all_reduce", 39_000, 46_000, b1, b1, pg, size),
               Call("send_recv", 230_000, 246_000, b2, b2, pg, size)),
        # annotations: the NCCL ranges and step markers only ("forward" is read by no table)
        steps=((7, 0, 250_000), (8, 250_000, 500_000)), runtime_rows=7, annotation_rows=9,
    )


def _rank_b(db: NsysExport, payload: bool) -> RankExpect:
    """pid 200 on device 1 (lower pid, higher device: still rank 1). Comm [100,320] us, mostly exposed."""
    pid, tid, dev = 200, 201, 1
    p = (lambda **kw: kw) if payload else (lambda **kw: None)
    db.process(pid)
    db.gpu(dev, "NVIDIA H100 80GB HBM3")
    db.kernel(pid, 0, 50_000, GEMM, dev, stream=7, correlation=11)  # correlation ids repeat across processes
    db.kernel(pid, 100_000, 300_000, ALLREDUCE, dev, stream=20, correlation=12)
    db.kernel(pid, 280_000, 320_000, SENDRECV, dev, stream=21, correlation=13)
    db.kernel(pid, 310_000, 330_000, FILL, dev, stream=7, correlation=14)
    db.runtime(pid, tid, 100, 400, "cudaLaunchKernel_v7000", 11)
    db.runtime(pid, tid, 90_000, 95_000, "cuLaunchKernelEx", 12)
    db.runtime(pid, tid, 270_000, 275_000, "cuLaunchKernelEx", 13)
    db.runtime(pid, tid, 276_000, 276_400, "cudaLaunchKernel_v7000", 14)
    comm = {"NCCL communicator ID": COMM_HASH}
    n = NCCL_DOMAIN
    db.nvtx(pid, tid, 89_000, 96_000, "ncclAllReduce", n, p(**comm, **{"Message size [bytes]": 4096}))
    db.nvtx(pid, tid, 260_000, 261_000, "ncclGroupStart", n)
    db.nvtx(pid, tid, 262_000, 263_000, "ncclRecv", n, p(**comm, **{"Message size [bytes]": 2048, "Peer rank": 0}))
    db.nvtx(pid, tid, 264_000, 265_000, "ncclSend", n, p(**comm, **{"Message size [bytes]": 1024, "Peer rank": 0}))
    db.nvtx(pid, tid, 266_000, 276_000, "ncclGroupEnd", n)
    db.nvtx(pid, tid, 0, 400_000, "ProfilerStep#7")
    # No init row in this process: the size comes from rank A's ncclCommInitRank (same communicator).
    b1, b2 = (4096, 3072) if payload else (None, None)
    pg, size = (f"{COMM_HASH:#x}", 2) if payload else (None, None)
    return RankExpect(
        pid=pid, device=dev, comm_union_ns=220_000, compute_union_ns=70_000, overlapped_ns=10_000,
        kinds={"compute": 2, "comm": 2},
        calls=(Call("all_reduce", 89_000, 96_000, b1, b1, pg, size),
               Call("send_recv", 260_000, 276_000, b2, b2, pg, size)),
        steps=((7, 0, 400_000),), runtime_rows=4, annotation_rows=6,
    )


def _idle_process(db: NsysExport) -> None:
    """A launcher process with CPU activity and no GPU work: must not become a rank."""
    db.process(100, "torchrun")
    db.runtime(100, 100, 5, 10, "cudaGetDeviceCount_v3020", 1)
    db.nvtx(100, 100, 0, 1_000_000, "ProfilerStep#1")


def two_process_report(path: Path, variant: str = "current", payload: bool = True) -> Fixture:
    """One report, three processes: two with GPU work (ranks 0 and 1) and an idle launcher."""
    db = NsysExport(variant)
    db.session_start(1_779_782_330_176_752_435)
    db.meta("EXPORT_PRODUCT_VERSION", "2026.2.1.210")
    db.meta("EXPORT_SCHEMA_VERSION", "3.25.0")
    db.system_env("Hostname", "node-a")
    if variant == "2023.4":
        db.nvtx_domain(300, 300, NCCL_DOMAIN, "NCCL")
    _idle_process(db)
    b = _rank_b(db, payload)  # written first: rank order must come from devices, not row order
    a = _rank_a(db, payload)
    return Fixture(db.write(path), (a, b), variant)


def single_rank_report(path: Path, variant: str = "current") -> Fixture:
    """One process (``nsys profile`` per rank). In the reduced variant: no globalPid, no NVTX."""
    db = NsysExport(variant)
    if variant != "reduced":
        db.session_start(1_700_000_000_000_000_000)
    db.meta("EXPORT_PRODUCT_VERSION", "2023.4.1.97")
    a = _rank_a(db, payload=True)
    if variant == "reduced":
        a = RankExpect(pid=a.pid, device=a.device, comm_union_ns=a.comm_union_ns,
                       compute_union_ns=a.compute_union_ns, overlapped_ns=a.overlapped_ns,
                       kinds={k: v for k, v in a.kinds.items() if k != "sync"}, runtime_rows=a.runtime_rows)
    return Fixture(db.write(path), (a,), variant)


def reduced_two_process(path: Path) -> Fixture:
    """Reduced export (no globalPid) with two processes: owners come from launch correlation ids."""
    db = NsysExport("reduced")
    for pid, dev, corr0 in ((10, 0, 100), (20, 1, 200)):
        for i in range(3):
            start = 1_000 * (i + 1) + dev * 100
            db.kernel(pid, start, start + 500, GEMM if i else ALLREDUCE, dev, correlation=corr0 + i)
            db.runtime(pid, pid, start - 900, start - 800, "cudaLaunchKernel_v7000", corr0 + i)
    # A correlation id both processes used: the owner comes from its device instead.
    db.kernel(20, 9_000, 9_500, GEMM, 1, correlation=7)
    db.runtime(10, 10, 8_000, 8_100, "cudaLaunchKernel_v7000", 7)
    db.runtime(20, 20, 8_000, 8_100, "cudaLaunchKernel_v7000", 7)
    return Fixture(db.write(path), (), "reduced", {"kernels": {10: 3, 20: 4}})


def no_gpu_report(path: Path) -> Path:
    """A valid Nsight export of a process that never touched the GPU."""
    db = NsysExport("current")
    db.session_start(1_700_000_000_000_000_000)
    db.process(5)
    db.runtime(5, 5, 0, 10, "cudaGetDeviceCount_v3020", 1)
    db.nvtx(5, 5, 0, 100, "main")
    return db.write(path)


def plain_sqlite(path: Path) -> Path:
    """A SQLite database that is not an Nsight export."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO users (name) VALUES (?)", [("a",), ("b",)])
    conn.commit()
    conn.close()
    return path


# ----------------------------------------------------------------------------- Kineto inputs


def kineto_trace(rank: int, world: int = 2, t0_us: str = "1700000000123.457") -> dict:
    """A small Kineto trace: two steps, one compute kernel, one all-reduce with record_param_comms.

    Timestamps carry ns precision on a large base so float parsing would round them.
    """
    from decimal import Decimal

    base = Decimal(t0_us) + rank * Decimal("0.5")
    pid, tid = 4000 + rank, 4000 + rank

    def us(offset: str) -> float:
        return float(base + Decimal(offset))

    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": pid, "tid": tid,
         "ts": us("0"), "dur": 500.125},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": pid, "tid": tid,
         "ts": us("500.125"), "dur": 400.001},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
         "ts": us("10.001"), "dur": 5.002, "args": {"correlation": 21, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": GEMM, "pid": rank, "tid": 7, "ts": us("20.003"), "dur": 200.111,
         "args": {"device": rank, "stream": 7, "correlation": 21}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid, "ts": us("30.000"),
         "dur": 20.5, "args": {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
                               "dtype": "Float", "Group size": world, "Process Group Name": "0"}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "pid": pid, "tid": tid,
         "ts": us("35.250"), "dur": 4.75, "args": {"correlation": 22}},
        {"ph": "X", "cat": "kernel", "name": ALLREDUCE, "pid": rank, "tid": 20, "ts": us("120.777"),
         "dur": 300.333, "args": {"device": rank, "stream": 20, "correlation": 22}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": rank, "tid": 7,
         "ts": us("600.5"), "dur": 10.25, "args": {"device": rank, "stream": 7, "correlation": 23, "bytes": 8}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": rank, "tid": 7, "ts": us("611"),
         "dur": 1.5, "args": {"device": rank, "stream": 7, "correlation": 24, "bytes": 64}},
        {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": pid, "tid": tid,
         "ts": us("0"), "dur": 900},
    ]
    return {
        "schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "deviceProperties": [{"id": rank, "name": "NVIDIA H100 80GB HBM3"}],
        "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": ev,
    }


def write_kineto(path: Path, trace: dict, gz: bool = False) -> Path:
    text = json.dumps(trace).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path
