"""The communication catalogue, one family at a time: a trace with the family's real kernel (and host op) names,
as its library's source spells them (comm_catalogue.toml says where each was read), gives the right op, engine
and overlap; the same names in Nsight's demangler spelling give the same family.

Each trace: per rank a compute kernel on stream 7 over [100, 200) us and the family's work on stream 20 over
[150, 250) us, so by definition comm = 100 us, overlapped = 50 us, exposed = 50 us.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analyzer.comm_catalogue import catalogue, describe, launcher_literals, launcher_of
from analyzer.report.json import to_dict
from analyzer.rules import P2P_OPS
from tests.comm_traces import COMPUTE_STREAM, Call, Gpu, write
from tests.helpers import run

US = 1_000
COMM_STREAM = 20

# (family, host op or None, GPU name as Kineto writes it, activity, op, engine, role)
CASES = [
    ("deepep", None, "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*, int*, "
     "int*, int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, "
     "int, int, int, int, int, void**, int**, int, int, int)", "kernel", "all_to_all", "sm", "payload"),
    ("deepep", None, "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, "
     "int, bool const*, int*, int*, int, int, void**, int**, int)", "kernel", "all_to_all", "sm", "metadata"),
    ("deepep", None, "void deep_ep::internode_ll::combine<false, 8, 7168>(void*, void*, int*, void const*, long "
     "const*, float const*, int const*, int const*, long const*, int*, int*, int*, long*, int, int, int, int, int, "
     "int, int, int, int, bool, int*, bool)", "kernel", "all_to_all", "rdma", "payload"),
    ("deepep", None, "void deep_ep::legacy::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, "
     "bool*, int, int, int, int)", "kernel", "all_to_all", "sm", "metadata"),
    ("deepep", None, "void deep_ep::elastic::dispatch_impl<false, 8, 7168>(void*, int*)", "kernel", "all_to_all", "sm",
     "payload"),
    # DeepSeek's own build (deepseek-ai/profile-data train.json, an EP64 training rank) names them dpsk::ep::
    ("deepep", None, "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool "
     "const*, int4 const*, float const*, int const*, int const*, int const*)", "kernel", "all_to_all", "rdma",
     "payload"),
    ("deepep", None, "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, int const*, "
     "int const*, int*)", "kernel", "all_to_all", "rdma", "metadata"),
    ("hybrid_ep", None, "void hybrid_ep::dispatch_kernel<unsigned short, 7168>(hybrid_ep::dispatch_kernel_param_t"
     "<unsigned short>)", "kernel", "all_to_all", "sm", "payload"),
    ("hybrid_ep", None, "void hybrid_ep::device_sync_kernel<64>(unsigned int*, unsigned int const*)", "kernel",
     "all_to_all", "sm", "sync"),
    ("nccl_ep", None, "void nccl_ep::internode_ll::dispatch<true, 8, 7168>(void const*, float const*)", "kernel",
     "all_to_all", "rdma", "payload"),
    ("nccl_ep", None, "nccl_ep_jit_ht_combine_kernel", "kernel", "all_to_all", "sm", "payload"),
    ("te_ep", "transformer_engine_ep::dispatch", "ep_copy_tokens_kernel(int4 const*, int4*, int)", "kernel",
     "all_to_all", "sm", "payload"),
    ("megatron_a2a", "FusedDispatch", "ep_copy_tokens_kernel(int4 const*, int4*, int)", "kernel", "all_to_all", "sm",
     "payload"),
    ("megatron_a2a", "autograd::engine::evaluate_function: HybridEPCombineBackward", "ep_copy_tokens_kernel(int4 "
     "const*, int4*, int)", "kernel", "all_to_all", "sm", "payload"),
    ("pplx", "pplx_kernels::all_to_all_intranode_dispatch", "void (anonymous namespace)::dispatchKernel<10u, true, "
     "true>(int*, unsigned long, std::byte*, unsigned long)", "kernel", "all_to_all", "sm", "payload"),
    ("trtllm_moe_a2a", None, "void tensorrt_llm::kernels::moe_comm::moeA2ADispatchKernel<8, false, false>(int const*, "
     "tensorrt_llm::kernels::moe_comm::DispatchKernelPointers, int, int)", "kernel", "all_to_all", "sm", "payload"),
    ("mori", None, "void mori::moe::EpDispatchIntraNodeKernel<__hip_bfloat16, false>(mori::moe::EpDispatchCombineArgs"
     "<__hip_bfloat16>)", "kernel", "all_to_all", "sm", "payload"),
    ("symm_mem", "symm_mem::multimem_all_reduce_", "void (anonymous namespace)::multimem_all_reduce_kernel<c10::"
     "BFloat16, 16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)", "kernel",
     "all_reduce", "sm", "payload"),
    # the launcher's op wins where the kernel is shared: reduce_scatter_out runs the two-shot all-reduce kernel
    ("symm_mem", "symm_mem::reduce_scatter_out", "void (anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16,"
     " 16, 8, true, true>(c10::BFloat16**, c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned "
     "long, unsigned long, unsigned long)", "kernel", "reduce_scatter", "sm", "payload"),
    ("userbuffers", None, "void userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, int, int, int, void**, int, "
     "unsigned long)", "kernel", "reduce_scatter", "sm", "payload"),
    ("userbuffers", None, "kuserbuffers_pushsend(int*, int*, int4*, int4*, int)", "kernel", "send", "sm", "payload"),
    ("vllm_custom_ar", "_C_custom_ar::all_reduce", "void vllm::cross_device_reduce_1stage<c10::BFloat16, 8>(vllm::"
     "RankData*, vllm::RankSignals, vllm::Signal volatile*, c10::BFloat16*, int, int)", "kernel", "all_reduce", "sm",
     "payload"),
    ("sglang_custom_ar", None, "void sglang::cross_device_reduce_2stage<__nv_bfloat16, 8>(sglang::RankData*, "
     "sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)", "kernel", "all_reduce", "sm", "payload"),
    ("aiter_custom_ar", None, "void aiter::cross_device_reduce_1stage<__hip_bfloat16, 8>(aiter::RankData*, "
     "aiter::RankSignals, aiter::Signal*, __hip_bfloat16*, int, int)", "kernel", "all_reduce", "sm", "payload"),
    ("custom_allreduce", None, "void cross_device_reduce_1stage<half, 8>(RankData*, RankSignals, Signal*, half*, int, "
     "int)", "kernel", "all_reduce", "sm", "payload"),
    ("quickreduce", "_C_custom_ar::qr_all_reduce", "void quickreduce::allreduce_prototype_twoshot<quickreduce::"
     "AllReduceTwoshot<__half, quickreduce::CodecQ4<__half, 4>, true>, __half>(__half const*, __half*, unsigned int, "
     "unsigned int, int, unsigned char**, unsigned int, unsigned int*, long)", "kernel", "all_reduce", "sm", "payload"),
    ("trtllm_allreduce", None, "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<(tensor"
     "rt_llm::kernels::ar_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, true, true>(tensorrt_llm::kernels::"
     "ar_fusion::AllReduceFusionParams)", "kernel", "all_reduce", "sm", "payload"),
    ("trtllm_allreduce", None, "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(tensorrt_llm::"
     "kernels::AllReduceParams)", "kernel", "all_reduce", "sm", "payload"),
    ("vllm_collective", "vllm::all_reduce", "ep_copy_tokens_kernel(int4 const*, int4*, int)", "kernel", "all_reduce",
     "sm", "payload"),
    ("sglang_collective", "sglang::outplace_all_reduce", "ep_copy_tokens_kernel(int4 const*, int4*, int)", "kernel",
     "all_reduce", "sm", "payload"),
    ("nvshmem", None, "void broadcast32_on_stream_kernel(void*, void const*, unsigned long, int, int, int, int, "
     "unsigned long*)", "kernel", "broadcast", "sm", "payload"),
    ("nvshmem", None, "void barrier_on_stream_kernel_threadgroup<(threadgroup_t)3>(int, int, int, long*, long*)",
     "kernel", "barrier", "sm", "sync"),
    ("mscclpp", None, "void mscclpp::algorithm::allreduceFullmesh<(mscclpp::ReduceOp)0, __nv_bfloat16>(__nv_bfloat16*"
     ", __nv_bfloat16*, __nv_bfloat16*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*)", "kernel", "all_reduce", "sm",
     "payload"),
    ("nccl_symmetric", None, "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16(ncclSymkDevWorkArgs4K)", "kernel",
     "all_reduce", "sm", "payload"),
    ("nccl", None, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "all_gather", "sm",
     "payload"),
    ("copy_engine", None, "Memcpy PtoP (Device -> Device)", "gpu_memcpy", "copy", "copy_engine", "payload"),
]


def _trace(tmp: Path, host_op: str | None, name: str, activity: str) -> list[Path]:
    ranks = {}
    for r in (0, 1):
        comm = Gpu(name, COMM_STREAM, 150 * US, 100 * US, cat=activity,
                   nbytes=64 << 20 if activity == "gpu_memcpy" else None)
        ranks[r] = [Gpu("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)",
                        COMPUTE_STREAM, 100 * US, 100 * US), Call(host_op, [comm]) if host_op else comm]
    return write(tmp, ranks)


@pytest.mark.parametrize(("family", "host_op", "name", "activity", "op", "engine", "role"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_family_gives_its_op_engine_and_overlap(tmp_path: Path, family: str, host_op: str | None, name: str,
                                                   activity: str, op: str, engine: str, role: str) -> None:
    a = run(_trace(tmp_path, host_op, name, activity))
    rows = a.traces.collectives
    assert rows.height == 2, rows
    assert set(rows["family"]) == {family} and set(rows["op"]) == {op} and set(rows["engine"]) == {engine}
    assert set(rows["role"]) == {role}
    ranks = a.ranks.sort("rank")
    # by construction: 100 us of communication, its first half beside the compute kernel
    assert ranks["comm_ns"].to_list() == [100 * US] * 2
    assert ranks["overlapped_comm_ns"].to_list() == [50 * US] * 2
    assert ranks["exposed_comm_ns"].to_list() == [50 * US] * 2
    assert ranks["compute_ns"].to_list() == [100 * US] * 2
    split = a.communication.sort("rank")
    assert split.select("family", "engine").unique().rows() == [(family, engine)]
    assert split["comm_ns"].to_list() == [100 * US] * 2 and split["exposed_comm_ns"].to_list() == [50 * US] * 2
    inst = a.kernels
    if engine == "copy_engine":  # one-sided: never matched by order alone
        assert inst["instance"].null_count() == inst.height
        assert split["bytes"].to_list() == [64 << 20] * 2
    elif op not in P2P_OPS:  # matched across the two ranks by op and order on the family's stream (a send
        # needs its recv, which these traces do not have)
        assert inst["instance"].n_unique() == 1 and inst["instance"].null_count() == 0


# Nsight's demangler: `<unnamed>` for the anonymous namespace, `(int)8` template arguments, `T *` pointers
NSIGHT = [
    ("deepep", "void deep_ep::intranode::dispatch<(int)8, (int)768, (int)6144>(int4 *, float *, int *, long *)"),
    ("symm_mem", "void <unnamed>::multimem_all_reduce_kernel<c10::BFloat16, (int)16>(c10::BFloat16 *, unsigned long, "
     "unsigned int **, unsigned long, unsigned long)"),
    ("symm_mem", "void <unnamed>::one_shot_all_reduce_kernel<float, (int)16, (int)8>(T1 **, T1 *, T1 *, unsigned long)"),
    ("vllm_custom_ar", "void vllm::cross_device_reduce_2stage<c10::BFloat16, (int)8>(vllm::RankData *, "
     "vllm::RankSignals, vllm::Signal *, T1 *, int, int)"),
    ("nccl", "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"),
    ("hybrid_ep", "void hybrid_ep::combine_kernel<(int)64>(hybrid_ep::combine_kernel_param_t)"),
]


@pytest.mark.parametrize(("family", "name"), NSIGHT)
def test_nsight_spellings_name_the_same_family(family: str, name: str) -> None:
    assert describe(pl.Series([name]))["family"].to_list() == [family]


def test_compute_kernels_that_merely_mention_words_stay_compute() -> None:
    names = ["void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*, long*>>(long*)",
             "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128>>(flash::Flash_fwd_params)",
             "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)",
             "Memcpy DtoD (Device -> Device)"]
    got = pl.concat([describe(pl.Series(names[:3])), describe(pl.Series(names[3:]), "memcpy")])
    assert got["family"].null_count() == len(names)


def test_every_launcher_is_found_by_one_of_the_scan_literals() -> None:
    lits = launcher_literals()
    for la in catalogue().launchers:
        text = la.name or la.prefix
        assert any(x.decode() in text for x in lits), text
        assert launcher_of(text + ("x" if la.prefix else "")) is not None


def test_each_family_names_its_source() -> None:
    for f in catalogue().families:
        assert f.source and f.library and (f.kernels or f.launchers), f.id


def test_a_fused_matmul_keeps_its_gemm_as_compute_and_its_peer_copies_as_communication(tmp_path: Path) -> None:
    # async tensor parallel: symm_mem::fused_all_gather_matmul runs the GEMM on SMs and pulls the other ranks'
    # shards with copy-engine peer copies beside it
    gemm = Gpu("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
               "_kernel__5x_cublas", COMPUTE_STREAM, 100 * US, 300 * US)
    copies = [Gpu("Memcpy PtoP (Device -> Device)", 30 + i, (120 + 90 * i) * US, 80 * US, cat="gpu_memcpy",
                  nbytes=16 << 20) for i in range(3)]
    a = run(write(tmp_path, {0: [Call("symm_mem::fused_all_gather_matmul", [gemm, *copies])]}))
    assert a.traces.collectives["op"].to_list() == ["all_gather"] * 3  # the launcher's op: its name spells it
    d = to_dict(a)
    rank = d["ranks"][0]
    assert rank["compute_ms"] == pytest.approx(0.3) and rank["comm_ms"] == pytest.approx(0.24)
    # the copies over [120,200) [210,290) [300,380) us: 240 us, all of it beside the GEMM over [100,400)
    assert rank["overlapped_comm_ms"] == pytest.approx(0.24) and rank["exposed_comm_ms"] == pytest.approx(0.0)
    (row,) = d["communication"]
    assert (row["family"], row["engine"], row["kernels"], row["bytes"]) == ("copy_engine", "copy_engine", 3, 48 << 20)
    assert row["gbps"] == pytest.approx((48 << 20) / 240_000)
