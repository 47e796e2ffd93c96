"""What a tool parameter's schema allows, as llama.cpp's schema reader decides it: its JSON
types, whether it may be a string, where a local ``$ref`` points."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "ALL_TYPES",
    "value_types",
    "may_be_string",
    "has_properties",
    "resolve_ref",
    "function_parameters",
    "parameters",
]

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


def resolve_ref(root: Mapping[str, Any], ref: str) -> Any:
    """The node a local ``$ref`` (a JSON pointer into ``root``) names; None when it names none."""
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
        target = resolve_ref(root, ref)
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
        if has_properties(schema):
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


def has_properties(schema: Mapping[str, Any]) -> bool:
    """An object schema by its members: ``properties``, or ``additionalProperties`` other than
    ``true`` (llama.cpp's test)."""
    return "properties" in schema or (
        "additionalProperties" in schema and schema["additionalProperties"] is not True
    )


def function_parameters(function: Mapping[str, Any]) -> Mapping[str, Any]:
    """A tool function's ``parameters`` schema (empty when it has none)."""
    params = function.get("parameters")
    return params if isinstance(params, Mapping) else {}


def parameters(function: Mapping[str, Any]) -> Iterator[tuple[str, Any, bool, Mapping[str, Any]]]:
    """(name, schema, required, root schema) for each parameter, in the schema's order."""
    params = function_parameters(function)
    props = params.get("properties")
    if not isinstance(props, Mapping):
        return
    required = params.get("required")
    required_set = set(required) if isinstance(required, list) else set()
    for name, schema in props.items():
        yield str(name), schema, name in required_set, params


def may_be_string(schema: Any, root: Mapping[str, Any], seen: frozenset[int] = frozenset()) -> bool:
    """llama.cpp's ``may_be_string``: a string type, string const/enum, or a branch that is;
    a schema without any type is *not* a string."""
    if not isinstance(schema, Mapping):
        return False
    if "$ref" in schema:
        ref = schema["$ref"]
        target = resolve_ref(root, ref) if isinstance(ref, str) else None
        if target is None or id(target) in seen:
            return False
        return may_be_string(target, root, seen | {id(target)})
    for key in ("oneOf", "anyOf"):
        if key in schema:
            alts = schema[key]
            return isinstance(alts, list) and any(may_be_string(a, root, seen) for a in alts)
    kind = schema.get("type")
    if isinstance(kind, list):
        return any(may_be_string({**schema, "type": k}, root, seen) for k in kind)
    if "const" in schema:
        return isinstance(schema["const"], str)
    if "enum" in schema:
        values = schema["enum"]
        return isinstance(values, list) and any(isinstance(v, str) for v in values)
    with_properties = has_properties(schema)
    if kind is None:
        if with_properties:
            return False
        if "allOf" in schema:
            return _all_of_string(schema["allOf"], root, seen)
        if "items" in schema or "prefixItems" in schema:
            return False
        return any(k in schema for k in ("pattern", "minLength", "maxLength", "format"))
    if kind == "string":
        if "allOf" in schema:
            return _all_of_string(schema["allOf"], root, seen)
        return True
    if kind == "object" and not with_properties and "allOf" in schema:
        return _all_of_string(schema["allOf"], root, seen)
    return False


def _is_any(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    structural = (
        "$ref", "oneOf", "anyOf", "type", "const", "enum", "properties", "additionalProperties",
        "allOf", "items", "prefixItems", "pattern", "minLength", "maxLength", "format",
    )  # fmt: skip
    return not any(k in schema for k in structural)


def _all_of_string(children: Any, root: Mapping[str, Any], seen: frozenset[int]) -> bool:
    any_string = False
    for child in children if isinstance(children, list) else []:
        if _is_any(child):
            continue
        if not may_be_string(child, root, seen):
            return False
        any_string = True
    return any_string
