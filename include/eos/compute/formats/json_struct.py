"""Compiling the declared paths into a msgspec Struct: the typed decoder the JSON parser
(``eos.compute.formats.json``) reads every record with first, and a getter per declared field
from the decoded Struct.

msgspec checks what its strict types are exactly our rules (string, long, double, boolean) and
skips undeclared keys; a path that is both a value and an object is decoded as plain JSON and
walked in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Annotated, Any, Union

import msgspec

from eos.compute.formats.values import BAD, LONG_MAX, LONG_MIN, Use

_Long = Annotated[int, msgspec.Meta(ge=LONG_MIN, le=LONG_MAX)]
# What decoding a record may raise: msgspec's errors; UnicodeDecodeError (a ValueError) for bad
# UTF-8 in a string; ArithmeticError when the float hook's Decimal() refuses an exponent beyond
# +-10^18 (it is only called for declared values read exactly).
DECODE_ERRORS = (msgspec.DecodeError, ValueError, RecursionError, ArithmeticError)


def msgspec_type(use: Use) -> Any:
    """The msgspec type that decodes ``use``'s value (Any: decoded as plain JSON)."""
    return {"string": str, "long": _Long, "double": float, "boolean": bool,
            "epoch_ms": int, "iso8601": str}.get(use.kind, Any)


class Node:
    """A key of the declared paths: a leaf (uses), an object (children), or both (generic)."""

    def __init__(self) -> None:
        self.children: dict[str, Node] = {}
        self.uses: list[Use] = []
        self.attr = ""
        self.type: Any = Any
        self.generic = False  # decoded as plain JSON (dict, list, ...) and walked in Python
        self.required = False
        self.dummy: Any = None  # a stand-in value, for records that failed to decode

    def walk(self) -> list[Node]:
        return [self, *(n for child in self.children.values() for n in child.walk())]


def _compile_node(node: Node, name: str) -> None:
    """Give ``node`` its msgspec type, whether it is required, and its stand-in value."""
    node.required = any(not use.optional for n in node.walk() for use in n.uses)
    if node.children and node.uses:  # a value and an object at once: walked in Python
        node.generic = True
        return
    if node.uses:
        types = {msgspec_type(use) for use in node.uses}
        if types == {int, _Long}:  # the event time in ms and a long: the stricter serves both
            types = {_Long}
        node.type = types.pop() if len(types) == 1 else Any
        node.generic = node.type is Any
        if node.generic:
            numeric = {"decimal", "double", "long", "epoch_ms", "epoch_s"}
            node.dummy = 0 if {use.kind for use in node.uses} <= numeric else None
        else:
            node.dummy = {str: "", _Long: 0, int: 0, float: 0.0, bool: False}[node.type]
        return
    fields: list[tuple] = []
    rename, dummies = {}, {}
    for i, (key, child) in enumerate(node.children.items()):
        child.attr = f"f{i}"
        rename[child.attr] = key
        _compile_node(child, f"{name}_{i}")
        if child.required:
            fields.append((child.attr, child.type))
            dummies[child.attr] = child.dummy
        else:
            fields.append((child.attr, Union[child.type, None], None))  # noqa: UP007
    node.type = msgspec.defstruct(name, fields, rename=rename, kw_only=True, gc=False)
    node.dummy = node.type(**dummies)


def getter(root: Node, use: Use) -> tuple[Callable[[Any], Any], bool]:
    """A function from the decoded Struct to the use's value (None: absent or null; BAD: an
    intermediate that is not an object), and whether the value is exactly typed by msgspec."""
    attrs: list[str] = []
    nullable = False
    node = root
    rest: tuple[str, ...] = ()
    for i, key in enumerate(use.path):
        node = node.children[key]
        attrs.append(node.attr)
        if node.generic:
            rest = use.path[i + 1:]
            break
        if i < len(use.path) - 1 and not node.required:
            nullable = True
    exact = not node.generic and node.type is msgspec_type(use)
    if not nullable and not rest:
        return attrgetter(".".join(attrs)), exact

    def get(struct: Any) -> Any:
        value = struct
        for attr in attrs:
            value = getattr(value, attr)
            if value is None:
                return None
        for key in rest:
            if type(value) is not dict:
                return None if value is None else BAD
            value = value.get(key)
        return value

    return get, exact and not rest


def compile_struct(uses: list[Use]) -> Node:
    """The root of the declared paths of ``uses``, compiled: its ``type`` is the Struct."""
    root = Node()
    for use in uses:
        node = root
        for key in use.path:
            node = node.children.setdefault(key, Node())
        node.uses.append(use)
    _compile_node(root, "Event")
    return root
