"""The hostile-input corpus of issue #32, rebuilt from a real rank: 127 mutated inputs, each with the outcome it must have.

Every case mutates rank 0 of ``sample_traces/gpu_h200/hybrid_tp_dp`` (or replaces it: empty files, FIFOs, a link to
/dev/zero, an Nsight report) and is analyzed twice: as a single file, and as rank 0 of a folder with the three real
ranks. Each use has an expected outcome class:

- ``same``: the numbers equal the unmutated input's and no new warning (neutral mutations: order, whitespace, BOM);
- ``warn``: a new warning matching ``expect`` names what was dropped, clipped or not counted;
- ``skip`` (folders): the file is in ``source.skipped`` with a reason matching ``expect``, and in the warnings;
- ``exit2``: a ``CommscopeError`` of one line matching ``expect`` (the CLI prints it and exits 2).

``run_corpus`` runs every case in worker processes under a timeout and classifies what happened, including the
outcomes that must never occur: ``hang``, ``traceback`` (any other exception), ``silent`` (numbers changed, no new
warning, nothing skipped) and ``unnamed-skip`` (a skipped file missing from the warnings).
``python tests/hostile_corpus.py`` prints the outcome table (the issue's closing note).
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.hostile_mutations import (
    DELETE,
    HYBRID,
    RANK0,
    STEM,
    bomb_file,
    bytes_case,
    compute_kernel,
    crlf,
    deep_document,
    doc_case,
    drop_key,
    duplicate,
    events_are,
    extra_keys,
    giant_name,
    gz_bomb,
    gz_corrupt,
    gz_multimember,
    gz_truncated,
    info,
    insert_event,
    long_annotation,
    metadata_events,
    minified,
    nccl_kernel,
    nested_args,
    nsight_of_another_job,
    pg_disagree,
    pretty,
    rank_in_name,
    reorder_keys,
    set_all,
    set_field,
    shift_days,
    shuffled,
    special,
    stretch_over_next,
    text_case,
    truncate,
    whitespace_after_bracket,
    with_bom,
)

TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Path], Path]  # writes the input into a folder and returns its path
    single: str  # expected outcome class as a single file
    folder: str  # expected outcome class as rank 0 of the real folder
    expect: str = ""  # regex the warning / skip reason / error line must match
    options: dict = field(default_factory=dict)  # keyword overrides for analyzer.analyze (limits)
    prepare: Callable[[Path], object] | None = None  # run once in the parent before the timed runs (slow builds)
    api: str = "analyze"  # "triage": a Flight Recorder dump, through analyzer.triage (issue #42's dump cases)



def cases() -> list[Case]:
    c = compute_kernel
    n = nccl_kernel
    out: list[Case] = []

    def add(name: str, build: Callable[[Path], Path], single: str, folder: str | None = None, expect: str = "",
            prepare: Callable[[Path], object] | None = None, **options: Any) -> None:
        out.append(Case(name, build, single, folder or single, expect, options, prepare))

    # ---- neutral: order, whitespace, BOM, layout, compression (identical numbers)
    add("reversed events", doc_case(lambda d: d["traceEvents"].reverse()), "same")
    add("shuffled events", doc_case(shuffled), "same")
    add("sorted keys", doc_case(reorder_keys), "same")
    add("kineto layout, plain", doc_case(lambda d: None, gz=False), "same")
    add("kineto layout, gzip", doc_case(lambda d: None), "same")
    for gz in (False, True):
        tag = "gzip" if gz else "plain"
        add(f"minified, {tag}", minified(gz), "same")
        add(f"indent 1, {tag}", pretty(gz), "same")
        add(f"UTF-8 BOM, {tag}", with_bom(gz), "same")
        add(f"CRLF line ends, {tag}", text_case(crlf, gz), "same")
        for mib in (1, 20):
            add(f"{mib} MiB whitespace after '[', {tag}", text_case(whitespace_after_bracket(mib << 20), gz), "same")
        add(f"whitespace before the document, {tag}", text_case(lambda t: "\n" * 4096 + t, gz), "same")
        add(f"whitespace after the document, {tag}", text_case(lambda t: t + " \n" * 4096, gz), "same")
    add("gzip, two members", gz_multimember, "same")
    add("extra unknown keys", doc_case(extra_keys), "same")
    add("metadata and instant events", doc_case(metadata_events), "same")
    add("8 MiB kernel name", doc_case(giant_name), "same")
    add("baseTime 3 days later", doc_case(shift_days(3)), "same", "exit2", r"days apart")
    add("world_size 8", doc_case(info(world_size=8)), "same", "exit2", r"world size")
    add("world_size 2", doc_case(info(world_size=2)), "same", "exit2", r"world size")
    add("rank says 1", doc_case(info(rank=1)), "same", "exit2", r"rank 1 appears twice")
    add("process groups disagree", doc_case(pg_disagree), "same", "exit2", r"process group")

    # ---- truncations and corrupt compression (exit 2 alone; skipped and named in a folder)
    for frac in (0.0001, 0.01, 0.1, 0.5, 0.9, 0.999, 0.99999):
        add(f"truncated at {frac:.3%}", bytes_case(truncate(frac)), "exit2", "skip",
            r"not valid JSON|truncated|not a valid Kineto|is empty")
    add("gzip cut in half", bytes_case(gz_truncated, name=STEM + ".pt.trace.json.gz"), "exit2", "skip",
        r"truncated or corrupt gzip")
    add("gzip with corrupt bytes", bytes_case(gz_corrupt, name=STEM + ".pt.trace.json.gz"), "exit2", "skip",
        r"corrupt gzip")

    # ---- limits: inflated size, nesting depth, events per rank
    add("gzip bomb: 2.24 GiB of whitespace", gz_bomb(2405 << 20), "exit2", "skip", r"gzip bomb",
        prepare=lambda scratch: bomb_file(scratch, 2405 << 20))
    add("gzip bomb, limit 64 MiB", gz_bomb(200 << 20), "exit2", "skip", r"inflates to more than 64 MiB",
        prepare=lambda scratch: bomb_file(scratch, 200 << 20), max_inflated_bytes=64 << 20,
        max_inflate_ratio=10_000)
    # a limit applies to every rank of a folder: all four are refused, and so is the run
    add("real rank, inflated limit 1 MiB", doc_case(lambda d: None), "exit2", "exit2", r"inflates",
        max_inflated_bytes=1 << 20)
    add("real rank, 1000 events limit", doc_case(lambda d: None), "exit2", "exit2", r"more than 1,000 events",
        max_events=1000)
    add("real rank, events limit raised", doc_case(lambda d: None), "same", max_events=10_000_000)
    for depth in (65, 1000, 100_000):
        add(f"args nested {depth} deep", nested_args(depth), "exit2", "skip", r"nest")
    add("document nested 1e6 deep", bytes_case(lambda: deep_document(1_000_000)), "exit2", "skip", r"nest")
    add("args nested 65 deep, depth limit raised", nested_args(65), "same", max_json_depth=100)

    # ---- impossible times on one kernel: dropped or clipped, counted, said
    for label, pick in (("compute kernel", c), ("NCCL kernel", n)):
        for key in ("ts", "dur"):
            for v, vname in ((None, "null"), (float("nan"), "NaN"), (1e30, "1e30"), (-1e30, "-1e30"),
                             ("12", "a string"), (float("inf"), "Infinity")):
                if key == "dur" and vname == "a string":
                    continue
                add(f"{label} {key} {vname}", doc_case(set_field(pick, key, v), gz=False), "warn",
                    expect=r"dropped 1 of \d+ GPU events")
        add(f"{label} ts -5", doc_case(set_field(pick, "ts", -5.0)), "warn", expect=r"dropped 1 of")
        add(f"{label} dur -1", doc_case(set_field(pick, "dur", -1.0)), "warn", expect=r"dropped 1 of")
        add(f"{label} dur 1e15", doc_case(set_field(pick, "dur", 1e15)), "warn", expect=r"longer than")
        add(f"{label} no ts", doc_case(set_field(pick, "ts", DELETE)), "warn", expect=r"dropped 1 of")
        add(f"{label} no dur", doc_case(set_field(pick, "dur", DELETE)), "warn", expect=r"dropped 1 of")
        add(f"{label} over the next 3 kernels on its stream", doc_case(lambda d, p=pick: stretch_over_next(d, p, 3)),
            "warn", expect=r"overlap")
    add("every kernel ts 1e30", doc_case(lambda d: set_all(d, "ts", 1e30)), "warn", expect=r"dropped \d+ of")
    add("every GPU event dur -1", doc_case(lambda d: [e.__setitem__("dur", -1) for e in d["traceEvents"]
                                                      if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]),
        "exit2", "skip", r"all \d+ GPU events")

    # ---- names: null, wrong type, empty: counted, never guessed
    for label, pick in (("compute kernel", c), ("NCCL kernel", n)):
        for v, vname in ((None, "null"), (42, "a number"), ("", "empty"), ({"a": 1}, "an object")):
            add(f"{label} name {vname}", doc_case(set_field(pick, "name", v)), "warn", expect=r"no name")
        add(f"{label} no name", doc_case(set_field(pick, "name", DELETE)), "warn", expect=r"no name")
        add(f"{label} ph B", doc_case(set_field(pick, "ph", "B")), "warn", expect=r"not complete")
        add(f"{label} no ph", doc_case(set_field(pick, "ph", DELETE)), "warn", expect=r"not complete")

    # ---- duplicates
    add("one kernel twice", doc_case(duplicate("one")), "warn", expect=r"duplicate")
    add("every kernel twice", doc_case(duplicate("kernels")), "warn", expect=r"duplicate")
    add("every GPU event twice", doc_case(duplicate("gpu")), "warn", expect=r"duplicate")

    # ---- wrong types and missing keys
    add("no traceEvents", doc_case(drop_key("traceEvents")), "exit2", "skip", r"no traceEvents")
    add("traceEvents {}", doc_case(events_are({})), "exit2", "skip", r"not a valid Kineto")
    add("traceEvents a string", doc_case(events_are("x")), "exit2", "skip", r"not a valid Kineto")
    add("traceEvents null", doc_case(events_are(None)), "exit2", "skip", r"not a valid Kineto")
    add("traceEvents []", doc_case(events_are([])), "exit2", "skip", r"no GPU activity")
    # an entry of traceEvents that is no object carries no event: nothing to count, the numbers stay
    add("an event that is a number", doc_case(insert_event(7)), "same")
    add("an event that is null", doc_case(insert_event(None)), "same")
    add("kernel args a list", doc_case(set_field(c, "args", [1, 2])), "exit2", "skip", r"not a valid Kineto")
    add("no distributedInfo", doc_case(drop_key("distributedInfo")), "warn", expect=r"taken from the file name")
    add("distributedInfo null", doc_case(lambda d: d.__setitem__("distributedInfo", None)), "warn",
        expect=r"taken from the file name")
    add("distributedInfo.rank -3", doc_case(info(rank=-3)), "exit2", "skip", r"distributedInfo\.rank is -3")
    add("distributedInfo.rank 7 of 4", doc_case(info(rank=7)), "exit2", "exit2", r"rank 7")
    add("distributedInfo.rank a string", doc_case(info(rank="zero")), "warn", expect=r"taken from the file name")
    add("world_size a string", doc_case(info(world_size="four")), "same")
    add("pg_config a string", doc_case(info(pg_config="nonsense")), "same")

    # ---- whole-file replacements
    add("empty file", bytes_case(lambda: b""), "exit2", "skip", r"is empty")
    add("empty gzip", bytes_case(lambda: b"", gz=True), "exit2", "skip", r"empty")
    add("[]", bytes_case(lambda: b"[]"), "exit2", "skip", r"not a valid Kineto|not a profiler trace")
    add("{}", bytes_case(lambda: b"{}"), "exit2", "skip", r"no traceEvents")
    add("one giant JSON string", bytes_case(lambda: b'"' + b"a" * (16 << 20) + b'"'), "exit2", "skip",
        r"not a valid Kineto|not a profiler trace")
    add("binary garbage", bytes_case(lambda: os.urandom(1 << 16)), "exit2", "skip", r"not valid JSON|not a")
    add("link to /dev/zero", special("devzero"), "exit2", "skip", r"character device")
    add("FIFO", special("fifo"), "exit2", "skip", r"FIFO")
    add("dangling link", special("dangling"), "exit2", "skip", r"does not exist|cannot be read|dangling")
    add("Nsight report of another job", nsight_of_another_job, "same-other", "exit2", r"formats|format")

    # ---- issue #42: user regexes in a linear-time engine, rank numbers bounded by --max-ranks
    add("step marker (a+)+$ over a 41-character annotation", doc_case(long_annotation), "warn",
        expect=r"no step markers", step_marker="(a+)+$")
    add("step marker with look-behind", doc_case(lambda d: None), "exit2", "exit2", r"look-around",
        step_marker=r"(?<=Profiler)Step#(\d+)")
    add("file named rank3000000000", rank_in_name(3_000_000_000), "warn", expect=r"not taken as its rank")
    add("distributedInfo.rank 3e9", doc_case(info(rank=3_000_000_000)), "exit2", "skip", r"--max-ranks")
    add("distributedInfo.world_size 3e9", doc_case(info(world_size=3_000_000_000)), "exit2", "skip", r"--max-ranks")
    return out + flight_recorder_cases()


def flight_recorder_cases() -> list[Case]:
    """Issue #42's Flight Recorder dump cases: rank 0 of the real gloo capture with one hostile field, alone and
    beside the capture's three other ranks, through ``analyzer.triage``."""
    from tests import hostile_dumps as hd

    out: list[Case] = []

    def add(name: str, build: Callable[[Path], Path], single: str, folder: str | None = None, expect: str = "") -> None:
        out.append(Case(f"FR: {name}", build, single, folder or single, expect, api="triage"))

    add("the real dump, rewritten", hd.dump_case(lambda d: None), "same")
    for field_name in ("input_dtypes", "duration_ms", "input_sizes", "frames", "process_group", "state"):
        add(f"{field_name}: a tuple 200,000 deep", hd.deep_case(hd.in_entry(field_name), 200_000), "exit2", "skip",
            r"nests deeper than 64")
    add("pg_config ranks: a tuple 200,000 deep", hd.deep_case(hd.in_pg_ranks, 200_000), "exit2", "skip",
        r"nests deeper than 64")
    add("a file named rank3000000000.pkl", hd.renamed("rank3000000000.pkl"), "exit2", "exit2",
        r"rank 3,000,000,000, more than any job has")
    for key, value, vname in (("time_created_ns", float("inf"), "inf"), ("time_created_ns", 1e30, "1e30"),
                              ("time_discovered_started_ns", float("nan"), "NaN"), ("duration_ms", float("inf"), "inf"),
                              ("timeout_ms", 10 ** 25, "10**25"), ("input_sizes", [[10 ** 40]], "[[10**40]]"),
                              ("input_sizes", [[2 ** 62, 2 ** 62]], "a product past int64")):
        add(f"{key} {vname}", hd.dump_case(hd.entry_field(key, value)), "warn", expect=rf"{key} value\(s\) are not")
    add("collective_seq_id 10**30", hd.dump_case(hd.entry_field("collective_seq_id", 10 ** 30)), "exit2", "skip",
        r"seq id is an integer of 31 digits")
    add("record_id a float", hd.dump_case(hd.entry_field("record_id", 1.5)), "exit2", "skip", r"record_id is 1\.5")
    add("pg_config ranks past 2^20", hd.dump_case(lambda d: hd.in_pg_ranks(d, "[0, 3000000000]")), "exit2", "skip",
        r"unreadable ranks")
    return out


# ------------------------------------------------------------------------------------------ running and classifying


def _numbers(a: Any) -> list[tuple]:
    """What a silent change would show in: every per-rank number (rounded to 1 ps; not the rank id, which the file
    states), and the match counts."""
    rows = []
    for r in a.ranks.iter_rows(named=True):
        rows.append(tuple(round(v, 9) if isinstance(v, float) and not math.isnan(v) else v
                          for k, v in r.items() if k != "rank"))
    return rows + [tuple(sorted((k, v) for k, v in a.matching.items() if isinstance(v, (int, float))))]


def observe(paths: list[str], options: dict, api: str = "analyze") -> dict:
    """Analyze in this process; the outcome as plain data (picklable)."""
    from analyzer import analyze
    from analyzer.errors import CommscopeError

    if api == "triage":
        return _observe_triage(paths)
    try:
        a = analyze(*paths, jobs=1, cache=False, **options)
    except CommscopeError as exc:
        return {"kind": "error", "message": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - the corpus records tracebacks, it does not raise them
        import traceback

        return {"kind": "traceback", "message": f"{type(exc).__name__}: {exc}"[:500],
                "trace": traceback.format_exc()[-3000:]}
    skipped = a.source.get("skipped", [])
    return {"kind": "ok", "numbers": _numbers(a), "warnings": list(a.warnings), "skipped": skipped,
            "ranks": list(a.source["ranks"]), "world_size": a.source.get("world_size"),
            "skip_named": all(any(s["path"] in w for w in a.warnings) for s in skipped)}


def _observe_triage(paths: list[str]) -> dict:
    """``observe`` for Flight Recorder dumps: the hang's facts are the numbers; a skipped dump is a rank of the
    world without one (``missing_dumps``), so the world analyzed is the ranks read."""
    from analyzer import triage
    from analyzer.errors import CommscopeError

    try:
        a = triage(*paths)
    except CommscopeError as exc:
        return {"kind": "error", "message": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - the corpus records tracebacks, it does not raise them
        import traceback

        return {"kind": "traceback", "message": f"{type(exc).__name__}: {exc}"[:500],
                "trace": traceback.format_exc()[-3000:]}
    h = a.hang or {}
    numbers = [tuple(str(h.get(k)) for k in ("group", "seq", "op", "waiting", "missing", "mismatched", "bytes")),
               (a.result.mismatch_count, len(a.result.stuck))]
    skipped = a.source.get("skipped", [])
    return {"kind": "ok", "numbers": numbers, "warnings": list(a.warnings), "skipped": skipped,
            "ranks": list(a.source["ranks"]), "world_size": len(a.source["ranks"]),
            "skip_named": all(any(s["path"] in w for w in a.warnings) for s in skipped)}


def classify(case: Case, mode: str, got: dict, baseline: dict) -> tuple[str, str]:
    """(outcome class, detail): same, warn, skip, exit2, silent, traceback, hang."""
    if got["kind"] in ("traceback", "hang", "build"):
        return got["kind"], got.get("message", "")
    if got["kind"] == "error":
        return "exit2", got["message"]
    if case.single == "same-other" and mode == "single":
        return "same", "another job's trace"  # not a mutation of rank 0: nothing to compare with
    # what a changed input does to matching and clocks is no explanation of the change itself
    new = [w for w in got["warnings"] if w not in baseline["warnings"] and not _COLLATERAL.search(w)]
    if got["skipped"]:
        if not got["skip_named"] or got["world_size"] != len(got["ranks"]):
            return "unnamed-skip", "a skipped file is missing from the warnings, or world_size is not what was analyzed"
        return "skip", "; ".join(s["reason"] for s in got["skipped"])
    if new:
        return "warn", " | ".join(new)
    if got["numbers"] == baseline["numbers"] and len(got["ranks"]) == len(baseline["ranks"]):
        return "same", ""
    if len(got["ranks"]) != len(baseline["ranks"]):
        return "silent", f"ranks {got['ranks']} analyzed instead of {baseline['ranks']}, none skipped"
    return "silent", "numbers changed without a warning"


_COLLATERAL = re.compile(r"could not be matched|point-to-point kernels|clock uncertainty|matched instances have|"
                         r"no collective metadata|no message sizes")


def matches(case: Case, mode: str, outcome: str, detail: str) -> bool:
    want = case.single if mode == "single" else case.folder
    want = "same" if want == "same-other" else want
    if outcome != want:
        return False
    if outcome == "exit2":
        return "\n" not in detail and (not case.expect or re.search(case.expect, detail) is not None)
    if outcome in ("warn", "skip"):
        return re.search(case.expect, detail) is not None
    return True


def _paths(case_path: Path, mode: str, folder: Path, api: str = "analyze") -> list[str]:
    if mode == "single":
        return [str(case_path)]
    if api == "triage":
        from tests.hostile_dumps import others

        for other in others():
            (folder / other.name).symlink_to(other)
        return [str(folder)]
    for other in sorted(HYBRID.glob("rank[123].*.pt.trace.json.gz")):
        (folder / other.name).symlink_to(other)
    return [str(folder)]


def run_one(case: Case, mode: str, scratch: str) -> dict:
    """Build the case in a fresh folder of ``scratch`` and analyze it (in a worker process)."""
    folder = Path(scratch) / f"{mode}-{abs(hash(case.name)) % 10**9}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    try:
        try:
            built = case.build(folder)
        except Exception as exc:  # noqa: BLE001 - a corpus bug, reported as such
            return {"kind": "build", "message": f"the corpus could not build this case: {type(exc).__name__}: {exc}"}
        return observe(_paths(built, mode, folder, case.api), case.options, case.api)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _cases_by_name() -> dict[str, Case]:
    return {c.name: c for c in cases()}


def _run_named(name: str, mode: str, scratch: str) -> dict:
    return run_one(_cases_by_name()[name], mode, scratch)


def baselines() -> dict[str, dict]:
    from tests.hostile_dumps import FR, FR_RANK0

    return {"single": observe([str(RANK0)], {}), "folder": observe([str(HYBRID)], {}),
            "triage-single": observe([str(FR_RANK0)], {}, "triage"), "triage-folder": observe([str(FR)], {}, "triage")}


def _serve(conn: Any, scratch: str) -> None:
    """A worker: run the cases it is sent until it gets None."""
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(_run_named(msg[0], msg[1], scratch))


class _Worker:
    def __init__(self, ctx: Any, scratch: str) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, scratch), daemon=True)
        self.proc.start()
        child.close()
        self.task: tuple[Case, str] | None = None
        self.deadline = 0.0

    def stop(self) -> None:
        self.proc.kill()
        self.proc.join(5)


def run_corpus(scratch: Path, workers: int = 2, timeout: float = TIMEOUT_S,
               selected: list[Case] | None = None) -> list[dict]:
    """Every case in both modes, each under ``timeout`` in a worker process (a hang is killed and recorded)."""
    import multiprocessing
    import time
    from multiprocessing.connection import wait

    todo = [(c, m) for c in (selected or cases()) for m in ("single", "folder")]
    base_out = baselines()
    for c, _ in todo:
        if c.prepare is not None:
            c.prepare(scratch)
    ctx = multiprocessing.get_context("spawn")
    pool = [_Worker(ctx, str(scratch)) for _ in range(max(1, min(workers, len(todo))))]
    done: dict[tuple[str, str], dict] = {}
    pending = list(reversed(todo))
    try:
        while len(done) < len(todo):
            for w in pool:
                if w.task is None and pending:
                    w.task, w.deadline = pending.pop(), time.monotonic() + timeout
                    w.conn.send((w.task[0].name, w.task[1]))
            busy = [w for w in pool if w.task is not None]
            ready = wait([w.conn for w in busy], timeout=max(0.0, min(w.deadline for w in busy) - time.monotonic()))
            for i, w in enumerate(pool):
                if w.task is None:
                    continue
                got = None
                if w.conn in ready:
                    try:
                        got = w.conn.recv()
                    except (EOFError, OSError) as exc:
                        got = {"kind": "traceback", "message": f"worker died: {type(exc).__name__} "
                                                               f"(exit code {w.proc.exitcode})"}
                elif time.monotonic() > w.deadline:
                    got = {"kind": "hang", "message": f"no answer in {timeout:.0f} s"}
                if got is None:
                    continue
                done[(w.task[0].name, w.task[1])] = got
                if got["kind"] in ("hang", "traceback") and got.get("message", "").startswith(("no answer", "worker")):
                    w.stop()
                    pool[i] = _Worker(ctx, str(scratch))
                else:
                    w.task = None
    finally:
        for w in pool:
            try:
                w.conn.send(None)
            except OSError:
                pass
            w.stop()
    results = []
    for c, m in todo:
        got = done[(c.name, m)]
        outcome, detail = classify(c, m, got, base_out[m if c.api == "analyze" else f"{c.api}-{m}"])
        results.append({"case": c.name, "mode": m, "outcome": outcome, "detail": detail,
                        "ok": matches(c, m, outcome, detail), "trace": got.get("trace", "")})
    return results


def table(results: list[dict]) -> str:
    counts = Counter(r["outcome"] for r in results)
    order = ("same", "warn", "skip", "exit2", "silent", "unnamed-skip", "traceback", "hang", "build")
    lines = [f"{len({r['case'] for r in results})} cases x 2 uses = {len(results)} runs; "
             f"{sum(r['ok'] for r in results)} as expected"]
    lines.append("  ".join(f"{k}: {counts.get(k, 0)}" for k in order))
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", help="only cases whose name contains this")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("-v", action="store_true", help="print every run, not only the unexpected ones")
    args = ap.parse_args()
    sel = [c for c in cases() if not args.k or args.k in c.name]
    with tempfile.TemporaryDirectory(prefix="cs-corpus-") as tmp:
        res = run_corpus(Path(tmp), args.workers, selected=sel)
    for r in res:
        if args.v or not r["ok"]:
            print(f"{'ok ' if r['ok'] else 'BAD'} {r['mode']:6} {r['outcome']:9} {r['case']}: {r['detail'][:300]}")
    print(table(res))
