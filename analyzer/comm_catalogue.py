"""The communication catalogue: which GPU work is communication, of which family, op, role and engine.

The families live as data in ``comm_catalogue.toml`` (kernel-name patterns, host launcher ops, the source each
was read from); this module loads it once and is the one place the question "is this communication" is
answered. Readers call :func:`gpu_kind` (by name, cached per rank); the loader adds what a name cannot say:
launches inside a known communication op on the host (``ingest/launchers.py``) and the user's rules
(``--comm-kernel REGEX=OP``, the config file: :class:`UserRules`). Patterns run in Polars' regex engine (the
Rust ``regex`` crate), which is linear in the input and refuses look-around and back-references, so a user
pattern can never backtrack.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from .errors import UsageError
from .patterns import check as check_regex
from .rules import REPORT_OPS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    import tomli as tomllib

DATA = Path(__file__).with_name("comm_catalogue.toml")
ENGINES = ("sm", "rdma", "copy_engine")
ROLES = ("payload", "metadata", "sync")
MODES = ("comm", "fused")
FROM_NAME = "from_name"
OPS = REPORT_OPS  # the ops a report knows (rules.py)
USER_FAMILY = "user"  # rows a user rule classified
COMPUTE = "compute"  # ``--comm-kernel REGEX=compute``: this is not communication after all


@dataclass(frozen=True)
class KernelRule:
    pattern: str
    op: str  # a report op, or FROM_NAME
    role: str
    engine: str
    activity: str  # "kernel" | "memcpy": which GPU activity the pattern reads


@dataclass(frozen=True)
class Launcher:
    family: str
    op: str  # a report op, or FROM_NAME
    mode: str  # "comm": unrecognized kernels inside are communication; "fused": only its copies are
    name: str | None = None
    prefix: str | None = None


@dataclass(frozen=True)
class Family:
    id: str
    library: str
    engine: str
    host_metadata: bool
    source: str
    kernels: tuple[KernelRule, ...]
    launchers: tuple[Launcher, ...]


@dataclass(frozen=True)
class Catalogue:
    families: tuple[Family, ...]
    op_words: tuple[tuple[str, str], ...]
    candidate_words: str
    digest: str  # of the data file: part of every cache key that depends on the classification

    @functools.cached_property
    def by_id(self) -> dict[str, Family]:
        return {f.id: f for f in self.families}

    @functools.cached_property
    def rules(self) -> tuple[tuple[Family, KernelRule], ...]:
        """Every kernel rule in match order (families in file order, rules in family order)."""
        return tuple((f, k) for f in self.families for k in f.kernels)

    @functools.cached_property
    def launchers(self) -> tuple[Launcher, ...]:
        return tuple(la for f in self.families for la in f.launchers)

    @functools.cached_property
    def launcher_names(self) -> dict[str, Launcher]:
        return {la.name: la for la in self.launchers if la.name is not None}

    @functools.cached_property
    def launcher_prefixes(self) -> tuple[tuple[str, Launcher], ...]:
        return tuple((la.prefix, la) for la in self.launchers if la.prefix is not None)

    def any_pattern(self, activity: str) -> str | None:
        """One regex matching any of this activity's patterns (a reader's first question)."""
        parts = [_scoped(k.pattern) for _, k in self.rules if k.activity == activity]
        return "|".join(parts) if parts else None


def _scoped(pattern: str) -> str:
    """``(?i)X`` as ``(?i:X)``: a leading flag stays with its own pattern inside an alternation."""
    if pattern.startswith("(?i)"):
        return f"(?i:{pattern[4:]})"
    return f"(?:{pattern})"


class CatalogueError(ValueError):
    """The data file is malformed (a packaging bug, never the user's input): raised at import by the tests."""


def _parse(raw: bytes) -> Catalogue:
    doc = tomllib.loads(raw.decode("utf-8"))
    families = []
    seen: set[str] = set()
    for f in doc.get("family", []):
        fid = f["id"]
        if fid in seen or f["engine"] not in ENGINES:
            raise CatalogueError(f"family {fid!r}: duplicate id or unknown engine {f['engine']!r}")
        seen.add(fid)
        kernels = []
        for k in f.get("kernels", []):
            rule = KernelRule(k["pattern"], k["op"], k.get("role", "payload"), k.get("engine", f["engine"]),
                              k.get("activity", "memcpy" if f["engine"] == "copy_engine" else "kernel"))
            if rule.op not in (*OPS, FROM_NAME) or rule.role not in ROLES or rule.engine not in ENGINES:
                raise CatalogueError(f"family {fid!r}: bad kernel rule {k}")
            kernels.append(rule)
        launchers = []
        for la in f.get("launchers", []):
            item = Launcher(fid, la["op"], la.get("mode", "comm"), la.get("name"), la.get("prefix"))
            if (item.name is None) == (item.prefix is None) or item.mode not in MODES or item.op not in (*OPS, FROM_NAME):
                raise CatalogueError(f"family {fid!r}: bad launcher {la}")
            launchers.append(item)
        families.append(Family(fid, f["library"], f["engine"], bool(f.get("host_metadata", False)), f["source"],
                               tuple(kernels), tuple(launchers)))
    words = tuple((w["pattern"], w["op"]) for w in doc.get("op_words", []))
    return Catalogue(tuple(families), words, doc.get("candidate_words", ""), hashlib.sha256(raw).hexdigest()[:16])


@functools.cache
def catalogue() -> Catalogue:
    """The catalogue shipped with commscope (read once per process)."""
    return _parse(DATA.read_bytes())


# ----------------------------------------------------------------------------- by name (readers)

_CATEGORY_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync"}


def gpu_kind(category: pl.Expr, name: pl.Expr) -> pl.Expr:
    """Vectorized GPU kind from a raw category (Kineto's ``cat``; other readers map to it) and the name: the
    one rule every reader applies. A kernel is comm when a catalogue pattern names it; a peer copy
    (``Memcpy PtoP``) is comm on the copy engine; a kernel without a name is neither (counted by ``sanity``)."""
    cat = catalogue()
    base = category.replace_strict(_CATEGORY_KIND, default="other", return_dtype=pl.Utf8)
    kernel_any, copy_any = cat.any_pattern("kernel"), cat.any_pattern("memcpy")
    is_comm_kernel = name.str.contains(kernel_any) if kernel_any else pl.lit(False)
    is_comm_copy = name.str.contains(copy_any).fill_null(False) if copy_any else pl.lit(False)
    return (
        pl.when(base == "kernel")
        .then(pl.when(name.is_null()).then(pl.lit("other")).when(is_comm_kernel).then(pl.lit("comm"))
              .otherwise(pl.lit("compute")))
        .when((base == "memcpy") & is_comm_copy).then(pl.lit("comm"))
        .otherwise(base)
    )


def is_comm_kernel(name: str) -> bool:
    """One kernel name (tests, quick checks): does a catalogue pattern name it?"""
    pattern = catalogue().any_pattern("kernel")
    return bool(pattern) and bool(pl.Series([name], dtype=pl.Utf8).str.contains(pattern).item())


def op_from_name(name: pl.Expr) -> pl.Expr:
    """The collective op a kernel or host-op name spells (``ncclDevKernel_AllReduce_...``); null where none."""
    expr: pl.Expr = pl.lit(None, dtype=pl.Utf8)
    for pattern, op in reversed(catalogue().op_words):
        expr = pl.when(name.str.contains(pattern)).then(pl.lit(op)).otherwise(expr)
    return expr


op_from_kernel_name = op_from_name  # the name the readers have always used


DESCRIBED = {"name": pl.Utf8, "family": pl.Utf8, "op": pl.Utf8, "role": pl.Utf8, "engine": pl.Utf8}


def describe(names: pl.Series, activity: str = "kernel") -> pl.DataFrame:
    """Family, op, role and engine of each distinct name (null where no pattern names it). Run on the distinct
    names of a job's comm rows (a few hundred), then joined back: one pass of each pattern per name, not per row."""
    uniq = names.drop_nulls().unique()
    if uniq.is_empty():
        return pl.DataFrame(schema=DESCRIBED)
    rules = [(f, k) for f, k in catalogue().rules if k.activity == activity]
    df = pl.DataFrame({"name": uniq})
    idx: pl.Expr = pl.lit(None, dtype=pl.Int32)
    for i in reversed(range(len(rules))):
        idx = pl.when(pl.col("name").str.contains(rules[i][1].pattern)).then(pl.lit(i, dtype=pl.Int32)).otherwise(idx)
    table = pl.DataFrame(
        {"_i": list(range(len(rules))), "family": [f.id for f, _ in rules],
         "_op": [k.op for _, k in rules], "role": [k.role for _, k in rules], "engine": [k.engine for _, k in rules]},
        schema={"_i": pl.Int32, "family": pl.Utf8, "_op": pl.Utf8, "role": pl.Utf8, "engine": pl.Utf8},
    )
    out = df.with_columns(idx.alias("_i")).join(table, on="_i", how="left")
    return out.select(
        "name", "family",
        pl.when(pl.col("_op") == FROM_NAME).then(op_from_name(pl.col("name"))).otherwise(pl.col("_op")).alias("op"),
        "role", "engine",
    )


# ----------------------------------------------------------------------------- launchers (host ops)


def launcher_of(name: object) -> Launcher | None:
    """The catalogue's launcher for a host op's name (exact names first, then prefixes); None: not one."""
    if type(name) is not str:
        return None
    cat = catalogue()
    hit = cat.launcher_names.get(name)
    if hit is not None:
        return hit
    for prefix, la in cat.launcher_prefixes:
        if name.startswith(prefix):
            return la
    return None


def launcher_op(name: str) -> str | None:
    """A launcher's op: its own, or the one its name spells."""
    la = launcher_of(name)
    if la is None:
        return None
    if la.op != FROM_NAME:
        return la.op
    return pl.select(op_from_name(pl.lit(name))).item()


@functools.cache
def launcher_literals() -> tuple[bytes, ...]:
    """Byte strings one of which every launcher's name contains (the fewest: one that contains another is left
    out): the scan paths find launcher events by them, and ``_Selection.feed`` keeps only real launchers."""
    texts = {la.name or la.prefix or "" for la in catalogue().launchers} - {""}
    kept = sorted(t for t in texts if not any(o != t and o in t for o in texts))
    return tuple(t.encode() for t in kept)


def launcher_prefixes() -> tuple[bytes, ...]:
    """Byte strings one of which every launcher's name starts with (the fewest: one that starts with another is
    left out): the native scan finds launcher events by them; ``_Selection.feed`` keeps only real launchers."""
    texts = {la.name or la.prefix or "" for la in catalogue().launchers} - {""}
    kept = sorted(t for t in texts if not any(o != t and t.startswith(o) for o in texts))
    return tuple(t.encode() for t in kept)


# ----------------------------------------------------------------------------- the user's rules


@dataclass(frozen=True)
class UserRule:
    pattern: str
    op: str  # a report op, or "compute" (not communication)
    source: str = "--comm-kernel"  # where it was given (for messages)


@dataclass(frozen=True)
class UserRules:
    """``--comm-kernel REGEX=OP`` (first) and the config file's rules: the first that matches a name decides."""

    rules: tuple[UserRule, ...] = field(default_factory=tuple)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def key(self) -> list:
        """What the cached derived tables depend on."""
        return [[r.pattern, r.op] for r in self.rules]

    def op(self, name: pl.Expr) -> pl.Expr:
        """The matching rule's OP (null: none matches)."""
        expr: pl.Expr = pl.lit(None, dtype=pl.Utf8)
        for r in reversed(self.rules):
            expr = pl.when(name.str.contains(r.pattern).fill_null(False)).then(pl.lit(r.op)).otherwise(expr)
        return expr


def check_pattern(pattern: str, where: str) -> None:
    """Refuse a pattern the linear-time engine cannot run: the one check of every user regex (``patterns``)."""
    if not pattern:
        raise UsageError(f"{where}: the pattern is empty (give a regex that names the kernels)")
    check_regex(pattern, where)


def _rule(pattern: str, op: str, where: str) -> UserRule:
    op = op.strip().lower()
    if op not in (*OPS, COMPUTE):
        raise UsageError(f"{where}: unknown op {op!r} (one of {', '.join((*OPS, COMPUTE))})")
    check_pattern(pattern, where)
    return UserRule(pattern, op, where)


def parse_flag(value: str) -> UserRule:
    """``REGEX=OP`` (the last '=' splits: a regex may hold one)."""
    pattern, sep, op = value.rpartition("=")
    if not sep:
        raise UsageError(f"--comm-kernel {value!r}: expected REGEX=OP, e.g. 'dispatch_kernel=all_to_all'")
    return _rule(pattern, op, f"--comm-kernel {value!r}")


def read_config(path: Path) -> tuple[UserRule, ...]:
    """The config file's rules: TOML, ``[[comm_kernel]]`` tables of ``pattern`` and ``op``."""
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the config file ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a valid TOML config file ({exc})") from None
    entries = doc.get("comm_kernel", [])
    unknown = sorted(set(doc) - {"comm_kernel"})
    if unknown or not isinstance(entries, list):
        raise UsageError(f"{path}: unknown section(s) {', '.join(unknown) or 'comm_kernel'} (the config file holds "
                         "[[comm_kernel]] tables with pattern and op)")
    out = []
    for i, e in enumerate(entries):
        where = f"{path}: comm_kernel #{i + 1}"
        if not isinstance(e, dict) or not isinstance(e.get("pattern"), str) or not isinstance(e.get("op"), str):
            raise UsageError(f"{where}: needs pattern = \"REGEX\" and op = \"OP\"")
        out.append(_rule(e["pattern"], e["op"], where))
    return tuple(out)


def user_rules(flags: tuple[str, ...] = (), config: Path | None = None) -> UserRules:
    """The flags' rules before the config file's (a flag overrides the file for the names it matches)."""
    return UserRules((*[parse_flag(v) for v in flags], *(read_config(config) if config else ())))


# ----------------------------------------------------------------------------- PyTorch's collective names

_COLLECTIVE_NAME_OP = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "_allreduce_base": "all_reduce",
    "allgather": "all_gather",
    "all_gather": "all_gather",
    "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "recvanysource": "recv",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "coalesced": "coalesced",
}


def op_from_collective_name(name: str | None) -> str | None:
    """PyTorch ``record_param_comms`` "Collective name" (or NVTX ``ncclAllReduce``) -> canonical op."""
    if not name:
        return None
    key = name.strip().lower()
    if key.startswith("nccl"):
        key = key[4:]
    key = key.replace("-", "_")
    if key in _COLLECTIVE_NAME_OP:
        return _COLLECTIVE_NAME_OP[key]
    squashed = key.replace("_", "")
    for k, v in _COLLECTIVE_NAME_OP.items():
        if k.replace("_", "") == squashed:
            return v
    return key
