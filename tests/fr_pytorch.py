"""PyTorch's own Flight Recorder analyzer (``torch.distributed.flight_recorder``, what ``fr_trace`` runs) as an oracle.

Its database builder (``components.builder.build_db``) is fed the dumps as commscope's restricted loader reads
them: ``fr_trace``'s own loader (``components.loader.read_dump``) calls ``pickle.load`` on each file, which runs
whatever a pickle asks, so it is never called (``findings`` makes it raise if anything did). What it reports, per
collective: errors (``Collective.pass_check`` false, each mismatched rank with a ``MatchState``) and ranks that did
not join (``missing_ranks``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

KINDS = {"COLLECTIVE_TYPE_MISMATCH": "op", "SIZE_OR_SYNTAX_MISMATCH": "size", "COLLECTIVE_DTYPE_MISMATCH": "dtype",
         "COLLECTIVE_STATE_MISMATCH": "state"}


@dataclass(frozen=True)
class Finding:
    pg: str  # the group's name (PyTorch's ``group_id``)
    seq: int  # collective_seq_id
    op: str
    culprits: dict[int, str]  # rank -> kind (op, size, dtype, state), relative to PyTorch's first rank's entry
    missing: frozenset[int]  # ranks that did not join


def available() -> bool:
    try:
        from torch.distributed.flight_recorder.components import builder  # noqa: F401
    except ImportError:
        return False
    return True


def findings(folder: Path) -> list[Finding]:
    """PyTorch's analyzer on the dumps in ``folder`` (every rank present), its findings in its own terms."""
    from torch.distributed.flight_recorder.components import builder, loader
    from torch.distributed.flight_recorder.components.config_manager import JobConfig

    from analyzer.ingest.discover import flight_recorder_files
    from analyzer.ingest.flight_recorder.decode import decode

    logging.getLogger("Flight Recorder").setLevel(logging.CRITICAL)  # it logs every finding to stderr

    def refused(*_a: object, **_k: object) -> None:
        raise AssertionError("fr_trace's own loader would unpickle without restriction")

    kept, loader.read_dump = loader.read_dump, refused
    try:
        return _findings(folder, builder, JobConfig, flight_recorder_files, decode)
    finally:
        loader.read_dump = kept


def _findings(folder: Path, builder, job_config, flight_recorder_files, decode) -> list[Finding]:  # noqa: ANN001
    details = {}
    for f in flight_recorder_files([folder]) or []:
        doc, _ = decode(f.path)
        details[f.path.name] = {"host_name": f"host{f.rank_hint}", "rank": f.rank_hint, "entries": doc["entries"],
                                "version": doc["version"], "pg_config": doc["pg_config"]}
    args = job_config().parse_args([str(folder)])
    version = next(iter(details.values()))["version"]
    db = builder.build_db(details, args, version)
    out = []
    for c in db.collectives:
        if c.pass_check and not c.missing_ranks:
            continue
        culprits = {r: KINDS[m.type_of_mismatch.state.name] for r, m in (c.mismatch_collectives or {}).items()}
        out.append(Finding(str(c.group_id), int(c.collective_seq_id), c.collective_name.split(":", 1)[-1],
                           culprits, frozenset(c.missing_ranks or ())))
    return out


__all__ = ["Finding", "available", "findings"]
