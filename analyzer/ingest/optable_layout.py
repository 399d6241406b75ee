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

from ..errors import TraceError
from ..model import ProcessGroup

# group kind -> (pg name prefix, description read by metrics.dimensions' description rules)
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
    source: str = "inferred"  # "meta <file>", "inferred"

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
    return next((trace.parent / n for n in names if (trace.parent / n).is_file()), None)


def read_meta(path: Path) -> Layout:
    """Sizes from a What-if ``JobMeta`` YAML (``dp_size``, ``pp_size``, ``tp_size``, ``dsp_size``, ``vpp_size``,
    ``world_size``)."""
    import yaml  # only op tables need it

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TraceError(path, f"cannot be read as YAML ({exc})", "fix the meta file or remove it") from None
    if not isinstance(doc, dict):
        raise TraceError(path, "is not a mapping of sizes", "expected keys like dp_size: 4, pp_size: 4")
    sizes: dict[str, int] = {}
    for key, axis in _META_KEYS.items():
        if key in doc:
            val = doc[key]
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise TraceError(path, f"{key} is {val!r}, not a positive integer", "fix the meta file")
            sizes[axis] = val
    lay = Layout(**sizes, source=f"meta {path.name}")
    world = doc.get("world_size")
    if world is not None and world != lay.world:
        raise TraceError(path, f"world_size {world} is not tp*dsp*dp*pp = {lay.world}", "fix the meta file")
    return lay


def parse_layout_text(text: str) -> Layout:
    """``tp=4,cp=1,dp=4,pp=4[,vpp=1]`` (``dsp`` accepted for cp)."""
    sizes: dict[str, int] = {}
    for part in text.split(","):
        key, sep, val = part.partition("=")
        key = {"dsp": "cp"}.get(key.strip().lower(), key.strip().lower())
        if not sep or key not in ("tp", "cp", "dp", "pp", "vpp") or not val.strip().isdigit() or int(val) < 1:
            raise TraceError(text, "is not a layout", "expected AXIS=N pairs such as tp=4,dp=4,pp=4")
        sizes[key] = int(val)
    return Layout(**sizes, source="given")


def infer(ranks: list[tuple[int, int, int]]) -> Layout | None:
    """Sizes from the recorded (rank, dp_rank, stage) triples, assuming one recorded rank per tp x cp group at its
    first index (mp = rank / (dp_rank + dp*stage)); None when the ranks do not fit that."""
    dp = max(d for _, d, _ in ranks) + 1
    pp = max(s for _, _, s in ranks) + 1
    mps = {r // (d + dp * s) for r, d, s in ranks if d + dp * s}
    mp = mps.pop() if len(mps) == 1 else 1 if not mps else None
    if mp is None or mp < 1 or any(r != mp * (d + dp * s) for r, d, s in ranks):
        return None
    return Layout(dp=dp, pp=pp, tp=mp)


def groups_of(lay: Layout, rank: int, dp_rank: int, stage: int) -> dict[str, ProcessGroup]:
    """The groups a recorded rank's operations run on, keyed by kind (dp, pp, emb, mp, world)."""
    mp_index = rank - lay.rank_of(0, dp_rank, stage)

    def group(kind: str, members: list[int], desc: str | None = None) -> ProcessGroup:
        members = sorted(set(members))
        prefix, default = GROUP_KINDS.get(kind, (kind, kind))
        return ProcessGroup(name=prefix if kind == "world" else f"{prefix}:{members[0]}", desc=desc or default,
                            ranks=tuple(members))

    return {
        "dp": group("dp", [lay.rank_of(mp_index, d, stage) for d in range(lay.dp)]),
        "pp": group("pp", [lay.rank_of(mp_index, dp_rank, s) for s in range(lay.pp)]),
        "emb": group("emb", [lay.rank_of(mp_index, dp_rank, 0), lay.rank_of(mp_index, dp_rank, lay.pp - 1)]),
        "mp": group("mp", [lay.rank_of(m, dp_rank, stage) for m in range(lay.mp)], lay.mp_desc()),
        "world": group("world", list(range(lay.world))),
    }
