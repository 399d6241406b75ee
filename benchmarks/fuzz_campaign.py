"""The long fuzz campaign of issue #32: millions of hostile Kineto inputs against the contract, coverage-guided.

    pip install -e '.[fuzz]'          # atheris (libFuzzer for Python)
    python benchmarks/fuzz_campaign.py --runs 1000000 [--mode bytes|values] [--seconds 3600] [--out DIR]

Two modes, both seeded with a small generated 2-rank job (``sample_traces.generate``, rank 0):

- ``bytes`` (default): libFuzzer mutates the file's bytes (flips, inserts, splices, dictionary tokens) and every
  input goes through the loader (sniffing, inflating, limits, the Kineto reader's four paths, hygiene, the sanity
  and consistency checks). The contract: a ``TraceSet`` or a ``CommscopeError`` of one line; any other exception,
  or an input slower than ``--timeout`` seconds, is a finding (libFuzzer writes it to ``--out``).
- ``values``: the input picks GPU events, fields and hostile values (null, NaN, +-inf, huge, negative, wrong
  types), and each mutated document is analyzed in full and checked against the unmutated one
  (``tests/fuzz_contract.py``): refused in one line, or the same numbers, or a new warning -- never a silent change.

Without atheris, a plain random byte mutator runs the ``bytes`` contract (no coverage guidance). Prints the
number of inputs run, the rate and the findings; README "Fuzzing" keeps the figure of the last campaign.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOSTILE = [None, math.nan, math.inf, -math.inf, -1, -1e30, 1e30, 10**30, "x", "", [], {}, True]
FIELDS = ["ts", "dur", "name", "ph", "args", "pid", "tid", "args.stream", "args.device", "args.correlation",
          "args.Collective name", "args.In msg nelems", "args.Process Group Ranks"]
DICTIONARY = ['"traceEvents"', '"ph"', '"X"', '"cat"', '"kernel"', '"ts"', '"dur"', '"args"', '"stream"',
              '"correlation"', '"distributedInfo"', '"rank"', '"world_size"', "NaN", "Infinity", "1e30", "-1",
              "null", "[[[[", "\\u0000", "\xef\xbb\xbf", '"ncclDevKernel_AllReduce"', '"ProfilerStep#1"']


def seed_trace(folder: Path) -> Path:
    from sample_traces import generate

    generate.main([str(folder / "gen"), "--ranks", "2", "--steps", "1", "--no-truth", "--seed", "7"])
    return next((folder / "gen").glob("*rank0*.json"))


class Target:
    def __init__(self, work: Path, mode: str, timeout: int) -> None:
        from tests import fuzz_contract as fc

        self.fc = fc
        self.mode = mode
        self.timeout = timeout
        self.seed = seed_trace(work)
        self.seed_doc = json.loads(self.seed.read_text())
        self.path = work / "rank0.pt.trace.json"
        self.base = fc.run([self.seed])
        self.runs = 0
        self.refused = 0
        self.warned = 0

    def bytes_input(self, data: bytes) -> None:
        from analyzer.errors import CommscopeError
        from analyzer.ingest.loader import LoadOptions, load

        self.runs += 1
        self.path.write_bytes(data)
        try:
            load([self.path], LoadOptions(jobs=1, cache=False))
        except CommscopeError as exc:
            self.refused += 1
            if "\n" in str(exc):
                raise AssertionError(f"an error of several lines: {exc}") from None

    def values_input(self, picks: list[tuple[int, str, object]], shuffle: int | None) -> None:
        import copy

        self.runs += 1
        doc = copy.deepcopy(self.seed_doc)
        events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in ("kernel", "gpu_memcpy",
                                                                                            "gpu_memset")]
        if shuffle is not None:
            random.Random(shuffle).shuffle(doc["traceEvents"])
        for i, field, value in picks:
            e = events[i % len(events)]
            if field.startswith("args."):
                if isinstance(e.get("args"), dict):
                    e["args"][field[5:]] = value
            else:
                e[field] = value
        self.path.write_text(json.dumps(doc))
        got = self.fc.run([self.path])
        self.refused += got.kind == "error"
        self.warned += got.kind == "ok" and got.warnings != self.base.warnings
        problem = self.fc.violation(self.base, got, neutral=not picks)
        if problem:
            raise AssertionError(problem)


def _values_from(fdp: object) -> tuple[list[tuple[int, str, object]], int | None]:
    n = fdp.ConsumeIntInRange(0, 3)  # type: ignore[attr-defined]
    picks = [(fdp.ConsumeIntInRange(0, 1 << 20), FIELDS[fdp.ConsumeIntInRange(0, len(FIELDS) - 1)],  # type: ignore[attr-defined]
              HOSTILE[fdp.ConsumeIntInRange(0, len(HOSTILE) - 1)]) for _ in range(n)]  # type: ignore[attr-defined]
    shuffle = fdp.ConsumeIntInRange(0, 1 << 30) if fdp.ConsumeBool() else None  # type: ignore[attr-defined]
    return picks, shuffle


def run_atheris(target: Target, args: argparse.Namespace, out: Path) -> None:
    import atheris

    def one(data: bytes) -> None:
        if target.mode == "bytes":
            target.bytes_input(data)
        else:
            target.values_input(*_values_from(atheris.FuzzedDataProvider(data)))

    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    if target.mode == "bytes" and not any(corpus.iterdir()):
        (corpus / "seed.json").write_bytes(target.seed.read_bytes())
    dict_file = out / "kineto.dict"
    dict_file.write_text("".join(f'"{_dict_escape(t)}"\n' for t in DICTIONARY))
    argv = [sys.argv[0], str(corpus), f"-runs={args.runs}", f"-timeout={args.timeout}", f"-rss_limit_mb={args.rss_mb}",
            f"-artifact_prefix={out}/", f"-max_len={max(1 << 16, target.seed.stat().st_size * 2)}",
            f"-dict={dict_file}", "-print_final_stats=1"]
    if args.seconds:
        argv.append(f"-max_total_time={args.seconds}")
    atheris.Setup(argv, one)
    atheris.Fuzz()


def _dict_escape(token: str) -> str:
    """A libFuzzer dictionary entry's body: \\ and \" escaped, other bytes past ASCII as \\xNN."""
    out = []
    for b in token.encode("latin-1", "replace"):
        c = chr(b)
        out.append("\\\\" if c == "\\" else '\\"' if c == '"' else c if 32 <= b < 127 else f"\\x{b:02x}")
    return "".join(out)


def run_plain(target: Target, args: argparse.Namespace, out: Path) -> None:
    """No atheris: random byte mutations of the seed, the same contract, time-limited per input."""
    rng = random.Random(args.seed)
    seed = target.seed.read_bytes()
    tokens = [t.encode("latin-1", "replace") for t in DICTIONARY]
    deadline = time.monotonic() + args.seconds if args.seconds else math.inf
    findings = 0
    for i in range(args.runs):
        if time.monotonic() > deadline:
            break
        data = bytearray(seed)
        for _ in range(rng.randint(1, 8)):
            op, at = rng.random(), rng.randrange(len(data) + 1)
            if op < 0.3 and data:
                data[at % len(data)] = rng.randrange(256)
            elif op < 0.55:
                data[at:at] = rng.choice(tokens)
            elif op < 0.8:
                del data[at:at + rng.randint(1, 64)]
            else:
                src = rng.randrange(len(data) + 1)
                data[at:at] = data[src:src + rng.randint(1, 256)]
        try:
            with target.fc.time_limit(args.timeout):
                target.bytes_input(bytes(data))
        except Exception as exc:  # noqa: BLE001 - a finding, kept for the report
            findings += 1
            (out / f"finding-{i}.json").write_bytes(bytes(data))
            print(f"finding {i}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    print(f"plain mutator: {target.runs} inputs, {findings} findings", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=int, default=0, help="stop after this long (0: when --runs are done)")
    ap.add_argument("--mode", choices=("bytes", "values"), default="bytes")
    ap.add_argument("--timeout", type=int, default=30, help="seconds one input may take before it is a finding")
    ap.add_argument("--rss-mb", type=int, default=4096)
    ap.add_argument("--out", type=Path, help="findings and the corpus (default: a temporary folder)")
    ap.add_argument("--plain", action="store_true", help="the random mutator even where atheris is installed")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="cs-fuzz-campaign-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cs-fuzz-work-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is not None and not args.plain:
        with atheris.instrument_imports(include=["analyzer"]):
            import analyzer.analysis  # noqa: F401
    target = Target(work, args.mode, args.timeout)
    print(f"fuzzing {args.mode} from {target.seed} ({target.seed.stat().st_size:,} bytes); findings -> {out}",
          flush=True)
    start = time.monotonic()
    try:
        if atheris is not None and not args.plain:
            run_atheris(target, args, out)
        else:
            run_plain(target, args, out)
    finally:
        took = time.monotonic() - start
        print(f"{target.runs:,} inputs in {took:,.0f} s ({target.runs / max(took, 1e-9):,.0f}/s); "
              f"{target.refused:,} refused in one line", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
