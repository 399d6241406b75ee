"""``commscope export``: the merged trace, decoded with the perfetto package's protos, against the analysis.

Expected values are rebuilt here from the analysis' input tables and the clock fit (offset rounded to
the ns, subtracted), and, on generated traces, from the generator's truth (instances, clock offsets).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import polars as pl
import pytest

from analyzer.analysis import Analysis
from analyzer.analysis.units import ms_tables
from analyzer.export import Selection, write_trace
from sample_traces.generate import Scenario, build, write_kineto
from tests.conftest import SAMPLES, SHARED
from tests.helpers import cli, run
from tests.perfetto_decode import Decoded, decode

OFFSETS = {0: 0, 1: 0, 2: 7_300_000, 3: 7_300_000}  # two hosts 7.3 ms apart: alignment matters


def _off(a: Analysis) -> dict[int, int]:
    return {int(r): round(v) for r, v in a.clock.offsets_ns.items()}


def _aligned(df: pl.DataFrame, a: Analysis) -> pl.DataFrame:
    off = pl.col("rank").replace_strict(_off(a), default=0, return_dtype=pl.Int64)
    return df.with_columns(pl.col("start_ns") - off, pl.col("end_ns") - off)


def _meets(df: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    return df.filter((pl.col("start_ns") < hi) & (pl.col("end_ns") > lo))


def _kernel_slices(d: Decoded) -> pl.DataFrame:
    return d.slices.filter(pl.col("track_name").str.starts_with("stream ") & (pl.col("depth") == 0))


def _same_rows(got: pl.DataFrame, want: pl.DataFrame, cols: list[str]) -> None:
    g = got.select(cols).sort(cols)
    w = want.select([pl.col(c).cast(got.schema[c]) for c in cols]).sort(cols)
    assert g.height == w.height
    assert g.equals(w)


def check_trace(a: Analysis, d: Decoded, ranks: list[int] | None = None) -> None:
    """Everything the merged trace must say about the analysis it came from (no selection)."""
    ranks = ranks if ranks is not None else [int(r) for r in a.source["ranks"]]
    # one process per rank, named rank N (host, GPU)
    procs = sorted(d.processes.values())
    assert [p[0] for p in procs] == [r + 1 for r in ranks]
    assert all(name.startswith(f"rank {pid - 1} (") and ", GPU" in name for pid, name, _ in procs)
    # a track per stream
    gpu = a.traces.gpu
    for r in ranks:
        want = {f"stream {s}" for s in gpu.filter(pl.col("rank") == r)["stream"].unique().to_list()}
        got = {n for u, (parent, n, _) in d.tracks.items()
               if parent == next(k for k, p in d.processes.items() if p[0] == r + 1)
               and n.startswith("stream ") and "(overlap" not in n}
        assert got == want, r
    # every GPU event at its aligned time, to the nanosecond
    k = _kernel_slices(d)
    _same_rows(k, _aligned(gpu.filter(pl.col("rank").is_in(ranks)), a), ["rank", "name", "start_ns", "end_ns"])
    # matched comm kernels split into wait then transfer, adding up to the kernel; unmatched ones not split
    kern = _aligned(a.kernels, a).filter(pl.col("rank").is_in(ranks))
    comm = k.filter(pl.col("cat") == "comm")
    kids = d.slices.filter(pl.col("cat").is_in(["comm.wait", "comm.transfer"]))
    assert (kids["depth"] == 1).all()
    wait = kids.filter(pl.col("cat") == "comm.wait").select("track", "start_ns", pl.col("end_ns").alias("w_end"))
    xfer = kids.filter(pl.col("cat") == "comm.transfer").select("track", pl.col("start_ns").alias("t_start"),
                                                                 pl.col("end_ns").alias("t_end"))
    split = comm.join(wait, on=["track", "start_ns"]).join(xfer, left_on=["track", "w_end"],
                                                           right_on=["track", "t_start"])
    assert split.height == wait.height == xfer.height
    assert (split["t_end"] == split["end_ns"]).all()
    assert ((split["w_end"] - split["start_ns"]) + (split["t_end"] - split["w_end"])
            == split["end_ns"] - split["start_ns"]).all()
    matched = kern.filter(pl.col("instance").is_not_null())
    _same_rows(split.with_columns((pl.col("w_end") - pl.col("start_ns")).alias("wait_ns"),
                                  (pl.col("t_end") - pl.col("w_end")).alias("transfer_ns")),
               matched, ["rank", "start_ns", "end_ns", "wait_ns", "transfer_ns"])
    # one flow per matched instance, carried by each participant's kernel and by nothing else
    flows = comm.filter(pl.col("flow_ids").list.len() > 0)
    assert (flows["flow_ids"].list.len() == 1).all()
    got = flows.select("rank", "start_ns", pl.col("flow_ids").list.first().alias("flow"))
    inst = matched.join(got, on=["rank", "start_ns"], how="left")
    per = inst.group_by("instance").agg(pl.col("flow").n_unique().alias("n"), pl.col("flow").first(),
                                        pl.col("flow").null_count().alias("missing"))
    assert per.height == matched["instance"].n_unique()
    assert (per["n"] == 1).all() and (per["missing"] == 0).all()
    assert per["flow"].n_unique() == per.height  # distinct instances, distinct flows
    assert got.height == matched.height
    # step windows on their own track
    steps = d.slices.filter(pl.col("track_name") == "steps")
    want_steps = _aligned(a.traces.steps.filter(pl.col("rank").is_in(ranks)), a).with_columns(
        pl.format("step {}", "step").alias("name"))
    _same_rows(steps, want_steps, ["rank", "name", "start_ns", "end_ns"])
    # counters: each step's exposed comm from its start
    ctr_track = {u for u, (_, n, c) in d.tracks.items() if c and n.startswith("exposed comm")}
    values = sorted((c["ts"], round(c["value"], 9)) for c in d.counters if c["track"] in ctr_track
                    and c["value"] != 0.0)
    st = ms_tables(a).steps.join(want_steps.select("rank", "step", "start_ns"), on=["rank", "step"])
    assert values == sorted((s, round(v, 9)) for s, v in st.select("start_ns", "exposed_comm_ms").iter_rows()
                            if v != 0.0)
    # notes: the clock correction and the root-caused (or caused) wait of each rank
    col = "root_caused_wait_ms" if "root_caused_wait_ms" in ms_tables(a).ranks.columns else "caused_wait_ms"
    notes = {}
    for i in d.instants:
        notes.setdefault(i["track"], {}).update(i["args"])
    rank_of = {u: d.processes[p][0] - 1 for u, (p, _, _) in d.tracks.items() if p in d.processes}
    by_rank = {rank_of[u]: v for u, v in notes.items() if u in rank_of}
    for r, want in ms_tables(a).ranks.select("rank", col).iter_rows():
        if r in ranks:
            assert by_rank[r][col] == pytest.approx(want, abs=1e-9)
            assert by_rank[r]["clock_offset_us"] == _off(a).get(r, 0) / 1e3
            assert by_rank[r]["clock_method"] == a.clock.method
    assert d.metadata["commscope.clock_method"] == a.clock.method
    if a.clock.uncertainty_ns is not None:
        assert float(d.metadata["commscope.clock_uncertainty_us"]) == pytest.approx(a.clock.uncertainty_ns / 1e3,
                                                                                    abs=1e-3)


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("gen")
    sc = Scenario(ranks=4, steps=4, clock_offsets_ns=OFFSETS, late_ranks={1: (400_000, "host")})
    wl = build(sc)
    write_kineto(wl, folder)
    return folder, wl.truth, run(folder)


def _export(a: Analysis, tmp: Path, sel: Selection | None = None, fmt: str = "pftrace") -> Path:
    out = tmp / f"t.{fmt}"
    with open(out, "wb") as f:
        write_trace(a, sel or Selection(), f, fmt)
    return out


def test_generated_trace_through_the_command(gen, tmp_path: Path) -> None:
    folder, truth, a = gen
    out = tmp_path / "job.pftrace"
    res = cli("export", folder, "-o", out)
    assert res.returncode == 0, res.stderr
    d = decode(out)
    check_trace(a, d)
    # the generator's instances: one flow each
    flows = {f for ids in d.slices["flow_ids"].to_list() for f in ids}
    assert len(flows) == len([i for i in truth.instances if i.op not in ("send", "recv")])
    # the verdict is in the trace, and on the straggler's own notes
    assert a.verdict is not None and a.verdict.rank == 1  # the injected late rank
    assert d.metadata["commscope.straggler"] == f"rank 1 ({a.verdict.kind})"
    assert any(i["name"].startswith("straggler: rank 1") for i in d.instants)


def test_alignment_lines_up_collective_ends(gen, tmp_path: Path) -> None:
    """True collective ends are equal on every rank; on raw clocks they are 7.3 ms apart across hosts."""
    _, truth, a = gen
    for r, want_us in truth.offsets_us(0).items():
        assert a.clock.offsets_ns[r] / 1e3 == pytest.approx(want_us, abs=3.0)
    d = decode(_export(a, tmp_path))
    comm = _kernel_slices(d).filter(pl.col("cat") == "comm").select(
        "rank", "end_ns", pl.col("flow_ids").list.first().alias("flow"))
    spread = comm.group_by("flow").agg((pl.col("end_ns").max() - pl.col("end_ns").min()).alias("s"))
    assert spread["s"].max() <= 3_000
    raw = a.traces.collectives.join(a.kernels.select("rank", "start_ns", "instance"), on=["rank", "start_ns"])
    raw_spread = raw.group_by("instance").agg((pl.col("end_ns").max() - pl.col("end_ns").min()).alias("s"))
    assert raw_spread["s"].max() > 7_000_000


def test_ranks_and_steps_are_honoured(gen, tmp_path: Path) -> None:
    folder, _, a = gen
    out = tmp_path / "sel.pftrace"
    res = cli("export", folder, "-o", out, "--ranks", "1,2", "--steps", "2")
    assert res.returncode == 0, res.stderr
    d = decode(out)
    assert sorted(p[0] - 1 for p in d.processes.values()) == [1, 2]
    win = _aligned(a.traces.steps.filter(pl.col("step") == 2), a)
    want = []
    for r in (1, 2):
        lo, hi = win.filter(pl.col("rank") == r).select("start_ns", "end_ns").row(0)
        want.append(_meets(_aligned(a.traces.gpu.filter(pl.col("rank") == r), a), lo, hi))
    _same_rows(_kernel_slices(d), pl.concat(want), ["rank", "name", "start_ns", "end_ns"])
    assert d.slices.filter(pl.col("track_name") == "steps")["name"].to_list() == ["step 2", "step 2"]
    # flows join only the written participants: each flow has exactly two kernels (ranks 1 and 2)
    per_flow = _kernel_slices(d).filter(pl.col("flow_ids").list.len() > 0).group_by(
        pl.col("flow_ids").list.first()).agg(pl.col("rank").sort())
    assert per_flow.height > 0 and all(r == [1, 2] for r in per_flow["rank"].to_list())


def test_window_is_honoured(gen, tmp_path: Path) -> None:
    _, _, a = gen
    gpu = _aligned(a.traces.gpu, a)
    origin = int(gpu["start_ns"].min())
    d = decode(_export(a, tmp_path, Selection(window_ms=(3.0, 7.5))))
    want = _meets(gpu, origin + 3_000_000, origin + 7_500_000)
    assert 0 < want.height < gpu.height
    _same_rows(_kernel_slices(d), want, ["rank", "name", "start_ns", "end_ns"])


def test_json_has_the_same_slices_and_flows(gen, tmp_path: Path) -> None:
    _, _, a = gen
    d = decode(_export(a, tmp_path))
    doc = json.loads(_export(a, tmp_path, fmt="json").read_text())
    base = int(doc["metadata"]["commscope.base_ns"])
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    got = pl.DataFrame({
        "rank": [e["pid"] - 1 for e in xs], "name": [e["name"] for e in xs], "cat": [e["cat"] for e in xs],
        "start_ns": [base + round(e["ts"] * 1e3) for e in xs],
        "end_ns": [base + round(e["ts"] * 1e3) + round(e["dur"] * 1e3) for e in xs],
    })
    _same_rows(got, d.slices, ["rank", "name", "cat", "start_ns", "end_ns"])
    bound = pl.DataFrame({"flow": [e["bind_id"] for e in xs if "bind_id" in e],
                          "rank": [e["pid"] - 1 for e in xs if "bind_id" in e],
                          "start_ns": [base + round(e["ts"] * 1e3) for e in xs if "bind_id" in e]})
    pf = _kernel_slices(d).filter(pl.col("flow_ids").list.len() > 0).select(
        pl.format("0x{}", pl.col("flow_ids").list.first()).alias("flow"), "rank", "start_ns")
    groups = {tuple(sorted(zip(g["rank"], g["start_ns"]))) for _, g in bound.group_by("flow")}
    assert groups == {tuple(sorted(zip(g["rank"], g["start_ns"]))) for _, g in pf.group_by("flow")}
    assert {e["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"} == {
        "process_name"}
    assert doc["metadata"]["commscope.clock_method"] == a.clock.method


def test_host_activity_only_when_asked(gen, tmp_path: Path) -> None:
    _, _, a = gen
    plain = decode(_export(a, tmp_path))
    assert not plain.slices.filter(pl.col("cat").str.starts_with("host.")).height
    d = decode(_export(a, tmp_path, Selection(host=True)))
    host = d.slices.filter(pl.col("cat").str.starts_with("host."))
    _same_rows(host, _aligned(a.traces.cpu, a), ["rank", "name", "start_ns", "end_ns"])


@pytest.mark.parametrize("args, message", [
    (["--window", "9:3"], "--window"),
    (["--window", "5000:6000"], "no GPU event"),
    (["--steps", "77"], "--steps"),
    (["--ranks", "12"], "--ranks"),
    (["--format", "svg"], "format"),
])
def test_bad_input_is_one_line_and_exit_2(gen, tmp_path: Path, args: list[str], message: str) -> None:
    folder, _, _ = gen
    out = tmp_path / "bad.pftrace"
    res = cli("export", folder, "-o", out, *args)
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr
    assert not out.exists() and not list(tmp_path.glob("*.part"))


def _real_sets() -> list[tuple[Path, bool]]:
    """(input, has matched instances): the real captures, and other formats' shared traces where present."""
    found = sorted(p for p in (SAMPLES / "gpu_h200").iterdir() if p.is_dir())
    assert len(found) >= 5, "the project's real traces are missing"
    shared = sorted(p for p in (SHARED / "gpu_h200").iterdir() if p.is_dir()) if SHARED.exists() else []
    others = [SHARED / "nsys" / "mfu_2gpu_before.sqlite", SHARED / "hta" / "trace_filter"]
    return [(p, True) for p in found + shared] + [(p, False) for p in others if p.exists()]


@pytest.mark.parametrize("folder, matched", _real_sets(), ids=lambda p: f"{p.parent.name}/{p.name}"
                         if isinstance(p, Path) else str(p))
def test_real_traces(folder: Path, matched: bool) -> None:
    a = run(folder)
    assert a.kernels is not None
    if matched:
        assert a.kernels["instance"].drop_nulls().len() > 0
    buf = io.BytesIO()
    write_trace(a, Selection(host=not matched), buf)
    check_trace(a, decode(buf.getvalue()))

def test_dashboard_downloads_the_selected_step(gen) -> None:
    import base64

    from analyzer.cli.compose import dashboard_app

    _, _, a = gen
    client = dashboard_app(a).server.test_client()
    sel = {"rank": None, "step": 3, "collective": None}
    body = {"output": "export-download.data", "outputs": {"id": "export-download", "property": "data"},
            "inputs": [{"id": "export-button", "property": "n_clicks", "value": 1}],
            "state": [{"id": "selection", "property": "data", "value": sel},
                      {"id": "export-format", "property": "value", "value": "pftrace"}],
            "changedPropIds": ["export-button.n_clicks"]}
    resp = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert resp.status_code == 200
    data = resp.get_json()["response"]["export-download"]["data"]
    assert data["filename"] == "commscope_step3.pftrace"
    d = decode(base64.b64decode(data["content"]))
    assert sorted(p[0] - 1 for p in d.processes.values()) == [int(r) for r in a.source["ranks"]]
    assert set(d.slices.filter(pl.col("track_name") == "steps")["name"].to_list()) == {"step 3"}


def test_html_report_gives_the_export_command(gen) -> None:
    from analyzer.report.html import render

    folder, _, a = gen
    page = render(a)
    assert "Merged Perfetto trace" in page and f"commscope export {folder} -o job.pftrace" in page


def test_overlapping_slices_get_lanes_where_none_overlaps() -> None:
    from analyzer.export.tables import _lanes

    iv = [(0, 10), (5, 8), (10, 20), (12, 30), (15, 16), (40, 40)]
    df = pl.DataFrame({"stream": [7] * len(iv), "start_ns": [s for s, _ in iv], "end_ns": [e for _, e in iv]})
    out, dropped = _lanes(df, "stream")
    assert dropped.height == 0 and out.height == len(iv)
    lanes = {(s, e): lane for s, e, lane in out.select("start_ns", "end_ns", "lane").iter_rows()}
    assert lanes == {(0, 10): 0, (10, 20): 0, (40, 40): 0, (5, 8): 1, (12, 30): 1, (15, 16): 2}


def test_root_caused_wait_is_the_note_once_the_analysis_has_it(gen, tmp_path: Path) -> None:
    """Root cause (another change) adds ``ranks.root_caused_wait_ms``: the notes then carry it, not caused wait."""
    from dataclasses import replace

    _, _, a = gen
    b = replace(a, ranks=a.ranks.with_columns((pl.col("caused_wait_ns") * 0.5 + pl.col("rank")).alias(
        "root_caused_wait_ns")))
    d = decode(_export(b, tmp_path))
    check_trace(b, d)
    names = [i["name"] for i in d.instants]
    assert sum(n.startswith("root caused wait: ") for n in names) == len(b.source["ranks"])
    assert not any(n.startswith("caused wait: ") for n in names)
