"""MkDocs hooks (mkdocs.yml ``hooks:``): the JSON reference is rendered from the contract the writer uses
(analyzer/report/schema.py).

``<!-- commscope:json-schema -->`` in a page becomes one table per object of the schema; the schema itself is
published beside the page as ``commscope.analysis-1.schema.json``.
"""

from __future__ import annotations

import json
from typing import Any

from mkdocs.structure.files import File, Files

from analyzer.report.schema import ANALYSIS

MARKER = "<!-- commscope:json-schema -->"
SCHEMA_FILE = "reference/commscope.analysis-1.schema.json"
_UNITS = (("_ms", "ms"), ("_us", "µs"), ("_ns", "ns"), ("_pct", "%"), ("_gbps", "GB/s"), ("bytes", "bytes"))
_INPUTS = {"flight_recorder": "Flight Recorder dumps", "nccl_inspector": "NCCL Inspector logs", "optable": "op tables"}


def _unit(name: str) -> str:
    for suffix, unit in _UNITS:
        if name.endswith(suffix) or f"{suffix}_" in name:
            return unit
    return ""


def _type(node: dict[str, Any]) -> str:
    if "const" in node:
        return f'`"{node["const"]}"`'
    t = node.get("type", "")
    types = [t] if isinstance(t, str) else list(t)
    nullable = "null" in types
    types = [x for x in types if x != "null"]
    name = types[0] if types else "any"
    if name == "array":
        item = node.get("items", {})
        inner = item.get("type", "any")
        inner = inner if isinstance(inner, str) else "/".join(x for x in inner if x != "null")
        name = "list of records" if inner == "object" else f"list of {inner}s"
    elif name == "object" and isinstance(node.get("additionalProperties"), dict):
        name = "map"
    if "enum" in node:
        name += ": " + ", ".join(f"`{v}`" for v in node["enum"] if v is not None)
    return name + (" or null" if nullable else "")


def _children(node: dict[str, Any]) -> dict[str, Any] | None:
    """The fields of an object, of a list of records' items, or of a map's values."""
    for inner in (node, node.get("items"), node.get("additionalProperties")):
        if isinstance(inner, dict) and "properties" in inner:
            return inner["properties"]
    return None


def _suffix(node: dict[str, Any]) -> str:
    if isinstance(node.get("items"), dict) and "properties" in node["items"]:
        return "[]"
    if isinstance(node.get("additionalProperties"), dict):
        return ".*"
    return ""


def _section(path: str, node: dict[str, Any], level: int, seen: dict[int, str] | None = None) -> list[str]:
    """A table of the node's fields, then one section per nested object; a shape already shown (the five
    attribution axes, a root and the verdict) links to its first table instead of repeating it."""
    seen = {} if seen is None else seen
    fields = _children(node) or {}
    only = node.get("x-input")
    lines = [f"{'#' * level} `{path}`", "", node.get("description", "")]
    if only:
        lines[-1] += f" *Only for {_INPUTS[only]}.*"
    lines += ["", "| field | type | unit | meaning |", "|---|---|---|---|"]
    nested = []
    for name, sub in fields.items():
        meaning = sub.get("description", "").replace("|", "\\|")
        if sub.get("x-input") and sub.get("x-input") != only:
            meaning += f" *Only for {_INPUTS[sub['x-input']]}.*"
        if _children(sub):
            shape = id(_children(sub))
            if shape not in seen:
                seen[shape] = _anchor(f"{path}.{name}")
                nested.append((f"{path}.{name}{_suffix(sub)}", sub))
            meaning += f" See [its fields](#{seen[shape]})."
        lines.append(f"| `{name}` | {_type(sub)} | {_unit(name)} | {meaning} |")
    lines.append("")
    for sub_path, sub in nested:
        lines += _section(sub_path, sub, min(level + 1, 4), seen)
    return lines


def _anchor(path: str) -> str:
    return "json-" + path.replace(".", "-").replace("[]", "").replace("*", "").strip("-").replace("--", "-")


def render(schema: dict[str, Any]) -> str:
    lines: list[str] = []
    seen: dict[int, str] = {}
    for name, node in schema["properties"].items():
        path = name + _suffix(node)
        if _children(node):
            seen[id(_children(node))] = _anchor(name)
            lines += _section(path, node, 3, seen)
    top = ["| field | type | meaning |", "|---|---|---|"]
    for name, node in schema["properties"].items():
        link = f" See [`{name}`](#{_anchor(name)})." if _children(node) else ""
        only = f" *Only for {_INPUTS[node['x-input']]}.*" if node.get("x-input") else ""
        top.append(f"| `{name}` | {_type(node)} | {node.get('description', '')}{only}{link} |")
    return "\n".join(top + [""] + lines)


def _with_anchors(md: str) -> str:
    # each section heading gets a stable id (json-ranks, json-stragglers-roots, ...) for the links above
    out = []
    for line in md.split("\n"):
        if line.startswith("#") and "`" in line:
            path = line.split("`")[1].replace("[]", "").replace(".*", "")
            line += f" {{#{_anchor(path)}}}"
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, _with_anchors(render(ANALYSIS)))
    return markdown


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    # mkdocs-click (0.9) prints click 8.2+'s "no default" sentinel as a default; the table shows none instead
    return html.replace("<td><code>Sentinel.UNSET</code></td>", "<td></td>")


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, SCHEMA_FILE, content=json.dumps(ANALYSIS, indent=2, ensure_ascii=False)))
    return files
