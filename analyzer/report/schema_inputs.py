"""The parts of the JSON contract that one kind of input fills: NCCL Inspector logs (``inspector``) and Flight
Recorder dumps (``hang``, ``flight_recorder``). Declared like the rest (``report/schema.py``)."""

from __future__ import annotations

from .schema_types import flag, mapping, num, obj, records, string, strings, whole, wholes

_I = "nccl_inspector"
_F = "flight_recorder"

_BUCKET = whole("Power-of-two size bucket, in bytes.")
_LINK = {
    "id": string("Communicator id."), "name": string("Communicator name.", null=True),
}

INSPECTOR = obj("NCCL Inspector logs: their own summary (null for profiler traces).", {
    "verbose": flag("The logs carry timestamps (`NCCL_INSPECTOR_DUMP_VERBOSE=1`)."),
    "counts": mapping("What was read: `files`, `lines`, `records`, `bad_lines`, `unknown_records`, "
                      "`truncated_files`, `unmapped_records`, `timeline_records`, `instances`, `complete_instances` "
                      "(streamed logs add `verbose_records`).", whole("Count.", null=True)),
    "verdict": obj("The Inspector's own kernel-time test (null: none): kept only where it names the same rank as "
                   "`stragglers.verdict`, and the verdict of logs without timestamps.", {
        "rank": whole("Rank."), "caused_wait_ms": num("Wait it caused."),
        "share_pct": num("Its share of all caused wait, in percent."),
        "last_arrival_pct": num("Share of its instances where it arrived last, in percent."),
        "instances_last": num("Instances where it arrived last (ties share one)."), "instances": whole("Its instances."),
        "z": num("Standard deviations its caused wait stands above chance."),
        "basis": string("What the verdict was decided on."),
    }, null=True),
    "communicators": records("Per communicator.", {
        **_LINK, "n_ranks": whole("Members."), "nnodes": whole("Nodes.", null=True),
        "ranks": string("Global ranks in communicator-rank order, comma-separated (`?` without a log)."),
        "intra_node": flag("One node."), "records": whole("Records."),
        "ranks_logged": whole("Members with a log."), "instances": whole("Instances."),
        "complete_instances": whole("Instances every member logged."),
    }),
    "busbw": records("Bus bandwidth per communicator x op x size x algorithm/protocol x intra/inter node.", {
        **_LINK, "op": string("Operation."), "size_bucket": _BUCKET,
        "algo": string("Algorithm, where logged.", null=True), "proto": string("Protocol, where logged.", null=True),
        "n_ranks": whole("Members."), "nnodes": whole("Nodes.", null=True), "intra_node": flag("One node."),
        "ranks": string("Members, comma-separated."), "count": whole("Instances."),
        "bytes_p50": num("Median message bytes."),
        "transfer_ms_p50": num("Median transfer."), "busbw_gbps_p50": num("Median bus bandwidth."),
        "busbw_gbps_min": num("Lowest."), "busbw_gbps_max": num("Highest."),
        "logged_busbw_gbps_p50": num("Median of the plugin's own `coll_busbw_gbs` (waits included: reads low)."),
    }),
    "bandwidth": records("The same over all communicators per op x size x intra/inter node.", {
        "op": string("Operation."), "size_bucket": _BUCKET, "intra_node": flag("One node."),
        "count": whole("Instances."), "bytes_p50": num("Median bytes."), "transfer_ms_p50": num("Median transfer."),
        "busbw_gbps_p50": num("Median bus bandwidth."), "busbw_gbps_min": num("Lowest."),
        "busbw_gbps_max": num("Highest."), "logged_busbw_gbps_p50": num("The plugin's own median."),
    }),
    "slow_links": records("Communicators whose median busbw is under 0.7x the median of those doing the same work, "
                          "for messages of at least 1 MiB (smaller ones are latency-bound).", {
        **_LINK, "ranks": string("Members, comma-separated."), "op": string("Operation."), "size_bucket": _BUCKET,
        "intra_node": flag("One node."), "n_ranks": whole("Members."), "nnodes": whole("Nodes.", null=True),
        "count": whole("Instances."), "busbw_gbps_p50": num("Its median bus bandwidth."),
        "peer_busbw_gbps_p50": num("The median of its peers."), "ratio": num("Its median over its peers'."),
        "peers": whole("Communicators compared with."),
    }),
    "ranks": records("Per rank.", {
        "rank": whole("Rank."), "records": whole("Records."), "comm_ms": num("Kernel time."),
        "wait_ms": num("Wait."), "caused_wait_ms": num("Wait it caused."), "instances": whole("Instances."),
        "instances_last": num("Instances where it arrived last (ties share one)."),
        "last_arrival_pct": num("In percent."), "caused_wait_z": num("Caused wait against chance, in sigmas."),
    }),
    "dimensions": records("Per rank and communicator family.", {
        "rank": whole("Rank."), "dimension": string("Dimension (from the communicators' membership, as the cross-rank "
                                                   "stage names it; else their name family)."),
        "groups": whole("Communicators."), "intra_node": flag("One node."), "comm_ms": num("Kernel time."),
        "wait_ms": num("Wait."),
    }),
    "outliers": records("The instances with the largest waits.", {
        **_LINK, "seq": whole("`coll_sn`."), "op": string("Operation."), "bytes": num("Bytes."),
        "n_ranks": whole("Members."), "last_rank": whole("Last arriver.", null=True),
        "transfer_ms": num("Transfer."), "max_wait_ms": num("Longest wait."), "total_wait_ms": num("Sum of waits."),
        "busbw_gbps": num("Bus bandwidth."),
    }),
}, null=True, input=_I)

_OP = {"op": string("Operation.", null=True), "bytes": whole("Input bytes.", null=True),
       "dtype": string("Data type.", null=True)}
_SIZES = string("Tensor shapes, as the dump lists them (`[[1024]]`).", null=True)
_ENTRY = obj("An op of a rank.", {
    "group": string("Process group."), "seq": whole("Collective seq.", null=True), **_OP,
    "state": string("NCCL's state (`completed`, `started`, `scheduled`, ...).", null=True),
    "time_ns": whole("Wall clock, ns since the epoch.", null=True),
})

_SHIFT = records("The odd rank's collectives `first`..`last` equal the reference's `by` seqs later (`by` > 0: it "
                 "skipped `by`; < 0: it ran extra), over `compared` collectives.", {
    "rank": whole("Rank."), "by": whole("Seqs shifted."), "first": whole("First seq compared.", null=True),
    "last": whole("Last seq compared.", null=True), "compared": whole("Collectives compared.")}, null=True)

_HANG = {
    "group": string("Process group name (`name [first rank]` where split groups share a name)."),
    "dimension": string("Parallelism dimension.", null=True),
    "seq": whole("Collective seq (the p2p seq for send/recv)."),
    **_OP,
    "waiting": wholes("Ranks that entered it and wait."),
    "missing": wholes("Members with a dump that never entered it (send/recv: the peer that never posted)."),
    "mismatched": records("Members that called another op, size or dtype at that seq.", {"rank": whole("Rank."), **_OP}),
    "last_completed": mapping("Rank -> each missing rank's last finished op in this group.", _ENTRY),
    "stacks": mapping("Rank -> the stack of a missing, mismatched or first waiting rank (pickles only).", obj(
        "A stack.", {"op": string("Op.", null=True), "seq": whole("Seq.", null=True), "group": string("Group."),
                     "frames": strings("Frames, innermost first."),
                     "user_frame": string("The first frame outside torch.", null=True)})),
    "kind": string("`collective` or `p2p`.", enum=["collective", "p2p"]),
    "pg": string("Process group id."),
    "desc": string("Group description.", null=True),
    "group_ranks": wholes("Members."),
    "src": whole("Send/recv: the sender (global rank).", null=True),
    "dst": whole("Send/recv: the receiver (global rank).", null=True),
    "no_dump": wholes("Members without a dump."),
    "completed": whole("Members that finished it."),
    "since_ns": whole("Earliest start or enqueue of a waiting rank, ns since the epoch.", null=True),
    "since_utc": string("The same, ISO 8601 UTC.", null=True),
    "root": flag("Nothing else blocks this hang."),
    "blocked_by": records("Hangs of other groups this one waits on.", {
        "group": string("Group."), "seq": whole("Seq."), "op": string("Op.", null=True)}),
    "last_entry": mapping("Rank -> each missing rank's latest op in any group (where it is now).", _ENTRY),
    # issue #40: why it cannot complete, and where a desync before it leads
    "cause": string("Why it cannot complete: `skipped`, `mismatch`, `never_entered`, `no_dump`, `blocked` (members "
                    "pending in another stuck group) or `waiting` (every member waits: NCCL or the network).",
                    enum=["skipped", "mismatch", "never_entered", "no_dump", "blocked", "waiting"], null=True),
    "desync": flag("The answer is a collective whose members disagree, before the stuck ones."),
    "shift": _SHIFT,
    "hangs_at": obj("Where the job stopped when the answer is an earlier desync.", {
        "group": string("Group."), "seq": whole("Seq.", null=True), "op": string("Op.", null=True),
        "waiting": wholes("Ranks that wait there."), "missing": wholes("Members that never entered it."),
        "since_ns": whole("Earliest start of a waiting rank, ns since the epoch.", null=True)}, null=True),
    "queued": wholes("Waiting members whose entry is still `scheduled` (their GPU is blocked in another stuck group)."),
    "went_astray": records("For a rank that never entered: its first collective in another group before which it had "
                           "run a different number of this group's collectives than its peers.", {
        "rank": whole("Rank."), "group": string("Group."), "seq": whole("Seq.", null=True),
        "op": string("Op.", null=True), "done_before": whole("This group's collectives it had run before it.",
                                                             null=True),
        "peers_done_before": whole("Its peers' count.", null=True), "by": whole("The difference.", null=True),
        "skipped_seq": whole("The seq of this group it skipped.", null=True), "peers": wholes("The peers compared.")},
        null=True),
    "explains": whole("Other stuck groups that wait on this one, directly or through others.", null=True),
}

HANG = obj("Flight Recorder input: the root hang (null: no group hangs).", _HANG, null=True, input=_F)

FLIGHT_RECORDER = obj("Flight Recorder input: every stuck group, the dumps, the grid.", {
    "stuck": {"type": "array", "description": "Every group's hang, roots first (the shape of `hang`).",
              "items": obj("A hang.", _HANG)},
    "missing_dumps": wholes("Ranks of the world without a readable dump."),
    "p2p_unmatched": records("Pending sends with no pending recv on the peer, or the reverse.", {
        "pg": string("Group."), "op": string("`send` or `recv`."), "src": whole("Sender."), "dst": whole("Receiver."),
        "rank": whole("The rank that posted it."), "peer": whole("Its peer."), "seq": whole("P2p seq.", null=True),
        "bytes": whole("Bytes.", null=True), "dtype": string("Data type.", null=True),
        "since_ns": whole("Posted at, ns since the epoch.", null=True),
        "peer_has_dump": flag("Whether the peer left a dump."),
    }),
    "grid": records("Per group and seq (each group's last 16 seqs up to its hang).", {
        "label": string("Group label."), "seq": whole("Seq."), "op": string("Op.", null=True),
        "size": whole("Bytes.", null=True), "completed": whole("Members that finished it."),
        "waiting": whole("Members that entered it and wait."), "missing": whole("Members that never entered it."),
        "no_dump": whole("Members without a dump."),
        "mismatched": whole("Members whose op, size or dtype differs from the others'."),
    }),
    "mismatches": records("Every collective whose members disagree, by group then seq (at most 64 a group).", {
        "group": string("Group."), "pg": string("Process group id."), "desc": string("Description.", null=True),
        "dimension": string("Dimension.", null=True), "seq": whole("Seq.", null=True), **_OP,
        "in_sizes": _SIZES, "out_sizes": _SIZES,
        "state": string("The reference's state.", null=True),
        "kind": string("The first of op > size > dtype > state > missing."), "kinds": strings("Every kind found."),
        "ranks": wholes("Ranks odd in op, size or dtype."), "reference_ranks": wholes("Ranks that agree."),
        "entries": records("Each odd rank's entry.", {
            "rank": whole("Rank."), "kind": string("What differs."), **_OP, "in_sizes": _SIZES, "out_sizes": _SIZES,
            "state": string("State.", null=True)}),
        "missing": wholes("Members that never entered it."), "done": flag("Every member completed it."),
        "shift": _SHIFT, "since_ns": whole("Earliest start, ns since the epoch.", null=True),
    }),
    "mismatch_count": whole("All mismatches (`mismatches` lists fewer past 64 a group)."),
}, input=_F)
