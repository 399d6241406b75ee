"""The Kineto scanner (``analyzer/ingest/kineto/_kscan.c``) under AddressSanitizer and UBSan, on mutated documents.

    python -m benchmarks.kscan_fuzz [--runs 30000] [--seed 1]

Builds the scanner once with ``-fsanitize=address,undefined`` into a temporary folder (gcc and libasan needed), then
re-runs this script under ``LD_PRELOAD=libasan.so``: generated Kineto documents in three layouts, each edited at
random (bytes replaced, cut, inserted, the document truncated), scanned at three depth limits; every accepted
document's spans must lie inside it and be gathered. A memory error aborts with the sanitizer's report; the last
line says how many documents were scanned and accepted. Run it after any change to the C source.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "analyzer" / "ingest" / "kineto" / "_kscan.c"
_ALPHABET = b'{}[]",:\\ \n\t0123456789.-+eEtrufalsnu\x00\x1f\x7f\x80\xc3\xa9\xed\xf0\xf4\xff'


def build(out: Path) -> None:
    target = out / f"_kscan{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["gcc", "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-shared", "-fPIC",
                    f"-I{sysconfig.get_paths()['include']}", str(SOURCE), "-o", str(target)], check=True)


def fuzz(folder: Path, runs: int, seed: int) -> None:
    import numpy as np

    sys.path.insert(0, str(folder))
    import _kscan  # the sanitized build

    from sample_traces.generate import Scenario, kineto_text
    from sample_traces.generate import build as build_job

    doc = json.loads(kineto_text(build_job(Scenario(ranks=2, steps=1, python_noise=2)), 0))
    docs = [json.dumps(doc).encode(), json.dumps(doc, indent=1).encode(), json.dumps(doc, separators=(",", ":")).encode()]
    rng = random.Random(seed)
    accepted, t = 0, time.perf_counter()
    for _ in range(runs):
        data = bytearray(rng.choice(docs))
        for _ in range(rng.randrange(1, 8)):
            if not data:
                break
            pos, op = rng.randrange(len(data)), rng.random()
            if op < 0.4:
                data[pos] = rng.choice(_ALPHABET)
            elif op < 0.6:
                del data[pos : pos + rng.randrange(1, 40)]
            elif op < 0.8:
                data[pos:pos] = bytes(rng.choice(_ALPHABET) for _ in range(rng.randrange(1, 6)))
            else:
                del data[rng.randrange(len(data)) :]
        text = bytes(data)
        for depth in (64, 3, 5):
            got = _kscan.scan(text, depth, (b"kernel", b"cuda_runtime", b"user_annotation"), (b"record_param_comms",),
                              (b"ProfilerStep#",), False)
            if got is None:
                continue
            accepted += 1
            s, e = np.frombuffer(got[2], np.int64), np.frombuffer(got[3], np.int64)
            assert ((s >= 0) & (s < e) & (e <= len(text))).all()
            _kscan.gather(text, s, e)
    print(f"scanned {3 * runs} documents, accepted {accepted}, in {time.perf_counter() - t:.1f} s: no sanitizer error")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--built", type=Path, help=argparse.SUPPRESS)  # the re-run under the sanitizer
    a = ap.parse_args()
    if a.built is not None:
        fuzz(a.built, a.runs, a.seed)
        return 0
    with tempfile.TemporaryDirectory(prefix="kscan-asan-") as tmp:
        build(Path(tmp))
        asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True)
        env = {**os.environ, "LD_PRELOAD": asan.stdout.strip(), "ASAN_OPTIONS": "detect_leaks=0",
               "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "benchmarks.kscan_fuzz", "--runs", str(a.runs), "--seed",
                               str(a.seed), "--built", tmp], env=env, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
