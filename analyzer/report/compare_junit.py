"""JUnit XML for CI dashboards: one testcase per gated metric and scope, failing when it regressed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..compare.diff import Comparison, Delta
from .compare_text import describe, straggler_lines


def _case(suite: ET.Element, d: Delta) -> bool:
    case = ET.SubElement(suite, "testcase", classname=f"commscope.compare.{d.scope.replace(' ', '_')}",
                         name=f"{d.metric} ({d.scope})")
    if d.regressed:
        fail = ET.SubElement(case, "failure", message=f"{d.metric} regressed ({d.scope})", type="regression")
        fail.text = describe(d)
    else:
        ET.SubElement(case, "system-out").text = describe(d)
    return d.regressed


def render(c: Comparison) -> str:
    """Gated metrics (those with a threshold) become testcases; so does the straggler check."""
    suite = ET.Element("testsuite", name="commscope.compare")
    gated = [d for d in c.deltas if d.rule is not None]
    failures = sum(_case(suite, d) for d in gated)
    s = c.straggler
    case = ET.SubElement(suite, "testcase", classname="commscope.compare.straggler", name="straggler")
    if s.regressed:
        failures += 1
        fail = ET.SubElement(case, "failure", message=f"straggler appeared: rank {s.new_rank}", type="regression")
        fail.text = "\n".join(straggler_lines(s))
    else:
        ET.SubElement(case, "system-out").text = "\n".join(straggler_lines(s))
    suite.set("tests", str(len(gated) + 1))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    root = ET.Element("testsuites", name="commscope", tests=suite.get("tests", "0"), failures=str(failures))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
