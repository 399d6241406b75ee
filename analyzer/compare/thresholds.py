"""Regression thresholds for ``commscope compare``: defaults, ``--fail-on`` specs and TOML files.

A rule ``METRIC=+N%`` means "an increase of more than N% of the base value is a regression";
``METRIC=-N`` means "a decrease of more than N units (ms, points, GB/s) is a regression";
``METRIC=off`` disables the metric's gate (it is still reported). Later sources override earlier
ones: built-in defaults, then the TOML file, then each ``--fail-on``.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import UsageError
from ..ingest.digest import read_regular

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    import tomli as tomllib

# metric -> unit; the names match the JSON contract's columns
METRICS: dict[str, str] = {
    "step_time_ms": "ms",
    "compute_ms": "ms",
    "exposed_comm_ms": "ms",
    "exposed_wait_ms": "ms",
    "exposed_transfer_ms": "ms",
    "overlap_pct": "%",
    "idle_ms": "ms",
    "busbw_gbps": "GB/s",
    "caused_wait_ms": "ms",
}

_SPEC = re.compile(r"^\s*([+-])\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(%?)\s*$")  # ASCII digits: int() takes '٣'
MAX_FILE_BYTES = 1 << 20  # a thresholds file is a few lines
MAX_TOML_DEPTH = 8  # [fail_on] in a document: 2 levels; the TOML parser recurses per level


@dataclass(frozen=True)
class Rule:
    """How far a metric may move in its bad direction before the move counts."""

    amount: float  # magnitude, >= 0
    relative: bool  # True: percent of the base value; False: the metric's own unit
    worse: int  # +1: increases are bad; -1: decreases are bad

    def spec(self) -> str:
        return f"{'+' if self.worse > 0 else '-'}{self.amount:g}{'%' if self.relative else ''}"

    def exceeded(self, before: float | None, after: float | None) -> bool:
        """True when the change goes the bad way by more than the allowed amount."""
        if before is None or after is None:
            return False
        bad = (after - before) * self.worse
        if bad <= 0:
            return False
        if not self.relative:
            return bad > self.amount
        if before == 0:
            return True  # from nothing to something: any relative threshold is exceeded
        return 100.0 * bad / abs(before) > self.amount


@dataclass(frozen=True)
class Thresholds:
    rules: dict[str, Rule | None] = field(default_factory=dict)  # None: reported, never fails
    confidence: float = 0.95  # a change is significant when the test's p-value < 1 - confidence
    # time changes smaller than this share of the base median step time are noise, whatever their %
    min_effect_pct_of_step: float = 1.0
    straggler: bool = True  # a new straggler whose caused wait rose significantly is a regression

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    def rule(self, metric: str) -> Rule | None:
        return self.rules.get(metric)


DEFAULT_RULES: dict[str, Rule | None] = {
    "step_time_ms": Rule(5.0, True, +1),
    "compute_ms": None,
    "exposed_comm_ms": Rule(10.0, True, +1),
    "exposed_wait_ms": Rule(10.0, True, +1),
    "exposed_transfer_ms": None,
    "overlap_pct": Rule(5.0, False, -1),  # points
    "idle_ms": None,
    "busbw_gbps": Rule(10.0, True, -1),
    "caused_wait_ms": Rule(10.0, True, +1),
}
DEFAULTS = Thresholds(rules=dict(DEFAULT_RULES))


def _check_metric(metric: str, where: str) -> str:
    if metric not in METRICS:
        raise UsageError(f"{where}: unknown metric {metric!r} (one of {', '.join(METRICS)})")
    return metric


def parse_value(value: object, where: str) -> Rule | None:
    """``"+5%"``, ``"-5"``, ``-5`` (a number: absolute, its sign the bad direction), ``"off"`` / ``false``."""
    if value is False or (isinstance(value, str) and value.strip().lower() in ("off", "none", "false")):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # nan would never be exceeded and inf never reached: either switches the gate off without saying so
        if not math.isfinite(value):
            raise UsageError(f"{where}: {value!r} is not a finite threshold (write off to disable the metric's gate)")
        if value == 0:
            raise UsageError(f"{where}: a numeric threshold needs a sign (+ for increases, - for decreases)")
        return Rule(abs(float(value)), False, 1 if value > 0 else -1)
    m = _SPEC.match(str(value))
    if not m or not math.isfinite(float(m[2])):
        raise UsageError(f"{where}: expected +N% / -N% (relative), +N / -N (absolute) or off, not {str(value)[:60]!r}")
    sign, num, pct = m.groups()
    return Rule(float(num), pct == "%", 1 if sign == "+" else -1)


def parse_fail_on(text: str) -> tuple[str, Rule | None]:
    """One ``--fail-on METRIC=SPEC`` option."""
    metric, sep, value = text.partition("=")
    if not sep:
        raise UsageError(f"--fail-on {text!r}: expected METRIC=+N% (e.g. exposed_comm_ms=+5%)")
    metric = _check_metric(metric.strip(), f"--fail-on {text!r}")
    return metric, parse_value(value, f"--fail-on {text!r}")


def load_toml(path: Path, base: Thresholds = DEFAULTS) -> Thresholds:
    """Read a thresholds file (see the README): top-level settings and a ``[fail_on]`` table. A regular file of at
    most ``MAX_FILE_BYTES`` (a FIFO would block the read), nested at most ``MAX_TOML_DEPTH``."""
    try:
        text = read_regular(Path(path), MAX_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: thresholds file does not exist") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a valid TOML thresholds file ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read as a thresholds file ({exc.strerror or exc}; give a regular TOML "
                         f"file of at most {MAX_FILE_BYTES >> 10} KiB)") from None
    if toml_depth(text) > MAX_TOML_DEPTH:
        raise UsageError(f"{path}: not a thresholds file (nested more than {MAX_TOML_DEPTH} levels deep; one has 2)")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not a valid TOML thresholds file ({exc})") from None
    known = {"confidence", "min_effect_pct_of_step", "straggler", "fail_on"}
    extra = sorted(set(doc) - known)
    if extra:
        raise UsageError(f"{path}: unknown key(s) {', '.join(extra)} (expected {', '.join(sorted(known))})")
    rules = dict(base.rules)
    table = doc.get("fail_on", {})
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [fail_on] must be a table of METRIC = \"+N%\"")
    for metric, value in table.items():
        rules[_check_metric(metric, f"{path} [fail_on]")] = parse_value(value, f"{path} [fail_on] {metric}")
    out = replace(base, rules=rules)
    if "confidence" in doc:
        conf = doc["confidence"]
        if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0.5 <= conf < 1.0:
            raise UsageError(f"{path}: confidence must be a number in [0.5, 1), e.g. 0.95")
        out = replace(out, confidence=float(conf))
    if "min_effect_pct_of_step" in doc:
        floor = doc["min_effect_pct_of_step"]
        # nan compares false with everything and inf hides every change: both would switch the gate off
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor <= 100:
            raise UsageError(f"{path}: min_effect_pct_of_step must be a number from 0 to 100 (a share of the step), "
                             f"not {floor!r}")
        out = replace(out, min_effect_pct_of_step=float(floor))
    if "straggler" in doc:
        if not isinstance(doc["straggler"], bool):
            raise UsageError(f"{path}: straggler must be true or false")
        out = replace(out, straggler=doc["straggler"])
    return out


_TOML_MARK = re.compile(r"[\"'#\[\]{}]")
_TOML_CLOSE = {  # from after an opening quote to past its closing one (or the line's end where a string may not span)
    '"': re.compile(r'(?:[^"\\\n]|\\.)*(?:"|\n|$)'),
    "'": re.compile(r"[^'\n]*(?:'|\n|$)"),
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*(?:"""|$)', re.S),
    "'''": re.compile(r"(?:[^']|'(?!''))*(?:'''|$)"),
}


def toml_depth(text: str, stop: int = MAX_TOML_DEPTH) -> int:
    """How deeply arrays and inline tables nest (brackets outside strings and comments): the TOML parser recurses
    once per level. One pass of regex searches, no recursion, stopping once past ``stop``."""
    depth = best = 0
    pos = 0
    while (m := _TOML_MARK.search(text, pos)) is not None:
        c, pos = m.group(), m.end()
        if c in "\"'":
            quote = c * 3 if text.startswith(c * 3, m.start()) else c
            pos = _TOML_CLOSE[quote].match(text, m.start() + len(quote)).end()
        elif c == "#":
            nl = text.find("\n", pos)
            pos = len(text) if nl < 0 else nl + 1
        elif c in "[{":
            depth += 1
            best = max(best, depth)
            if best > stop:
                return best
        else:
            depth = max(0, depth - 1)
    return best


def build(fail_on: tuple[str, ...] | list[str] = (), path: Path | None = None) -> Thresholds:
    """Defaults, then the file, then each ``--fail-on`` (``straggler=off`` disables the straggler gate)."""
    th = load_toml(path) if path is not None else DEFAULTS
    rules = dict(th.rules)
    for text in fail_on:
        if text.partition("=")[0].strip() == "straggler":
            value = text.partition("=")[2].strip().lower()
            if value not in ("on", "off", "true", "false"):
                raise UsageError(f"--fail-on {text!r}: straggler takes on or off")
            th = replace(th, straggler=value in ("on", "true"))
            continue
        metric, rule = parse_fail_on(text)
        rules[metric] = rule
    return replace(th, rules=rules)
