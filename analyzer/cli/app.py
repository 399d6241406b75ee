"""Click commands only: parse options, call the library, render. One error boundary: exit code 2."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from .. import ranklist
from ..redact import remember_environment
from . import report_cache
from .comm_rules import comm_rule_options, rules_from_context
from .limits import limit_options, limits_from_context
from .output import emit as _emit
from .output import guard as _guard
from .output import say, step_summary, write_text

FORMATS = ("text", "json", "markdown", "html")


def _rank_map(values: tuple[str, ...]) -> dict[str, int]:
    from ..ingest.limits import ascii_int, rank_problem

    limit = limits_from_context().max_ranks
    out: dict[str, int] = {}
    for v in values:
        key, sep, rank = v.rpartition("=")
        n = ascii_int(rank)
        if not sep or n is None:
            raise click.BadParameter(f"{v!r}: expected FILE=RANK (or FILE:PID=RANK for Nsight reports)")
        if problem := rank_problem(n, limit):
            raise click.BadParameter(f"{v!r}: {problem}")
        out[key] = n
    return out


def _ranks(value: str | None) -> tuple[int, ...] | None:
    if not value:
        return None
    try:
        return ranklist.parse(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: {exc}; expected ranks like 0,2,4-7") from None


def load_options(rank_map: tuple[str, ...], step_marker: str | None, jobs: int | None, ranks: str | None,
                 no_cache: bool, layout: str | None = None):
    from ..ingest.loader import LoadOptions

    if step_marker:  # one line now, before any file is read (analyzer/patterns.py: linear time or refused)
        from ..patterns import check

        check(step_marker, "--step-marker")
    return LoadOptions(rank_map=_rank_map(rank_map), step_marker=step_marker, jobs=jobs, ranks=_ranks(ranks),
                       cache=not no_cache, layout=layout, limits=limits_from_context(),
                       comm_rules=rules_from_context())


def start_workers(paths: tuple[Path, ...] | list[Path], jobs: int | None, cache: bool = True) -> None:
    """Start the parse workers' fork server before the heavy imports, so both import at once (~0.4 s);
    not for inputs read from the cache before (the loader starts it if a rank is not there after all), nor,
    by default, for inputs too small to repay a pool (``ingest.workers.pool_pays``: parsed in this process)."""
    if jobs != 1 and (len(paths) > 1 or any(p.is_dir() for p in paths)):
        if cache:
            from ..ingest.cachedir import seen

            if seen(paths):
                return
        from ..ingest.workers import pool_pays_for, prestart

        if jobs is None and not pool_pays_for(paths, os.cpu_count() or 1):
            return  # small inputs are parsed in this process (ingest/loader.py _read_all)
        prestart()


def common_load_options(f: Callable) -> Callable:
    for opt in reversed([
        click.option("--rank-map", multiple=True, metavar="FILE=RANK", help="Set a file's rank (repeatable)."),
        click.option("--step-marker", metavar="REGEX", help="Annotation names that mark steps (default ProfilerStep#N)."),
        click.option("--jobs", "-j", type=click.IntRange(1, 512), help="Worker processes (default: the cores)."),
        click.option("--ranks", metavar="LIST", help="Analyze only these ranks, e.g. 0,2,4-7."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the Parquet cache."),
        *comm_rule_options(),
        *limit_options(),
    ]):
        f = opt(f)
    return f


def dimension_options(f: Callable) -> Callable:
    for opt in reversed([
        click.option("--layout", metavar="AXIS=N,...",
                     help="Parallel sizes, e.g. tp=8,cp=1,ep=1,dp=16,pp=4: names each group's dimension."),
        click.option("--layout-order", metavar="AXES", help="Rank order of --layout, fastest axis first "
                     "(default Megatron's tp-cp-ep-dp-pp)."),
        click.option("--gpus-per-host", type=click.IntRange(1, 1024), default=8, show_default=True,
                     help="Ranks per host where the traces do not name hosts (intra- vs inter-node groups)."),
    ]):
        f = opt(f)
    return f


def dim_options(layout: str | None, layout_order: str | None, gpus_per_host: int):
    from ..crossrank.groups import Options, parse_layout

    return Options(layout=parse_layout(layout, layout_order, limits_from_context().max_ranks), gpus_per_host=gpus_per_host)


def history_run_options(f: Callable) -> Callable:
    for opt in reversed([
        click.option("--run", "run_id", metavar="ID", help="The run's ID in the history (default: UTC time + random)."),
        click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
                     help="Label the stored run (repeatable): commit=abc123, branch=main, config=..., host=..."),
    ]):
        f = opt(f)
    return f


def store_option(f: Callable) -> Callable:
    return click.option("--store", metavar="STORE", help="The run history: an SQLite file or a postgresql:// URL "
                        "(default $COMMSCOPE_HISTORY, else commscope-history.sqlite in the current folder). Keep the "
                        "password out of the URL: PGPASSWORD, ~/.pgpass or a service file; it is never printed.")(f)


def hang_triage(paths: tuple[Path, ...], rank_map: tuple[str, ...], layout: str | None, layout_order: str | None,
                gpus_per_host: int):
    """The hang analysis when the paths are Flight Recorder dumps (by content), else None (traces)."""
    from ..hangs.analysis import triage

    return triage(list(paths), _rank_map(rank_map), dim_options(layout, layout_order, gpus_per_host),
                  limits_from_context().max_json_depth)


@click.group()
@click.version_option(package_name="commscope")
def main() -> None:
    """Find where communication holds back distributed training and inference."""
    remember_environment()  # $PGPASSWORD is masked wherever a driver might repeat it


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write the report here.")
@click.option("--steps", "show_steps", is_flag=True, help="Also list every step (text format).")
@click.option("--wide", is_flag=True, help="Every per-rank and per-step column (text format; may exceed the terminal).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Parse ranks on this Dask scheduler (tcp://host:8786); the cache dir must be shared storage.")
@click.option("--whatif", "whatif_specs", multiple=True, metavar="busbw:OP=GBPS",
              help="Also replay with transfers at this bus bandwidth (repeatable), e.g. busbw:all_reduce=400.")
@click.option("--history", "history_store", metavar="STORE",
              help="Also add this run to the run history (an SQLite file or a postgresql:// URL; the password "
                   "from PGPASSWORD, ~/.pgpass or a service file).")
@history_run_options
@common_load_options
@dimension_options
def analyze(paths: tuple[Path, ...], fmt: str, output: Path | None, show_steps: bool, scheduler: str | None,
            whatif_specs: tuple[str, ...], rank_map: tuple[str, ...], step_marker: str | None, jobs: int | None,
            ranks: str | None, no_cache: bool, layout: str | None, layout_order: str | None, gpus_per_host: int,
            wide: bool, history_store: str | None, run_id: str | None, labels: tuple[str, ...]) -> None:
    """Analyze traces (files or folders of ranks): overlap, exposed communication, waits, stragglers."""

    def run() -> None:
        kept = None
        if fmt in report_cache.FORMATS and not (no_cache or scheduler or history_store):
            kept = report_cache.key(list(paths), {
                "fmt": fmt, "show_steps": show_steps, "wide": wide, "whatif": whatif_specs, "rank_map": rank_map,
                "step_marker": step_marker, "ranks": ranks, "layout": layout, "layout_order": layout_order,
                "gpus_per_host": gpus_per_host, "limits": repr(limits_from_context())})
            text = report_cache.load(kept) if kept is not None else None
            if text is not None:  # the same inputs, options and code: the same report (cli/report_cache.py)
                return _emit(text, output)
        if not scheduler:  # first: the server's imports then overlap the hang check's and ours (polars, numpy)
            start_workers(paths, jobs, not no_cache)
        if hang := hang_triage(paths, rank_map, layout, layout_order, gpus_per_host):
            from ..errors import UsageError
            from ..report import render

            unused = [o for o, v in (("--ranks", ranks), ("--steps", show_steps), ("--whatif", whatif_specs),
                                     ("--scheduler", scheduler), ("--step-marker", step_marker)) if v]
            if unused:  # not silently ignored: they select parts of a timeline, which dumps do not have
                raise UsageError(f"{', '.join(unused)}: profiler-trace options; Flight Recorder dumps get the "
                                 "whole hang triage (drop them)")
            return _emit(render(hang, fmt), output)
        from ..analysis import analyze as run_analysis
        from ..ingest.loader import load
        from ..report import render
        from ..whatif.scenarios import parse_specs

        busbw = parse_specs(whatif_specs)
        opts = load_options(rank_map, step_marker, jobs, ranks, no_cache, layout)
        dims = dim_options(layout, layout_order, gpus_per_host)
        if history_store is not None:  # a bad store (an empty one too) or label fails before the slow loading
            from ..history.record import check, parse_labels

            check(history_store, create=True)
            label_map = parse_labels(labels)
        if scheduler:
            from dataclasses import replace

            opts = replace(opts, scheduler=scheduler)
        result = run_analysis(load(list(paths), opts), dims, busbw=busbw)
        text = render(result, fmt, show_steps=show_steps, wide=wide)
        if history_store is not None:
            from ..history.record import add

            stored = add(history_store, result, run_id, label_map)
            say(f"added run {stored} to {history_store}", err=True)
        _emit(text, output)
        if kept is not None:
            report_cache.store(kept, text)

    _guard(run)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (0.0.0.0 exposes it).")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(0, 65535))
@click.option("--debug", is_flag=True, help="Dash debug mode (dev tools, tracebacks): never on a shared host.")
@click.option("--max-request-kb", default=1024, show_default=True, type=click.IntRange(1, 1 << 20),
              help="Largest request body the server reads; larger ones get 413.")
@common_load_options
@dimension_options
def dashboard(paths: tuple[Path, ...], host: str, port: int, debug: bool, max_request_kb: int,
              rank_map: tuple[str, ...], step_marker: str | None, jobs: int | None, ranks: str | None, no_cache: bool,
              layout: str | None, layout_order: str | None, gpus_per_host: int) -> None:
    """Serve the interactive dashboard over these traces (loaded and analyzed once)."""

    def run() -> None:
        if hang := hang_triage(paths, rank_map, layout, layout_order, gpus_per_host):
            from dashboards.hang import serve_hang

            say(f"commscope dashboard: hang triage of {len(hang.source['ranks'])} dumps on "
                       f"http://{host}:{port}/", err=True)
            return serve_hang(hang, host=host, port=port, debug=debug)
        start_workers(paths, jobs, not no_cache)
        from dashboards.app import serve

        from ..analysis import analyze as run_analysis
        from ..export import write_trace
        from ..ingest.loader import load

        opts = load_options(rank_map, step_marker, jobs, ranks, no_cache, layout)
        result = run_analysis(load(list(paths), opts), dim_options(layout, layout_order, gpus_per_host))
        say(f"commscope dashboard: {len(result.source['ranks'])} ranks on http://{host}:{port}/", err=True)
        serve(result, host=host, port=port, debug=debug, max_request_bytes=max_request_kb * 1024,
              trace_writer=write_trace)  # the Perfetto download (presenters never import each other)

    _guard(run)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The trace file to write (e.g. job.pftrace).")
@click.option("--format", "fmt", type=click.Choice(("pftrace", "json")),
              help="Perfetto protobuf (default), or Chrome JSON trace events (default for -o *.json).")
@click.option("--steps", "steps_sel", metavar="LIST", help="Only these steps, e.g. 3,5-7.")
@click.option("--window", metavar="START:END", help="Only this window: ms on the aligned clock from the first GPU event.")
@click.option("--host", "host_activity", is_flag=True, help="Also the host's launches and annotations.")
@common_load_options
def export(paths: tuple[Path, ...], output: Path, fmt: str | None, steps_sel: str | None, window: str | None,
           host_activity: bool, rank_map: tuple[str, ...], step_marker: str | None, jobs: int | None,
           ranks: str | None, no_cache: bool) -> None:
    """One Perfetto trace of every rank on the aligned clock (--ranks picks what is written, not analyzed)."""

    def run() -> None:
        start_workers(paths, jobs, not no_cache)
        from .compose import run_export

        n = run_export(list(paths), output, fmt, load_options(rank_map, step_marker, jobs, None, no_cache),
                       ranks=ranks, steps=steps_sel, window=window, host=host_activity)
        dropped = f"; {n['dropped']} slices overlapping beyond {n['max_lanes']} lanes left out" if n["dropped"] else ""
        say(f"wrote {output}: {n['ranks']} ranks, {n['slices']} slices{dropped}", err=True)
        for reason in n.get("skipped", []):  # a rank left out of the trace is named, as in every report
            say(f"skipped {reason}", err=True)

    _guard(run)


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="[BASE] NEW")
@click.option("--baseline", metavar="NAME", help="Compare NEW against this named baseline of the run history "
              "(commscope history baseline set NAME RUN) instead of BASE.")
@store_option
@click.option("--fail-on", multiple=True, metavar="METRIC=+N%",
              help="Threshold (repeatable): +N%/-N% relative, +N/-N absolute, or off; e.g. exposed_comm_ms=+5%.")
@click.option("--thresholds", "thresholds_file", type=click.Path(path_type=Path, dir_okay=False),
              help="TOML file of thresholds ([fail_on] table, confidence, min_effect_pct_of_step, straggler).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--junit", "junit_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write JUnit XML here (one failing testcase per regressed metric).")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write the report here.")
@click.option("--allow-mismatch", is_flag=True,
              help="Compare runs that skipped a rank or differ in world size, layout or step count (exit 2 "
                   "otherwise); each mismatch is a warning and a note.")
@common_load_options
@dimension_options
def compare(runs: tuple[Path, ...], baseline: str | None, store: str | None, fail_on: tuple[str, ...],
            thresholds_file: Path | None, fmt: str, junit_path: Path | None, output: Path | None,
            allow_mismatch: bool, rank_map: tuple[str, ...], step_marker: str | None, jobs: int | None,
            ranks: str | None, no_cache: bool, layout: str | None, layout_order: str | None,
            gpus_per_host: int) -> None:
    """Compare NEW against BASE (folders or files), or against a named baseline of the run history
    (--baseline): exit 0 within thresholds, 1 on regression, 2 on bad input."""
    outcome = {"passed": True}
    if len(runs) != (1 if baseline else 2):
        say("commscope: error: compare takes " + ("one path (NEW) with --baseline" if baseline else
                   "two paths, BASE and NEW (or NEW with --baseline NAME)"), err=True)
        sys.exit(2)
    base, new = (None, runs[0]) if baseline else runs

    def run() -> None:
        start_workers([p for p in (base, new) if p is not None], jobs, not no_cache)
        from ..analysis import analyze as run_analysis
        from ..compare import thresholds
        from ..compare.diff import compare as compare_runs
        from ..errors import UsageError
        from ..ingest.loader import load
        from ..report import compare_formats

        for label, path in (("BASE", base), ("NEW", new)):
            if path is not None and not path.exists():
                raise UsageError(f"{label} {path}: does not exist (give a trace file or a folder of rank traces)")
        th = thresholds.build(fail_on, thresholds_file)  # bad thresholds fail before the slow loading
        opts = load_options(rank_map, step_marker, jobs, ranks, no_cache, layout)
        dims = dim_options(layout, layout_order, gpus_per_host)
        if baseline:  # the baseline's stored summary: its traces need not exist any more
            from ..history.record import baseline_analysis
            from ..history.store import default_target

            base_analysis, base_run = baseline_analysis(store if store is not None else default_target(), baseline)
            say(f"baseline {baseline}: run {base_run}", err=True)
        else:
            base_analysis = run_analysis(load([base], opts), dims)
        result = compare_runs(base_analysis, run_analysis(load([new], opts), dims), th,
                              allow_mismatch=allow_mismatch, selected=opts.ranks)
        for why in result.mismatches:
            say(f"commscope: warning: {why} (compared anyway: --allow-mismatch)", err=True)
        text = compare_formats.render(result, fmt)
        step_summary(text if fmt == "markdown" else compare_formats.render(result, "markdown"))
        if junit_path:
            write_text(junit_path, compare_formats.junit(result))
        _emit(text, output)
        outcome["passed"] = result.passed

    _guard(run)
    sys.exit(0 if outcome["passed"] else 1)


@main.group()
def history() -> None:
    """The run history: add runs, trends with change points, named baselines (an SQLite file or PostgreSQL)."""


@history.command("add")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@store_option
@history_run_options
@common_load_options
@dimension_options
def history_add(paths: tuple[Path, ...], store: str | None, run_id: str | None, labels: tuple[str, ...],
                rank_map: tuple[str, ...], step_marker: str | None, jobs: int | None, ranks: str | None,
                no_cache: bool, layout: str | None, layout_order: str | None, gpus_per_host: int) -> None:
    """Analyze traces (files or folders of ranks) and add the run's summary to the history."""

    def run() -> None:
        from ..history.record import check, parse_labels
        from ..history.store import default_target

        target = store if store is not None else default_target()
        check(target, create=True)
        label_map = parse_labels(labels)
        start_workers(paths, jobs, not no_cache)
        from ..analysis import analyze as run_analysis
        from ..history.record import add
        from ..ingest.loader import load

        opts = load_options(rank_map, step_marker, jobs, ranks, no_cache)
        result = run_analysis(load(list(paths), opts), dim_options(layout, layout_order, gpus_per_host))
        say(f"added run {add(target, result, run_id, label_map)} to {target}")

    _guard(run)


@history.command("trend")
@store_option
@click.option("--metric", "metrics", multiple=True, metavar="NAME",
              help="Only this metric (repeatable), e.g. exposed_comm_ms, busbw_gbps_p50 (default: the main ones).")
@click.option("--since", metavar="RUN|DATE", help="Only runs from this run ID or date (2026-05-01) on.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Only runs with this label (repeatable).")
@click.option("--per-rank", is_flag=True, help="Also one series per rank (which rank moved).")
@click.option("--format", "fmt", type=click.Choice(("text", "markdown", "html", "json")), default="text",
              show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write the report here.")
def history_trend(store: str | None, metrics: tuple[str, ...], since: str | None, labels: tuple[str, ...],
                  per_rank: bool, fmt: str, output: Path | None) -> None:
    """Each metric over the stored runs, with change points (shifts) and drifts."""

    def run() -> None:
        from ..history.record import parse_labels, trend
        from ..report import trend_formats

        t = trend(store, list(metrics), since, parse_labels(labels), per_rank)
        text = trend_formats.render(t, fmt)
        step_summary(text if fmt == "markdown" else trend_formats.render(t, "markdown"))
        _emit(text, output)

    _guard(run)


@history.group("baseline")
def history_baseline() -> None:
    """Named baselines: a name (main, release-1.2) that points at a stored run."""


@history_baseline.command("set")
@click.argument("name")
@click.argument("run_id", metavar="RUN")
@store_option
def baseline_set(name: str, run_id: str, store: str | None) -> None:
    """Point baseline NAME at stored run RUN (moving it if it exists; the runs stay)."""

    def run() -> None:
        from ..history.record import set_baseline

        old = set_baseline(store, name, run_id)
        say(f"baseline {name}: run {run_id}" + (f" (was {old})" if old and old != run_id else ""))

    _guard(run)


@history_baseline.command("list")
@store_option
def baseline_list(store: str | None) -> None:
    """The named baselines and their runs."""

    def run() -> None:
        from ..history.record import baselines

        rows = baselines(store)
        say("\n".join(f"{b['name']}\t{b['run_id']}\t{b['set_at']}" for b in rows) or "no baselines")

    _guard(run)


@history.command("dashboard")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (0.0.0.0 exposes it).")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(0, 65535))
def history_dashboard(store: str | None, host: str, port: int) -> None:
    """Serve the history page: a metric over runs; a click on a run opens its analysis."""

    def run() -> None:
        from dashboards.history import serve

        from ..history.record import check
        from ..history.store import default_target
        from .compose import full_report

        target = store if store is not None else default_target()
        check(target, create=False)
        say(f"commscope history dashboard: {target} on http://{host}:{port}/", err=True)
        serve(target, host=host, port=port, open_run=full_report)

    _guard(run)


def entry() -> None:
    """The console script: ``main`` then an immediate exit.

    Tearing down an interpreter that loaded polars and numpy takes ~0.2 s (a tenth of a 4-rank run);
    every output is written and closed by then, so the process leaves without it. Tests call ``main``.
    """
    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (``| head``): nothing left to say
            pass
    if (pending := sys.modules.get("analyzer.ingest.background")) is not None:
        pending.wait()  # cache writes still running beside the report (they end the run, not the interpreter)
    os._exit(code)
