"""Op types of an op table (the What-if artifact's ``metatypes.OpType``, Megatron-LM's timers) -> GPU kind,
collective operation, process group and stream.

Groups follow the artifact's dependency model (``analyzer/dependency_model.py``): data-parallel collectives
(``params-all-gather``, ``grads-reduce-scatter``, ``separate-grads-all-reduce``) synchronize the dp ranks of a
stage; ``embedding-grads-all-reduce`` the first and last stage of a dp rank; ``optimizer-clip-main-grad`` every
stage and every dp rank (the artifact pairs it across stages and marks it for dp synchronization: the whole
job); ``layernorm-grads-all-reduce`` runs on the tensor/sequence-parallel group, whose other members are not
recorded (the artifact treats it as a local op). A send/recv pairs with the adjacent stage of the same dp rank:
forward-send to the next stage, forward-recv from the previous, backward the other way.

Streams mirror the artifact's chains: forward and backward compute (and the optimizer) in order on one stream,
each of the four p2p op types on a stream of its own (the artifact chains each separately; a batched
send+recv is two operations), the params all-gathers and grads reduce-scatters on one stream, the other
collectives (the step's closing chain: layernorm, embedding, separate grads all-reduce, clip) on another.
What waits for what across streams is :mod:`.optable_deps`.
The collective operation names are canonicalized by ``comm_catalogue.op_from_collective_name`` (the one rule).
"""

from __future__ import annotations

import polars as pl

from ...comm_catalogue import op_from_collective_name

STREAM_COMPUTE = 0
STREAM_FWD_SEND, STREAM_FWD_RECV, STREAM_BWD_SEND, STREAM_BWD_RECV = 1, 2, 3, 4
STREAM_DP = 5
STREAM_MP = 6

# optype -> (kind, collective name as PyTorch records it, group kind, stream, peer stage delta)
OPTYPES: dict[str, tuple[str, str | None, str | None, int, int | None]] = {
    "forward-compute": ("compute", None, None, STREAM_COMPUTE, None),
    "backward-compute": ("compute", None, None, STREAM_COMPUTE, None),
    "optimizer": ("compute", None, None, STREAM_COMPUTE, None),
    "gc": ("other", None, None, STREAM_COMPUTE, None),  # a host-side marker (Python GC), zero length
    "params-all-gather": ("comm", "allgather", "dp", STREAM_DP, None),
    "grads-reduce-scatter": ("comm", "reduce_scatter", "dp", STREAM_DP, None),
    "separate-grads-all-reduce": ("comm", "allreduce", "dp", STREAM_MP, None),
    "layernorm-grads-all-reduce": ("comm", "allreduce", "mp", STREAM_MP, None),
    "embedding-grads-all-reduce": ("comm", "allreduce", "emb", STREAM_MP, None),
    "optimizer-clip-main-grad": ("comm", "allreduce", "world", STREAM_MP, None),
    "forward-send": ("comm", "send", "pp", STREAM_FWD_SEND, 1),
    "forward-recv": ("comm", "recv", "pp", STREAM_FWD_RECV, -1),
    "backward-send": ("comm", "send", "pp", STREAM_BWD_SEND, -1),
    "backward-recv": ("comm", "recv", "pp", STREAM_BWD_RECV, 1),
}
UNKNOWN_KIND = "other"  # an op type not listed: kept as work on the compute stream, counted in a warning


def op_rules() -> pl.DataFrame:
    """The table above as a frame to join on ``optype``."""
    rows = [(k, kind, op_from_collective_name(name), group, stream, delta)
            for k, (kind, name, group, stream, delta) in OPTYPES.items()]
    return pl.DataFrame(rows, schema={"optype": pl.Utf8, "kind": pl.Utf8, "op": pl.Utf8, "group": pl.Utf8,
                                      "stream": pl.Int64, "peer_delta": pl.Int32}, orient="row")
