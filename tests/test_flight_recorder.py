"""Hang triage from Flight Recorder dumps: generated hangs with exact truth at 8 to 4,096 ranks, the real
gloo captures (torch 2.13), every format, the grid, pickle safety and bad input (one line, exit 2)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from analyzer.hangs.analysis import analyze_dumps
from analyzer.ingest.discover import flight_recorder_files
from analyzer.ingest.flight_recorder import reader as fr
from analyzer.report import render
from analyzer.report.hang_json import to_dict
from sample_traces.flight_recorder_gen import SCENARIOS, Job, write
from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "sample_traces" / "flight_recorder"


def analyze(path: Path):
    files = flight_recorder_files([path])
    assert files, f"{path} not recognised as Flight Recorder dumps"
    return analyze_dumps(fr.load([(f.path, f.rank_hint) for f in files]))


def check(a, truth: dict) -> None:
    """The report's first line and its JSON ``hang`` say what the generator planted."""
    doc = to_dict(a)
    first = render(a, "text").splitlines()[1]
    h = doc["hang"]
    if truth.get("hang", "") is None:
        assert h is None and first.startswith("No hang"), first
        return
    assert first.startswith(f"Hang: pg {truth['group']} ({truth['dimension']}) {truth['op']} #{truth['seq']} "), first
    assert (h["group"], h["dimension"], h["seq"], h["op"]) == (truth["group"], truth["dimension"], truth["seq"],
                                                              truth["op"])
    assert h["waiting"] == truth["waiting"]
    assert h["missing"] == truth["missing"]
    assert h["no_dump"] == truth["no_dump"]
    assert [{k: m[k] for k in ("rank", "op", "bytes", "dtype")} for m in h["mismatched"]] == truth["mismatched"]
    if "bytes" in truth:
        assert (h["bytes"], h["dtype"]) == (truth["bytes"], truth["dtype"])
    assert f"rank {truth['culprit']} " in first  # the culprit is named on the first line


@pytest.mark.parametrize("ranks", [8, 64, 512])
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_generated_hangs(tmp_path, scenario, ranks, fmt):
    truth = write(Job(ranks, scenario), tmp_path / "dumps", fmt)
    check(analyze(tmp_path / "dumps"), truth)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_generated_hangs_4096_ranks(tmp_path, scenario):
    job = Job(4096, scenario, steps=1, culprit=2_345)  # a culprit inside the world, not its last rank
    try:
        truth = write(job, tmp_path / "dumps", "pickle")
        check(analyze(tmp_path / "dumps"), truth)
    finally:
        shutil.rmtree(tmp_path / "dumps", ignore_errors=True)  # ~120 MB: pytest keeps the last runs' tmp dirs


def test_cascade_is_blocked_by_the_root(tmp_path):
    """The dp groups of the stuck tp members wait too; each names the tp hang as what blocks it."""
    write(Job(64, "wrong_size"), tmp_path / "d")
    doc = to_dict(analyze(tmp_path / "d"))
    stuck = doc["flight_recorder"]["stuck"]
    assert stuck[0]["root"] and stuck[0]["group"] == "8"
    dp = [s for s in stuck[1:]]
    assert len(dp) == 8  # every dp group holds one member of the stuck tp group 56..63
    assert all(not s["root"] and s["blocked_by"] == [{"group": "8", "seq": 7, "op": "all_reduce"}] for s in dp)
    assert sorted(m for s in dp for m in s["missing"]) == list(range(56, 64))


def test_grid_counts_the_hung_cell(tmp_path):
    from dashboards.hang import cell_details, grid_cells, grid_figure, on_click

    write(Job(16, "never_joined"), tmp_path / "d")
    a = analyze(tmp_path / "d")
    cells = {(c["label"], c["seq"]): c for c in grid_cells(a)}
    hung = cells[("2", 7)]  # tp group 2 = ranks 8..15 (tp = 8), culprit 15
    assert (hung["completed"], hung["waiting"], hung["missing"], hung["no_dump"], hung["state"]) == (0, 7, 1, 0, 2)
    assert cells[("1", 7)]["state"] == 0 and cells[("1", 7)]["completed"] == 8
    fig = grid_figure(a)
    assert len(fig.data[0].y) == len({c["label"] for c in cells.values()})
    text = on_click(a, {"points": [{"x": "7", "y": "2 (tp)"}]})
    assert text == cell_details(a, "2", 7) and "Never entered: rank 15." in text and "Waiting: ranks 8-14." in text


def test_dashboard_app_serves_the_grid(tmp_path):
    from dashboards.hang import create_hang_app

    write(Job(8, "wrong_op"), tmp_path / "d")
    app = create_hang_app(analyze(tmp_path / "d"))
    client = app.server.test_client()
    layout = json.loads(client.get("/_dash-layout").data)
    assert "hang-grid" in json.dumps(layout) and "Hang: pg" in json.dumps(layout)


# ----------------------------------------------------------------------------- real captures (torch 2.13 gloo)

REAL_CASES = sorted(p.name for p in REAL.iterdir() if p.is_dir()) if REAL.exists() else []


@pytest.mark.parametrize("encoding", ["pickle", "json"])
@pytest.mark.parametrize("scenario", REAL_CASES)
def test_real_captures_match_ground_truth(scenario, encoding):
    truth = json.loads((REAL / scenario / "ground_truth.json").read_text())
    a = analyze(REAL / scenario / encoding)
    h = to_dict(a)["hang"]
    assert h["group_ranks"] == truth["group_ranks"] and h["dimension"] == truth["dimension"]
    assert (h["seq"], h["op"]) == (truth["seq"], truth["op"])
    first = render(a, "text").splitlines()[1]
    assert first.startswith(f"Hang: pg {h['group']} (tp) all_reduce #{truth['seq']} ")
    culprit = truth["culprit"]
    if "missing" in truth:
        assert h["missing"] == truth["missing"] and culprit not in h["waiting"]
        assert f"rank {culprit} never entered it" in first
    for want in truth["mismatched"]:
        got = {m["rank"]: m for m in h["mismatched"]}[want["rank"]]
        assert all(got[k] == v for k, v in want.items())
        said = f"rank {culprit} called {want['op']} (" if want["op"] != truth["op"] else \
            f"rank {culprit} called it with {want['bytes'] // 1024} KiB"
        assert said in first, first
    if encoding == "pickle":  # pickles carry stacks: the culprit's own line in the capture script
        assert "capture_flight_recorder.py" in h["stacks"][str(culprit)]["user_frame"]


def test_cli_leads_with_the_answer_in_every_format(tmp_path):
    dumps = REAL / "skip" / "pickle"
    text = cli("analyze", dumps)
    assert text.returncode == 0, text.stderr
    line = text.stdout.splitlines()[1]
    assert line.startswith("Hang: pg ") and "rank 3 never entered it" in line
    for fmt in ("markdown", "html"):
        out = cli("analyze", dumps, "--format", fmt)
        assert out.returncode == 0 and "rank 3 never entered it" in out.stdout
    doc = json.loads(cli("analyze", dumps, "--format", "json").stdout)
    assert doc["schema"] == "commscope.analysis/1" and doc["source"]["format"] == "flight_recorder"
    assert doc["hang"]["missing"] == [3] and doc["hang"]["waiting"] == [2] and doc["ranks"] == []


# ----------------------------------------------------------------------------- pickle safety and bad input


class _Evil:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


class _EvilWrite:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (eval, (f"open({str(self.target)!r}, 'w').write('owned')",))


@pytest.mark.parametrize("evil", [_Evil, _EvilWrite])
def test_malicious_pickle_is_refused_without_side_effect(tmp_path, evil):
    target = tmp_path / "pwned"
    d = tmp_path / "dumps"
    d.mkdir()
    dump = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [evil(target)]}
    (d / "rank0.pkl").write_bytes(pickle.dumps(dump, protocol=2))
    out = cli("analyze", d)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "refused to load" in out.stderr and "rank0.pkl" in out.stderr
    assert not target.exists()
    # beside good dumps, the bad rank is skipped and named; the others still answer
    write(Job(8, "never_joined"), tmp_path / "good")
    (tmp_path / "good" / "rank0.pkl").write_bytes(pickle.dumps(dump, protocol=2))
    doc = json.loads(cli("analyze", tmp_path / "good", "--format", "json").stdout)
    assert doc["hang"]["missing"] == [7] and not target.exists()
    assert any("rank0.pkl" in w and "refused" in w for w in doc["warnings"])
    assert 0 in doc["flight_recorder"]["missing_dumps"]


def _one_line_exit_2(out, *needles: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    for n in needles:
        assert n in out.stderr, out.stderr


def test_truncated_dumps(tmp_path):
    write(Job(8, "wrong_op"), tmp_path / "d")
    write(Job(8, "wrong_op"), tmp_path / "j", "json")
    for name, folder in (("rank2.pkl", "d"), ("rank2.json", "j")):
        raw = (tmp_path / folder / name).read_bytes()
        (tmp_path / folder / name).write_bytes(raw[: len(raw) // 2])
        doc = json.loads(cli("analyze", tmp_path / folder, "--format", "json").stdout)
        assert doc["hang"]["mismatched"][0]["rank"] == 7  # the others still answer
        assert [w for w in doc["warnings"] if name in w and "truncated" in w]
        assert doc["source"]["skipped"][0]["path"].endswith(name)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "d" / "rank2.pkl", alone / "rank2.pkl")
    _one_line_exit_2(cli("analyze", alone), "rank2.pkl", "truncated")


def test_unknown_version_and_non_dump_pickles(tmp_path):
    write(Job(8, "never_joined"), tmp_path / "d")
    dump = pickle.loads((tmp_path / "d" / "rank1.pkl").read_bytes())
    (tmp_path / "d" / "rank1.pkl").write_bytes(pickle.dumps({**dump, "version": "3.0"}, protocol=2))
    (tmp_path / "d" / "rank2.pkl").write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}}, protocol=2))
    (tmp_path / "d" / "model.pkl").write_bytes(pickle.dumps([1, 2, 3], protocol=2))  # not a dump: not opened
    doc = json.loads(cli("analyze", tmp_path / "d", "--format", "json").stdout)
    assert doc["hang"]["missing"] == [7]
    reasons = {Path(s["path"]).name: s["reason"] for s in doc["source"]["skipped"]}
    assert "version '3.0'" in reasons["rank1.pkl"] and "not a Flight Recorder dump" in reasons["rank2.pkl"]
    assert doc["flight_recorder"]["missing_dumps"] == [1, 2] and "model.pkl" not in reasons
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(tmp_path / "d" / "rank1.pkl", one)
    _one_line_exit_2(cli("analyze", one / "rank1.pkl"), "rank1.pkl", "version '3.0'")
    # a pickle named on the command line is read (restricted) and refused with the reason
    _one_line_exit_2(cli("analyze", tmp_path / "d" / "model.pkl"), "model.pkl", "not a Flight Recorder dump")


def test_dumps_of_two_jobs_are_refused(tmp_path):
    write(Job(8, "never_joined"), tmp_path / "a")
    write(Job(16, "never_joined"), tmp_path / "b")
    shutil.copy(tmp_path / "b" / "rank9.pkl", tmp_path / "a" / "rank9.pkl")
    _one_line_exit_2(cli("analyze", tmp_path / "a"), "rank9.pkl", "different worlds")
    write(Job(8, "never_joined"), tmp_path / "c")
    shutil.copy(tmp_path / "b" / "rank3.pkl", tmp_path / "c" / "rank3.pkl")  # same name, the other job's world
    _one_line_exit_2(cli("analyze", tmp_path / "c"), "different worlds")
    write(Job(4, "never_joined"), tmp_path / "small")
    shutil.copy(tmp_path / "small" / "rank1.pkl", tmp_path / "a" / "rank9.pkl")  # renamed: not in its world
    _one_line_exit_2(cli("analyze", tmp_path / "a"), "rank9.pkl", "says rank 9", "another job")
    write(Job(8, "never_joined"), tmp_path / "dup", "json")
    write(Job(8, "never_joined"), tmp_path / "dup", "pickle")
    _one_line_exit_2(cli("analyze", tmp_path / "dup"), "both rank 0's dump")


def test_dumps_and_traces_mixed_are_refused(tmp_path):
    write(Job(8, "never_joined"), tmp_path / "d")
    shutil.copy(ROOT / "sample_traces" / "gpu_h200" / "ddp_balanced" / sorted(
        p.name for p in (ROOT / "sample_traces" / "gpu_h200" / "ddp_balanced").glob("*.json*")
        if "ground_truth" not in p.name)[0], tmp_path / "d" / "zz_trace.pt.trace.json.gz")
    _one_line_exit_2(cli("analyze", tmp_path / "d"), "analyze dumps and traces separately")


def test_watchdog_file_names_and_rank_map(tmp_path):
    """The watchdog writes TORCH_FR_DUMP_TEMP_FILE<rank> without a suffix (default nccl_trace_rank_<N>)."""
    write(Job(8, "wrong_size"), tmp_path / "d")
    for p in (tmp_path / "d").iterdir():
        p.rename(p.with_name(f"nccl_trace_rank_{p.stem.removeprefix('rank')}"))
    doc = json.loads(cli("analyze", tmp_path / "d", "--format", "json").stdout)
    assert doc["hang"]["mismatched"][0]["rank"] == 7 and len(doc["source"]["ranks"]) == 8


def test_commands_that_need_a_timeline_refuse_dumps(tmp_path):
    dumps = REAL / "wrong_op" / "pickle"
    for args in (("compare", dumps, dumps), ("export", dumps, "-o", tmp_path / "x.pftrace")):
        _one_line_exit_2(cli(*args), "is a Flight Recorder dump", "this command needs profiler traces")
    assert not (tmp_path / "x.pftrace").exists()


def test_library_triage():
    import analyzer
    from analyzer.errors import UsageError

    a = analyzer.triage(REAL / "wrong_size" / "pickle")
    assert a.hang["mismatched"] == [{"rank": 3, "op": "all_reduce", "bytes": 2048, "dtype": "Float"}]
    with pytest.raises(UsageError):
        analyzer.triage(ROOT / "sample_traces" / "gpu_h200" / "ddp_balanced")


def test_send_whose_receiver_left_no_dump(tmp_path):
    truth = write(Job(16, "p2p"), tmp_path / "d")
    (tmp_path / "d" / "rank15.pkl").unlink()
    doc = to_dict(analyze(tmp_path / "d"))
    h = doc["hang"]
    assert (h["group"], h["op"], h["seq"], h["src"], h["dst"]) == (truth["group"], "send", truth["seq"], 7, 15)
    assert h["waiting"] == [7] and h["missing"] == [] and h["no_dump"] == [15]
    assert doc["flight_recorder"]["p2p_unmatched"][0]["peer_has_dump"] is False
    assert doc["flight_recorder"]["missing_dumps"] == [15]


def test_dumps_before_2_2_with_one_seq_id(tmp_path):
    """torch 2.3 wrote version 2.0/2.1 dumps whose entries carry "seq_id", not collective_seq_id / p2p_seq_id."""
    truth = write(Job(8, "wrong_op"), tmp_path / "d")
    for p in (tmp_path / "d").glob("*.pkl"):
        dump = pickle.loads(p.read_bytes())
        for e in dump["entries"]:
            e["seq_id"] = e.pop("collective_seq_id")
            del e["p2p_seq_id"], e["is_p2p"]
        p.write_bytes(pickle.dumps({**dump, "version": "2.1"}, protocol=2))
    check(analyze(tmp_path / "d"), truth)


def test_nccl_work_retired_by_the_watchdog_still_hangs(tmp_path):
    """NCCL's watchdog retires timed-out work (its state stays scheduled/started): not done. Gloo, which has no
    events and keeps every state "scheduled", is done when retired (the real captures test that side)."""
    truth = write(Job(8, "never_joined"), tmp_path / "d")
    for p in (tmp_path / "d").glob("*.pkl"):
        dump = pickle.loads(p.read_bytes())
        for e in dump["entries"]:
            if e["state"] != "completed":
                e.update(state="scheduled", retired=True, time_discovered_started_ns=None)
        p.write_bytes(pickle.dumps(dump, protocol=2))
    check(analyze(tmp_path / "d"), truth)


def test_split_groups_sharing_a_name(tmp_path):
    """torch's split_group can give sibling subgroups one name: members (from pg_config) tell them apart."""
    truth = write(Job(16, "wrong_op"), tmp_path / "d")  # tp groups "1" (0-7) and "2" (8-15); culprit 15
    for p in (tmp_path / "d").glob("*.pkl"):
        dump = pickle.loads(p.read_bytes())
        cfg = dump["pg_config"]
        for name in [n for n, c in cfg.items() if c["desc"] == "mesh_tp"]:
            cfg["tp_split"] = {**cfg.pop(name), "name": "tp_split"}
        for e in dump["entries"]:
            if e["process_group"][1] == "mesh_tp":
                e["process_group"] = ("tp_split", "mesh_tp")
        p.write_bytes(pickle.dumps(dump, protocol=2))
    doc = to_dict(analyze(tmp_path / "d"))
    h = doc["hang"]
    assert (h["group"], h["group_ranks"], h["seq"], h["op"]) == ("tp_split [8]", list(range(8, 16)), truth["seq"],
                                                                 "all_reduce")
    assert h["mismatched"][0]["rank"] == 15
    labels = {g["label"]: g["ranks"] for g in doc["process_groups"] if g["pg"] == "tp_split"}
    assert labels == {"tp_split [0]": list(range(8)), "tp_split [8]": list(range(8, 16))}


def test_damaged_dumps_only_ever_raise_trace_errors(tmp_path, capfd):
    """Real dumps cut short or with flipped bytes (seeded): each one reads or fails with a TraceError, and
    nothing else reaches stderr (CPython prints a SystemError for some corrupt bytearray lengths)."""
    import random

    from analyzer.errors import TraceError

    rng = random.Random(7)
    sources = [(REAL / "wrong_op" / "pickle" / "rank3.pkl").read_bytes(),
               (REAL / "wrong_op" / "json" / "rank3.json").read_bytes()]
    refused = 0
    for i in range(600):
        b = bytearray(sources[i % 2])
        if rng.random() < 0.3:
            b = b[: rng.randrange(1, len(b))]
        else:
            for _ in range(rng.randrange(1, 6)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        p = tmp_path / f"rank{i}.bin"
        p.write_bytes(bytes(b))
        try:
            fr.table([fr.read(p, 0)[1]])
        except TraceError:
            refused += 1
    # one byte turned into BYTEARRAY8 (0x96) with an absurd length: MemoryError, and CPython prints a stray
    # "SystemError: deallocated bytearray object has exported buffers" unless the reader keeps it quiet
    b = bytearray(sources[0])
    b[1958] = 0x96
    (tmp_path / "rank_big.pkl").write_bytes(bytes(b))
    with pytest.raises(TraceError, match="truncated or corrupt"):
        fr.read(tmp_path / "rank_big.pkl", 0)
    assert refused > 300
    assert capfd.readouterr().err == ""


def test_trace_only_options_are_refused_not_ignored():
    out = cli("analyze", REAL / "skip" / "json", "--ranks", "0-1")
    _one_line_exit_2(out, "--ranks", "Flight Recorder dumps")


def test_nesting_is_bounded_in_json_and_pickle_and_the_limit_can_be_raised(tmp_path):
    """Issue #42: a 200,000-deep value crashed the process (exit 139). JSON is measured before it is parsed, a
    pickle walked with an explicit stack; --max-json-depth raises the limit for both."""
    write(Job(8, "never_joined"), tmp_path / "j", "json")
    doc = json.loads((tmp_path / "j" / "rank0.json").read_text())
    text = json.dumps(doc).replace('"input_dtypes": ["BFloat16"]', '"input_dtypes": ' + "[" * 200_000 + "]" * 200_000,
                                   1)
    (tmp_path / "j" / "rank0.json").write_text(text)
    out = cli("analyze", tmp_path / "j", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert any("rank0.json" in w and "nests deeper than 64" in w for w in json.loads(out.stdout)["warnings"])
    _one_line_exit_2(cli("analyze", tmp_path / "j" / "rank0.json"), "rank0.json", "nests deeper than 64")
    d = tmp_path / "p"
    write(Job(8, "never_joined"), d)
    raw = (d / "rank3.pkl").read_bytes()
    nested = pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [], "pg_status": {"x": [[[[[[[[1]]]]]]]]}},
                          protocol=2)
    (d / "rank3.pkl").write_bytes(nested)
    _one_line_exit_2(cli("analyze", d / "rank3.pkl", "--max-json-depth", "5"), "nests deeper than 5")
    assert cli("analyze", d / "rank3.pkl", "--max-json-depth", "12").returncode == 0
    (d / "rank3.pkl").write_bytes(raw)


def test_rank_numbers_are_bounded(tmp_path):
    """Issue #42: rank3000000000.pkl made a 3-billion-rank world (killed at 24 GB); one line, exit 2. Where no dump
    lists the world (gloo), the bound is MAX_RANKS; where one does, a dump outside it is another job's."""
    for name in ("rank3000000000.pkl", "rank1048576.pkl"):
        d = tmp_path / name
        shutil.copytree(REAL / "skip" / "pickle", d)
        shutil.copy(d / "rank3.pkl", d / name)
        _one_line_exit_2(cli("analyze", d), name, "more than any job has")
    d = tmp_path / "listed"
    write(Job(8, "never_joined"), d)
    shutil.copy(d / "rank3.pkl", d / "rank40.pkl")
    _one_line_exit_2(cli("analyze", d), "rank40.pkl", "its job's world is")
