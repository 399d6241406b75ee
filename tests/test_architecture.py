"""The import graph of analyzer/ and dashboards/ follows the data flow (DESIGN.md, README "Architecture").

Built with ``ast`` from the source (every import, also those inside functions; ``if TYPE_CHECKING:`` imports
are annotations and run nothing, so they are left out). Asserted: no cycle; presenters (report, export,
dashboards) import no other presenter and no reader; the shared views import no presenter; every module
imports only its own layer or layers upstream of it:

    ground (rules, model, errors, ranklist, timeline, redact, patterns, comm_catalogue)
    <- ingest <- crossrank <- metrics <- whatif <- analysis (the flow, its cache, units), hangs
    <- history, compare <- views <- presenters (report, export, dashboards)
    <- drivers (the library API in analyzer/__init__, the cli package)

The rules are checked on a synthetic edge list too, so a planted violation is shown to be caught.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analyzer", "dashboards")

# (layer, rank): a module may import its own layer's modules and those of lower rank
LAYERS: tuple[tuple[str, int], ...] = (
    ("analyzer.rules", 0), ("analyzer.model", 0), ("analyzer.errors", 0), ("analyzer.ranklist", 0),
    ("analyzer.timeline", 0), ("analyzer.redact", 0), ("analyzer.patterns", 0), ("analyzer.comm_catalogue", 0),
    ("analyzer.ingest", 1),
    ("analyzer.crossrank", 2),
    ("analyzer.metrics", 3),
    ("analyzer.whatif", 4),
    ("analyzer.analysis", 5), ("analyzer.hangs", 5),
    ("analyzer.history", 6), ("analyzer.compare", 6),
    ("analyzer.views", 7),
    ("analyzer.report", 8), ("analyzer.export", 8), ("dashboards", 8),
    ("analyzer.cli", 9), ("analyzer", 9),
)
PRESENTERS = ("analyzer.report", "analyzer.export", "dashboards")
VIEWS = "analyzer.views"
INGEST = "analyzer.ingest"

# Arrows against the flow left to the stage that owns them (each a reason, not a licence); none today: the
# canonical collectives table is built in ingest (ingest/collectives.py) and the bus factors sit in rules.py
KNOWN_UPSTREAM: set[tuple[str, str]] = set()


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> set[tuple[str, str]]:
    """(importer, imported) between modules of analyzer/ and dashboards/; ``from pkg import mod`` names mod."""
    files = [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    modules = {module_name(p, root) for p in files}
    edges: set[tuple[str, str]] = set()
    for path in files:
        me = module_name(path, root)
        here = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in modules:  # a name inside a module: the module
                    t = t.rpartition(".")[0]
                if t and t != me:
                    edges.add((me, t))
    return edges


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer(module: str) -> tuple[str, int]:
    """The most specific layer a module belongs to."""
    found = [(name, rank) for name, rank in LAYERS if _under(module, name)]
    if not found:
        raise AssertionError(f"{module}: in no layer; add it to LAYERS in tests/test_architecture.py")
    return max(found, key=lambda f: len(f[0]))


def _presenter(module: str) -> str | None:
    return next((p for p in PRESENTERS if _under(module, p)), None)


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def violations(edges: set[tuple[str, str]], known: set[tuple[str, str]] = frozenset()) -> list[str]:
    """Every arrow that breaks a rule, as one line each."""
    found = [f"cycle: {' <-> '.join(c)}" for c in cycles(edges)]
    for a, b in sorted(edges):
        pa, pb = _presenter(a), _presenter(b)
        if pa and pb and pa != pb:
            found.append(f"presenter to presenter: {a} -> {b}")
        if _under(a, VIEWS) and pb:
            found.append(f"views to presenter: {a} -> {b}")
        if (pa or _under(a, VIEWS)) and _under(b, INGEST):
            found.append(f"presenter to ingest: {a} -> {b}")
        (la, ra), (lb, rb) = layer(a), layer(b)
        if rb > ra and (a, b) not in known:
            found.append(f"downstream import: {a} ({la}) -> {b} ({lb})")
    return found


def test_the_import_graph_follows_the_flow() -> None:
    edges = import_graph()
    assert len(edges) > 200 and ("analyzer.analysis", "analyzer.crossrank.graph") in edges  # the graph is real
    assert violations(edges, KNOWN_UPSTREAM) == []


def test_known_exceptions_are_real_arrows() -> None:
    """An exception that no longer exists is removed from the list, so the list stays the debt it names."""
    assert KNOWN_UPSTREAM <= import_graph()


def test_presenters_share_only_views() -> None:
    """Presenters' imports of analyzer code are views, the analysis and the ground floor, never each other."""
    edges = import_graph()
    presenter_targets = {b for a, b in edges if _presenter(a) and not _under(b, _presenter(a))}
    assert not {b for b in presenter_targets if _presenter(b)}
    assert any(_under(b, VIEWS) for b in presenter_targets)


@pytest.mark.parametrize(("edges", "want"), [
    ({("analyzer.report.html", "dashboards.figures")},
     "presenter to presenter: analyzer.report.html -> dashboards.figures"),
    ({("dashboards.export", "analyzer.export")}, "presenter to presenter: dashboards.export -> analyzer.export"),
    ({("analyzer.views.figures", "dashboards.timeline")},
     "views to presenter: analyzer.views.figures -> dashboards.timeline"),
    ({("dashboards.history", "analyzer.ingest.loader")},
     "presenter to ingest: dashboards.history -> analyzer.ingest.loader"),
    ({("analyzer.ingest.kineto.reader", "analyzer.metrics.overlap")},
     "downstream import: analyzer.ingest.kineto.reader (analyzer.ingest) -> analyzer.metrics.overlap (analyzer.metrics)"),
    ({("analyzer.metrics.blame", "analyzer.analysis")},
     "downstream import: analyzer.metrics.blame (analyzer.metrics) -> analyzer.analysis (analyzer.analysis)"),
    ({("analyzer.ingest.loader", "analyzer.ingest.scaleout"), ("analyzer.ingest.scaleout", "analyzer.ingest.loader")},
     "cycle: analyzer.ingest.loader <-> analyzer.ingest.scaleout"),
])
def test_a_planted_violation_is_caught(edges: set[tuple[str, str]], want: str) -> None:
    assert want in violations(edges)


def test_allowed_arrows_pass() -> None:
    ok = {("analyzer.report.html", "analyzer.views.figures"), ("dashboards.layout", "analyzer.views.verdict"),
          ("analyzer.views.verdict", "analyzer.analysis"), ("analyzer.analysis", "analyzer.crossrank.graph"),
          ("analyzer.cli.compose", "analyzer.export"), ("analyzer.cli.compose", "dashboards.app"),
          ("analyzer.report.html", "analyzer.report.markdown"), ("analyzer.history.summary", "analyzer.analysis.units")}
    assert violations(ok) == []


def test_the_resolver_reads_relative_and_lazy_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "analyzer"
    (pkg / "report").mkdir(parents=True)
    (tmp_path / "dashboards").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "rules.py").write_text("X = 1\n")
    (pkg / "report" / "__init__.py").write_text("")
    (pkg / "report" / "html.py").write_text(
        "from typing import TYPE_CHECKING\nfrom ..rules import X\nif TYPE_CHECKING:\n    from dashboards import app\n"
        "def f():\n    from dashboards import figures\n")
    (tmp_path / "dashboards" / "__init__.py").write_text("")
    (tmp_path / "dashboards" / "figures.py").write_text("from analyzer.report import html\n")
    (tmp_path / "dashboards" / "app.py").write_text("")
    edges = import_graph(tmp_path)
    assert edges == {("analyzer.report.html", "analyzer.rules"), ("analyzer.report.html", "dashboards.figures"),
                     ("dashboards.figures", "analyzer.report.html")}
    found = violations(edges)
    assert "cycle: analyzer.report.html <-> dashboards.figures" in found
    assert "presenter to presenter: dashboards.figures -> analyzer.report.html" in found


_TRACESET = re.compile(r"\.traces\b")


def _reads_traceset(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if _TRACESET.search(line.split("#", 1)[0])]


def test_presenters_never_read_the_traceset() -> None:
    # presenters read Analysis (the graph carries the ingested events and the clock), never ``a.traces``
    files = [p for d in ("analyzer/report", "analyzer/export", "analyzer/views", "dashboards")
             for p in sorted((ROOT / d).rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in files for i in _reads_traceset(p.read_text())]
    assert files and found == []
    # the check sees the old spelling
    assert _reads_traceset('gpu = clock.to_reference(a.traces.gpu.select("rank"))') == [1]
