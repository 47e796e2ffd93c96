"""A JSON schema read into the typed nodes llama.cpp's grammar converter works on.

llama.cpp (common/json-schema.cpp) first reads a schema into a small tree: each node is one of
fourteen kinds, ``$ref`` targets are read once per reference and linked afterwards (so a cycle
is fine), and a schema outside the supported subset fails with ``JSON schema error at PATH:
...``. This module reproduces that reading, including its quirks: a ``type`` list becomes an
``anyOf`` over copies of the schema, keywords win in a fixed order (``$ref``, ``oneOf``,
``anyOf``, ``type`` list, ``const``, ``enum``, then the type), fractional integer bounds are
rounded inwards, counts are read as C ``int`` and bounds as ``int64``.

It also holds ``dump_json``, nlohmann::json's compact ``dump()`` (the text a ``const`` or an
``enum`` value becomes in the grammar; its numbers through ``floats.format_double``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import GrammarError
from ..schema_bounds import spend_on, with_type
from .floats import format_double

__all__ = [
    "INT64_MIN",
    "INT64_MAX",
    "AnyNode",
    "RefNode",
    "AnyOfNode",
    "AllOfNode",
    "ConstNode",
    "EnumNode",
    "NullNode",
    "BooleanNode",
    "NumberNode",
    "IntegerNode",
    "StringNode",
    "ArrayNode",
    "TupleNode",
    "Property",
    "ObjectNode",
    "SchemaNode",
    "SchemaDocument",
    "read_schema",
    "dump_json",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_UINT64_END = 2**64


@dataclass(eq=False)
class AnyNode:
    """``{}``: any JSON value."""


@dataclass(eq=False)
class RefNode:
    """A local ``$ref``; ``target`` is set once the whole document is read."""

    ref: str
    target: SchemaNode | None = None


@dataclass(eq=False)
class AnyOfNode:
    """``anyOf`` / ``oneOf``, or a ``type`` list (one alternative per type)."""

    children: list[SchemaNode] = field(default_factory=list)


@dataclass(eq=False)
class AllOfNode:
    children: list[SchemaNode] = field(default_factory=list)


@dataclass(eq=False)
class ConstNode:
    value: Any


@dataclass(eq=False)
class EnumNode:
    values: list[Any] = field(default_factory=list)


@dataclass(eq=False)
class NullNode:
    pass


@dataclass(eq=False)
class BooleanNode:
    pass


@dataclass(eq=False)
class NumberNode:
    """A number; llama.cpp reads no bound of a ``number``."""


@dataclass(eq=False)
class IntegerNode:
    """Inclusive bounds (exclusive ones folded in); the int64 extremes mean unbounded."""

    minimum: int = INT64_MIN
    maximum: int = INT64_MAX


@dataclass(eq=False)
class StringNode:
    pattern: str = ""
    format: str = ""  # "", "uuid", "date", "time" or "date-time"
    min_length: int = 0
    max_length: int = -1  # -1: unbounded


@dataclass(eq=False)
class ArrayNode:
    items: SchemaNode = field(default_factory=AnyNode)
    min_items: int = 0
    max_items: int = -1  # -1: unbounded


@dataclass(eq=False)
class TupleNode:
    """``items`` (or ``prefixItems``) given as a list: exactly these items, in order."""

    items: list[SchemaNode] = field(default_factory=list)


@dataclass(eq=False)
class Property:
    name: str
    schema: SchemaNode
    required: bool = False


@dataclass(eq=False)
class ObjectNode:
    properties: list[Property] = field(default_factory=list)  # in schema order
    additional: SchemaNode | None = None  # None: no other member allowed


SchemaNode = (
    AnyNode
    | RefNode
    | AnyOfNode
    | AllOfNode
    | ConstNode
    | EnumNode
    | NullNode
    | BooleanNode
    | NumberNode
    | IntegerNode
    | StringNode
    | ArrayNode
    | TupleNode
    | ObjectNode
)


@dataclass(eq=False)
class SchemaDocument:
    """A read schema: its root node and the targets of its ``$ref``s (by reference text)."""

    root: SchemaNode
    refs: dict[str, SchemaNode]


def read_schema(schema: Any) -> SchemaDocument:
    """Read a JSON schema as llama.cpp does; ``GrammarError`` where llama.cpp throws.

    The message is llama.cpp's (``JSON schema error at #/properties/x: ...``). A schema nesting
    past Python's stack is a ``GrammarError`` too (llama.cpp's stack overflows: a crash).
    """
    try:
        return _Reader(schema).read()
    except RecursionError:
        raise _fail("#", "the schema nests too deeply") from None


def _fail(path: str, message: str) -> GrammarError:
    return GrammarError(f"JSON schema error at {path}: {message}")


def _is_integer(value: Any) -> bool:
    # nlohmann reads an integer outside [-2^63, 2^64) as a float
    return (
        isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value < _UINT64_END
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _wrap(value: int, bits: int) -> int:
    """A C cast to a signed integer of ``bits`` bits (two's complement wrap)."""
    half = 1 << (bits - 1)
    return ((value + half) % (1 << bits)) - half


def _double_to_int64(value: float) -> int:
    # x86-64 converts a double out of int64 range (or not finite) to INT64_MIN
    if not math.isfinite(value) or not INT64_MIN <= value < 2.0**63:
        return INT64_MIN
    return int(value)


def _count(schema: Mapping[str, Any], key: str, path: str, default: int) -> int:
    if key not in schema:
        return default
    value = schema[key]
    if not _is_integer(value) or _wrap(value, 32) < 0:
        raise _fail(path, f"{key} must be a non-negative integer")
    return _wrap(value, 32)


def _bound(schema: Mapping[str, Any], key: str, path: str, round_up: bool) -> int:
    """A bound as int64; a fractional one rounded towards the integers it still admits."""
    value = schema[key]
    if _is_integer(value):
        return _wrap(value, 64)
    if not _is_number(value):
        raise _fail(path, f"{key} must be a number")
    number = float(value)
    if math.isfinite(number):
        number = float(math.ceil(number) if round_up else math.floor(number))
    return _double_to_int64(number)


def _format(schema: Mapping[str, Any], path: str) -> str:
    if "format" not in schema:
        return ""
    value = schema["format"]
    if not isinstance(value, str):
        raise _fail(path, "format must be a string")
    if value in ("date", "time", "date-time"):
        return value
    if value == "uuid" or re.fullmatch(r"uuid[1-5]", value):
        return "uuid"
    return ""


def _array_index(selector: str) -> int | None:
    """``std::stoull`` of a JSON-pointer token: None when it reads no number (or overflows)."""
    match = re.match(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)", selector)
    if match is None:
        return None
    number = int(match.group(2))
    if number >= _UINT64_END:
        return None
    return (_UINT64_END - number) % _UINT64_END if match.group(1) == "-" else number


def _has_properties(schema: Mapping[str, Any]) -> bool:
    # nlohmann's `!= true` is true for any value that is not the boolean true (1 included)
    return "properties" in schema or (
        "additionalProperties" in schema and schema["additionalProperties"] is not True
    )


def _has_string_keywords(schema: Mapping[str, Any], path: str) -> bool:
    return (
        "pattern" in schema
        or "minLength" in schema
        or "maxLength" in schema
        or _format(schema, path) != ""
    )


class _Reader:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, SchemaNode | None] = {}
        self.pending: list[RefNode] = []

    def read(self) -> SchemaDocument:
        root = self.node(self.root, "#")
        refs: dict[str, SchemaNode] = {}
        for ref, target in self.refs.items():
            assert target is not None  # every reserved key is filled before read() returns
            refs[ref] = target
        for ref_node in self.pending:
            ref_node.target = refs[ref_node.ref]
        return SchemaDocument(root, refs)

    def resolve(self, ref: str, path: str) -> Any:
        target = self.root
        for selector in ref[1:].split("/")[1:]:
            if isinstance(target, Mapping) and selector in target:
                target = target[selector]
            elif isinstance(target, (list, tuple)):
                index = _array_index(selector)
                if index is None:
                    index = len(target)
                if index >= len(target):
                    raise _fail(path, f"cannot resolve $ref {ref}, {selector} is out of range")
                target = target[index]
            else:
                raise _fail(path, f"cannot resolve $ref {ref}, {selector} not found")
        return target

    def ref(self, value: Any, path: str) -> SchemaNode:
        if not isinstance(value, str):
            raise _fail(path, "$ref must be a string")
        if not value.startswith("#/"):
            raise _fail(
                path,
                f"unsupported $ref {value}, only references into the same document are supported",
            )
        if value not in self.refs:
            self.refs[value] = None  # reserved first: a cycle back to this $ref stops here
            self.refs[value] = self.node(self.resolve(value, path), value)
        node = RefNode(value)
        self.pending.append(node)
        return node

    def alternatives(self, alts: Any, path: str, all_of: bool) -> SchemaNode:
        if not isinstance(alts, (list, tuple)):
            raise _fail(path, "must be an array of schemas")
        if not alts:
            raise _fail(path, "must not be empty")
        children = [self.node(alt, f"{path}/{i}") for i, alt in enumerate(alts)]
        return AllOfNode(children) if all_of else AnyOfNode(children)

    def object(self, schema: Mapping[str, Any], path: str) -> ObjectNode:
        node = ObjectNode()
        required: set[str] = set()
        if isinstance(schema.get("required"), (list, tuple)):
            required = {name for name in schema["required"] if isinstance(name, str)}
        if "properties" in schema:
            properties = schema["properties"]
            if not isinstance(properties, Mapping):
                raise _fail(path, "properties must be an object")
            for name, prop in properties.items():
                child = self.node(prop, f"{path}/properties/{name}")
                node.properties.append(Property(name, child, name in required))
        if "additionalProperties" in schema:
            additional = schema["additionalProperties"]
            if isinstance(additional, bool):
                node.additional = AnyNode() if additional else None
            elif isinstance(additional, Mapping):
                node.additional = self.node(additional, f"{path}/additionalProperties")
            else:
                raise _fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            node.additional = AnyNode()  # {"type": "object"} alone: any object
        return node

    def array(self, schema: Mapping[str, Any], path: str) -> SchemaNode:
        node = ArrayNode()
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if isinstance(items, (list, tuple)):
                return TupleNode(
                    [self.node(item, f"{path}/{key}/{i}") for i, item in enumerate(items)]
                )
            node.items = self.node(items, f"{path}/{key}")
        node.min_items = _count(schema, "minItems", path, 0)
        node.max_items = _count(schema, "maxItems", path, -1)
        return node

    def string(self, schema: Mapping[str, Any], path: str) -> StringNode:
        node = StringNode()
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                raise _fail(path, "pattern must be a string")
            node.pattern = pattern
        node.format = _format(schema, path)
        node.min_length = _count(schema, "minLength", path, 0)
        node.max_length = _count(schema, "maxLength", path, -1)
        return node

    def integer(self, schema: Mapping[str, Any], path: str) -> IntegerNode:
        node = IntegerNode()
        if "minimum" in schema:
            node.minimum = _bound(schema, "minimum", path, round_up=True)
        elif "exclusiveMinimum" in schema:
            node.minimum = _wrap(_bound(schema, "exclusiveMinimum", path, round_up=False) + 1, 64)
        if "maximum" in schema:
            node.maximum = _bound(schema, "maximum", path, round_up=False)
        elif "exclusiveMaximum" in schema:
            node.maximum = _wrap(_bound(schema, "exclusiveMaximum", path, round_up=True) - 1, 64)
        return node

    def node(self, schema: Any, path: str) -> SchemaNode:
        if not isinstance(schema, Mapping):
            raise _fail(path, "schema must be an object")
        spend_on(schema)
        if "$ref" in schema:
            return self.ref(schema["$ref"], path)
        if "oneOf" in schema or "anyOf" in schema:
            key = "oneOf" if "oneOf" in schema else "anyOf"
            return self.alternatives(schema[key], f"{path}/{key}", all_of=False)
        kind = schema.get("type")
        if isinstance(kind, (list, tuple)):
            if not kind:
                raise _fail(path, "type must not be empty")
            # {"type": [a, b], ...} reads as {"anyOf": [{"type": a, ...}, {"type": b, ...}]}
            # (each a view of the schema with its own type, not a copy of every member)
            return AnyOfNode(
                [self.node(with_type(schema, t), f"{path}/type/{i}") for i, t in enumerate(kind)]
            )
        if "const" in schema:
            return ConstNode(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, (list, tuple)) or not values:
                raise _fail(path, "enum must be a non-empty array")
            return EnumNode(list(values))
        if kind is not None and not isinstance(kind, str):
            raise _fail(path, "type must be a string or an array of strings")
        return self.typed(schema, kind or "", path)

    def typed(self, schema: Mapping[str, Any], kind: str, path: str) -> SchemaNode:
        if kind == "":
            # without a type the structural keywords decide, in llama.cpp's order
            if _has_properties(schema):
                return self.object(schema, path)
            if "allOf" in schema:
                return self.alternatives(schema["allOf"], f"{path}/allOf", all_of=True)
            if "items" in schema or "prefixItems" in schema:
                return self.array(schema, path)
            if _has_string_keywords(schema, path):
                return self.string(schema, path)
            return AnyNode()
        if kind in ("object", "string") and "allOf" in schema:
            if kind == "string" or not _has_properties(schema):
                return self.alternatives(schema["allOf"], f"{path}/allOf", all_of=True)
        if kind == "number":
            return NumberNode()
        if kind == "boolean":
            return BooleanNode()
        if kind == "null":
            return NullNode()
        if kind == "object":
            return self.object(schema, path)
        if kind == "string":
            return self.string(schema, path)
        if kind == "array":
            return self.array(schema, path)
        if kind == "integer":
            return self.integer(schema, path)
        raise _fail(path, f"unrecognized type {kind}")


# -- nlohmann::json's compact dump ------------------------------------------------------------

_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _dump_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def dump_json(value: Any) -> str:
    """``value`` as nlohmann::json (ordered) dumps it: compact, keys in insertion order,
    non-ASCII kept, control characters as ``\\u00xx``."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        if INT64_MIN <= value < _UINT64_END:
            return str(value)
        # nlohmann reads a wider integer as a double
        return format_double(float(value)) if abs(value) < 2**1024 else "null"
    if isinstance(value, float):
        return format_double(value)
    if isinstance(value, str):
        return _dump_string(value)
    if isinstance(value, Mapping):
        members = (f"{_dump_string(str(k))}:{dump_json(v)}" for k, v in value.items())
        return "{" + ",".join(members) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dump_json(v) for v in value) + "]"
    raise GrammarError(f"not a JSON value: {type(value).__name__}")
