"""What the CLI's history commands do, in one call each (the commands stay thin)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING

from ..errors import UsageError
from .store import Store

if TYPE_CHECKING:  # the analysis stages are imported only by the commands that analyze (trend does not)
    from ..analysis import Analysis
    from .trend import Trend


def parse_labels(values: tuple[str, ...] | list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--label {v!r}: expected KEY=VALUE, e.g. commit=abc123 or branch=main")
        out[key.strip()] = val.strip()
    return out


def _tool_version() -> str | None:
    try:
        return package_version("commscope")
    except PackageNotFoundError:
        return None


def add(target: str, a: Analysis, run_id: str | None = None, labels: dict[str, str] | None = None) -> str:
    """Store one analysis; returns the run ID. The store is opened (and checked) before the summary is built."""
    from .fingerprint import fingerprints
    from .summary import layout, metric_rows, verdict

    with Store.open(target, create=True) as store:
        return store.add_run(metric_rows(a), a.source, run_id=run_id, labels=labels, verdict=verdict(a),
                             fingerprints=fingerprints(a.source.get("paths", [])), tool_version=_tool_version(),
                             layout=layout(a))


def baseline_analysis(target: str, name: str) -> tuple[Analysis, str]:
    """The named baseline's run, as compare reads it, and its run ID."""
    from .stored import load_analysis

    with Store.open(target, create=False) as store:
        run_id = store.baseline(name)
        return load_analysis(store, run_id), run_id


def check(target: str, create: bool) -> None:
    """Open (and migrate) the store once and close it: a bad store fails before any slow work."""
    Store.open(target, create=create).close()


def _target(target: str | None) -> str:
    from .store import default_target

    return target if target is not None else default_target()


def trend(target: str | None, metrics: list[str], since: str | None, labels: dict[str, str], per_rank: bool
          ) -> Trend:
    from .trend import build

    with Store.open(_target(target), create=False) as store:
        return build(store, metrics or None, since, labels, per_rank)


def set_baseline(target: str | None, name: str, run_id: str) -> str | None:
    with Store.open(_target(target), create=False) as store:
        return store.set_baseline(name, run_id)


def baselines(target: str | None) -> list[dict]:
    with Store.open(_target(target), create=False) as store:
        return store.baselines()
