"""A newcomer's install: a clean virtual environment (no system site-packages), a non-editable ``pip install``
of a copy of this checkout, then the installed command and package used from outside the source tree.

Would have caught the undeclared numpy: ``pip check``, every module of ``analyzer`` and ``dashboards`` imported,
``commscope analyze``, ``compare`` and ``dashboard`` run, and every third-party module the package imports named
by a requirement of its own (a module that only arrives through another package's dependencies fails).
Slow (it installs polars, scipy, dash, ... from the package index or pip's cache); CI runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

HYBRID = Path("sample_traces", "gpu_h200", "hybrid_tp_dp")
_JUNK = {".git", ".venv", "venv", "build", "dist", "out", "test-artifacts", ".commscope-cache", ".whl", ".gl",
         ".pytest_cache", ".ruff_cache", "__pycache__"}

# Run inside the installed environment: import every module, then check that each third-party module the
# package imports is declared by the package itself (its installed Requires-Dist), not merely present.
_CHECK = r'''
import ast, importlib, importlib.metadata as md, importlib.util, json, pkgutil, re, sys
from pathlib import Path
import analyzer, dashboards

names = []
for pkg in (analyzer, dashboards):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if info.name.endswith(".__main__"):  # python -m analyzer.cli: importing it runs the command
            continue
        importlib.import_module(info.name)
        names.append(info.name)
files = {m: sys.modules[m].__file__ for m in ["analyzer", "dashboards", *names]}

norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
declared = {norm(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0]) for r in md.requires("commscope") or []}
provides = {m: {norm(d) for d in ds} for m, ds in md.packages_distributions().items()}
via_extra = {"distributed": "dask"}  # dask[distributed], the --scheduler extra (imported lazily)
undeclared = {}
for pkg in (analyzer, dashboards):
    sources = sorted(Path(pkg.__file__).parent.rglob("*.py"))
    assert len(sources) > 3, pkg  # a glob that finds nothing would check nothing
    for f in sources:
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else (
                [n.module] if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module else [])
            for mod in mods:
                top = mod.split(".")[0]
                if top in sys.stdlib_module_names or top in ("analyzer", "dashboards"):
                    continue
                dists = provides.get(top) if importlib.util.find_spec(top) else None
                ok = bool(dists & declared) if dists else norm(via_extra.get(top, top)) in declared
                if not ok:
                    undeclared.setdefault(top, []).append(f.name)
from analyzer.ingest.kineto import native  # the C scanner, built by pip install (a C compiler on the machine)
print(json.dumps({"modules": names, "files": files, "undeclared": undeclared, "native": native.available()}))
'''


def _copy_checkout(dest: Path) -> Path:
    """This checkout without VCS data, virtual environments, caches and build output."""
    def ignore(folder: str, entries: list[str]) -> set[str]:
        rel = Path(folder).resolve().relative_to(ROOT)
        out = {e for e in entries if e in _JUNK or e.endswith((".egg-info", ".so", ".pyd"))}  # built by the install
        if rel == Path("benchmarks"):
            out.add("data")
        return out

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    return dest


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(cmd: list[str | Path], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(virtual environment, an empty working folder outside the source tree)."""
    root = tmp_path_factory.mktemp("newcomer")
    src = _copy_checkout(root / "src")
    env_dir = root / "venv"
    _run([sys.executable, "-m", "venv", env_dir], cwd=root, timeout=300)  # no system site-packages
    cfg = (env_dir / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg
    _run([env_dir / "bin" / "python", "-m", "pip", "install", "--no-input", "-q", src], cwd=root, timeout=1500)
    shutil.rmtree(src)  # nothing may depend on the source tree
    work = root / "work"
    work.mkdir()
    return env_dir, work


def test_pip_check(venv: tuple[Path, Path]) -> None:
    env_dir, work = venv
    _run([env_dir / "bin" / "python", "-m", "pip", "check"], cwd=work)


def test_every_module_imports_and_every_import_is_declared(venv: tuple[Path, Path]) -> None:
    env_dir, work = venv
    out = json.loads(_run([env_dir / "bin" / "python", "-c", _CHECK], cwd=work).stdout)
    assert {"analyzer.cli", "analyzer.compare.diff", "analyzer.ingest.kineto.reader", "analyzer.metrics.overlap",
            "dashboards.app", "analyzer.views.figures"} <= set(out["modules"])
    site = str(env_dir.resolve())
    assert all(str(Path(f).resolve()).startswith(site) for f in out["files"].values()), out["files"]
    assert out["undeclared"] == {}, f"imported but not declared in pyproject.toml: {out['undeclared']}"
    assert out["native"], "pip install did not build the Kineto scanner (analyzer/ingest/kineto/_kscan.c)"


def test_commscope_help_and_analyze(venv: tuple[Path, Path]) -> None:
    env_dir, work = venv
    exe = env_dir / "bin" / "commscope"
    assert "analyze" in _run([exe, "--help"], cwd=work).stdout
    traces = ROOT / HYBRID
    rep = json.loads(_run([exe, "analyze", traces, "--format", "json"], cwd=work).stdout)
    assert [r["rank"] for r in rep["ranks"]] == [0, 1, 2, 3]
    assert rep["stragglers"]["verdict"]["rank"] == 3
    res = _run([exe, "compare", traces, traces], cwd=work)  # the significance test (scipy) runs too
    assert "PASS" in res.stdout.upper()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dashboard_starts(venv: tuple[Path, Path]) -> None:
    env_dir, work = venv
    port = _free_port()
    proc = subprocess.Popen([str(env_dir / "bin" / "commscope"), "dashboard", str(ROOT / HYBRID), "--host",
                             "127.0.0.1", "--port", str(port)], cwd=work, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    status = resp.status
                    page = resp.read().decode()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        assert status == 200, f"dashboard did not answer (exit {proc.poll()})"
        assert "_dash-config" in page or "dash" in page.lower()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
