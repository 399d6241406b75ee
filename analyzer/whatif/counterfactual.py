"""The counterfactual verdict: what the step would take if the slow parts ran like their peers.

Computed on the one dependency graph with its replay (replay.py), as in the What-if analysis (OSDI'25):

- **Role**: the ranks that run the same program part. Where the job has data-parallel groups, a rank's role
  is its DP group: the ranks with the same stage and tensor/sequence coordinate in every replica (they run
  the same operations, so one that runs an operation its peers do not run did extra work); where every
  group spans the job (DDP, FSDP, experts) all ranks are one role of replicas. Otherwise the role is every
  rank (pure pipeline or tensor parallel): an operation only some ranks run is their own structure, not
  extra work.
- **Ideal run**: every operation (kernel, memcpy, memset) takes the typical duration of its role's peers
  for the same operation in the same step (the k-th kernel of that name in the step: op, micro-batch slot and
  layer), and every host gap (a runtime call's host time before it, crossrank/host.py) the typical gap; never
  more than measured. "Typical": the lower median over the role's ranks in that step (with two replicas the
  faster one: a single slow replica must not set the pace of the ideal it is measured against), so steps that
  differ by design (variable sequence lengths) stay different. Transfers take the median of their (op, bytes,
  group size), never more than measured. The ideal is replayed with the host in place: T_ideal.
- **Slowdown** S = T_replay / T_ideal, where T_replay is the replay of the measured run (so the replay's
  own error cancels; it is reported beside S). With host gaps removed in both (launch delays out, as the
  published study reports) it is ``slowdown_no_host``.
- **Attribution**: put one group's measured durations, gaps (and, for op types and dimensions, transfers)
  back into the ideal run and replay; the step time it adds over the ideal is the group's share. Groups:
  ranks, pipeline stages, DP replicas, dimensions (their communication), op types. Per step too.
- **M_W** (share explained by individual workers): the part of T_replay − T_ideal removed by making the
  top ceil(3%) ranks ideal in the measured run; **M_S** (stage imbalance): the same for the last pipeline
  stage (the study's definitions). Step times are the job's interval (windows.py), so where the replay is
  monotone S >= 1 and every share lies in [0, 1]; commscope's model reports them bounded there (the raw value
  in a warning); the published study's model keeps its own (ST's M_S is 1.22).
- **Roots**: a rank whose put-back adds a visible part of the step (``VISIBLE_SHARE``), twice what
  a typical rank's (the upper quartile of the others') does and three times its own replicas' (same role)
  (``EFFECT``, ``PEER_EFFECT``), and more than its own step-to-step
  spread allows by chance (a one-sided t-test over steps of its lift over the typical rank, ``MAX_P``); and
  making the roots ideal together in the measured run saves at least half of what the first one's put-back
  adds (``SAVING_SHARE``: a rank slower than its peers that other ranks hold back as much is no root), and
  fixing each pays beyond the run's step-to-step noise (its per-step savings reach ``VISIBLE_SHARE`` of the
  step on average and stand out against their own spread, a one-sided t-test, ``MAX_P``): a pipeline stage
  slower by design (the last computes the loss) saves little, or in some steps only, and is stage
  imbalance (M_S), not a straggler. The analysis names a root only where other ranks waited for it.
  A balanced job's put-backs are all alike and small; a pipeline stage's structural waits stay in the
  ideal too, so putting one stage back changes nothing.
- **Kind**: the root's durations alone against its host gaps alone, put back: compute or host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..crossrank.graph import Graph
from . import replay
from .ideal import Ideal, Roles, declared, ideal, ideal_study, roles, steps_apart, study_steps

__all__ = ["AXES", "Counterfactual", "Ideal", "Roles", "Root", "analyze", "deciding", "ideal", "ideal_study",
           "roles", "steps_apart", "warnings"]

MAX_GROUPS = 32  # per attribution axis at most: the groups with the most time above ideal
MIN_GROUPS = 4  # ... and at least (all, when fewer), even where none could matter
MIN_BOUND_SHARE = 0.02  # replayed: groups whose time above ideal in a step reaches 2% of the measured step
MAX_REPLICAS = 8  # DP replicas replayed at most (a replica's bound sums its ranks': loose)
VISIBLE_SHARE = 0.02  # a root's put-back adds at least this share of the replayed step
EFFECT = 2.0  # ... and at least this many times a typical rank's put-back (upper quartile of the others')
PEER_EFFECT = 3.0  # ... and this many times its replicas' (same role: DP peers) median
MAX_P = 0.05  # ... and stands out against its step-to-step spread (one-sided t-test over steps)
SAVING_SHARE = 0.5  # roots made ideal together save at least this share of the first one's put-back
KIND_RATIO = 2.0  # durations (or gaps) put back alone explain this many times the other: compute (host)
MAX_ROOTS = 5
TYPICAL_QUANTILE = 0.75  # "a typical rank's put-back": the upper quartile of the other ranks'
WORKER_SHARE = 0.03  # M_W: the top 3% of ranks (at least one), as in the study


@dataclass(frozen=True)
class Root:
    rank: int
    kind: str  # "compute" | "host" | "unknown" (the caller may refine unknown)
    added_ns: float  # step time its put-back adds to the ideal run (mean over steps)
    saving_ns: float  # what making it ideal in the measured run saves (no_straggler)
    saving_pct: float
    confidence: float
    dur_added_ns: float  # its durations alone put back
    gap_added_ns: float  # its host gaps alone put back


@dataclass(frozen=True)
class Counterfactual:
    replay_ns: float  # mean step time of the replayed measured run
    ideal_ns: float
    slowdown: float | None  # S = replay / ideal
    replay_no_host_ns: float
    ideal_no_host_ns: float
    slowdown_no_host: float | None
    attribution: dict[str, pl.DataFrame]  # axis -> key, step_time_ns, added_ns, slowdown, share, (steps)
    m_w: float | None
    m_s: float | None
    roots: tuple[Root, ...]
    bottleneck_stage: int | None
    no_straggler_ns: float | None  # step time with the first root made ideal
    ideal_changes: Ideal = field(repr=False)
    steps: int = 0
    workers: tuple[int, ...] = ()  # the ranks M_W makes ideal
    study: Counterfactual | None = None  # the published study's model (op tables), see ideal_study
    raw_shares: dict[str, float] = field(default_factory=dict)  # M_W / M_S outside [0, 1] before they were bounded


AXES = ("by_rank", "by_stage", "by_dp_replica", "by_dimension", "by_op")


def _excess_per_step(keys: np.ndarray, step: np.ndarray, excess: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per key: its time above ideal per step, the mean and the largest over steps (ns). Putting a group back
    into the ideal run cannot lengthen a step by more than the group's time above ideal in it (the replay is a
    max-plus system), so the largest bounds what its put-back can add."""
    u, ki = _dense(keys)
    su, si = _dense(step)
    per = np.bincount(ki * su.size + si, weights=excess, minlength=u.size * su.size).reshape(u.size, su.size)
    return u, per.mean(axis=1), per.max(axis=1)


def _dense(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` of integers (ranks, steps) by a count per value where their range is
    small: no sort of every event (two sorts of 471 k events cost 80 ms an analysis)."""
    lo, hi = (int(x.min()), int(x.max())) if x.size else (0, 0)
    if not x.size or hi - lo > 4 * x.size + 1024:
        return np.unique(x, return_inverse=True)
    seen = np.bincount(x - lo, minlength=hi - lo + 1) > 0
    return (np.flatnonzero(seen) + lo).astype(x.dtype), (np.cumsum(seen) - 1)[x - lo]


def _worth(keys: np.ndarray, step: np.ndarray, excess: np.ndarray, floor: float) -> tuple[list[int], dict[int, float]]:
    """The groups worth replaying: those whose put-back could add ``floor`` (their time above ideal in a step
    reaches it), at least the ``MIN_GROUPS`` with the most, at most ``MAX_GROUPS``; and every group's mean
    time above ideal per step (an upper bound of what its put-back adds, for the groups not replayed)."""
    u, mean, peak = _excess_per_step(keys, step, excess)
    order = np.lexsort((u, -mean))
    k = max(MIN_GROUPS, int((peak >= floor).sum()))
    return [int(x) for x in u[order[:min(k, MAX_GROUPS)]]], dict(zip(u.tolist(), mean.tolist()))


def _op_type(nodes: pl.DataFrame) -> pl.Series:
    """Op types: the operations' names where a job has few (op tables: forward-compute, grads-reduce-scatter,
    ...); else communication by its operation (all_reduce, send_recv, ...) and the rest by kind (compute, memcpy)."""
    if nodes["name"].n_unique() <= MAX_GROUPS:
        return nodes["name"].fill_null("other").alias("t")
    return nodes.select(pl.when(pl.col("kind") == "comm").then(pl.coalesce("op", pl.lit("comm")))
                        .otherwise(pl.col("kind")).alias("t"))["t"]


def analyze(g: Graph, steps: pl.DataFrame, rl: Roles, dims: dict[str, str] | None = None,
            prepared: tuple[replay.Arrays, replay.Schedule, replay.Segments] | None = None,
            study: bool = False) -> Counterfactual | None:
    """S, its attribution, M_W, M_S and the roots. None when the graph has nothing to replay. ``study``: the
    published study's model (:func:`ideal_study`; host gaps removed in every run, the measured one too).
    ``dims``: process group -> dimension (by default the graph's, ``Graph.pg_dimensions``)."""
    if g.n_nodes == 0:
        return None
    dims = g.pg_dimensions if dims is None else dims
    if study:
        g, prepared = steps_apart(declared(g)), None
    arr, sch, seg = prepared or (replay.Arrays.of(g, eager=not study), None, replay.segments(g, steps))
    if seg.order.size == 0:
        return None
    sch = sch or replay.schedule(arr)
    idl = ideal_study(g) if study else ideal(g, rl)
    host = not study
    nodes = g.events.select("node", "rank", "kind", "name", "op", "pg", "inst")
    rank = nodes["rank"].to_numpy().astype(np.int64)
    excess = -(idl.ddur + idl.dgap)

    # scenario rows: (axis, key, fill)
    no_host = replay.Keyed(lambda m, i: m.dgap.__setitem__(i, -idl.gap), ("no_host", idl.token))
    rows: list[tuple[str, object, object]] = [
        ("", "replay", replay.Keyed(lambda m, i: None, ("measured",)) if host else no_host),
        ("", "ideal", idl.whole(host)),
        ("", "replay_no_host", no_host),
        ("", "ideal_no_host", idl.whole(False)),
    ]
    node_step = g.events["step"].fill_null(-1).to_numpy()
    # only groups whose put-back can matter are replayed (each is a replay of the whole job)
    floor = MIN_BOUND_SHARE * float(replay.step_times(seg, np.zeros((2, seg.table.height))).mean())
    by_rank, rank_bound = _worth(rank, node_step, excess, floor)
    rank_nodes = {r: np.flatnonzero(rank == r) for r in by_rank}
    for r in by_rank:
        rows.append(("by_rank", r, _put_back(idl, host, rank_nodes[r])))
    stage_of = _per_rank(rank, rl.stage) if rl.stage else None
    if stage_of is not None:
        for s in sorted(set(rl.stage.values())):
            rows.append(("by_stage", s, _put_back(idl, host, np.flatnonzero(stage_of == s))))
    if rl.replicated and rl.replica:
        rep = _per_rank(rank, rl.replica)
        # (the study's model, run to compare with its published attribution, replays every replica up to 32)
        worth = _worth(rep[rep >= 0], node_step[rep >= 0], excess[rep >= 0], 0.0 if study else floor)[0]
        for j in worth[:MAX_GROUPS if study else MAX_REPLICAS]:
            rows.append(("by_dp_replica", j, _put_back(idl, host, np.flatnonzero(rep == j))))
    inst_pg = g.instances.sort("inst")["pg"]
    # groups of nodes by a text key, compared in polars (a numpy object array compares in Python, per element)
    if dims:
        node_dim = nodes["pg"].replace_strict(dims, default=None, return_dtype=pl.Utf8)
        inst_dim = inst_pg.replace_strict(dims, default=None, return_dtype=pl.Utf8)
        for d in sorted({d for d in dims.values() if d and d != "unknown"}):
            rows.append(("by_dimension", d, _put_back(idl, host, _where(node_dim, d), _where(inst_dim, d))))
    op_t = _op_type(nodes)
    inst_op = op_t.gather(g.instances.sort("inst")["last_node"]) if g.instances.height else op_t.clear()
    for t in sorted({str(x) for x in op_t.unique().to_list()}):
        rows.append(("by_op", t, _put_back(idl, host, _where(op_t, t), _where(inst_op, t))))
    last_stage = max(rl.stage.values()) if rl.stage else None
    if stage_of is not None:
        rows.append(("", "remove_last_stage", _remove(idl, host, np.flatnonzero(stage_of == last_stage))))

    if study:  # the study's steps: each on its own, every rank starting it at its measured start
        measure = study_steps(g)

        def times(fills: list) -> list[np.ndarray]:
            return replay.batched(arr, sch, seg, fills, measure)
    else:
        def times(fills: list) -> list[np.ndarray]:
            return [replay.step_times(seg, sh) for sh in replay.batched(arr, sch, seg, fills)]
    # (the study's model removes host gaps in every run: its no-host runs are its runs, replayed once)
    per_step = times([f for _, _, f in rows[:2 if study else 4]])
    if study:
        per_step += per_step[:2]
    # an ideal that replays slower than the measured run (the replay is not monotone here) explains nothing:
    # no put-back is replayed (warnings() says so)
    if float(per_step[1].mean()) <= float(per_step[0].mean()) * (1.0 + 1e-9):
        per_step += times([f for _, _, f in rows[4:]]) if len(rows) > 4 else []
    else:
        rows = rows[:4]
    named = {k: per_step[i] for i, (ax, k, _) in enumerate(rows) if not ax}
    t_rep, t_idl = named["replay"], named["ideal"]
    rep_ns, idl_ns = float(t_rep.mean()), float(t_idl.mean())
    gap = rep_ns - idl_ns
    attribution: dict[str, pl.DataFrame] = {}
    added_steps: dict[tuple[str, object], np.ndarray] = {}
    for (ax, k, _), ts in zip(rows, per_step):
        if ax:
            added_steps[(ax, k)] = ts - t_idl
    for ax in AXES:
        recs = [(k, float((t_idl + v).mean())) for (a, k), v in added_steps.items() if a == ax]
        kt = pl.Int64 if ax in ("by_rank", "by_stage", "by_dp_replica") else pl.Utf8
        df = pl.DataFrame({"key": [k for k, _ in recs], "step_time_ns": [t for _, t in recs]},
                          schema={"key": kt, "step_time_ns": pl.Float64})
        attribution[ax] = df.with_columns(
            (pl.col("step_time_ns") - idl_ns).alias("added_ns"),
            (pl.col("step_time_ns") / idl_ns if idl_ns > 0 else pl.lit(None, pl.Float64)).alias("slowdown"),
            # (within [0, 1] where the replay is monotone; commscope's model bounds it there)
            ((((pl.col("step_time_ns") - idl_ns) / gap).clip(0.0, 1.0) if not study
              else (pl.col("step_time_ns") - idl_ns) / gap) if gap > 0 else pl.lit(None, pl.Float64)).alias("share"),
        ).sort(["added_ns", "key"], descending=[True, False])

    role_of = rl.role

    def stands_out(key: int) -> tuple[bool, float]:
        x = added_steps[("by_rank", key)]
        # ranks not replayed count with their time above ideal, all their put-back could add
        others = {**{r: b for r, b in rank_bound.items() if r != key},
                  **{int(k): float(v.mean()) for (a, k), v in added_steps.items() if a == "by_rank" and k != key}}
        # the upper quartile: lateness several ranks take turns at (ring positions) is the background, not a root
        typical = float(np.quantile(list(others.values()), TYPICAL_QUANTILE)) if others else 0.0
        # its replicas of the same role (where replayed): a balanced pipeline's last stage adds its noise on the
        # critical path in every replica alike
        peers = [v for k, v in others.items() if rl.replicated and role_of.get(k) == role_of.get(key)]
        peer = float(np.median(peers)) if peers else 0.0
        lift = x - typical
        conf = _confidence(lift)
        ok = (float(lift.mean()) >= VISIBLE_SHARE * rep_ns and float(x.mean()) >= EFFECT * max(typical, 0.0)
              and float(x.mean()) >= PEER_EFFECT * max(peer, 0.0) and 1.0 - conf <= MAX_P)
        return ok, conf

    # roots: ranks by what their put-back adds; then the kind and the saving of each, one more batch
    cands = []
    for key in attribution["by_rank"]["key"].to_list()[:MAX_ROOTS] if idl_ns <= rep_ns else []:
        ok, conf = stands_out(int(key))
        if ok:
            cands.append((int(key), conf))
    extra: list = []
    for r, _ in cands:
        s = rank_nodes[r]
        extra.append(lambda m, i, s=s: (idl.fill(m, i, s, keep=True, host=host),
                                        m.dgap.__setitem__((i, s), idl.dgap[s])))
        extra.append(lambda m, i, s=s: (idl.fill(m, i, s, keep=True, host=host),
                                        m.ddur.__setitem__((i, s), idl.ddur[s])))
        extra.append(_remove(idl, host, s))
    workers = tuple(int(k) for k in attribution["by_rank"]["key"].to_list()[:max(1, math.ceil(WORKER_SHARE * len(
        set(rank.tolist()))))])
    for k in range(2, len(cands) + 1):  # the first k candidates made ideal together
        extra.append(_remove(idl, host, np.concatenate([rank_nodes[r] for r, _ in cands[:k]])))
    if workers:
        extra.append(_remove(idl, host, np.flatnonzero(np.isin(rank, workers))))
    more_steps = times(extra) if extra else []
    more = [float(t.mean()) for t in more_steps]
    # the candidates fixing which pays: the most of them whose joint fix saves at least SAVING_SHARE of what the
    # first one's put-back adds (a rank slower than its peers that other ranks hold back as much is no root)
    joint = [rep_ns - more[2]] + [rep_ns - more[3 * len(cands) + k - 2] for k in range(2, len(cands) + 1)] \
        if cands else []
    keep = next((k for k in range(len(cands), 0, -1)
                 if joint[k - 1] >= SAVING_SHARE * float(added_steps[("by_rank", cands[0][0])].mean())), 0)
    # a root pays beyond the run's own step-to-step noise: fixing it saves a visible part of the step, and its
    # per-step savings stand out against their own spread over steps (one-sided t-test; one step: nothing to
    # test, said as such). Structure a schedule creates by design (a pipeline's last stage computing the loss)
    # saves little, or in some steps only
    def pays(k: int) -> bool:  # the first k candidates made ideal together
        fixed = more_steps[2] if k == 1 else more_steps[3 * len(cands) + k - 2]
        saved = t_rep - fixed
        return float(saved.mean()) >= VISIBLE_SHARE * rep_ns and 1.0 - _confidence(saved) <= MAX_P

    keep = next((k for k in range(keep, 0, -1) if pays(k)), 0)
    cands = cands[:keep]
    neck = None
    if cands and attribution["by_stage"].height:
        top = int(attribution["by_stage"]["key"][0])
        neck = top if rl.stage.get(cands[0][0]) == top else None
    roots = []
    for j, (r, conf) in enumerate(cands):
        dur_added, gap_added, t_ns = more[3 * j] - idl_ns, more[3 * j + 1] - idl_ns, more[3 * j + 2]
        kind = ("compute" if dur_added > KIND_RATIO * max(gap_added, 0.0) else
                "host" if gap_added > KIND_RATIO * max(dur_added, 0.0) else "unknown")
        added = float(added_steps[("by_rank", r)].mean())
        roots.append(Root(rank=r, kind=kind, added_ns=added, saving_ns=rep_ns - t_ns,
                          saving_pct=100.0 * (rep_ns - t_ns) / rep_ns if rep_ns > 0 else 0.0, confidence=conf,
                          dur_added_ns=dur_added, gap_added_ns=gap_added))
    m_w = (rep_ns - more[-1]) / gap if workers and gap > 0 else None
    m_s = (rep_ns - float(named["remove_last_stage"].mean())) / gap if "remove_last_stage" in named and gap > 0 \
        else None
    # shares of the gap to the ideal run: within [0, 1] where the replay is monotone (a fix that makes some
    # operations ideal lands between the measured and the ideal run); outside it, the raw value is kept for the
    # warning and the share reported is the nearest bound
    # (the published study's model keeps its own definitions, which may leave [0, 1]: ST's M_S is 1.22)
    raw = {"m_w": m_w, "m_s": m_s}
    if not study:
        m_w, m_s = (None if x is None else min(max(x, 0.0), 1.0) for x in (m_w, m_s))
    nh_rep, nh_idl = float(named["replay_no_host"].mean()), float(named["ideal_no_host"].mean())
    if idl_ns > rep_ns:  # not monotone here: S is never below 1 (raw_shares keeps what the replay said)
        raw["slowdown"] = rep_ns / idl_ns
        idl_ns = rep_ns
    return Counterfactual(
        replay_ns=rep_ns, ideal_ns=idl_ns, slowdown=rep_ns / idl_ns if idl_ns > 0 else None,
        replay_no_host_ns=nh_rep, ideal_no_host_ns=nh_idl, slowdown_no_host=nh_rep / nh_idl if nh_idl > 0 else None,
        attribution=attribution, m_w=m_w, m_s=m_s, roots=tuple(roots), bottleneck_stage=neck,
        no_straggler_ns=rep_ns - roots[0].saving_ns if roots else None,
        ideal_changes=idl, steps=int(t_rep.size), workers=workers,
        raw_shares={} if study else {k: v for k, v in raw.items() if v is not None and not 0.0 <= v <= 1.0})


def _per_rank(rank: np.ndarray, of: dict[int, int]) -> np.ndarray:
    """``of[rank]`` for each node's rank (-1 where absent), looked up once per distinct rank."""
    keys, inv = _dense(rank)
    return np.array([of.get(int(r), -1) for r in keys], dtype=np.int64)[inv]


def _where(s: pl.Series, value: str) -> np.ndarray:
    """Positions of ``s`` equal to ``value`` (nulls never are)."""
    return np.flatnonzero((s == value).fill_null(False).to_numpy())


def _put_back(idl: Ideal, host: bool, nodes: np.ndarray, insts: np.ndarray | None = None) -> replay.Keyed:
    """The ideal run with ``nodes`` (and ``insts``' transfers) as measured."""
    return idl.put_back(nodes, insts, host)


def _remove(idl: Ideal, host: bool, nodes: np.ndarray) -> replay.Keyed:
    """The measured run with ``nodes`` made ideal."""
    return idl.remove(nodes, host)


def deciding(c: Counterfactual) -> Counterfactual:
    """The model the verdict comes from: commscope's, unless its ideal replayed slower than the measured run
    (not monotone there) and the study's model was run (op tables), whose steps replay each on their own."""
    unsound = c.slowdown is None or "slowdown" in c.raw_shares
    return c.study if unsound and c.study is not None else c


SHARE_SLACK = 0.01  # M_W / M_S this far outside [0, 1] is said in a warning
STUDY_TOLERANCE = 0.15  # commscope's S without host gaps against the study's S on the same op tables
STUDY_SAID = 0.05  # from this difference on the report says why they differ


def warnings(c: Counterfactual | None) -> list[str]:
    """What the report must say about the counterfactual's own soundness, and where it differs from the study's."""
    if c is None:
        return []
    out = []
    if "slowdown" in c.raw_shares:
        out.append(f"the ideal run replays slower than the measured one (S = {c.raw_shares['slowdown']:.3f}): the "
                   "replay is not monotone here (partial or unmatched communication, inconsistent gaps), so S is "
                   "reported as 1 and no root is named"
                   + ("; the verdict is the published study's model's (stragglers.study)" if c.study is not None else ""))
    # (a share a rounding away from its bound is no news)
    bounded = [f"{k.upper()} {v:.2f}" for k, v in c.raw_shares.items() if k in ("m_w", "m_s") and
               (v < -SHARE_SLACK or v > 1.0 + SHARE_SLACK)]
    if bounded:
        out.append(f"{' and '.join(bounded)} fell outside [0, 1] (making those ranks or that stage ideal moved the "
                   "step by more than the whole gap to the ideal run, or the wrong way: the replay is not monotone "
                   "here); reported at the nearest bound")
    if c.steps == 1 and c.attribution["by_rank"].height > 1:
        out.append("one profiled step: the verdict and every saving are measured on that step alone; whether a late "
                   "rank is late in every step (chronic) or was late once cannot be told without more steps")
    st = c.study
    if st is not None and st.slowdown and c.slowdown_no_host:
        diff = c.slowdown_no_host / st.slowdown - 1.0
        if abs(diff) > STUDY_SAID:
            out.append(f"commscope's S with launch delays removed ({c.slowdown_no_host:.2f}) and the published "
                       f"study's ({st.slowdown:.2f}) differ by {100 * diff:+.0f}%: commscope's ideal run gives each "
                       "operation its role's typical time in the same step, never above measured (a stage's own work "
                       "stays), the study's the mean of its op type over every rank, stage and step")
    return out


def _confidence(lift: np.ndarray) -> float:
    """1 − the one-sided p-value that the mean per-step lift is above zero (t-test over steps); a single
    step (or no spread at all) gives 1 when the lift is positive."""
    n = lift.size
    m = float(lift.mean()) if n else 0.0
    if m <= 0:
        return 0.0
    sd = float(lift.std(ddof=1)) if n > 1 else 0.0
    if n < 2 or sd == 0.0:
        return 1.0
    from scipy.special import stdtr  # Student's t CDF without importing scipy.stats (~0.8 s)

    return float(stdtr(n - 1, m / (sd / math.sqrt(n))))
