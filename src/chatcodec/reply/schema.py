"""Which JSON types a tool parameter's schema allows, as llama.cpp's schema reader decides it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["ALL_TYPES", "value_types", "parameters"]

ALL_TYPES = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node: Any = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def value_types(
    schema: Any, root: Mapping[str, Any] | None = None, seen: frozenset[str] = frozenset()
) -> frozenset[str]:
    """The JSON types a value may take (llama.cpp: a schema without a type allows all)."""
    if not isinstance(schema, Mapping):
        return ALL_TYPES
    root = root if root is not None else schema
    if "$ref" in schema:
        ref = schema["$ref"]
        # a cycle contributes no type, like llama.cpp
        if not isinstance(ref, str) or ref in seen:
            return frozenset()
        target = _resolve(root, ref)
        return frozenset() if target is None else value_types(target, root, seen | {ref})
    for key in ("oneOf", "anyOf"):
        if key in schema and isinstance(schema[key], list):
            out: frozenset[str] = frozenset()
            for alt in schema[key]:
                out |= value_types(alt, root, seen)
            return out
    kind = schema.get("type")
    if isinstance(kind, list):
        out = frozenset()
        for t in kind:
            alt = dict(schema)
            alt["type"] = t
            out |= value_types(alt, root, seen)
        return out
    if "const" in schema:
        return frozenset({_json_type(schema["const"])})
    if "enum" in schema and isinstance(schema["enum"], list):
        return frozenset(_json_type(v) for v in schema["enum"])
    if kind is None:
        has_properties = "properties" in schema or (
            "additionalProperties" in schema and schema["additionalProperties"] is not True
        )
        if has_properties:
            return frozenset({"object"})
        if "allOf" in schema:
            return _all_of(schema["allOf"], root, seen)
        if "items" in schema or "prefixItems" in schema:
            return frozenset({"array"})
        if any(k in schema for k in ("pattern", "minLength", "maxLength", "format")):
            return frozenset({"string"})
        return ALL_TYPES
    if (
        kind in ("object", "string")
        and "allOf" in schema
        and not (kind == "object" and "properties" in schema)
    ):
        return _all_of(schema["allOf"], root, seen)
    if kind == "number":
        return frozenset({"number", "integer"})
    if kind in ALL_TYPES:
        return frozenset({kind})
    return ALL_TYPES


def _all_of(children: Any, root: Mapping[str, Any], seen: frozenset[str]) -> frozenset[str]:
    out = ALL_TYPES
    for child in children if isinstance(children, list) else []:
        out &= value_types(child, root, seen)
    return out


def parameters(function: Mapping[str, Any]) -> Iterator[tuple[str, Any, bool, Mapping[str, Any]]]:
    """(name, schema, required, root schema) for each parameter, in the schema's order."""
    params = function.get("parameters")
    if not isinstance(params, Mapping):
        return
    props = params.get("properties")
    if not isinstance(props, Mapping):
        return
    required = params.get("required")
    required_set = set(required) if isinstance(required, list) else set()
    for name, schema in props.items():
        yield str(name), schema, name in required_set, params
