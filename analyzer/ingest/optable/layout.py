"""The parallel layout of an op table: sizes (the What-if ``meta-<name>.yaml``, else inferred from the table),
each recorded rank's coordinates, and the process groups its operations run on.

Ranks follow Megatron's order, fastest-varying first: tp, cp (the What-if ``dsp``: sequence parallel), dp,
pp, so ``rank = mp + tp*cp * (dp_rank + dp * stage)`` where ``mp`` is the rank's index inside its tensor x
sequence-parallel group. Op tables usually record one rank per such group (the What-if traces do: tp peers
run in lock-step), so the dp, pp and embedding groups of the recorded ranks are complete while their tp/cp
groups hold one recorded member: the members the layout names are listed all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import TraceError, UsageError
from ...model import ProcessGroup
from ..digest import read_regular
from ..limits import DEFAULT as DEFAULT_LIMITS
from ..limits import ascii_int, world_problem

MAX_META_BYTES = 1 << 20  # a JobMeta file is a few hundred bytes
MAX_META_DEPTH = 16  # it is one flat mapping
MAX_META_EVENTS = 100_000

# group kind -> (pg name prefix, description read by crossrank.groups' description rules)
GROUP_KINDS = {
    "dp": ("dp", "data_parallel"),
    "pp": ("pp", "pipeline_parallel"),
    "emb": ("emb", "embedding"),  # first and last stage: tied word-embedding gradients
    "world": ("world", "world"),
}


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    pp: int = 1
    tp: int = 1
    cp: int = 1  # What-if ``dsp_size``
    vpp: int = 1
    source: str = "given"  # where the sizes came from, for the report: "meta <file>", "--layout", the rank numbers

    @property
    def mp(self) -> int:
        return self.tp * self.cp

    @property
    def world(self) -> int:
        return self.mp * self.dp * self.pp

    def rank_of(self, mp_index: int, dp_rank: int, stage: int) -> int:
        return mp_index + self.mp * (dp_rank + self.dp * stage)

    def text(self) -> str:
        parts = [f"{k}={v}" for k, v in (("tp", self.tp), ("cp", self.cp), ("dp", self.dp), ("pp", self.pp),
                                          ("vpp", self.vpp))]
        return ",".join(parts)

    def mp_desc(self) -> str:
        if self.cp == 1:
            return "tensor_parallel"
        if self.tp == 1:
            return "sequence_parallel"
        return "tensor_and_context_parallel"


_META_KEYS = {"dp_size": "dp", "pp_size": "pp", "tp_size": "tp", "dsp_size": "cp", "cp_size": "cp", "vpp_size": "vpp"}


def meta_path(trace: Path) -> Path | None:
    """``meta-<name>.yaml`` beside ``trace-<name>.<ext>`` (the What-if artifact's naming), or ``<stem>.meta.yaml``."""
    stem = trace.name.split(".", 1)[0]
    names = [f"{stem}.meta.yaml", f"{stem}.meta.yml"]
    if stem.startswith("trace-"):
        names += [f"meta-{stem[6:]}.yaml", f"meta-{stem[6:]}.yml"]
    # exists, not is_file: a FIFO or a device in its place is refused by read_meta, not silently ignored
    return next((trace.parent / n for n in names if (trace.parent / n).exists()), None)


def _bounded_yaml(text: str) -> object:
    """``yaml.safe_load`` of a document without anchors or aliases (a billion-laughs file expands a few hundred
    bytes into gigabytes through them; a JobMeta file has none), nested at most ``MAX_META_DEPTH`` (the composer
    recurses per level) and of at most ``MAX_META_EVENTS`` events: checked on the parser's event stream, which
    builds nothing, before anything is composed. Raises ValueError (or the parser's YAMLError)."""
    import yaml

    depth = events = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        events += 1
        if isinstance(ev, yaml.AliasEvent) or getattr(ev, "anchor", None):
            raise ValueError("uses YAML anchors or aliases (refused: they can expand without bound)")
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_META_DEPTH:
                raise ValueError(f"nests deeper than {MAX_META_DEPTH} levels")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        if events > MAX_META_EVENTS:
            raise ValueError(f"holds more than {MAX_META_EVENTS:,} YAML events")
    return yaml.safe_load(text)


def read_meta(path: Path, trace: Path, max_ranks: int = DEFAULT_LIMITS.max_ranks) -> Layout:
    """Sizes from a What-if ``JobMeta`` YAML (``dp_size``, ``pp_size``, ``tp_size``, ``dsp_size``, ``vpp_size``,
    ``world_size``). Errors name the trace (whose ranks are then skipped) and the meta file."""
    import yaml  # only op tables need it

    def bad(problem: str, hint: str = "fix the meta file") -> TraceError:
        return TraceError(trace, f"its meta file {path} {problem}", hint)

    try:
        doc = _bounded_yaml(read_regular(path, MAX_META_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise bad(f"cannot be read as YAML ({str(exc).splitlines()[0]})", "fix the meta file or remove it") from None
    if not isinstance(doc, dict):
        raise bad("is not a mapping of sizes", "expected keys like dp_size: 4, pp_size: 4")
    sizes: dict[str, int] = {}
    for key, axis in _META_KEYS.items():
        if key in doc:
            val = doc[key]
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise bad(f"gives {key} {val!r}, not a positive integer")
            sizes[axis] = val
    lay = Layout(**sizes, source=f"meta {path.name}")
    if problem := world_problem(lay.world, max_ranks):
        raise bad(f"describes {problem}")
    world = doc.get("world_size")
    if world is not None and world != lay.world:
        raise bad(f"gives world_size {world}, not tp*dsp*dp*pp = {lay.world}")
    return lay


def parse_layout_text(text: str, max_ranks: int = DEFAULT_LIMITS.max_ranks) -> Layout:
    """``--layout tp=4,cp=1,dp=4,pp=4[,vpp=1]`` (``dsp`` accepted for cp; ep only as 1: op tables know no experts);
    each axis once, ASCII digits, a world of at most ``max_ranks``."""
    sizes: dict[str, int] = {}
    seen: set[str] = set()
    for part in text.split(","):
        key, sep, val = part.partition("=")
        key = {"dsp": "cp"}.get(key.strip().lower(), key.strip().lower())
        n = ascii_int(val)
        ok = sep and n is not None and n >= 1 and key in ("tp", "cp", "dp", "pp", "vpp", "ep")
        if not ok or key == "ep" and n != 1:
            raise UsageError(f"--layout {text!r} is not an op table's layout (give AXIS=N pairs among tp, cp, dp, "
                             "pp, vpp, e.g. tp=4,dp=4,pp=4)")
        if key in seen:
            raise UsageError(f"--layout {text!r}: axis {key} is given twice (give each axis once)")
        seen.add(key)
        if key != "ep":
            sizes[key] = n  # type: ignore[assignment]
    lay = Layout(**sizes, source="--layout")
    if problem := world_problem(lay.world, max_ranks):
        raise UsageError(f"--layout {text!r}: {problem}")
    return lay


def infer(ranks: list[tuple[int, int, int]]) -> Layout | None:
    """Sizes from the recorded (rank, dp_rank, stage) triples, assuming one recorded rank per tp x cp group at its
    first index (mp = rank / (dp_rank + dp*stage)); None when the ranks do not fit that."""
    dp = max(d for _, d, _ in ranks) + 1
    pp = max(s for _, _, s in ranks) + 1
    mps = {r // (d + dp * s) for r, d, s in ranks if d + dp * s}
    mp = mps.pop() if len(mps) == 1 else 1 if not mps else None
    if mp is None or mp < 1 or any(r != mp * (d + dp * s) for r, d, s in ranks):
        return None
    return Layout(dp=dp, pp=pp, tp=mp, source="the rank numbers (no meta file; tp x cp taken as tp)")


def all_groups(lay: Layout, ranks: list[tuple[int, int, int]]) -> dict[int, dict[str, ProcessGroup]]:
    """Per recorded (rank, dp_rank, stage): the groups its operations run on, keyed by kind (dp, pp, emb, mp,
    world). Each distinct group is built once and shared by its members (1,024 ranks of an 8,192-rank world:
    one world tuple, not 1,024)."""
    members = {  # kind -> the group's members from its key
        "dp": lambda m, stage: [lay.rank_of(m, d, stage) for d in range(lay.dp)],
        "pp": lambda m, dp_rank: [lay.rank_of(m, dp_rank, s) for s in range(lay.pp)],
        "emb": lambda m, dp_rank: [lay.rank_of(m, dp_rank, 0), lay.rank_of(m, dp_rank, lay.pp - 1)],
        "mp": lambda dp_rank, stage: [lay.rank_of(x, dp_rank, stage) for x in range(lay.mp)],
        "world": lambda: range(lay.world),
    }
    built: dict[tuple, ProcessGroup] = {}

    def group(kind: str, *key: int) -> ProcessGroup:
        g = built.get((kind, *key))
        if g is None:
            ranks_ = tuple(sorted(set(members[kind](*key))))
            prefix, desc = GROUP_KINDS[kind] if kind != "mp" else ("mp", lay.mp_desc())
            g = built[(kind, *key)] = ProcessGroup(name=prefix if kind == "world" else f"{prefix}:{ranks_[0]}",
                                                   desc=desc, ranks=ranks_)
        return g

    out: dict[int, dict[str, ProcessGroup]] = {}
    for rank, dp_rank, stage in ranks:
        m = rank - lay.rank_of(0, dp_rank, stage)
        out[rank] = {"dp": group("dp", m, stage), "pp": group("pp", m, dp_rank), "mp": group("mp", dp_rank, stage),
                     "world": group("world")}
        if stage in (0, lay.pp - 1):  # the embedding group holds the first and last stage only
            out[rank]["emb"] = group("emb", m, dp_rank)
    return out
