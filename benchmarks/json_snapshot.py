"""Write the JSON report of every real trace set, or compare two such snapshots.

Used to show that a refactor leaves every number as it was (issue #33: "every JSON report of every
real set is identical before and after the move"). A set is a folder of ``rank<N>`` files, an
Nsight export, a single-rank Kineto file or an op table; ``sample_traces/`` and ``../shared/traces``
are walked.

    python benchmarks/json_snapshot.py write OUT_DIR [CACHE_DIR]
    python benchmarks/json_snapshot.py diff BEFORE_DIR AFTER_DIR

With CACHE_DIR the reports go through that cache (the first write fills it, a second write reads every
set's tables and analysis back: ``analyzer/analysis/cache.py``); without, ``--no-cache``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# ../shared/traces beside the checkout (or beside the folder of worktrees a checkout sits in); a checkout
# elsewhere names it in $COMMSCOPE_SHARED_TRACES
SHARED = Path(os.environ["COMMSCOPE_SHARED_TRACES"]) if os.environ.get("COMMSCOPE_SHARED_TRACES") else next(
    (p / "shared" / "traces" for p in ROOT.parents[:2] if (p / "shared" / "traces").is_dir()),
    ROOT.parent / "shared" / "traces")
_RANK = re.compile(r"rank[-_]?\d+")
# fields that name where or when the run happened, not what it measured
_VOLATILE = {"generated_at", "elapsed_s", "cache_dir", "path", "paths", "file", "files", "source_file",
             "commscope_version", "version"}


def trace_sets() -> list[tuple[str, list[Path]]]:
    files = [p for root in (ROOT / "sample_traces", SHARED) if root.is_dir() for p in root.rglob("*")
             if p.is_file() and (p.name.endswith((".json", ".json.gz", ".sqlite", ".parquet")))
             and p.name != "ground_truth.json" and "flight_recorder" not in p.parts
             and "nccl_inspector" not in p.parts and not re.match(r"(ms|mw|result)-", p.name)]
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(f)
    out = []
    for d, fs in sorted(by_dir.items()):
        ranked = sorted(f for f in fs if _RANK.search(f.name))
        rel = d.relative_to(ROOT) if d.is_relative_to(ROOT) else Path("shared") / d.relative_to(SHARED)
        if len(ranked) > 1:
            out.append((str(rel), [d]))
        for f in sorted(set(fs) - set(ranked if len(ranked) > 1 else [])):
            out.append((f"{rel}/{f.name}", [f]))
    return out


def write(out: Path, cache: Path | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COMMSCOPE_CACHE_DIR": str(cache)} if cache else None
    for name, paths in trace_sets():
        target = out / (name.replace("/", "__") + ".json")
        r = subprocess.run([sys.executable, "-m", "analyzer.cli", "analyze", "--format", "json",
                            *([] if cache else ["--no-cache"]), "-o", str(target), *map(str, paths)], cwd=ROOT,
                           capture_output=True, text=True, env=env)
        if r.returncode:
            target.with_suffix(".err").write_text(f"rc={r.returncode}\n{r.stdout}{r.stderr.strip()[-400:]}\n")
        print(f"{r.returncode} {name}", flush=True)


def _strip(x: object) -> object:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in _VOLATILE}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _walk(a: object, b: object, at: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{at}.{k}: {'added' if k not in a else 'removed'}")
            else:
                _walk(a[k], b[k], f"{at}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{at}[{i}]", out)
    elif a != b:
        out.append(f"{at}: {str(a)[:80]} -> {str(b)[:80]}")


def _paths(text: str) -> str:
    # the same input read from another checkout: compare from the trace folder down
    return re.sub(r"\S*/(sample_traces|shared/traces)/", r"\1/", text)


def diff(before: Path, after: Path) -> int:
    changed = 0
    for fa in sorted(set(p.name for p in before.iterdir()) | set(p.name for p in after.iterdir())):
        a, b = before / fa, after / fa
        if not a.exists() or not b.exists():
            print(f"{fa}: only in {'after' if not a.exists() else 'before'}")
            changed += 1
            continue
        if fa.endswith(".err"):
            if _paths(a.read_text()) != _paths(b.read_text()):
                print(f"{fa}: error text differs")
                changed += 1
            continue
        lines: list[str] = []
        _walk(_strip(json.loads(a.read_text())), _strip(json.loads(b.read_text())), "", lines)
        if lines:
            changed += 1
            print(f"{fa}: {len(lines)} differences")
            for line in lines[:15]:
                print(f"    {line}")
    print(f"{changed} of {len(list(before.iterdir()))} reports differ")
    return 1 if changed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["write"]:
        write(Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None)
    elif sys.argv[1:2] == ["diff"]:
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
