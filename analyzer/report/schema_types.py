"""Builders of the JSON Schema nodes the contract (``report/schema.py``) is written in: one line per field.

Every leaf may be null unless it says otherwise (the contract writes null for a missing value, never NaN);
``input`` tags a field only one kind of input fills (``x-input``, an annotation JSON Schema validators ignore).
"""

from __future__ import annotations

from typing import Any

Node = dict[str, Any]


def _node(types: list[str], description: str, null: bool, input: str | None, **more: Any) -> Node:
    node: Node = {"type": types + ["null"] if null else types[0] if len(types) == 1 else types,
                  "description": description, **more}
    if input:
        node["x-input"] = input
    return node


def num(description: str, input: str | None = None) -> Node:
    """A number (a float, or an int where the value is whole), null when missing."""
    return _node(["number"], description, True, input)


def whole(description: str, null: bool = False, input: str | None = None) -> Node:
    return _node(["integer"], description, null, input)


def string(description: str, enum: list[str] | None = None, null: bool = False, input: str | None = None) -> Node:
    node = _node(["string"], description, null, input)
    if enum:
        node["enum"] = enum + [None] if null else enum
    return node


def flag(description: str, input: str | None = None) -> Node:
    return _node(["boolean"], description, True, input)


def strings(description: str, input: str | None = None) -> Node:
    return _node(["array"], description, False, input, items={"type": ["string", "null"]})


def wholes(description: str, input: str | None = None) -> Node:
    return _node(["array"], description, False, input, items={"type": "integer"})


def obj(description: str, properties: dict[str, Node], null: bool = False, input: str | None = None) -> Node:
    """An object with exactly these keys, in this order (the writers' order)."""
    return _node(["object"], description, null, input, properties=properties, additionalProperties=False)


def records(description: str, properties: dict[str, Node], null: bool = False, input: str | None = None) -> Node:
    """A list of records (table rows), each with these keys in this order."""
    return _node(["array"], description, null, input,
                 items={"type": "object", "properties": properties, "additionalProperties": False})


def mapping(description: str, value: Node, null: bool = False, input: str | None = None) -> Node:
    """An object keyed by data (a rank, a group), each value of one shape."""
    return _node(["object"], description, null, input, additionalProperties=value)


def ref(node: Node, description: str) -> Node:
    """The same shape under another description."""
    return {**node, "description": description}
