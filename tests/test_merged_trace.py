"""One Kineto file holding several ranks' GPUs (TraceLens' trace fusion) is those ranks, never one rank summing them.

The merged file is built here from real rank files the way AMD-AGI/TraceLens ``TraceFusion/trace_fuse.py`` does
(MIT): every event gets ``args.rank``; ``pid``, ``id`` and the linking key (``correlation``) are shifted by
rank x 10^(digits of the first file's largest value + 1), the raw values kept as ``<field>_raw``; ``Trace`` and
``python_function`` events are dropped; ``process_name``/``process_sort_index``/``process_labels`` metadata is
replaced by "RANK N - CPU|GPU" labels; the document is ``{"traceEvents": [...]}``, gzip, indent 4.
Per-rank figures must equal those of the separate files.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from tests.helpers import report

FIELDS = ("compute_ms", "comm_ms", "overlapped_comm_ms", "exposed_comm_ms", "idle_ms", "memcpy_ms", "span_ms",
          "busy_ms", "steps", "step_time_ms")


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def trace_fuse(files: list[Path], out: Path) -> Path:
    """TraceLens' TraceFuse.merge_and_save, restated (rank i = files[i])."""
    first = _load(files[0])["traceEvents"]
    launch = next((e for e in first if e.get("cat") in ("cuda_runtime", "cuda_driver")
                   and "launch" in e.get("name", "").lower()), None)
    key = "correlation" if launch is not None and "correlation" in launch["args"] else "External id"
    fields = ["id", "pid", key]
    top: dict[str, int] = defaultdict(int)
    for e in first:
        for f in fields:
            v = e.get("args", {}).get(f) if f == key else e.get(f)
            if isinstance(v, int):
                top[f] = max(top[f], v)
    mult = {f: 10 ** (math.ceil(math.log10(v + 1)) + 1) for f, v in top.items()}
    merged = []
    for rank, path in enumerate(files):
        for e in _load(path)["traceEvents"]:
            if e.get("ph") == "M" and e.get("name") in ("process_name", "process_sort_index", "process_labels"):
                continue
            if e.get("cat") in ("Trace", "python_function"):
                continue
            e.setdefault("args", {})["rank"] = rank
            for f, m in mult.items():
                if f == key and f in e["args"]:
                    e["args"][f"{f}_raw"] = e["args"][f]
                    e["args"][f] += rank * m
                elif f != key and f in e:
                    e["args"][f"{f}_raw"] = e[f]
                    if type(e[f]) is int:
                        e[f] += rank * m
            merged.append(e)
    pids: dict[int, int] = {}
    gpu_pids = set()
    for e in merged:
        if e.get("ph") != "M" and isinstance(e.get("pid"), int):
            pids.setdefault(e["pid"], e["args"]["rank"])
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                gpu_pids.add(e["pid"])
    for pid, rank in sorted(pids.items(), key=lambda x: (x[1], x[0])):
        label = "GPU" if pid in gpu_pids else "CPU"
        merged.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": f"RANK {rank} - {label}"}})
    with gzip.open(out, "wt", encoding="utf-8") as f:
        json.dump({"traceEvents": merged}, f, indent=4)
    return out


@pytest.mark.parametrize("case", ["gpu_h200/ddp_balanced", "real_parallel/tp_dp_balanced"])
def test_a_merged_file_gives_the_per_rank_figures_of_the_separate_files(tmp_path: Path, case: str) -> None:
    folder = SAMPLES / case
    files = sorted(folder.glob("rank*.json*"), key=lambda p: int(p.name.split(".")[0].removeprefix("rank")))
    apart = report(folder)
    merged = report(trace_fuse(files, tmp_path / "merged_trace.json.gz"))
    assert merged["source"]["ranks"] == apart["source"]["ranks"] == list(range(len(files)))
    for a, m in zip(apart["ranks"], merged["ranks"], strict=True):
        assert {k: m[k] for k in FIELDS} == {k: a[k] for k in FIELDS}, a["rank"]
    assert [r["comm_ms"] for r in merged["communication"]] == [r["comm_ms"] for r in apart["communication"]]
    assert any("one file holds" in w and f"{len(files)} ranks" in w for w in merged["warnings"])


def test_several_processes_without_a_rank_per_event_are_said(tmp_path: Path) -> None:
    # two processes' events concatenated as they are (no args.rank): one rank is all commscope can read, and says so
    from tests.comm_traces import Gpu, write

    paths = write(tmp_path / "apart", {r: [Gpu("void gemm_kernel<128>(float*)", 7, 100_000, 50_000)] for r in (0, 1)})
    docs = [json.loads(p.read_text()) for p in paths]
    merged = {**{k: v for k, v in docs[0].items() if k != "distributedInfo"},
              "traceEvents": docs[0]["traceEvents"] + docs[1]["traceEvents"]}
    out = tmp_path / "naive.json"
    out.write_text(json.dumps(merged))
    d = report(out)
    assert d["source"]["ranks"] == [0]
    assert any("holds the GPU work of 2 processes on 2 devices" in w for w in d["warnings"])
