"""Communication that is not NCCL, end to end: expert all-to-all on a side stream against interval unions worked
out independently (a bitmap per microsecond), with and without ``--comm-kernel``; a peer copy hidden by compute;
vLLM's symmetric-memory all-reduces in a real B200 trace; user rules from flags and the config file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from analyzer.comm_catalogue import user_rules
from analyzer.errors import UsageError
from tests.comm_traces import COMPUTE_STREAM, Gpu, flat, union_us, write
from tests.conftest import shared
from tests.helpers import cli, report, run

US = 1_000
# a DeepEP-style step: notify + dispatch on the comm stream beside the attention GEMMs, combine beside the experts'
DEEPEP = {"notify": "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int)",
          "dispatch": "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*)",
          "combine": "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*, int*)"}
# the same shape from a library the catalogue does not know
UNKNOWN = {"notify": "void my_ep::notify_kernel<8>(int const*, int*)",
           "dispatch": "void my_ep::dispatch_kernel<8, 768>(int4*, float*)",
           "combine": "void my_ep::combine_kernel<8, 768>(int4*, float*)"}


def _moe_ranks(names: dict[str, str], ranks: int = 4, steps: int = 3, seed: int = 7) -> dict[int, list]:
    rnd = random.Random(seed)
    out = {}
    for r in range(ranks):
        items: list = []
        t = 100 * US
        for _ in range(steps):
            # compute stream: attention GEMM, expert GEMM, a gap (idle), back to back in its own stream
            attn = rnd.randrange(80, 160) * US
            expert = rnd.randrange(120, 240) * US
            items.append(Gpu("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", COMPUTE_STREAM, t,
                             attn))
            items.append(Gpu("void at::native::vectorized_elementwise_kernel<4, at::native::SiLUFunctor>(int)",
                             COMPUTE_STREAM, t + attn + 5 * US, expert))
            # comm stream: notify + dispatch starting during attention, combine overlapping the experts' tail
            n0 = t + rnd.randrange(10, 40) * US
            d0 = n0 + rnd.randrange(10, 20) * US
            dd = rnd.randrange(60, 200) * US
            c0 = max(d0 + dd + 2 * US, t + attn + rnd.randrange(50, 150) * US)
            cd = rnd.randrange(60, 200) * US
            items += [Gpu(names["notify"], 24, n0, 8 * US), Gpu(names["dispatch"], 24, d0, dd),
                      Gpu(names["combine"], 24, c0, cd)]
            t = max(t + attn + 5 * US + expert, c0 + cd) + rnd.randrange(20, 60) * US
        out[r] = items
    return out


def _truth(items: list, is_comm) -> dict[str, float]:
    """comm, exposed comm and compute of one rank (ms), from a per-microsecond bitmap of its kernels."""
    gpu = flat(items)
    lo, hi = min(g.start for g in gpu), max(g.start + g.dur for g in gpu)
    comm = union_us([(g.start, g.start + g.dur) for g in gpu if is_comm(g.name)], lo, hi)
    compute = union_us([(g.start, g.start + g.dur) for g in gpu if not is_comm(g.name)], lo, hi)
    return {"comm_ms": comm.sum() / 1e3, "exposed_comm_ms": (comm & ~compute).sum() / 1e3,
            "compute_ms": compute.sum() / 1e3, "overlapped_comm_ms": (comm & compute).sum() / 1e3}


def _check(d: dict, ranks: dict[int, list], is_comm) -> None:
    for row in d["ranks"]:
        want = _truth(ranks[row["rank"]], is_comm)
        for k, v in want.items():
            assert row[k] == pytest.approx(v, abs=1e-9), (row["rank"], k)


def test_deepep_kernels_are_expert_all_to_all_without_any_flag(tmp_path: Path) -> None:
    ranks = _moe_ranks(DEEPEP)
    d = report(write(tmp_path, ranks))
    _check(d, ranks, lambda n: "deep_ep::" in n)
    assert {(r["family"], r["engine"]) for r in d["communication"]} == {("deepep", "sm")}
    assert not [w for w in d["warnings"] if "--comm-kernel" in w]
    # the notify kernels are metadata, dispatch and combine payload; every all-to-all is matched across the 4 ranks
    coll = run(write(tmp_path / "again", ranks)).traces.collectives
    assert sorted(coll.group_by("role").len().rows()) == [("metadata", 12), ("payload", 24)]


def test_an_unknown_ep_library_warns_without_the_flag_and_matches_the_truth_with_it(tmp_path: Path) -> None:
    ranks = _moe_ranks(UNKNOWN)
    paths = write(tmp_path, ranks)
    plain = report(paths)
    _check(plain, ranks, lambda n: False)  # nothing recognized: every kernel is compute
    (said,) = [w for w in plain["warnings"] if "no communication recognized in a 4-rank job" in w]
    assert "my_ep::combine_kernel" in said and "my_ep::dispatch_kernel" in said and "--comm-kernel" in said
    flagged = report(paths, comm_rules=user_rules(("my_ep::(?:notify|dispatch|combine)_kernel=all_to_all",)))
    _check(flagged, ranks, lambda n: "my_ep::" in n)
    assert not [w for w in flagged["warnings"] if "no communication recognized" in w]
    assert {(r["family"], r["engine"]) for r in flagged["communication"]} == {("user", "sm")}
    # matched as collectives: 3 steps x 3 kernels, each an instance over the 4 ranks, the i-th kernel on every rank;
    # each rank's wait is its kernels' excess over the shortest of their instance (DESIGN: wait = d_r - min d)
    assert flagged["matching"]["instances"] == 9 and flagged["matching"]["unmatched_kernels"] == 0
    durs = {r: [g.dur for g in flat(items) if "my_ep::" in g.name] for r, items in ranks.items()}
    shortest = [min(d[i] for d in durs.values()) for i in range(9)]
    for row in flagged["ranks"]:
        want = sum(d - m for d, m in zip(durs[row["rank"]], shortest)) / 1e6
        assert row["wait_ms"] == pytest.approx(want, abs=1e-9), row["rank"]


def test_side_stream_kernels_named_like_communication_are_said(tmp_path: Path) -> None:
    # NCCL is recognized, but a custom all-to-all beside the experts is not: the report says so, once
    ranks = _moe_ranks(UNKNOWN, ranks=2)
    for items in ranks.values():
        items.append(Gpu("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 40,
                         max(g.start + g.dur for g in flat(items)) + 10 * US, 50 * US))
    d = report(write(tmp_path, ranks))
    (said,) = [w for w in d["warnings"] if "side streams beside compute" in w]
    assert "my_ep::dispatch_kernel" in said and "my_ep::combine_kernel" in said


def test_a_peer_copy_on_its_own_stream_is_communication_hidden_by_compute(tmp_path: Path) -> None:
    gemm = Gpu("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", COMPUTE_STREAM, 100 * US, 500 * US)
    copy = Gpu("Memcpy PtoP (Device -> Device)", 33, 200 * US, 250 * US, cat="gpu_memcpy", nbytes=1 << 30)
    d = report(write(tmp_path, {0: [gemm, copy]}))
    rank = d["ranks"][0]
    assert (rank["comm_ms"], rank["overlapped_comm_ms"], rank["exposed_comm_ms"]) == (0.25, 0.25, 0.0)
    assert rank["memcpy_ms"] == 0.0  # counted as communication, not as a plain copy
    (row,) = d["communication"]
    assert (row["family"], row["engine"], row["kernels"]) == ("copy_engine", "copy_engine", 1)
    assert (row["bytes"], row["gbps"]) == (1 << 30, pytest.approx((1 << 30) / 250_000))


def test_a_user_rule_can_say_a_recognized_kernel_is_compute(tmp_path: Path) -> None:
    ranks = _moe_ranks(DEEPEP, ranks=2)
    d = report(write(tmp_path, ranks), comm_rules=user_rules(("deep_ep::intranode::notify_dispatch=compute",)))
    _check(d, ranks, lambda n: "deep_ep::" in n and "notify" not in n)


@pytest.mark.parametrize("bad", ["x(?=y)=all_reduce", r"(a)\1=all_reduce", "x=allreduce", "=all_reduce", "x"])
def test_bad_rules_are_refused(bad: str) -> None:
    with pytest.raises(UsageError):
        user_rules((bad,))


def test_the_config_file_and_the_flag_reach_every_loading_command(tmp_path: Path) -> None:
    ranks = _moe_ranks(UNKNOWN, ranks=2)
    traces = tmp_path / "run"
    write(traces, ranks)
    cfg = tmp_path / "commscope.toml"
    cfg.write_text('[[comm_kernel]]\npattern = "my_ep::(?:notify|dispatch|combine)_kernel"\nop = "all_to_all"\n')
    out = tmp_path / "a.json"
    r = cli("analyze", traces, "--no-cache", "--format", "json", "-o", out, "--comm-config", cfg)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    _check(d, ranks, lambda n: "my_ep::" in n)
    r = cli("compare", traces, traces, "--no-cache", "--format", "json", "--comm-config", cfg)
    assert r.returncode == 0, r.stderr
    r = cli("export", traces, "--no-cache", "-o", tmp_path / "t.json", "--comm-kernel", "my_ep::=all_to_all")
    assert r.returncode == 0, r.stderr
    names = {e.get("name") for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]
             if e.get("cat") == "comm"}
    assert any("my_ep::dispatch_kernel" in str(n) for n in names)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[comm_kernel]]\npattern = "a(?<=b)"\nop = "all_to_all"\n')
    r = cli("analyze", traces, "--no-cache", "--comm-config", bad)
    assert r.returncode == 2 and "backtracking engine" in r.stderr and "Traceback" not in r.stderr


def test_vllm_symmetric_memory_all_reduces_are_kept_and_attributed() -> None:
    # AMD-AGI/TraceLens tests/traces/b200: 1 rank of 8, vLLM eager, 73 symm_mem::multimem_all_reduce_ (each inside
    # vllm::all_reduce) and one NCCL all-gather (record_param_comms): all 74 stay communication, now named
    a = run(shared("tracelens", "b200_eager_trace.json.gz"))
    coll = a.traces.collectives
    assert sorted(coll.group_by("family", "op", "engine").len().rows()) == [
        ("nccl", "all_gather", "sm", 1), ("symm_mem", "all_reduce", "sm", 73)]
    # the 146 staging copies around them stay copies: the all-reduce is the kernel
    assert a.traces.gpu.filter(a.traces.gpu["kind"] == "memcpy").height == 161
    assert not [w for w in a.warnings if "no collective metadata" in w]
