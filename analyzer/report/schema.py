"""The JSON contract ``commscope.analysis/1``, declared once as a JSON Schema (draft 2020-12).

``report/json.py`` and ``report/hang_json.py`` take their field lists (and so the key order of every record)
from here; the documentation site renders its reference page from here (``docs/hooks.py``); the tests validate
real reports against it (``tests/test_json_schema.py``), so a field added to a writer and not declared here, or
declared here and written by no writer, fails. Units are in the names (``_ms``, ``_us``, ``_ns``, ``_pct``,
``_gbps``, ``bytes``); times are milliseconds unless the name says otherwise; missing values are null, never NaN.

``x-input`` marks fields that only one kind of input fills (``flight_recorder``: hang triage of Flight Recorder
dumps; ``nccl_inspector``; ``optable``); the trace writer leaves those out.
"""

from __future__ import annotations

from typing import Any

from .schema_inputs import FLIGHT_RECORDER, HANG, INSPECTOR
from .schema_types import flag, mapping, num, obj, records, ref, string, strings, whole, wholes

SCHEMA_ID = "commscope.analysis/1"

SOURCE = obj("What was read.", {
    "paths": strings("Every input file analyzed, as given (folders expanded)."),
    "format": string("The input format.", enum=["kineto", "nsys", "optable", "nccl_inspector", "flight_recorder"]),
    "ranks": wholes("Ranks analyzed."),
    "world_size": whole("Number of ranks analyzed."),
    "declared_world_size": whole("World size the traces declare (`distributedInfo.world_size`, Nsight's processes).",
                                 null=True),
    "skipped": records("Every input left out, also named in `warnings`.", {
        "path": string("The file."), "reason": string("Why it was left out."),
    }),
    "versions": strings("Flight Recorder dump versions read.", input="flight_recorder"),
    "encodings": strings("Flight Recorder dump encodings read (`pickle`, `json`).", input="flight_recorder"),
    "entries": whole("Flight Recorder entries read.", input="flight_recorder"),
})

_RANK_TOTALS = {
    "compute_ms": num("GPU time with a compute kernel running (union over streams)."),
    "comm_ms": num("GPU time with a communication kernel running (union over streams)."),
    "overlapped_comm_ms": num("Communication time under compute: |comm ∩ compute|."),
    "exposed_comm_ms": num("Communication not hidden by compute: |comm − compute|."),
    "overlap_pct": num("Overlapped / comm, in percent."),
    "exposed_wait_ms": num("The part of the exposed communication spent waiting for a late peer."),
    "exposed_transfer_ms": num("The part of the exposed communication spent moving data."),
}

RANKS = records("Per rank, over the whole captured window (first to last GPU event).", {
    "rank": whole("Global rank."),
    "steps": whole("Step windows found on this rank."),
    **_RANK_TOTALS,
    "idle_ms": num("Window span minus GPU busy time."),
    "memcpy_ms": num("Time when only memcpy/memset ran."),
    "wait_ms": num("Wait suffered in matched collectives (kernel duration minus the instance's transfer)."),
    "caused_wait_ms": num("The others' wait in instances where this rank arrived last."),
    "root_caused_wait_ms": num("Wait, anywhere, that traces back to this rank's own compute or host time."),
    "propagated_wait_ms": num("Caused wait this rank only passed on (it was itself held up)."),
    "last_arrival_pct": num("Share of its matched instances where this rank arrived last, in percent."),
    "span_ms": num("The window: first to last GPU event."),
    "busy_ms": num("GPU time with any activity."),
    "compute_only_ms": num("Compute time with no communication under it."),
    "step_time_ms": obj("Step span over the profiled steps.", {
        "mean": num("Mean."), "p50": num("Median."), "max": num("Longest."),
    }),
})

STEPS = records("Per rank and step window (a synchronous job's step spans the same interval on every rank).", {
    "rank": whole("Global rank."),
    "step": whole("Step number (`ProfilerStep#N`)."),
    "start_ms": num("Start of the window on the rank's own clock."),
    "span_ms": num("Length of the window."),
    "compute_ms": _RANK_TOTALS["compute_ms"],
    "comm_ms": _RANK_TOTALS["comm_ms"],
    "overlapped_comm_ms": _RANK_TOTALS["overlapped_comm_ms"],
    "exposed_comm_ms": _RANK_TOTALS["exposed_comm_ms"],
    "overlap_pct": _RANK_TOTALS["overlap_pct"],
    "exposed_wait_ms": _RANK_TOTALS["exposed_wait_ms"],
    "exposed_transfer_ms": _RANK_TOTALS["exposed_transfer_ms"],
    "compute_only_ms": num("Compute with no communication under it."),
    "memcpy_ms": num("Time when only memcpy/memset ran."),
    "idle_ms": num("Span minus GPU busy time."),
    "wait_ms": num("Wait suffered in matched collectives of this step."),
    "caused_wait_ms": num("The others' wait in this step's instances where this rank arrived last."),
    "root_caused_wait_ms": num("Wait suffered in this step that traces back to this rank."),
})

COLLECTIVES = records("Per matched collective instance or send/recv pair, by start.", {
    "pg": string("Process group (communicator) name.", null=True),
    "seq": whole("Ordinal of the instance within its group.", null=True),
    "op": string("Operation (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`, `send_recv`, ...)."),
    "step": whole("Step of the instance.", null=True),
    "bytes": whole("Bytes moved per rank (the larger direction for send/recv).", null=True),
    "ranks": wholes("Participants."),
    "group_size": whole("Members of the group.", null=True),
    "transfer_ms": num("The shortest participant's kernel: the time the data took to move."),
    "max_wait_ms": num("Longest wait of a participant (its kernel minus the transfer)."),
    "total_wait_ms": num("Sum of the participants' waits."),
    "last_rank": whole("The participant that arrived last (shortest kernel).", null=True),
    "arrival_skew_ms": num("Latest minus earliest start, on the aligned clock."),
    "end_skew_ms": num("Latest minus earliest end, on the aligned clock."),
    "algbw_gbps": num("Algorithm bandwidth: bytes / transfer."),
    "busbw_gbps": num("Bus bandwidth: algbw x the nccl-tests factor of the operation."),
    "start_ms": num("Earliest start on the aligned clock."),
    "has_meta": flag("Whether the kernels carried collective metadata."),
    "match_rule": string("How the instance was matched.",
                         enum=["metadata", "shift", "no_metadata", "p2p_peer", "p2p_pair", "exchange"], null=True),
    "partial": flag("Fewer participants than the group."),
    "dimension": string("Parallelism dimension of its group.", null=True),
    "intra_node": flag("All participants on one host (null: unknown)."),
})

BANDWIDTH = records("Per operation, power-of-two size bucket and intra/inter node: medians over the instances.", {
    "op": string("Operation."),
    "size_bucket": whole("Power-of-two size bucket, in bytes (the size rounded down to a power of two)."),
    "intra_node": flag("Intra-node instances (null: unknown)."),
    "count": whole("Instances."),
    "total_bytes": whole("Bytes over the instances.", null=True),
    "transfer_ms_p50": num("Median transfer."),
    "algbw_gbps_p50": num("Median algorithm bandwidth."),
    "busbw_gbps_p50": num("Median bus bandwidth."),
    "busbw_gbps_max": num("Highest bus bandwidth."),
})

_CHAIN = records("How the delay spread: the groups the root delayed itself (`via` empty), then through whom.", {
    "via": wholes("Ranks it held up on the way (empty: its own groups)."),
    "pg": strings("Process groups delayed."),
    "groups": whole("Groups delayed."),
    "peers": whole("Peers that waited."),
    "wait_ms": num("Their wait."),
})

ROOT = obj("A root straggler (the verdict is the first root).", {
    "rank": whole("The rank."),
    "kind": string("What made it late.", enum=["host", "compute", "unknown"]),
    "root_caused_wait_ms": num("Wait it caused from its own compute or host time."),
    "caused_wait_ms": num("Wait in instances where it arrived last."),
    "confidence": num("1 − the p-value of the test that named it."),
    "chronic": flag("Late in most steps, not once."),
    "last_arrival_pct": num("Share of its instances where it arrived last, in percent."),
    "steps_last": whole("Steps where it was the top root-causer.", null=True),
    "steps_seen": whole("Steps seen.", null=True),
    "idle_before_ms": num("Its GPU's idle time before its late arrivals, per step."),
    "compute_before_ms": num("Its extra compute before its late arrivals, per step."),
    "instances_last": whole("Instances where it arrived last.", null=True),
    "effect": num("Its costliest late arrival per step over the others' median (null: nobody else was late)."),
    "saving_ms": num("What making it ideal saves per step (the lead sentence)."),
    "saving_pct": num("The same, in percent of the step."),
    "added_ms": num("What putting its measured durations back into the ideal run adds per step."),
    "chain": _CHAIN,
}, null=True)

_ATTRIBUTION_ENTRY = obj("One group's measured durations put back into the ideal run.", {
    "step_time_ms": num("Step time with that group put back."),
    "added_ms": num("What it adds over the ideal run."),
    "slowdown": num("Its step over the ideal step."),
    "share": num("Its share of replay − ideal (put-backs need not add up)."),
})

_COUNTERFACTUAL = {
    "slowdown": num("S = replayed step / ideal step (commscope's model: >= 1)."),
    "slowdown_no_host": num("S with every host gap removed in both runs."),
    "replay_step_time_ms": num("The measured run replayed, per step."),
    "ideal_step_time_ms": num("The ideal run replayed, per step."),
    "replay_no_host_step_time_ms": num("The replay without host gaps."),
    "ideal_no_host_step_time_ms": num("The ideal run without host gaps."),
    "attribution": obj("Per axis, per group key: that group put back into the ideal run.", {
        axis: mapping(f"Key -> put-back ({axis[3:].replace('_', ' ')}).", _ATTRIBUTION_ENTRY)
        for axis in ("by_rank", "by_stage", "by_dp_replica", "by_dimension", "by_op")
    }, null=True),
    "m_w": num("M_W: share of replay − ideal removed by making the top 3% ranks ideal; commscope's model reports "
               "it in [0, 1] (a raw value outside in a warning), the study's keeps its own."),
    "m_s": num("M_S: share of replay − ideal removed by making the last pipeline stage ideal (bounded as M_W)."),
    "m_w_ranks": wholes("The ranks M_W made ideal."),
}

STRAGGLERS = obj("Who held the job back, and what fixing it would buy.", {
    "verdict": ref(ROOT, "The first of `roots`, or null: no rank holds the job back."),
    "roots": {"type": "array", "description": "Independent root stragglers, most costly first.",
              "items": {**ROOT, "type": "object"}},
    "ranking": records("Every rank, by root-caused wait.", {
        "rank": whole("The rank."),
        "root_caused_wait_ms": num("Wait that traces back to its own time."),
        "propagated_wait_ms": num("Caused wait it only passed on."),
        "caused_wait_ms": num("The others' wait where it arrived last."),
        "wait_ms": num("Wait it suffered."),
        "last_arrival_pct": num("Share of its instances where it arrived last, in percent."),
        "steps_last": whole("Steps where it was the top root-causer.", null=True),
        "instances": whole("Matched instances it took part in.", null=True),
    }),
    "transfer_caused_wait_ms": num("Wait that traces to slower transfers on the late ranks' paths (nobody's): "
                                   "with the ranks' `root_caused_wait_ms` it adds up to all caused wait."),
    **_COUNTERFACTUAL,
    "study": obj("Op tables only: the same block under the published What-if study's model.",
                 dict(_COUNTERFACTUAL), input="optable"),
})

CLOCK = obj("How the ranks' clocks were aligned.", {
    "method": string("How.", enum=["collective-end", "none"]),
    "reference_rank": whole("The rank whose clock the others are moved to.", null=True),
    "offsets_us": mapping("Rank -> offset, subtracted from that rank's times to reach the reference clock.",
                          num("Offset in µs.")),
    "uncertainty_us": num("Spread of the fit."),
    "instances": whole("Collectives the fit used.", null=True),
})

PROCESS_GROUPS = records("Per process group, largest first.", {
    "pg": string("Name.", null=True),
    "desc": string("Description the framework gave it (DeviceMesh, Megatron, ...).", null=True),
    "ranks": wholes("Members."),
    "size": whole("Members.", null=True),
    "dimension": string("Parallelism dimension.", enum=["tp", "cp", "ep", "dp", "fsdp", "pp", "world", "unknown"],
                        null=True),
    "dimension_source": string("How the dimension was decided.", null=True),
    "guess": flag("Decided by membership geometry only."),
    "intra_node": flag("All members on one host (null: unknown)."),
    "label": string("Name shown in the hang grid.", input="flight_recorder"),
    "state": string("`ok` or `hung`.", enum=["ok", "hung"], input="flight_recorder"),
    "members_source": string("Where the members came from (`pg_config`, `entries`).", input="flight_recorder"),
})

DIMENSIONS = records("Per rank and parallelism dimension, whole window.", {
    "rank": whole("Global rank."),
    "dimension": string("Dimension."),
    "comm_ms": num("Union of that dimension's communication kernels."),
    "exposed_comm_ms": num("The part not under compute."),
    "exposed_wait_ms": num("Exposed time spent waiting."),
    "exposed_transfer_ms": num("Exposed time spent moving data."),
    "wait_ms": num("Wait in this dimension's instances."),
    "root_caused_wait_ms": num("Wait suffered in this dimension's instances that traces back to this rank."),
    "busbw_gbps_p50": num("Median bus bandwidth."),
})

PIPELINE = obj("Pipeline stages, when matched send/recv pairs link ranks into chains (null otherwise).", {
    "stage_source": string("Where the stages came from (`layout`, `p2p`, `pp group`)."),
    "steps": whole("Steps seen.", null=True),
    "chains": whole("Chains of ranks found.", null=True),
    "bottleneck_stage": whole("The stage that sets the pace (null: the top two are within 1%).", null=True),
    "stages": records("Per stage: per rank and step, averaged over the stage's ranks.", {
        "stage": whole("Stage."),
        "ranks": wholes("Its ranks."),
        "step_ms": num("Step span."),
        "compute_ms": num("Compute."),
        "bubble_ms": num("Idle or waiting on a peer while the pipeline is not full."),
        "bubble_pct": num("Bubble in percent of the step span."),
        "warmup_bubble_ms": num("Bubble during warm-up."),
        "steady_bubble_ms": num("Bubble in the steady state."),
        "cooldown_bubble_ms": num("Bubble during cool-down."),
        "recv_wait_ms": num("Wait inside recv (and batched send/recv) kernels."),
        "caused_wait_ms": num("Peers' wait in pairs where this stage arrived last."),
    }),
}, null=True)

EXPERTS = obj("Expert all-to-all(v) with recorded split sizes (null otherwise).", {
    "instances": whole("All-to-all instances with split sizes."),
    "imbalance_p50": num("Median over instances of max / mean of the bytes each rank received."),
    "imbalance_max": num("Largest imbalance."),
    "top_receiver": whole("The rank that received most often the most.", null=True),
    "per_instance": records("Per instance.", {
        "pg": string("Group.", null=True), "step": whole("Step.", null=True), "ranks": whole("Participants."),
        "recv_bytes_max": num("Most bytes a rank received."), "recv_bytes_mean": num("Mean bytes received."),
        "imbalance": num("Max / mean."), "top_rank": whole("The rank that received most.", null=True),
        "max_wait_ms": num("Longest wait."),
    }),
    "ranks": records("Per rank over the window.", {
        "rank": whole("Rank."), "recv_bytes": num("Bytes received."), "sent_bytes": num("Bytes sent."),
        "instances_top": whole("Instances where it received most."),
    }),
    "peers": records("Bytes per (source, destination) over the window.", {
        "src": whole("Sender."), "dst": whole("Receiver."), "bytes": num("Bytes."),
    }),
}, null=True)

MATCHING = obj("How the communication kernels were matched across ranks (empty for Flight Recorder input).", {
    k: whole(d) for k, d in (
        ("instances", "Matched collective instances."),
        ("matched_kernels", "Collective kernels in a matched instance."),
        ("unmatched_kernels", "Collective kernels left unmatched."),
        ("p2p_kernels", "Send/recv kernels."),
        ("p2p_pairs", "Matched send/recv pairs."),
        ("p2p_unmatched_kernels", "Send/recv kernels left unmatched."),
        ("exchange_instances", "Grouped send/recv matched as group exchanges."),
        ("partial_instances", "Instances with fewer participants than the group."),
        ("kernels_without_metadata", "Communication kernels without collective metadata."),
        ("one_sided_copies", "Copy-engine rows not matched across ranks (one-sided peer copies)."),
    )
})

CRITICAL_PATH = records("Per step and rank on that step's critical path (they add up to the step's span).", {
    "step": whole("Step."),
    "rank": whole("Rank on the path."),
    "compute_ms": num("Compute on the path."),
    "exposed_transfer_ms": num("Exposed transfer on the path."),
    "wait_ms": num("Wait on the path."),
    "host_idle_ms": num("Host or idle time on the path."),
})

WHATIF = obj("The measured run replayed on the dependency graph, and scenarios (null without GPU operations).", {
    "replay_step_time_ms": num("The unchanged replay of the job's step, mean over steps."),
    "measured_step_time_ms": num("The job's measured step (one interval per step on the aligned clock; ranks that "
                                 "share no clock: the longest rank window), mean over steps."),
    "replay_error_pct": num("|replay − measured| / measured, in percent: how well the replay reproduces the "
                            "measured run (a warning above 5% on any rank and step)."),
    "ideal_speedup": num("S = replay of the measured run / ideal run, never below 1 (the counterfactual's S)."),
    "scenarios": records("Modified replays (`no_straggler`, `balanced_experts`, `no_exposed_comm`, "
                         "`no_exposed_comm:<dim>`, `busbw:<op>=<GB/s>`, `ideal`).", {
        "name": string("Scenario."), "step_time_ms": num("Step time in the scenario."),
        "saving_ms": num("Measured replay minus the scenario."), "saving_pct": num("The same, in percent."),
    }),
    "ranks": records("Making one rank ideal, largest saving first.", {
        "rank": whole("Rank."), "saving_ms": num("Saving per step."), "saving_pct": num("In percent."),
    }),
    "ranks_replayed": whole("Ranks replayed for `ranks`."),
    "rank_steps": records("Per rank and step: the saving from making that rank ideal.", {
        "rank": whole("Rank."), "step": whole("Step."), "saving_ms": num("Saving."),
    }),
    "replay_steps": records("Per rank and step: measured against replayed.", {
        "rank": whole("Rank."), "step": whole("Step."), "measured_ms": num("Measured."),
        "replay_ms": num("Replayed."), "error_pct": num("Error, in percent."),
    }),
}, null=True)

COMMUNICATION = records("Communication split by library and engine: one row per rank, catalogue family and engine, over "
                        "the whole captured window (families may overlap: a rank's rows need not add up to its "
                        "`comm_ms`).", {
    "rank": whole("Rank."),
    "family": string("Communication catalogue family (`nccl`, `deepep`, `symm_mem`, `copy_engine`, ...; `user` for "
                     "`--comm-kernel` rules)."),
    "library": string("The family's library, as the catalogue names it."),
    "engine": string("What moved the bytes: `sm`, `copy_engine` or `rdma`."),
    "kernels": whole("Communication rows (kernels or copies) of the family on the rank."),
    "bytes": num("Bytes recorded for them (host records, or a copy's own size)."),
    "comm_ms": num("Union of the family's rows."),
    "overlapped_comm_ms": num("Of it, beside compute kernels."),
    "exposed_comm_ms": num("Of it, not beside compute: the step waited for it."),
    "overlap_pct": num("overlapped / comm, in percent."),
    "gbps": num("bytes / comm time, GB/s over the family's busy time."),
})

ANALYSIS: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "commscope analysis report",
    "description": "`commscope analyze PATH --format json`. Times are milliseconds unless the key says otherwise; "
                   "missing values are null, never NaN; rows are ordered (ranks by rank, steps by rank then step, "
                   "collectives by start).",
    "type": "object",
    "additionalProperties": False,
    "required": ["schema", "source", "ranks", "steps", "collectives", "bandwidth", "stragglers", "clock",
                 "process_groups", "dimensions", "pipeline", "experts", "matching", "critical_path", "whatif",
                 "warnings"],
    "properties": {
        "schema": {"const": SCHEMA_ID, "description": "This contract's name and version."},
        "source": SOURCE,
        "ranks": RANKS,
        "steps": STEPS,
        "collectives": COLLECTIVES,
        "bandwidth": BANDWIDTH,
        "communication": COMMUNICATION,
        "stragglers": STRAGGLERS,
        "clock": CLOCK,
        "process_groups": PROCESS_GROUPS,
        "dimensions": DIMENSIONS,
        "pipeline": PIPELINE,
        "experts": EXPERTS,
        "matching": MATCHING,
        "critical_path": CRITICAL_PATH,
        "whatif": WHATIF,
        "inspector": INSPECTOR,
        "hang": HANG,
        "flight_recorder": FLIGHT_RECORDER,
        "warnings": strings("Everything missing or guessed: skipped files, no step markers, unmatched kernels, "
                            "clock uncertainty."),
    },
}


def fields(section: dict, input: str | None = None) -> tuple[str, ...]:
    """The keys of a declared object (or of a list of records' items), in the contract's order; with ``input``,
    also those only that input fills (without, none of them)."""
    props = (section.get("items") or section)["properties"]
    return tuple(k for k, v in props.items() if v.get("x-input") in (None, input))
