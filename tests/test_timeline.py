"""Interval algebra against a per-nanosecond brute force, and the one comm-kernel rule."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.comm_catalogue import gpu_kind, is_comm_kernel, op_from_kernel_name
from analyzer.metrics.coverage import Coverage
from analyzer.timeline import union

intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=40)


def _mask(iv: list[tuple[int, int]], size: int = 300) -> np.ndarray:
    m = np.zeros(size, dtype=bool)
    for s, d in iv:
        m[s : s + d] = True
    return m


@settings(max_examples=200, deadline=None)
@given(intervals, intervals, st.integers(0, 260), st.integers(0, 60))
def test_coverage_matches_bitmap(a: list, b: list, w0: int, wlen: int) -> None:
    ca = Coverage.of(np.array([s for s, _ in a], dtype=np.int64), np.array([s + d for s, d in a], dtype=np.int64))
    cb = Coverage.of(np.array([s for s, _ in b], dtype=np.int64), np.array([s + d for s, d in b], dtype=np.int64))
    ma, mb = _mask(a), _mask(b)
    assert ca.total == ma.sum()
    w = slice(w0, w0 + wlen)
    assert int(ca.within(np.array([w0]), np.array([w0 + wlen]))[0]) == ma[w].sum()
    both = ca | cb
    assert both.total == (ma | mb).sum()
    # |A ∩ B| = |A| + |B| − |A ∪ B|, the identity the overlap metric relies on
    assert ca.total + cb.total - both.total == (ma & mb).sum()


@settings(max_examples=100, deadline=None)
@given(intervals)
def test_union_is_disjoint_and_same_length(a: list) -> None:
    df = pl.DataFrame({"rank": [0] * len(a), "start_ns": [s for s, _ in a], "end_ns": [s + d for s, d in a]},
                      schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})
    u = union(df, ["rank"])
    assert int((u["end_ns"] - u["start_ns"]).sum() or 0) == _mask(a).sum()
    starts, ends = u["start_ns"].to_list(), u["end_ns"].to_list()
    assert all(e < s2 for e, s2 in zip(ends, starts[1:]))


def test_comm_rule_covers_vendors_and_not_compute() -> None:
    comm = ["ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "ncclDevKernel_Generic(ncclDevKernelArgs)",
            "ncclDevKernel_AllGather_RING_LL(x)", "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16>",
            "rcclGenericKernel", "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float>",
            "void vllm::cross_device_reduce_1stage<half>", "mscclKernel_AllReduce"]
    compute = ["sm80_xmma_gemm_f32f32_f32f32_f32_tn_n", "void at::native::reduce_kernel<128, 4>",
               "void at::native::vectorized_elementwise_kernel<4, AllReduceLike>"]
    assert all(is_comm_kernel(n) for n in comm)
    assert not any(is_comm_kernel(n) for n in compute)
    df = pl.DataFrame({"cat": ["kernel", "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"],
                       "name": [comm[0], compute[0], "Memcpy HtoD", "Memset", "sync"]})
    kinds = df.select(gpu_kind(pl.col("cat"), pl.col("name")).alias("k"))["k"].to_list()
    assert kinds == ["comm", "compute", "memcpy", "memset", "sync"]


def test_op_from_kernel_name() -> None:
    names = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
             "ncclKernel_AllGather_RING_LL_Sum_int8_t", "ncclDevKernel_SendRecv", "ncclKernel_Broadcast_RING_LL",
             "ncclDevKernel_Generic"]
    ops = pl.DataFrame({"n": names}).select(op_from_kernel_name(pl.col("n")).alias("op"))["op"].to_list()
    assert ops == ["all_reduce", "reduce_scatter", "all_gather", "send_recv", "broadcast", None]
