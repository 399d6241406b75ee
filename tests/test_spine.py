"""The graph is the spine (issue #33, DESIGN "graph ... the only place offsets are applied").

1. No module but ``analyzer/crossrank/graph.py`` applies clock offsets: a grep of ``analyzer/`` and ``dashboards/``
   for the ways they were applied before (``align.apply``, ``offsets_ns`` lookups, offset columns, a clock of
   one's own). Showing an offset to a person (in us) is not applying it.
2. On a real multi-rank capture whose ranks' clocks are moved by known amounts, every aligned time that the
   graph and its consumers hold is the raw time minus round(offset), checked row by row in plain Python.
3. Each process group's dimension is named in the cross-rank stage only (a grep), before the graph, and every
   matched comm node carries its group's dimension as worked out in plain Python from the group's description
   and membership.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from analyzer.analysis import analyze
from analyzer.crossrank import step_sync
from analyzer.ingest.loader import LoadOptions, load
from analyzer.model import TraceSet

ROOT = Path(__file__).resolve().parents[1]
HOME = "analyzer/crossrank/graph.py"
# where offsets are fitted (it names them; it does not apply them) and where the graph's clock is made from the fit
FIT = "analyzer/crossrank/align.py"
MAKER = "analyzer/analysis/__init__.py"

APPLY = [
    (re.compile(r"\balign\.apply\b|^\s*def apply\(|import [^\n]*\bapply\b"), "align.apply"),
    (re.compile(r"\boffsets_ns\b"), "offsets_ns"),
    (re.compile(r"\.offsets\b(?!_)"), "an offsets table"),
    (re.compile(r"""["'](_off|off_ns|_offset|offset_ns)["']"""), "an offset column"),
    (re.compile(r"replace_strict\([^)]*off"), "an offset lookup"),
    (re.compile(r"\bClock\.(of|from_offsets)\(|\bClock\(\{"), "a clock of its own"),
]


def _display(line: str) -> bool:
    """An offset shown to a person (microseconds in a report or a trace's note), not subtracted from a time."""
    return "NS_PER_US" in line or "_us" in line


def offenders(text: str, path: str) -> list[str]:
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        for pat, what in APPLY:
            if not pat.search(line):
                continue
            if what == "offsets_ns" and (path == FIT or _display(line)):
                continue
            if what == "an offsets table" and _display(line):
                continue
            if what == "a clock of its own" and path == MAKER:
                continue
            out.append(f"{path}:{no}: {what}: {line.strip()}")
    return out


def test_the_grep_finds_what_the_code_did_before() -> None:
    # the seven places as they read before the graph took the offsets (one line of each)
    before = {
        "analyzer/analysis/__init__.py": 'aligned = align.apply(inst.select("rank", "start_ns", "end_ns"), fit)',
        "analyzer/metrics/critical_path.py": 'off = pl.DataFrame({"rank": list((offsets_ns or {}).keys()),',
        "analyzer/export/tables.py": 'off = pl.col("rank").replace_strict(p.offsets, default=0, return_dtype=pl.Int64)',
        "analyzer/views/timeline.py": 'gpu = align.apply(a.traces.gpu.select("rank", "start_ns"), a.clock)',
        "dashboards/pipeline.py": '.join(off, on="rank", how="left").with_columns(pl.col("_off").fill_null(0))',
        "analyzer/metrics/pipeline.py": 'pl.col("off_ns").first(),',
        "analyzer/crossrank/step_sync.py": 'start = (pl.col("_s") + pl.col("_off")).round().cast(pl.Int64)',
        "dashboards/other.py": "clock = Clock.of(a.clock)",
    }
    for path, line in before.items():
        assert offenders(line, path), path
    # showing an offset is fine
    assert not offenders('off_us = round(a.clock.offsets_ns.get(rank, 0.0)) / NS_PER_US', "analyzer/export/text.py")


def test_offsets_are_applied_only_in_the_graph() -> None:
    # ingest/ runs before align (no clock offset exists there; its "_off" lays op-table steps end to end)
    files = sorted(p for d in ("analyzer", "dashboards") for p in (ROOT / d).rglob("*.py")
                   if "ingest" not in p.relative_to(ROOT).parts)
    assert len(files) > 50
    found = []
    for f in files:
        rel = f.relative_to(ROOT).as_posix()
        if rel != HOME:
            found += offenders(f.read_text(), rel)
    assert not found, "\n".join(found)


# rank -> ns its clock is moved ahead: odd amounts, so that a rounding or sign slip shows
SHIFT = {1: 40_000_017, 2: -25_000_003, 3: 70_000_123}
REAL = ROOT / "sample_traces" / "real_parallel" / "tp_pp_dp_mps_slow"


def _shifted(ts: TraceSet) -> TraceSet:
    move = pl.col("rank").replace_strict(list(SHIFT), list(SHIFT.values()), default=0, return_dtype=pl.Int64)

    def shift(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.col("start_ns") + move, pl.col("end_ns") + move)

    return TraceSet(ranks=ts.ranks, gpu=shift(ts.gpu), cpu=shift(ts.cpu), collectives=shift(ts.collectives),
                    steps=shift(ts.steps), skipped=ts.skipped, warnings=ts.warnings)


@pytest.fixture(scope="module")
def skewed():
    ts = _shifted(load([REAL], LoadOptions(jobs=1, cache=False)))
    a = analyze(ts)
    off = {r: round(v) for r, v in a.clock.offsets_ns.items()}
    return ts, a, off


def test_the_fit_sees_the_moved_clocks(skewed) -> None:
    ts, a, off = skewed
    assert a.clock.method == "collective-end" and sorted(off) == [0, 1, 2, 3, 4, 5, 6, 7]
    # the moved amounts come back to within the ends' spread (ms here: eight ranks time-share GPUs through MPS), so
    # every aligned time below is tens of ms away from its raw one
    for r, d in SHIFT.items():
        assert off[r] == pytest.approx(d, abs=5_000_000), (r, off[r])
    assert a.graph.clock.by_rank == off


def _rows(df: pl.DataFrame, *cols: str) -> list[tuple]:
    return sorted(df.select(*cols).iter_rows())


def test_graph_nodes_and_steps_are_raw_minus_rounded_offset(skewed) -> None:
    ts, a, off = skewed
    n = a.graph.nodes
    assert n.height > 1000
    for r, s, e, a_s, a_e in n.select("rank", "start_ns", "end_ns", "a_start_ns", "a_end_ns").iter_rows():
        assert (a_s, a_e) == (s - off[r], e - off[r])
    # the nodes are the raw kernels (end at least start + 1)
    raw = ts.gpu.filter(pl.col("kind") != "sync").unique(["rank", "stream", "start_ns", "end_ns", "name"])
    assert _rows(n, "rank", "start_ns") == _rows(raw, "rank", "start_ns")
    want = sorted((r, st, s, e, s - off[r], e - off[r]) for r, st, s, e in ts.steps.select(
        "rank", "step", "start_ns", "end_ns").iter_rows())
    assert _rows(a.graph.steps, "rank", "step", "start_ns", "end_ns", "a_start_ns", "a_end_ns") == want


def test_comm_rows_and_common_steps_use_the_same_offsets(skewed) -> None:
    ts, a, off = skewed
    k = a.kernels
    for r, s, e, a_s, a_e in k.select("rank", "start_ns", "end_ns", "a_start_ns", "a_end_ns").iter_rows():
        assert (a_s, a_e) == (s - off[r], e - off[r])
    # step sync: step N starts at the earliest aligned start of step N over the linked ranks, on each rank's clock
    linked = sorted(k.filter(pl.col("instance").is_not_null())["rank"].unique().to_list())
    synced, _ = step_sync.common_windows(a.graph, linked)
    first: dict[int, int] = {}
    for r, st, s in ts.steps.select("rank", "step", "start_ns").iter_rows():
        if r in linked:
            first[st] = min(first.get(st, s - off[r]), s - off[r])
    got = [(r, st, s) for r, st, s, _ in synced.iter_rows() if r in linked]
    assert got and all(s == first[st] + off[r] for r, st, s in got)


def test_timeline_and_export_are_on_the_graphs_clock(skewed) -> None:
    from analyzer.export import tables
    from analyzer.export.selection import Selection
    from analyzer.views import timeline

    ts, a, off = skewed
    prep = timeline.prepare(a)
    got = [(r, s + prep.origin_ns, e + prep.origin_ns) for r, s, e in prep.gpu.select("rank", "start_ns", "end_ns")
           .iter_rows()]
    want = [(r, s - off[r], e - off[r]) for r, s, e in ts.gpu.select("rank", "start_ns", "end_ns").iter_rows()]
    assert sorted(got) == sorted(want)
    assert prep.origin_ns == min(s for _, s, _ in want)
    steps = [(r, st, s + prep.origin_ns) for r, st, s, _ in prep.steps.iter_rows()]
    assert sorted(steps) == sorted((r, st, s - off[r]) for r, st, s, _ in ts.steps.iter_rows())

    p = tables.plan(a, Selection(ranks=(1, 2)))
    assert p.offsets == off and p.origin_ns == prep.origin_ns
    for t in tables.rank_tables(a, p, (1, 2)):
        comm = t.slices.filter((pl.col("cat") == "comm") & (pl.col("pos") == 0))
        raw = ts.collectives.filter(pl.col("rank") == t.rank)
        assert sorted(comm["start_ns"].to_list()) == sorted(s - off[t.rank] for s in raw["start_ns"])
        st = t.slices.filter(pl.col("cat") == "step")
        assert sorted(st["start_ns"].to_list()) == sorted(
            s - off[t.rank] for s in ts.steps.filter(pl.col("rank") == t.rank)["start_ns"])


def test_pipeline_schedule_is_on_the_graphs_clock(skewed) -> None:
    from dashboards import pipeline as view

    ts, a, off = skewed
    assert a.pipeline is not None
    comp, tr, step = view.schedule_rows(a)
    rs = a.pipeline["rank_steps"]
    win = rs.filter((pl.col("step") == step) & (pl.col("chain") == rs["chain"].min()))
    t0 = min(s - off[r] for r, s in win.select("rank", "start_ns").iter_rows())
    bounds = {r: (s, e) for r, s, e in win.select("rank", "start_ns", "end_ns").iter_rows()}
    want = sorted(((s - off[r] - t0) / 1e6, r) for r, s, e in a.pipeline["transfers"].select(
        "rank", "start_ns", "end_ns").iter_rows() if r in bounds and s < bounds[r][1] and e > bounds[r][0])
    got = sorted(tr.select("start_ms", "rank").iter_rows())
    assert want and [r for _, r in got] == [r for _, r in want]
    assert [t for t, _ in got] == pytest.approx([t for t, _ in want], abs=1e-9)  # ms, to a picosecond


# --- the graph's instance table is the one blame and the export read (issue #33: "none ... rebuilds instances")

# what building an instance table or a comm-kernel order of one's own looked like in blame and the export
REBUILD = [
    # a table of kernels grouped by instance (grouping one's own results per instance, e.g. blame's per-peer parts,
    # is not building one)
    (re.compile(r"""\b(rows|kern\w*|nodes|matched|m)\.group_by\(\s*["']instance["']|over\(\s*["']instance["']\)"""),
     "an instance table"),
    (re.compile(r"\brows\b"), "a comm-kernel table of its own"),
    (re.compile(r"\bring_hop\b"), "the ring-hop rule"),
    (re.compile(r"""str\.split\(\s*["'],["']\s*\)"""), "a member-list parser"),
    (re.compile(r"""sort\(\s*["']rank["'],\s*["']start_ns["']\s*\)"""), "a comm-kernel order"),
    (re.compile(r"""pl\.col\(\s*["']instance["']\s*\)\.unique\(|with_row_index\(\s*["']_k["']\s*\)\s*$"""),
     "instances or kernel ids of its own"),
    (re.compile(r"\ba\.kernels\b"), "the analysis' kernel table instead of the graph's"),
]
READERS = ("analyzer/metrics/blame.py", "analyzer/export/tables.py")


# blame's own: no kernel rows, no order (the export names its own rows and sorts its step slices)
BLAME_ONLY = {"a comm-kernel table of its own", "a comm-kernel order"}


def rebuilds(text: str, blame: bool = True) -> list[str]:
    return [f"{no}: {what}: {line.strip()}" for no, line in enumerate(text.splitlines(), 1)
            for pat, what in REBUILD if pat.search(line) and (blame or what not in BLAME_ONLY)]


def test_the_rebuild_grep_finds_what_blame_and_the_export_did_before() -> None:
    # one line of each, as blame and the export read before the graph carried members and kernel ids
    for line in ('inst = rows.group_by("instance").agg(', "hop = ring_hop(rows)",
                 '.with_columns(pl.col("group_ranks").str.split(",").cast(pl.List(pl.Int32)).alias("member"))',
                 '.sort("rank", "start_ns")', 'ids = m.select(pl.col("instance").unique().sort())',
                 'return k.with_row_index("_k")', "k = a.kernels if a.kernels is not None else x"):
        assert rebuilds(line), line


def test_blame_and_the_export_read_the_graphs_instances() -> None:
    for rel in READERS:
        found = rebuilds((ROOT / rel).read_text(), blame=rel.endswith("blame.py"))
        assert not found, rel + "\n" + "\n".join(found)
    # and the analysis hands them the graph's tables
    text = (ROOT / MAKER).read_text()
    assert "blame.root_cause(dep.members," in text and "kernels=dep.kernels" in text
    # and the collectives report is the graph's instance table, not one of its own
    assert "itable = _instance_frame(dep)" in text and "instance_table(" not in text
    assert "Graph.kernels" in (ROOT / READERS[1]).read_text() and "g.kernels" in (ROOT / READERS[1]).read_text()


def _raw_groups(ts: TraceSet) -> dict[tuple, dict[int, tuple[int, int, int]]]:
    """Brute force: the raw collectives table grouped by (process group, its members, seq) in plain Python:
    each group's kernels by rank (stream, start, end)."""
    out: dict[tuple, dict[int, tuple[int, int, int]]] = {}
    for r, pg, members, seq, stream, s, e in ts.collectives.select(
            "rank", "pg", "group_ranks", "seq", "stream", "start_ns", "end_ns").iter_rows():
        out.setdefault((pg, members, seq), {})[r] = (stream, s, e)
    return out


@pytest.fixture(scope="module")
def ring():
    ts = load([ROOT / "sample_traces" / "real_parallel" / "cp_ring_mps_slow"], LoadOptions(jobs=1, cache=False))
    return ts, analyze(ts)


@pytest.mark.parametrize("which", ["skewed", "ring"])
def test_the_graphs_instance_table_holds_every_matched_collective_and_p2p_exchange(which, request) -> None:
    ts, a = request.getfixturevalue(which)[:2]
    g = a.graph
    raw = _raw_groups(ts)
    # every raw group seen on 2 ranks or more (one kernel each here: every kernel of these captures has metadata)
    want = {key: sorted(by) for key, by in raw.items() if len(by) >= 2}
    assert len(want) == sum(1 for by in raw.values() if len(by) >= 2) > 20
    ops = {row[1] for row in ts.collectives.select("pg", "op").iter_rows()}
    assert "send_recv" in ops  # p2p exchanges are in it
    # the graph's instance of each raw kernel, through its comm-kernel table's row: the same raw group, whole
    where = {(r, st, s, e): key for key, by in raw.items() for r, (st, s, e) in by.items()}
    got: dict[int, set] = {}
    ranks: dict[int, list[int]] = {}
    for r, st, s, e, inst in g.kernels.select("rank", "stream", "start_ns", "end_ns", "inst").iter_rows():
        if inst is not None:
            got.setdefault(inst, set()).add(where[(r, st, s, e)])
            ranks.setdefault(inst, []).append(r)
    assert all(len(keys) == 1 for keys in got.values())
    by_key = {next(iter(keys)): inst for inst, keys in got.items()}
    assert sorted(by_key) == sorted(want)
    inst = {row["inst"]: row for row in g.instances.iter_rows(named=True)}
    assert sorted(inst) == list(range(len(want)))
    for key, i in by_key.items():
        assert inst[i]["ranks"] == want[key] == sorted(ranks[i]) and inst[i]["n"] == len(want[key])
    # what the collectives report says of each instance comes from the same table: skews and first arrival on the
    # aligned clock (raw minus the rounded offset), the smallest seq, one report row per instance
    off = {r: round(v) for r, v in a.clock.offsets_ns.items()}
    for key, i in by_key.items():
        s = [st - off.get(r, 0) for r, (_, st, _) in raw[key].items()]
        e = [en - off.get(r, 0) for r, (_, _, en) in raw[key].items()]
        row = inst[i]
        assert (row["arrival_skew_ns"], row["end_skew_ns"], row["first_start_ns"], row["seq"]) == (
            max(s) - min(s), max(e) - min(e), min(s), key[2])
    assert a.collectives.height == len(want) == a.matching["instances"]
    # every matched kernel is a node that carries its row id, and blame's units are the instances (a ring's hop:
    # split per rank waited for), their caused wait the members' wait
    k = g.kernels.filter(pl.col("inst").is_not_null())
    assert k["node"].null_count() == 0
    assert g.nodes.filter(pl.col("k").is_not_null()).select("k", "inst").sort("k").rows() == \
        k.select("k", "inst").sort("k").rows()
    units = g.members.units
    assert set(units["instance"]) == set(g.instances["instance"])
    split = {i: len(set(lr)) for i, lr in k.group_by("instance").agg(pl.col("last_rank")).iter_rows()}
    assert units.height == sum(split.values()) and (units.height > len(want)) == (which == "ring")
    assert units["caused_ns"].sum() == pytest.approx(float(k["wait_ns"].sum()))


def test_export_flows_are_the_graphs_instances(skewed) -> None:
    from analyzer.export import tables
    from analyzer.export.selection import Selection

    ts, a, off = skewed
    p = tables.plan(a, Selection())
    kern = a.graph.kernels.select("k", "inst")
    flows = p.flows.join(kern, left_on="_k", right_on="k")
    # one flow per graph instance, over all its participants, in aligned start order (out ... in)
    per = flows.group_by("flow_id").agg(pl.col("inst").n_unique().alias("n"), pl.col("inst").first(), pl.len())
    assert (per["n"] == 1).all() and per["inst"].n_unique() == per.height == a.graph.instances.height
    n = dict(a.graph.instances.select("inst", "n").iter_rows())
    assert all(n[i] == c for i, c in per.select("inst", "len").iter_rows())


# --- the graph carries each comm kernel's parallelism dimension, named in the cross-rank stage only ---

# ways of deciding a group's dimension (a naming function, a call that names per kernel, a dimension written as a
# literal, a rule on group names); crossrank/ is where they live
DECIDE = [
    (re.compile(r"^\s*def (groups|meta_groups|hosts|row_dimensions|pair_dimension|pg_dimensions|from_description|"
                r"family|_classify|_by_layout)\("), "a naming function"),
    (re.compile(r"\b(row_dimensions|pair_dimension|pg_dimensions|from_description|_classify|_by_layout)\("),
     "a naming call"),
    (re.compile(r"""lit\(["'](tp|cp|ep|dp|fsdp|pp|world)["']\)"""), "a dimension literal"),
    (re.compile(r"""["'](default_pg|mesh_\w+|_?DATA_PARALLEL_GROUP|TENSOR_MODEL_PARALLEL_GROUP)["']|\^\(default_pg"""),
     "a group-name rule"),
]
# the world group's name read to find the job's world (Flight Recorder checks and hang votes), not to name a dimension
WORLD_BY_NAME = {
    ("analyzer/ingest/flight_recorder/reader.py", 'if desc != "default_pg":'),
    ("analyzer/hangs/hang.py", 'world = groups.filter(pl.col("desc") == "default_pg")["size"]'),
}


def deciders(text: str, path: str) -> list[str]:
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        code = line.split("#")[0]
        if (path, line.strip()) in WORLD_BY_NAME:
            continue
        out += [f"{path}:{no}: {what}: {line.strip()}" for pat, what in DECIDE if pat.search(code)]
    return out


def test_the_naming_grep_finds_what_the_code_did_before() -> None:
    # one line of each, as analysis and metrics/dimensions.py read before the graph carried the dimension
    for line in ("    drows = dimensions.row_dimensions(dep.kernels, groups, dims.layout)",
                 "                                 dimensions.pg_dimensions(groups), prepared)",
                 '    (r"^(default_pg|world|_?world_group|global)$", "world"),',
                 '        pl.when(pl.col("size") >= world).then(pl.lit("world"))',
                 "def groups(meta_groups: pl.DataFrame, rows: pl.DataFrame, world: int, hosts: pl.DataFrame | None,"):
        assert deciders(line, "analyzer/metrics/dimensions.py"), line
    assert not deciders('    per = kern.group_by("rank", "dimension").agg(', "analyzer/metrics/dimensions.py")


def test_only_the_crossrank_stage_names_a_groups_dimension() -> None:
    files = sorted(p for d in ("analyzer", "dashboards") for p in (ROOT / d).rglob("*.py")
                   if p.relative_to(ROOT).parts[:2] != ("analyzer", "crossrank"))
    assert len(files) > 50
    found = [hit for f in files for hit in deciders(f.read_text(), f.relative_to(ROOT).as_posix())]
    assert not found, "\n".join(found)
    assert deciders((ROOT / "analyzer" / "crossrank" / "groups.py").read_text(), "analyzer/crossrank/groups.py")
    # and the analysis reads the graph's: per-kernel dimensions, the groups and the pg -> dimension map
    text = (ROOT / MAKER).read_text()
    assert "groups = dep.groups" in text and "drows = dep.kernels" in text and "dep.pg_dimensions" in text


def _brute_dimensions(ts: TraceSet) -> dict[tuple[str, tuple[int, ...]], tuple[str, bool]]:
    """(pg, members) -> (dimension, intra_node) in plain Python, from each group's description and, independently,
    its membership: this capture's DeviceMesh is (dp, pp, tp) = (2, 2, 2), slowest first, so rank = 4 dp + 2 pp + tp;
    the axis its members differ along is its dimension (all three: the world). One host of 8 GPUs (the traces name
    none; 8 per host is the default)."""
    by_desc = {"default_pg": "world", "mesh_dp": "dp", "mesh_pp": "pp", "mesh_tp": "tp"}
    out = {}
    for m in ts.ranks:
        for g in m.process_groups:
            coords = [{"dp": r // 4, "pp": r // 2 % 2, "tp": r % 2} for r in g.ranks]
            varying = {axis for axis in ("dp", "pp", "tp") if len({c[axis] for c in coords}) > 1}
            by_members = "world" if len(varying) == 3 else varying.pop()
            assert by_desc[g.desc] == by_members, (g.name, g.desc, g.ranks)
            out[(g.name, tuple(sorted(g.ranks)))] = (by_members, len({r // 8 for r in g.ranks}) == 1)
    return out


def test_every_matched_comm_node_carries_its_process_groups_dimension(skewed) -> None:
    ts, a, _ = skewed
    g = a.graph
    want = _brute_dimensions(ts)
    assert {d for d, _ in want.values()} == {"world", "dp", "pp", "tp"}
    kern = g.kernels.filter(pl.col("inst").is_not_null()).select("k", "node", "inst", "pg", "group_ranks")
    node = {row[0]: row[1:] for row in g.nodes.select("node", "k", "kind", "dimension", "intra_node").iter_rows()}
    per_inst: dict[int, set] = {}
    for k, n, inst, pg, members in kern.iter_rows():
        expect = want[(pg, tuple(sorted(int(r) for r in members.split(","))))]
        assert node[n] == (k, "comm", *expect), (pg, members)
        per_inst.setdefault(inst, set()).add(expect)
    assert kern.height == ts.collectives.height > 600 and len(per_inst) == g.instances.height
    # the instance table and the collectives report carry the same, one dimension per instance
    assert all(len(v) == 1 for v in per_inst.values())
    got = {i: (d, x) for i, d, x in g.instances.select("inst", "dimension", "intra_node").iter_rows()}
    assert got == {i: next(iter(v)) for i, v in per_inst.items()}
    assert a.collectives["dimension"].to_list() == g.instances.sort("inst")["dimension"].to_list()
    # every other node carries none
    assert g.nodes.filter(pl.col("k").is_null())["dimension"].null_count() == g.nodes.filter(pl.col("k").is_null()).height
    # the per-rank dimension metrics split the same kernels: each rank's dimensions are those of its groups
    mine = {(r, d) for key, (d, _) in want.items() for r in key[1]}
    seen = {(r, d) for r, d in a.dimensions.select("rank", "dimension").iter_rows()}
    assert seen <= mine and {d for _, d in seen} == {"world", "dp", "pp", "tp"}
