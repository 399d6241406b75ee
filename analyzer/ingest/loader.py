"""Paths -> TraceSet: discover files, read each rank (in worker processes), assemble the canonical tables.

A rank that fails to load becomes a ``Skipped`` entry, never an exception, as long as one rank loads.
The ``cpu`` table keeps only what cross-rank work reads (runtime launches and annotations): ``cpu_op``
rows are most of a trace and no metric uses them, so they are dropped per rank, before caching.
With ``scheduler`` set, ranks are parsed on a Dask cluster into the cache (see ``scaleout.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from ..comm_catalogue import UserRules, catalogue
from ..errors import CommscopeError, TraceError, UsageError
from ..model import (
    COLLECTIVE_SCHEMA,
    COMM_CALL_SCHEMA,
    CPU_SCHEMA,
    GPU_OPTIONAL,
    GPU_SCHEMA,
    STEP_SCHEMA,
    RankTrace,
    Skipped,
    TraceSet,
    conform,
)
from ..ranklist import compact
from ..timeline import fill_sparse_steps, gpu_step_windows, host_step_windows
from . import ReadOptions, collectives
from .background import later
from .consistency import check_job
from .discover import TraceFile, discover_all
from .hygiene import drop_invalid_gpu
from .launchers import classify
from .lean import lean_reader, read_lean
from .limits import DEFAULT as DEFAULT_LIMITS
from .limits import Limits, rank_problem, world_problem
from .sanity import check_gpu
from .workers import no_main_reimport, parse_bytes, pool_pays, prestart, worker_context


@dataclass(frozen=True)
class LoadOptions:
    rank_map: dict[str, int] | None = None
    step_marker: str | None = None
    jobs: int | None = None  # None: the cores
    ranks: tuple[int, ...] | None = None  # keep only these ranks
    cache: bool = True
    progress: Callable[[str], None] | None = None
    scheduler: str | None = None  # Dask scheduler address: parse ranks on that cluster
    layout: str | None = None  # --layout: op tables take their parallel sizes from it (ingest/optable_layout.py)
    limits: Limits = DEFAULT_LIMITS  # what one input may cost (--max-inflated-size, --max-events, ...)
    comm_rules: UserRules = UserRules()  # --comm-kernel REGEX=OP and the config file's rules


UNCACHED = ("optable",)  # already columnar: read whole faster than a cache entry (AR, 117 k ops: ~0.1 s)


def read_one(tf: TraceFile, opts: ReadOptions, use_cache: bool = True) -> list[RankTrace] | Skipped:
    """Read one file; a user-fixable problem becomes a Skipped entry (picklable for workers)."""
    try:
        if use_cache and tf.format not in UNCACHED:
            from .cache import cached_read

            return cached_read(tf, opts, lean_reader(tf.format))
        return read_lean(tf.path, opts, tf.format)
    except CommscopeError as exc:
        return Skipped(str(tf.path), str(exc))
    except Exception as exc:  # noqa: BLE001 - a broken rank must never sink the others
        return Skipped(str(tf.path), f"{tf.path}: unexpected error while reading ({type(exc).__name__}: {exc})")


@dataclass(frozen=True)
class _Stored:
    """A worker's answer when it wrote the rank to the cache: the parent reads the Parquet entry,
    which is faster than pickling the tables through a pipe (~0.2 s per 500 MB rank here)."""

    folder: str


def _read_in_worker(tf: TraceFile, opts: ReadOptions, use_cache: bool,
                    cache_root: str | None = None) -> list[RankTrace] | Skipped | _Stored:
    if cache_root is not None:
        # workers fork from a server that kept the environment it started with: use the caller's cache now
        os.environ["COMMSCOPE_CACHE_DIR"] = cache_root
    res = read_one(tf, opts, use_cache)
    if use_cache and not isinstance(res, Skipped):
        from .cache import entry_dir

        try:
            folder = entry_dir(tf, opts)
            if (folder / "manifest.json").is_file():
                return _Stored(str(folder))
        except OSError:
            pass
    return res


def _read_chunk_in_worker(tfs: list[TraceFile], opts: list[ReadOptions], use_cache: bool,
                          cache_root: str | None = None) -> list[list[RankTrace] | Skipped | _Stored]:
    """Several small files in one task: parsed one by one, their cache entries written together (one
    pack of tables for all of them, ``cache.store_many``)."""
    if len(tfs) == 1 or not use_cache:
        return [_read_in_worker(tf, o, use_cache, cache_root) for tf, o in zip(tfs, opts)]
    if cache_root is not None:
        os.environ["COMMSCOPE_CACHE_DIR"] = cache_root
    res, folders = _read_chunk(tfs, opts)
    return [_Stored(str(folders[i])) if i in folders else r for i, r in enumerate(res)]


def _read_chunk(tfs: list[TraceFile], opts: list[ReadOptions], in_background: bool = False
                ) -> tuple[list[list[RankTrace] | Skipped], dict[int, Path]]:
    """Files parsed one by one and cached together (one pack of tables for all of them: reading 1,024 small
    ranks back from one pack takes ~0.01 s, from 4,096 Parquet files ~0.7 s); each result, and the entry
    folder of each one stored (``in_background``: being stored, ``background.later``)."""
    from .cache import entry_dir, store_many

    res: list[list[RankTrace] | Skipped] = [read_one(tf, o, use_cache=False) for tf, o in zip(tfs, opts)]
    try:
        folders = {i: entry_dir(tfs[i], opts[i]) for i, r in enumerate(res)
                   if not isinstance(r, Skipped) and tfs[i].format not in UNCACHED}
        items = [(f, res[i]) for i, f in folders.items()]
        if in_background:
            later(store_many, items)
        else:
            store_many(items)  # type: ignore[arg-type]
    except OSError:
        return res, {}  # a read-only or full cache directory must not fail the analysis
    return res, folders


# a task holds at most this many files and bytes: big files go alone, small ones share a pack
_CHUNK_FILES = 64
_CHUNK_BYTES = 32 << 20


def _sizes(files: list[TraceFile], todo: list[int]) -> dict[int, int]:
    """Each file's size, read once for grouping and for recycling (unreadable: as big as a pack)."""
    out = {}
    for i in todo:
        try:
            out[i] = files[i].path.stat().st_size
        except OSError:
            out[i] = _CHUNK_BYTES
    return out


def _chunks(sizes: dict[int, int], jobs: int) -> list[list[int]]:
    """Consecutive files grouped into tasks, at least ~4 per worker where there are that many files."""
    limit = max(1, min(_CHUNK_FILES, len(sizes) // (4 * jobs)))
    out: list[list[int]] = []
    size = 0
    for i, n in sizes.items():
        if not out or len(out[-1]) >= limit or size + n > _CHUNK_BYTES:
            out.append([])
            size = 0
        out[-1].append(i)
        size += n
    return out


_RECYCLE_BYTES = 1 << 30  # a file this big gets a fresh worker (``_recycled``)


def _recycled(sizes: dict[int, int]) -> dict[str, int]:
    """A fresh worker per task when a file is very big (Python >= 3.11; a pack of small files stays under
    ``_CHUNK_BYTES``). A worker keeps some freed memory: on the scan path ~180 MB of arenas after a 500 MB
    rank (a few live objects pin them), on the block path ~90 MB (one process reading 4 fsdp ranks of
    512 MB peaked at 634, 728, 752, 768 MB). A fresh worker's first rank costs more, though: recycling
    made 4 x 512 MB cold 8.38 s instead of 7.81 s (peak 1.36 instead of 1.62 GB), so only ranks of 1 GB
    and more, where the memory matters more than the time, get one. The limit is 1: CPython's executor can deadlock
    with a limit above 1 (gh-115634: a completion that is not a worker's last leaves a stale idle token),
    never with 1."""
    if sys.version_info < (3, 11) or not sizes or max(sizes.values()) < _RECYCLE_BYTES:
        return {}
    return {"max_tasks_per_child": 1}


def _pool(files: list[TraceFile], todo: list[int], asked: int | None, jobs: int) -> bool:
    """Whether to parse ``todo`` in workers: ``--jobs N`` (N > 1) always does; by default (all cores) only
    inputs big enough to repay the pool's start-up (``workers.pool_pays``, one worker per file at most;
    results are the same either way)."""
    if jobs <= 1:
        return False
    return bool(asked) or pool_pays(sum(parse_bytes(files[i].path) for i in todo), min(jobs, len(todo)), len(todo))


def _from_workers(stored: list[_Stored]) -> list[list[RankTrace] | None]:
    """The cache entries the workers wrote, read together (None where one has gone meanwhile)."""
    from .cache import load_entries

    return load_entries([Path(s.folder) for s in stored])


def load(paths: list[Path], options: LoadOptions | None = None) -> TraceSet:
    options = options or LoadOptions()
    files, set_aside = discover_all(paths)
    if dumps := [f for f in files if f.format == "flight_recorder"]:  # no timeline in them: hang triage only
        raise UsageError(f"{dumps[0].path} is a Flight Recorder dump: `commscope analyze` and `commscope dashboard` "
                         "triage hangs from dumps; this command needs profiler traces")
    if any(f.format == "nccl_inspector" for f in files):  # one job's logs are read together (ranks span files)
        return _inspector_logs(files, options)
    files, named = _within_max_ranks(files, options)
    derived_key = _derived_key(files, options)  # before reading, as each rank's entry is keyed (key, rank keys)
    results = [*set_aside, *_read_all(files, options)]
    if options.cache and not options.scheduler:
        from .cachedir import mark_seen

        mark_seen(paths)
    traces: list[RankTrace] = []
    skipped: list[Skipped] = []
    for res in results:
        if isinstance(res, Skipped):
            skipped.append(res)
        else:
            traces.extend(res)
    traces, invalid, dropped = drop_invalid_gpu(traces)
    skipped += invalid
    traces, too_big = _ranks_within(traces, options.limits.max_ranks)
    skipped += too_big
    if not traces:
        if len(skipped) == 1:
            raise TraceError(skipped[0].path, skipped[0].reason.split(": ", 1)[-1])
        raise UsageError("no rank could be read: " + "; ".join(s.reason for s in skipped))
    named = _dropped_hints(traces, named, options.limits.max_ranks)
    traces, warnings = _settle_ranks(traces)
    warnings = named + warnings
    warnings += check_job(traces)  # ranks that cannot be one job: one line, exit 2
    if options.ranks is not None:
        traces = [t for t in traces if t.meta.rank in options.ranks]
        if not traces:
            raise UsageError(f"none of the requested ranks {list(options.ranks)} is in the traces")
    warnings += dropped + [f"skipped {s.reason}" if s.reason.startswith(s.path) else f"skipped {s.path}: {s.reason}"
                           for s in skipped]
    return assemble(traces, skipped, warnings, options.step_marker, derived_key, options.comm_rules)


def _inspector_logs(files: list[TraceFile], options: LoadOptions) -> TraceSet:
    """NCCL Inspector logs; with Kineto traces of the same job beside them, the traces' process groups name the
    logs' communicators (``inspector.traces``: their headers only are read)."""
    from .inspector.reader import load_logs

    logs = [f for f in files if f.format == "nccl_inspector"]
    traces = [f for f in files if f.format == "kineto"]
    if not traces or len(logs) + len(traces) < len(files):
        return load_logs(files, options.ranks, options.jobs)  # refuses any other mix, in one line
    from .inspector.traces import with_trace_groups
    from .kineto.reader import read_meta

    metas = [read_meta(f.path, ReadOptions(rank_hint=f.rank_hint, rank_map=dict(options.rank_map or {}),
                                           limits=options.limits)) for f in traces]
    ts, note = with_trace_groups(load_logs(logs, options.ranks, options.jobs), metas)
    return replace(ts, warnings=(*ts.warnings, note)) if note else ts


def _within_max_ranks(files: list[TraceFile], options: LoadOptions) -> tuple[list[TraceFile], dict[str, int]]:
    """``--max-ranks`` before reading: a ``--rank-map`` value past it is a usage error; a number in a file name
    past it is no rank (a job id, a pid: ``step_based_trace_2543932.json``): the file is read as one without a
    rank in its name (returned: path -> the number, for the warning where no other rank is found). A world of
    that many ranks is never built from a file name."""
    limit = options.limits.max_ranks
    for name, rank in (options.rank_map or {}).items():
        if problem := rank_problem(rank, limit):
            raise UsageError(f"--rank-map {name}={rank}: {problem}")
    kept, dropped = [], {}
    for tf in files:
        if tf.rank_hint is not None and rank_problem(tf.rank_hint, limit):
            dropped[str(tf.path)] = tf.rank_hint
            tf = replace(tf, rank_hint=None)
        kept.append(tf)
    return kept, dropped


def _dropped_hints(traces: list[RankTrace], dropped: dict[str, int], limit: int) -> list[str]:
    """The warning for each file whose name's number was no rank and that states none either."""
    return [f"{Path(t.meta.source).name}: the number {dropped[t.meta.source]:,} in its file name is past --max-ranks "
            f"{limit:,}: not taken as its rank" for t in traces if t.meta.rank < 0 and t.meta.source in dropped]


def _ranks_within(traces: list[RankTrace], limit: int) -> tuple[list[RankTrace], list[Skipped]]:
    """Ranks whose number or declared world size is past ``--max-ranks``: skipped, named."""
    kept, past = [], []
    for t in traces:
        problem = (rank_problem(t.meta.rank, limit) if t.meta.rank >= 0 else None) or world_problem(
            t.meta.world_size, limit)
        if problem:
            past.append(Skipped(t.meta.source, f"{t.meta.source}: {problem}"))
        else:
            kept.append(t)
    return kept, past


def _derived_key(files: list[TraceFile], options: LoadOptions) -> tuple[str, list[str]] | None:
    """The key of the job's cached derived tables (``derived.py``) and the ranks' cache keys it is derived from;
    None without the cache."""
    if not options.cache or any(f.format in UNCACHED for f in files):  # op tables are never cached, nor what they derive
        return None
    from . import derived
    from .cache import cache_key

    try:
        keys = [cache_key(tf, ReadOptions(rank_hint=tf.rank_hint, rank_map=dict(options.rank_map or {}),
                                          step_marker=options.step_marker)) for tf in files]
        return derived.job_key(keys, [options.step_marker, sorted((options.rank_map or {}).items()),
                                      list(options.ranks) if options.ranks is not None else None, options.layout,
                                      repr(options.limits), options.comm_rules.key()]), keys
    except OSError:  # a file gone meanwhile, or commscope's source unreadable: derived afresh, not cached
        return None


def _read_all(files: list[TraceFile], options: LoadOptions) -> list[list[RankTrace] | Skipped]:
    from .progress import rank_progress

    jobs = options.jobs or os.cpu_count() or 1
    opts = [ReadOptions(rank_hint=tf.rank_hint, rank_map=dict(options.rank_map or {}),
                        step_marker=options.step_marker, layout=options.layout, limits=options.limits) for tf in files]
    with rank_progress(len(files)) as bar:
        def done(name: str) -> None:
            bar(name)
            if options.progress:
                options.progress(name)

        if options.scheduler:
            from .scaleout import read_on_cluster

            # uncached formats are read here: the cluster hands ranks over through the cache
            here = [i for i, tf in enumerate(files) if tf.format in UNCACHED]
            there = [i for i in range(len(files)) if files[i].format not in UNCACHED]
            got = dict(zip(there, read_on_cluster([files[i] for i in there], [opts[i] for i in there],
                                                  options.scheduler, done))) if there else {}
            for i in here:
                got[i] = read_one(files[i], opts[i], use_cache=False)
                done(files[i].path.name)
            return [got[i] for i in sorted(got)]
        results: list[list[RankTrace] | Skipped | None] = [None] * len(files)
        todo = list(range(len(files)))
        if options.cache:
            # cache hits are read together, one Parquet read per table for all of them; a worker would
            # cost more in start-up and pickling
            from .cache import entry_dir, load_entries

            folders: dict[int, Path] = {}
            for i in todo:
                try:
                    folders[i] = entry_dir(files[i], opts[i])
                except OSError:
                    pass
            misses = [i for i in todo if i not in folders or not (folders[i] / "manifest.json").is_file()]
            if len(misses) > 1 and _pool(files, misses, options.jobs, jobs):
                prestart()  # misses the CLI did not expect: the workers' server imports while hits are read
            for i, hit in zip(folders, load_entries(list(folders.values()))):
                if hit is not None:
                    results[i] = hit
                    done(files[i].path.name)
            todo = [i for i in todo if results[i] is None]
        if len(todo) <= 1 or not _pool(files, todo, options.jobs, jobs):
            if not options.cache:
                for i in todo:
                    results[i] = read_one(files[i], opts[i], False)
                    done(files[i].path.name)
                return [r for r in results if r is not None]
            for c in _chunks(_sizes(files, todo), 1):  # cached as the workers cache them: a pack per chunk
                for i, res in zip(c, _read_chunk([files[i] for i in c], [opts[i] for i in c], True)[0]):
                    results[i] = res
                    done(files[i].path.name)
            return [r for r in results if r is not None]
        # One task per file (small files: per chunk), at most `jobs` alive: a worker holds one rank's bytes
        # and events at a time.
        ctx = worker_context()
        stored: dict[int, _Stored] = {}
        sizes = _sizes(files, todo)
        chunks = _chunks(sizes, jobs)
        # the script stays hidden until the pool has shut down: a recycled worker can be replaced late
        with no_main_reimport(), ProcessPoolExecutor(max_workers=min(jobs, len(chunks)), mp_context=ctx,
                                                     **_recycled(sizes)) as pool:
            from .cache import cache_dir

            root = str(cache_dir())
            futures = {pool.submit(_read_chunk_in_worker, [files[i] for i in c], [opts[i] for i in c],
                                   options.cache, root): c for c in chunks}
            for f in as_completed(futures):
                for i, res in zip(futures[f], f.result()):
                    if isinstance(res, _Stored):
                        stored[i] = res
                    else:
                        results[i] = res
                    done(files[i].path.name)
        for i, res in zip(stored, _from_workers(list(stored.values()))):
            results[i] = res if res is not None else read_one(files[i], opts[i], options.cache)  # entry gone meanwhile
        return [r for r in results if r is not None]


def _settle_ranks(traces: list[RankTrace]) -> tuple[list[RankTrace], list[str]]:
    """Give rank-less traces the free rank numbers in file order; duplicate ranks are an error."""
    warnings: list[str] = [w for t in traces for w in t.meta.warnings]
    seen: dict[int, str] = {}
    for t in traces:
        if t.meta.rank >= 0:
            if t.meta.rank in seen:
                raise UsageError(
                    f"rank {t.meta.rank} appears twice: {seen[t.meta.rank]} and {t.meta.source} "
                    "(pass each rank once, or fix ranks with --rank-map FILE=RANK)"
                )
            seen[t.meta.rank] = t.meta.source
    free = (r for r in range(10**9) if r not in seen)
    settled = []
    for t in traces:
        if t.meta.rank < 0:
            r = next(free)
            warnings.append(f"{Path(t.meta.source).name}: no rank in the trace or file name; assumed rank {r} "
                            "(use --rank-map to set it)")
            t = _with_rank(t, r, "assumed")
        settled.append(t)
    return sorted(settled, key=lambda t: t.meta.rank), warnings


def _with_rank(t: RankTrace, rank: int, source: str) -> RankTrace:
    def fix(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")) if "rank" in df.columns else df

    return RankTrace(
        meta=replace(t.meta, rank=rank, rank_source=source),
        gpu=fix(t.gpu), cpu=fix(t.cpu), comm_calls=fix(t.comm_calls), steps=fix(t.steps),
        steps_on_gpu=t.steps_on_gpu,
    )


def _concat(schema: dict[str, pl.DataType], frames: list[pl.DataFrame],
            optional: dict[str, pl.DataType] | None = None) -> pl.DataFrame:
    """``pl.concat`` of each frame conformed to ``schema``; frames that already share one schema (cache hits)
    are concatenated first and conformed once (thousands of ranks)."""
    shared = [f for f in frames if f.width]
    if shared:
        try:
            return conform(pl.concat(shared, how="vertical"), schema, optional)
        except (pl.exceptions.SchemaError, pl.exceptions.ShapeError):
            pass  # columns differ between frames: each conformed on its own
    return pl.concat([conform(f, schema, optional) for f in frames], how="diagonal_relaxed")


def assemble(traces: list[RankTrace], skipped: list[Skipped], warnings: list[str],
             step_marker: str | None = None, derived_key: tuple[str, list[str]] | None = None,
             rules: UserRules | None = None) -> TraceSet:
    """The job's tables; with ``derived_key``, the checked GPU table, steps and collectives come from the
    job's cached entry where there is one (``derived.py``), and are stored there otherwise."""
    gpu = _concat(GPU_SCHEMA, [t.gpu for t in traces], GPU_OPTIONAL)
    cpu = _concat(CPU_SCHEMA, [t.cpu for t in traces])
    if derived_key is not None:
        from . import derived

        hit = derived.load(*derived_key)
        if hit is not None:
            warnings.extend(hit.warnings)
            return TraceSet(
                ranks=tuple(t.meta for t in traces), gpu=gpu if hit.gpu is None else hit.gpu, cpu=cpu,
                collectives=hit.collectives, steps=hit.steps, skipped=tuple(skipped), warnings=tuple(warnings),
                job_key=derived_key[0],
            )
    said = len(warnings)
    raw = gpu
    gpu, sane = check_gpu(gpu, cpu)  # duplicates, impossible lengths, stream overlaps, unnamed kernels: said
    warnings.extend(sane)
    calls = _concat(COMM_CALL_SCHEMA, [t.comm_calls for t in traces])
    rules = rules or UserRules()
    gpu = classify(gpu, cpu, calls, rules)  # what names cannot say: the launching host op, the user's rules
    host_steps = [t.steps for t in traces if not t.steps_on_gpu]
    gpu_steps = [t.steps for t in traces if t.steps_on_gpu]
    steps = _concat(STEP_SCHEMA, [*gpu_steps, pl.DataFrame()])
    if host_steps:
        steps = pl.concat([steps, gpu_step_windows(_concat(STEP_SCHEMA, host_steps), gpu, cpu)])
    steps = steps.sort("rank", "start_ns")
    steps, tiled = fill_sparse_steps(steps, gpu, cpu, step_marker)  # (timeline.py: the one rule)
    if tiled:
        warnings.append(tiled)
    no_steps = [t.meta.rank for t in traces if t.steps.height == 0]
    if no_steps:
        warnings.append(f"no step markers on rank(s) {_ranks_text(no_steps)}: analyzed as one window")
    groups = {t.meta.rank: t.meta.process_groups for t in traces}
    given = [t for t in traces if t.collectives is not None]  # readers that know the table whole (op tables)
    rest = gpu.filter(~pl.col("rank").is_in([t.meta.rank for t in given])) if given else gpu
    table = collectives.build_table(rest, cpu, calls, steps, groups, host_step_windows(cpu, step_marker), rules)
    if given:
        table = _concat(COLLECTIVE_SCHEMA, [table, *[t.collectives for t in given]]).sort("rank", "start_ns")
    # only families whose calls PyTorch records can miss that record; the others' op comes from the catalogue
    recorded = [f.id for f in catalogue().families if f.host_metadata]
    missing = table.filter(~pl.col("has_meta") & (pl.col("family").is_in(recorded) | pl.col("family").is_null()))
    if missing.height:
        warnings.append(
            f"{missing.height} of {table.filter(pl.col('family').is_in(recorded) | pl.col('family').is_null()).height} "
            "communication kernels have no collective metadata "
            "(launched before the profiling window, or no record_param_comms): operation guessed from the kernel name"
        )
    if derived_key is not None:
        from . import derived

        same = gpu.height == raw.height and gpu.equals(raw)  # the checks fixed nothing: the ranks' tables are it
        derived.store(*derived_key, derived.Derived(None if same else gpu, steps, table, warnings[said:]))
    return TraceSet(
        ranks=tuple(t.meta for t in traces), gpu=gpu, cpu=cpu, collectives=table, steps=steps,
        skipped=tuple(skipped), warnings=tuple(warnings), job_key=derived_key[0] if derived_key else None,
    )


def _ranks_text(ranks: list[int]) -> str:
    return compact(ranks)
