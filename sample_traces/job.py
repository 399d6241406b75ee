"""Synthetic multi-rank PyTorch profiler (Kineto) traces whose answers are known exactly.

Every rank's events are laid out on one TRUE clock (integer nanoseconds); only when a file is written
is the rank's clock offset added to each timestamp. A collective instance ends at the same true time
on every participant, ``E = max(arrivals) + transfer``, so a rank's wait is ``max(a) - a_r`` and the
shortest kernel of the instance lasts exactly ``transfer``. :func:`build` returns the events and that
truth; :func:`write_kineto` writes them in the real Kineto JSON format (PyTorch >= 2.4 style with
float microseconds and ``baseTimeNanoseconds``, or old integer-microsecond style).

This module holds the job model and its builder; ``generate`` is the command line and the writers
(``python -m sample_traces.generate OUT_DIR --ranks 4 --steps 3 --late-rank 2:host:5ms --gzip``) and
re-exports these names, so callers import from there.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from .model import BASE_TIME_NS as BASE_TIME_NS  # re-exported
from .model import T0_FLOAT_NS, T0_INT_NS, Event

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "recv")
LATE_KINDS = ("host", "compute")

COMPUTE_STREAM = 7
NCCL_STREAM_BASE = 16  # pg i gets stream 16 + 4 i; its point-to-point ops use the next even stream
SLOT_NS = 10_000  # host time one kernel launch takes (aten op around the runtime call)
COMM_SLOT_NS = 20_000  # host time one collective call takes (c10d op, record_param_comms, wait)
MARGIN_NS = 10_000
SYNC_TAIL_NS = 5_000  # cudaDeviceSynchronize returns this long after the rank's last GPU op
LAUNCH_LATENCY_NS = 2_000  # a launch's return -> its kernel's start, where the GPU waited for the launch

# op -> ("Collective name" as PyTorch records it, c10d op, NCCL annotation, kernel name stem)
_OP_INFO = {
    "all_reduce": (
        "allreduce",
        "c10d::allreduce_",
        "nccl:all_reduce",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    ),
    "all_gather": (
        "_allgather_base",
        "c10d::_allgather_base_",
        "nccl:_all_gather_base",
        "ncclDevKernel_AllGather_RING_LL",
    ),
    "reduce_scatter": (
        "_reduce_scatter_base",
        "c10d::_reduce_scatter_base_",
        "nccl:_reduce_scatter_base",
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
    ),
    # all_to_all_single is recorded as "all_to_allv" and NCCL runs it as SendRecv kernels (real 2.28 traces).
    "all_to_all": ("all_to_allv", "c10d::alltoall_base_", "nccl:all_to_all", "ncclDevKernel_SendRecv"),
    "broadcast": ("broadcast", "c10d::broadcast_", "nccl:broadcast", "ncclDevKernel_Broadcast_RING_LL"),
    "send": ("send", "c10d::send", "nccl:send", "ncclDevKernel_SendRecv"),
    "recv": ("recv", "c10d::recv_", "nccl:recv", "ncclDevKernel_SendRecv"),
}
_NCCL_SUFFIX = "(ncclDevKernelArgsStorage<4096ul>)"

# (cpu op, kernel name) pairs cycled through for compute kernels; names taken from real H200 traces.
_MTA = "at::native::(anonymous namespace)::"
_COMPUTE = (
    (
        "aten::addmm",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4"
        "_execute_kernel__5x_cublas",
    ),
    (
        "aten::mm",
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>"
        "(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)",
    ),
    (
        "aten::split_with_sizes_copy",
        "at::native::detail::split_with_sizes_copy_out_contiguous_no_cast_kernel"
        "(char**, char**, long*, long*, long*, long, long)",
    ),
    (
        "aten::_foreach_copy_",
        f"void {_MTA}multi_tensor_apply_kernel<{_MTA}TensorListMetadata<2>, {_MTA}UnaryOpFunctor<float, 2,"
        f" 1, 1>, at::native::Copy<float, float> >({_MTA}TensorListMetadata<2>, {_MTA}UnaryOpFunctor<float,"
        " 2, 1, 1>, at::native::Copy<float, float>)",
    ),
)
_PY_NAMES = (
    "torch/nn/modules/module.py(1762): _call_impl",
    "torch/nn/modules/linear.py(125): forward",
    "torch/autograd/graph.py(824): _engine_run_backward",
    "<built-in method apply_ of Tensor object at 0x7f3a2c1b5e40>",
)


# ----------------------------------------------------------------------------------------- scenario


@dataclass(frozen=True)
class ProcessGroup:
    name: str
    ranks: tuple[int, ...]
    desc: str = "undefined"


@dataclass(frozen=True)
class Collective:
    """One collective per step, run in every process group named in ``groups``.

    ``after``: how many of the step's compute kernels finish before it is launched (None: spread evenly).
    Point-to-point (``send``/``recv``): ``peers=(src, dst)`` in the single group; src sends, dst receives.
    ``bytes`` follows nccl-tests: the full buffer (output of all_gather, input of reduce_scatter).
    ``splits`` (all_to_all, expert dispatch): ``splits[i][j]`` rows of ``SPLIT_ROW_ELEMS`` floats that
    group rank i sends to group rank j (recorded as "In split size"/"Out split size"; bytes follow).
    """

    op: str = "all_reduce"
    bytes: int = 16 << 20
    transfer_ns: int = 100_000
    groups: tuple[str, ...] = ("0",)
    after: int | None = None
    peers: tuple[int, int] | None = None
    splits: tuple[tuple[int, ...], ...] | None = None


SPLIT_ROW_ELEMS = 1024  # elements per dim-0 row of an all_to_all(v) split


@dataclass(frozen=True)
class Scenario:
    """What to generate. Empty ``process_groups``/``collectives`` get defaults in ``__post_init__``:
    world pg "0" (plus TP blocks and DP strides named "1", "2", ... when ``tp > 1``, like PyTorch numbers
    them) and DP all-reduces (plus a TP all-reduce when ``tp > 1``)."""

    ranks: int = 4
    steps: int = 3
    first_step: int = 1
    step_gap_ns: int = 200_000  # slowest rank's last GPU op -> next step's host work
    compute_ns: tuple[int, ...] = (300_000, 250_000, 200_000, 150_000)  # compute kernels of every step
    # steps that differ by design (variable sequence lengths, packing): step i's compute kernels each take
    # step_compute_ns[i % len] ns instead of compute_ns; empty: compute_ns in every step
    step_compute_ns: tuple[int, ...] = ()
    collectives: tuple[Collective, ...] = ()
    process_groups: tuple[ProcessGroup, ...] = ()
    tp: int = 1
    overlap: float = 0.5  # compute kernel of overlap * transfer runs beside each comm kernel
    late_ranks: dict[int, tuple[int, str]] = field(default_factory=dict)  # rank -> (delay_ns, host|compute)
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)  # added to every timestamp a rank writes
    missing_meta_first: int = 0  # first K comm kernels of each rank: launch fell before the window
    # older PyTorch: record_param_comms without "Collective name", on another thread than the launch
    legacy_comms: bool = False
    ts_style: str = "float"  # "float": 3-decimal us + baseTimeNanoseconds; "int": integer us
    distributed_info: bool = True
    gpu_step_annotations: bool = True  # GPU-side ProfilerStep#N (gpu_user_annotation)
    memcpy_ns: int = 20_000  # HtoD input copy at the start of each step (0: none)
    memset_ns: int = 2_000
    wait_events: bool = True  # record_param_comms "wait" after each collective, as real traces have
    python_noise: int = 0  # python_function events per step per rank (real files are mostly noise)
    gpus_per_host: int = 8
    jitter_ns: int = 8_000  # per-phase compute jitter, distinct across ranks where the range allows
    seed: int = 0
    # structured background lateness (ring position, not slowness): in collective j of every step, rank
    # position_late_ranks[j % len] arrives position_late_ns late (its kernels before it run that much longer)
    position_late_ranks: tuple[int, ...] = ()
    position_late_ns: int = 0

    def __post_init__(self) -> None:
        # Fill the defaults that depend on other fields; frozen, hence object.__setattr__.
        if not self.process_groups:
            object.__setattr__(self, "process_groups", default_groups(self.ranks, self.tp))
        if not self.collectives:
            object.__setattr__(self, "collectives", default_collectives(self.ranks, self.tp))
        _validate(self)

    @property
    def quantum_ns(self) -> int:
        """Time resolution the file format keeps: 1 us for integer-microsecond files."""
        return 1000 if self.ts_style == "int" else 1

    @property
    def lead_ns(self) -> int:
        """How far ahead of its GPU work a rank's host starts a step (room for every launch)."""
        n = 3 + len(self.compute_ns) + len(self.collectives)
        return MARGIN_NS + SLOT_NS * n + COMM_SLOT_NS * len(self.collectives)

    def delay(self, rank: int, kind: str) -> int:
        d, k = self.late_ranks.get(rank, (0, ""))
        return d if k == kind else 0


def default_groups(ranks: int, tp: int = 1) -> tuple[ProcessGroup, ...]:
    """World group "0"; with ``tp > 1`` also TP blocks, then DP strides (as real: 1={0,1} 2={2,3} 3={0,2})."""
    pgs = [ProcessGroup("0", tuple(range(ranks)), "default_pg")]
    if tp > 1:
        for b in range(ranks // tp):
            pgs.append(ProcessGroup(str(len(pgs)), tuple(range(b * tp, (b + 1) * tp))))
        for i in range(tp):
            pgs.append(ProcessGroup(str(len(pgs)), tuple(range(i, ranks, tp))))
    return tuple(pgs)


def default_collectives(ranks: int, tp: int = 1) -> tuple[Collective, ...]:
    if tp <= 1:
        return (Collective("all_reduce", 32 << 20, 150_000), Collective("all_reduce", 16 << 20, 100_000))
    pgs = default_groups(ranks, tp)
    n_tp = ranks // tp
    tp_names = tuple(pg.name for pg in pgs[1 : 1 + n_tp])
    dp_names = tuple(pg.name for pg in pgs[1 + n_tp :])
    return (
        Collective("all_reduce", 4 << 20, 60_000, tp_names),
        Collective("all_reduce", 32 << 20, 150_000, dp_names),
    )


def host_offsets(ranks: int, gpus_per_host: int, per_host_ns: int) -> dict[int, int]:
    """Clock offsets where host h runs ``h * per_host_ns`` ahead (ranks on one host share a clock)."""
    return {r: (r // gpus_per_host) * per_host_ns for r in range(ranks)}


def _validate(sc: Scenario) -> None:
    q = sc.quantum_ns
    if sc.ts_style not in ("float", "int"):
        raise ValueError(f"ts_style must be 'float' or 'int', not {sc.ts_style!r}")
    if sc.ranks < 1 or sc.steps < 1 or not sc.compute_ns:
        raise ValueError("need at least one rank, one step and one compute kernel")
    if sc.tp > 1 and sc.ranks % sc.tp:
        raise ValueError(f"ranks ({sc.ranks}) must be a multiple of tp ({sc.tp})")
    if not 0.0 <= sc.overlap <= 1.0:
        raise ValueError("overlap must be within [0, 1]")
    if sc.step_gap_ns < 2 * SYNC_TAIL_NS:
        raise ValueError(f"step_gap_ns must be >= {2 * SYNC_TAIL_NS}")
    times = [sc.step_gap_ns, sc.memcpy_ns, sc.memset_ns, sc.jitter_ns, *sc.compute_ns, *sc.step_compute_ns]
    times += [c.transfer_ns for c in sc.collectives] + [d for d, _ in sc.late_ranks.values()]
    times += list(sc.clock_offsets_ns.values())
    if any(t % q for t in times):
        raise ValueError("with ts_style='int' every duration, delay and offset must be a multiple of 1 us")
    if min(times[: len(times) - len(sc.clock_offsets_ns)]) < 0:
        raise ValueError("durations and delays must be non-negative")
    for r, (_, kind) in sc.late_ranks.items():
        if kind not in LATE_KINDS or not 0 <= r < sc.ranks:
            raise ValueError(f"late rank {r}: kind must be one of {LATE_KINDS} and the rank must exist")
    pgs = {pg.name: pg for pg in sc.process_groups}
    prev = 0
    for c in sc.collectives:
        if c.op not in OPS:
            raise ValueError(f"unknown op {c.op!r}; one of {OPS}")
        if c.transfer_ns <= 0:
            raise ValueError("transfer_ns must be positive")
        if c.after is not None and not prev <= c.after <= len(sc.compute_ns):
            raise ValueError("Collective.after must be non-decreasing and at most len(compute_ns)")
        prev = c.after if c.after is not None else prev
        seen: set[int] = set()
        for g in c.groups:
            if g not in pgs:
                raise ValueError(f"collective names unknown process group {g!r}")
            if seen & set(pgs[g].ranks):
                raise ValueError("a collective's groups must not share ranks")
            seen |= set(pgs[g].ranks)
        if c.splits is not None:
            sizes = {len(pgs[g].ranks) for g in c.groups}
            if c.op != "all_to_all" or len(sizes) != 1 or any(len(r) != len(c.splits) for r in c.splits) \
                    or len(c.splits) != sizes.pop() or min(min(r) for r in c.splits) < 0:
                raise ValueError("splits: an all_to_all's n x n non-negative matrix, n its group's size")
        if c.op in ("send", "recv"):
            ok = c.peers is not None and len(c.groups) == 1 and c.peers[0] != c.peers[1]
            if not ok or not set(c.peers or ()) <= set(pgs[c.groups[0]].ranks):
                raise ValueError("send/recv needs peers=(src, dst), two distinct ranks of its single group")


# ----------------------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class InstanceTruth:
    """One collective instance. Times are on the true clock (add a rank's offset for its file)."""

    index: int
    step: int
    pg: str
    op: str  # for point-to-point: "send" (the pair; src sends, dst receives)
    bytes: int
    ranks: tuple[int, ...]  # participants
    transfer_ns: int
    start_ns: dict[int, int]  # arrival = kernel start per rank
    end_ns: int  # the same on every participant
    wait_ns: dict[int, int]  # d_r - transfer = max(start) - start_r
    last_rank: int | None  # unique latest arriver; None when several arrive together
    seq: dict[int, int]  # ordinal of this kernel among the rank's kernels in this pg
    has_meta: dict[int, bool]


@dataclass(frozen=True)
class RankTruth:
    rank: int
    clock_offset_ns: int
    wait_ns: int  # sum over instances of d_r - transfer
    caused_wait_ns: int  # sum, over instances it arrived last, of the others' wait
    last_arrivals: int  # instances where it was the unique last arriver
    instances: int  # instances it took part in
    steps: int
    missing_meta: int  # comm kernels without record_param_comms


@dataclass(frozen=True)
class Truth:
    ranks: dict[int, RankTruth]
    instances: tuple[InstanceTruth, ...]

    def offsets_us(self, ref: int = 0) -> dict[int, float]:
        """Expected ``clock.offsets_us``: each rank's clock minus the reference rank's, in us."""
        base = self.ranks[ref].clock_offset_ns
        return {r: (t.clock_offset_ns - base) / 1000 for r, t in self.ranks.items()}

    def to_dict(self) -> dict:
        return {
            "ranks": [asdict(t) for t in self.ranks.values()],
            "instances": [asdict(i) for i in self.instances],
        }


@dataclass(frozen=True)
class Workload:
    scenario: Scenario
    events: dict[int, list[Event]]  # per rank, true clock
    truth: Truth


# ----------------------------------------------------------------------------------------- builder


@dataclass
class _Launch:
    kind: str  # kernel | memcpy | memset | comm
    gpu: Event
    op: str = ""  # CPU op name (compute) or canonical op (comm)
    meta: dict | None = None  # record_param_comms args (comm with metadata)
    ext: int = 0


class _Rank:
    """Per-rank state while the timeline is built."""

    def __init__(self, sc: Scenario, rank: int) -> None:
        self.sc, self.rank = sc, rank
        self.device = rank % sc.gpus_per_host
        self.pid = 1000 + 37 * rank
        self.main_tid, self.comm_tid = self.pid, self.pid + 136  # main thread, autograd thread (DDP hooks)
        self.events: list[Event] = []
        self.corr, self.ext, self.py_id = 3000, 1, 1
        self.cursor = 0  # next free time on the compute stream
        self.cpu_start = 0
        self.launches: list[_Launch] = []  # this step's launches in GPU order
        self.step_gpu: list[Event] = []
        self.comm_kernels = 0
        self.seq: dict[str, int] = {}

    def next_ids(self, n_ext: int = 1) -> tuple[int, int]:
        self.corr += 2
        self.ext += n_ext
        return self.corr, self.ext - n_ext

    def cpu(self, cat: str, name: str, tid: int, ts: int, dur: int, args: dict) -> None:
        self.events.append(Event("X", cat, name, self.pid, tid, ts, dur, args))

    def flow(self, ph: str, pid: int | str, tid: int | str, ts: int, corr: int) -> None:
        self.events.append(Event(ph, "ac2g", "ac2g", pid, tid, ts, id=corr))

    def gpu(self, cat: str, name: str, start: int, dur: int, stream: int, args: dict) -> Event:
        ev = Event("X", cat, name, self.device, stream, start, dur, args)
        self.events.append(ev)
        self.step_gpu.append(ev)
        return ev

    def plain(self, cat: str, name: str, dur: int, op: str, nbytes: int) -> None:
        """A memcpy/memset on the compute stream at the cursor."""
        corr, ext = self.next_ids()
        args = {"External id": ext, **_stream_args(self.device, COMPUTE_STREAM, corr), "bytes": nbytes}
        args["memory bandwidth (GB/s)"] = round(nbytes / dur, 3)
        ev = self.gpu(cat, name, self.cursor, dur, COMPUTE_STREAM, args)
        self.launches.append(_Launch(cat.removeprefix("gpu_"), ev, op, ext=ext))
        self.cursor += dur

    def kernel(self, i: int, dur: int, start: int | None = None) -> Event:
        """Compute kernel ``i`` of the step (names cycle); at the cursor unless ``start`` is given."""
        op, name = _COMPUTE[i % len(_COMPUTE)]
        corr, ext = self.next_ids()
        args = _kernel_args(ext, self.device, COMPUTE_STREAM, corr, comm=False)
        ev = self.gpu("kernel", name, self.cursor if start is None else start, dur, COMPUTE_STREAM, args)
        self.launches.append(_Launch("kernel", ev, op, ext=ext))
        return ev


def _stream_args(device: int, stream: int, corr: int) -> dict:
    return {"device": device, "context": 1, "stream": stream, "correlation": corr}


def _kernel_args(ext: int | None, device: int, stream: int, corr: int, comm: bool) -> dict:
    """CUPTI kernel args as Kineto writes them (launch shape of a small GEMM, or of NCCL's 2-block ring)."""
    args: dict = {} if ext is None else {"External id": ext}
    args.update(
        {
            "queued": 0,
            **_stream_args(device, stream, corr),
            "registers per thread": 96 if comm else 128,
            "shared memory": 103808 if comm else 13056,
            "blocks per SM": 0.015152 if comm else 1.939394,
            "warps per SM": 0.136364 if comm else 7.757576,
            "grid": [2, 1, 1] if comm else [16, 16, 1],
            "block": [288, 1, 1] if comm else [128, 1, 1],
            "est. achieved occupancy %": 0 if comm else 12,
        }
    )
    return args


def _ranks_str(ranks: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, ranks)) + "]"


def _comm_meta(c: Collective, op: str, pg: ProcessGroup, rank: int, peer: int | None) -> dict:
    """record_param_comms args exactly as PyTorch writes them (send/recv put the PEER in "Rank")."""
    n = len(pg.ranks)
    nel = c.bytes // 4
    in_n, out_n = nel, nel
    if op == "all_gather":
        in_n = nel // n
    elif op == "reduce_scatter":
        out_n = nel // n
    ins_split: list[int] = []
    outs_split: list[int] = []
    if c.splits is not None and op == "all_to_all":
        gi = pg.ranks.index(rank)
        ins_split, outs_split = list(c.splits[gi]), [row[gi] for row in c.splits]
        in_n, out_n = sum(ins_split) * SPLIT_ROW_ELEMS, sum(outs_split) * SPLIT_ROW_ELEMS
    stride = pg.ranks[1] - pg.ranks[0] if n > 1 else 1
    meta: dict = {
        "Collective name": _OP_INFO[op][0],
        "Process Group Description": pg.desc,
        "dtype": "Float",
        "Rank": rank if peer is None else pg.ranks.index(peer),  # p2p: the peer's rank in the group
        "Input Strides": [[[1]], [], [], [], [], [], [], [], [], []],
        "Concrete Inputs": ["", "", "", str(rank), "", "[]", "[]", "0", "1", str(n)],
        "Out msg nelems": out_n,
        "Process Group Name": pg.name,
        "Input type": _INPUT_TYPES,
        "Global rank stride": stride,
        "Out split size": _ranks_str(tuple(outs_split)),
        "In split size": _ranks_str(tuple(ins_split)),
        "Process Group Ranks": _ranks_str(pg.ranks),
        "Group size": n,
        "Input Dims": [[[in_n]], [], [], [], [], [], [], [], [], []],
        "Global rank start": pg.ranks[0],
        "In msg nelems": in_n,
    }
    if op == "send":
        meta["Dst Rank"] = peer
    elif op == "recv":
        meta["Src Rank"] = peer
    return meta


# Kineto copies these record_param_comms args onto the NCCL kernel itself.
_KERNEL_META_KEYS = (
    "Collective name|In msg nelems|Out msg nelems|Group size|dtype|In split size|"
    "Out split size|Process Group Name|Process Group Description|Process Group Ranks".split("|")
)
_INPUT_TYPES = ["TensorList", "", "", "Scalar", "", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"]


def _auto_after(sc: Scenario) -> list[int]:
    """Kernels before each collective; unspecified ones spread so at least one kernel runs after the last."""
    n, m = len(sc.compute_ns), len(sc.collectives)
    out, prev = [], 0
    for j, c in enumerate(sc.collectives):
        a = c.after if c.after is not None else max(prev, min(n, round((j + 1) * (n - 1) / m)))
        out.append(a)
        prev = a
    return out


def _jitter(sc: Scenario, rng: random.Random) -> list[int]:
    """Per-rank jitter for one phase; distinct values (so a unique last arriver) where the range allows."""
    q = sc.quantum_ns
    top = sc.jitter_ns // q
    if top == 0:
        return [0] * sc.ranks
    if top + 1 >= sc.ranks:
        return [v * q for v in rng.sample(range(top + 1), sc.ranks)]
    return [rng.randint(0, top) * q for _ in range(sc.ranks)]


def build(sc: Scenario) -> Workload:
    """Lay out every rank's events on the true clock and compute the exact answers."""
    rng = random.Random(sc.seed)
    pgs = {pg.name: pg for pg in sc.process_groups}
    pg_stream = {pg.name: NCCL_STREAM_BASE + 4 * i for i, pg in enumerate(sc.process_groups)}
    ranks = [_Rank(sc, r) for r in range(sc.ranks)]
    afters = _auto_after(sc)
    instances: list[InstanceTruth] = []
    t_step = T0_INT_NS if sc.ts_style == "int" else T0_FLOAT_NS
    for si in range(sc.steps):
        step = sc.first_step + si
        for rk in ranks:
            rk.cursor = t_step + sc.delay(rk.rank, "host")  # host straggler: GPU idles until its launches
            rk.cpu_start = rk.cursor - sc.lead_ns
            rk.launches, rk.step_gpu = [], []
            if sc.memcpy_ns:
                rk.plain("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", sc.memcpy_ns, "aten::copy_", 4 << 20)
            if sc.memset_ns:
                rk.plain("gpu_memset", "Memset (Device)", sc.memset_ns, "aten::zero_", 4096)
        delayed = {rk.rank: False for rk in ranks}
        compute = sc.compute_ns if not sc.step_compute_ns else \
            (sc.step_compute_ns[si % len(sc.step_compute_ns)],) * len(sc.compute_ns)
        k = 0
        for j, col in enumerate(sc.collectives):
            jit = _jitter(sc, rng)
            groups = [pgs[g] for g in col.groups]
            members = {r: pg for pg in groups for r in pg.ranks}
            if col.peers is not None:
                members = {r: groups[0] for r in col.peers}
            for rk in ranks:
                extra = 0
                if rk.rank in members and not delayed[rk.rank]:
                    extra = sc.delay(rk.rank, "compute")  # compute straggler: slower kernels, no idle gap
                    delayed[rk.rank] = True
                if sc.position_late_ranks and rk.rank == sc.position_late_ranks[j % len(sc.position_late_ranks)]:
                    extra += sc.position_late_ns
                _run_phase(rk, sc, k, afters[j], jit[rk.rank], extra, compute)
            k = afters[j]
            pieces = [tuple(col.peers)] if col.peers is not None else [pg.ranks for pg in groups]
            for part in pieces:
                pg = members[part[0]]
                instances.append(_run_instance(sc, ranks, col, pg, part, pg_stream[pg.name], step, len(instances)))
        jit = _jitter(sc, rng)
        for rk in ranks:
            _run_phase(rk, sc, k, len(sc.compute_ns), jit[rk.rank], 0, compute)
            _emit_cpu_step(rk, sc, step)
        t_step = max(rk.cursor for rk in ranks) + sc.step_gap_ns + sc.lead_ns
    for rk in ranks:
        _finish(rk, sc, t_step)
    return Workload(sc, {rk.rank: rk.events for rk in ranks}, _truth(sc, ranks, instances))


def _run_phase(rk: _Rank, sc: Scenario, k0: int, k1: int, jitter: int, extra: int,
               compute: tuple[int, ...] | None = None) -> None:
    """Compute kernels k0..k1 back to back (durations: ``compute``, the step's, by default ``sc.compute_ns``);
    ``extra`` (a compute straggler's delay) is spread over them."""
    durs = list((compute or sc.compute_ns)[k0:k1])
    if extra and not durs:
        durs = [0]
    if durs:
        q = sc.quantum_ns
        share = (extra // q // len(durs)) * q
        durs = [d + share for d in durs]
        durs[-1] += extra - share * len(durs) + jitter
    for i, d in enumerate(durs):
        ev = rk.kernel(k0 + i, d)
        rk.cursor = ev.ts + d


def _run_instance(
    sc: Scenario,
    ranks: list[_Rank],
    col: Collective,
    pg: ProcessGroup,
    part: tuple[int, ...],
    stream: int,
    step: int,
    index: int,
) -> InstanceTruth:
    """All participants' kernels end together at max(arrival) + transfer; compute overlaps the start."""
    q = sc.quantum_ns
    if col.peers is not None:
        stream += 2
    arrive = {r: ranks[r].cursor for r in part}
    latest = max(arrive.values())
    end = latest + col.transfer_ns
    overlap = round(sc.overlap * col.transfer_ns / q) * q
    last = [r for r in part if arrive[r] == latest]
    seqs, metas = {}, {}
    for r in part:
        rk, op, peer = ranks[r], col.op, None
        if col.peers is not None:
            op = "send" if r == col.peers[0] else "recv"
            peer = col.peers[1] if op == "send" else col.peers[0]
        seqs[r] = rk.seq.get(pg.name, 0)
        rk.seq[pg.name] = seqs[r] + 1
        metas[r] = rk.comm_kernels >= sc.missing_meta_first
        rk.comm_kernels += 1
        corr, ext = rk.next_ids(4)  # c10d op, record_param_comms (the kernel's External id), annotation, wait
        meta = _comm_meta(col, op, pg, r, peer) if metas[r] else None
        if meta and sc.legacy_comms:
            for key in ("Collective name", "Dst Rank", "Src Rank"):
                meta.pop(key, None)
        args = _kernel_args(ext + 1 if meta else None, rk.device, stream, corr, comm=True)
        args.update({key: meta[key] for key in _KERNEL_META_KEYS if key in meta} if meta else {})
        ev = rk.gpu("kernel", _OP_INFO[op][3] + _NCCL_SUFFIX, arrive[r], end - arrive[r], stream, args)
        rk.launches.append(_Launch("comm", ev, op, meta, ext))
        if meta:  # the nccl:* range shows on the GPU lane too; it is an annotation, not GPU activity
            annotation = Event("X", "gpu_user_annotation", _OP_INFO[op][2], rk.device, stream, ev.ts, ev.dur)
            annotation.args = {"External id": ext + 2}
            rk.events.append(annotation)
        if overlap:
            rk.kernel(1, overlap, start=arrive[r])
        rk.cursor = max(arrive[r] + overlap, end)  # the next compute needs the collective's result
    return InstanceTruth(
        index=index, step=step, pg=pg.name, op=col.op if col.peers is None else "send", bytes=col.bytes,
        ranks=tuple(part), transfer_ns=col.transfer_ns, start_ns=arrive, end_ns=end,
        wait_ns={r: latest - arrive[r] for r in part}, last_rank=last[0] if len(last) == 1 else None,
        seq=seqs, has_meta=metas,
    )  # fmt: skip


_LAUNCH_API = {"kernel": ("cudaLaunchKernel", 211), "memcpy": ("cudaMemcpyAsync", 41), "memset": ("cudaMemsetAsync", 51)}


def _emit_comm_call(rk: _Rank, sc: Scenario, ln: _Launch, t: int) -> None:
    """c10d op > record_param_comms > nccl:* annotation > cuLaunchKernelEx, then a ``wait`` record."""
    assert ln.meta is not None
    tid, ext, op, corr = rk.comm_tid, ln.ext, ln.op, ln.gpu.args["correlation"]
    rk.cpu("cpu_op", _OP_INFO[op][1], tid, t, 16_000, {"External id": ext, "Record function id": 0})
    rpc = {"External id": ext + 1, "Record function id": 0, **ln.meta}
    rk.cpu("cpu_op", "record_param_comms", rk.main_tid if sc.legacy_comms else tid, t + 1_000, 14_000, rpc)
    rk.cpu("user_annotation", _OP_INFO[op][2], tid, t + 2_000, 10_000, {"External id": ext + 2, "Record function id": 0})
    rk.cpu(
        "cuda_driver", "cuLaunchKernelEx", tid, t + 5_000, 4_000, {"External id": ext + 1, "cbid": 652, "correlation": corr}
    )
    rk.flow("s", rk.pid, tid, t + 5_000, corr)
    if sc.wait_events:  # real traces record work.wait() as record_param_comms too, with no kernel inside
        wait = {"External id": ext + 3, "Record function id": 0, "Collective name": "wait",
                "Process Group Description": ln.meta["Process Group Description"], "dtype": "Byte",
                "Rank": rk.rank, "Out msg nelems": 0, "Process Group Name": ln.meta["Process Group Name"],
                "Process Group Ranks": "[]", "Group size": 1, "In msg nelems": 0, "In split size": "[]",
                "Out split size": "[]"}  # fmt: skip
        rk.cpu("cpu_op", "record_param_comms", tid, t + 17_000, 2_000, wait)


def _emit_cpu_step(rk: _Rank, sc: Scenario, step: int) -> None:
    """Host side of one step: launches in GPU order, noise, then a sync. The host starts the step as late as it
    can with every launch returning before its GPU work starts, so the step's first GPU operation starts
    ``LAUNCH_LATENCY_NS`` after its launch returns (the GPU waited for its host, as in a real step) and the rest
    were launched ahead of their GPU work."""
    t, latest = MARGIN_NS // 2, None
    for ln in rk.launches:  # each launch's return, from the step's host start
        if ln.kind == "comm" and ln.meta is None:
            continue
        ret = t + (9_000 if ln.kind == "comm" else 7_000)
        room = ln.gpu.ts - LAUNCH_LATENCY_NS - ret
        latest = room if latest is None else min(latest, room)
        t += COMM_SLOT_NS if ln.kind == "comm" else SLOT_NS
    if latest is not None:
        rk.cpu_start = latest
    t = rk.cpu_start + MARGIN_NS // 2
    for ln in rk.launches:
        corr = ln.gpu.args["correlation"]
        if ln.kind == "comm":
            if ln.meta is None:
                continue  # launched before the profiling window: no host events and no flow at all
            _emit_comm_call(rk, sc, ln, t)
            t += COMM_SLOT_NS
        else:
            api, cbid = _LAUNCH_API[ln.kind]
            rk.cpu("cpu_op", ln.op, rk.main_tid, t, 8_000, {"External id": ln.ext, "Record function id": 0})
            rk.cpu(
                "cuda_runtime",
                api,
                rk.main_tid,
                t + 3_000,
                4_000,
                {"External id": ln.ext, "cbid": cbid, "correlation": corr},
            )
            rk.flow("s", rk.pid, rk.main_tid, t + 3_000, corr)
            t += SLOT_NS
        rk.flow("f", ln.gpu.pid, ln.gpu.tid, ln.gpu.ts, corr)
    assert rk.step_gpu, "a step has GPU work"
    gpu_first = min(e.ts for e in rk.step_gpu)
    gpu_end = max(e.ts + e.dur for e in rk.step_gpu)
    sync_from = _noise(rk, sc, t, gpu_end) if sc.python_noise else t
    corr, _ = rk.next_ids(0)
    sync = {"cbid": 165, "correlation": corr}
    rk.cpu("cuda_runtime", "cudaDeviceSynchronize", rk.main_tid, sync_from, gpu_end + SYNC_TAIL_NS - sync_from, sync)
    _, ext = rk.next_ids()
    # The CPU step lasts until the next one starts: its duration is filled in by _finish.
    rk.cpu("user_annotation", f"ProfilerStep#{step}", rk.main_tid, rk.cpu_start, -1,
           {"External id": ext, "Record function id": 0})  # fmt: skip
    if sc.gpu_step_annotations:  # Kineto's GPU-side step: first to last GPU op launched in it
        name = f"ProfilerStep#{step}"
        ev = Event("X", "gpu_user_annotation", name, rk.device, COMPUTE_STREAM, gpu_first, gpu_end - gpu_first)
        ev.args = {"External id": ext}
        rk.events.append(ev)


def _noise(rk: _Rank, sc: Scenario, t0: int, t1: int) -> int:
    """python_function events spread over [t0, t1) on the main thread; returns where they stop."""
    q = sc.quantum_ns
    n = min(sc.python_noise, (t1 - t0) // (2 * q))
    if n <= 0:
        return t0
    spacing = ((t1 - t0) // n // q) * q
    for i in range(n):
        args = {"Python parent id": rk.py_id - 1, "Python id": rk.py_id, "Python thread": 0}
        dur = max(q, (spacing // 2 // q) * q)
        rk.cpu("python_function", _PY_NAMES[i % len(_PY_NAMES)], rk.main_tid, t0 + i * spacing, dur, args)
        rk.py_id += 1
    return t0 + n * spacing


def _finish(rk: _Rank, sc: Scenario, t_after: int) -> None:
    """Close each CPU ProfilerStep at the next one's start (the last at where a next one would start)."""
    steps = [e for e in rk.events if e.cat == "user_annotation" and e.name.startswith("ProfilerStep#")]
    ends = [e.ts for e in steps[1:]] + [t_after + sc.delay(rk.rank, "host") - sc.lead_ns]
    for e, end in zip(steps, ends, strict=True):
        e.dur = end - e.ts


def _truth(sc: Scenario, ranks: list[_Rank], instances: list[InstanceTruth]) -> Truth:
    out = {}
    for rk in ranks:
        r = rk.rank
        mine = [i for i in instances if r in i.ranks]
        lasts = [i for i in mine if i.last_rank == r]
        out[r] = RankTruth(
            rank=r,
            clock_offset_ns=sc.clock_offsets_ns.get(r, 0),
            wait_ns=sum(i.wait_ns[r] for i in mine),
            caused_wait_ns=sum(sum(i.wait_ns.values()) for i in lasts),
            last_arrivals=len(lasts),
            instances=len(mine),
            steps=sc.steps,
            missing_meta=sum(not i.has_meta[r] for i in mine),
        )
    return Truth(out, tuple(instances))
