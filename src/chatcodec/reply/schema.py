"""What a tool parameter's schema allows, as llama.cpp's schema reader decides it: its JSON
types, whether it may be a string, where a local ``$ref`` points.

llama.cpp follows a ``$ref`` again on every path that reaches it, which doubles its work per
level of ``$defs`` that each refer twice to the next. ``SchemaTypes`` gives the same answers
with each ``$ref`` walked once (docs/security.md, "Request schemas")."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..schema_bounds import (
    MAX_SCHEMA_DEPTH,
    RefAnswers,
    call_answers,
    pointer,
    pointer_keys,
    schema_path,
    spend_on,
    too_deep,
    with_type,
)

__all__ = [
    "ALL_TYPES",
    "SchemaTypes",
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
    found = pointer(root, ref)
    return None if found is None else found[0]


class SchemaTypes:
    """llama.cpp's questions about the schemas of one document (a tool's ``parameters``):
    what JSON types a value may take, whether it may be a string.

    Each ``$ref``'s answer is kept once it does not depend on the ``$ref``s being walked
    above it (a cycle cut short there), so the answers are llama.cpp's and the work is that
    of the document's size. Every node visited is counted (``schema_bounds.spend_on``); a walk
    deeper than ``MAX_SCHEMA_DEPTH`` is a ``RequestError`` naming the ``$ref`` it was in.
    """

    def __init__(self, root: Mapping[str, Any], where: str = "a tool's parameters") -> None:
        self.root = root
        self.where = where
        self._types: RefAnswers[frozenset[str]] = RefAnswers(frozenset())
        self._strings: RefAnswers[bool] = RefAnswers(False)

    @classmethod
    def of(cls, root: Mapping[str, Any]) -> SchemaTypes:
        """The walker of ``root`` for the current call: one per schema while a count is
        open (``schema_bounds.schema_work``), so every question shares its answers."""
        return call_answers("schema-types", root, lambda: cls(root))

    def _deeper(self, schema: Mapping[str, Any], depth: int) -> int:
        spend_on(schema)
        if depth >= MAX_SCHEMA_DEPTH:
            within = self._types.within() or self._strings.within()
            raise too_deep(schema_path(self.where, pointer_keys(within)))
        return depth + 1

    # -- value types ---------------------------------------------------------------------------

    def value_types(self, schema: Any, depth: int = 0) -> frozenset[str]:
        """The JSON types a value may take (llama.cpp: a schema without a type allows all)."""
        if not isinstance(schema, Mapping):
            return ALL_TYPES
        depth = self._deeper(schema, depth)
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                return frozenset()
            # a cycle contributes no type, like llama.cpp
            return self._types.follow(
                ref, resolve_ref(self.root, ref), ref, lambda found: self.value_types(found, depth)
            )
        for key in ("oneOf", "anyOf"):
            if key in schema and isinstance(schema[key], list):
                out: frozenset[str] = frozenset()
                for alt in schema[key]:
                    out |= self.value_types(alt, depth)
                return out
        kind = schema.get("type")
        if isinstance(kind, list):
            # each type of the list read as the schema's type (no copy of the schema made)
            out = frozenset()
            for one in kind:
                spend_on(schema)  # each type reads the schema again
                out |= self._typed_types(schema, one, depth)
            return out
        return self._typed_types(schema, kind, depth)

    def _typed_types(self, schema: Mapping[str, Any], kind: Any, depth: int) -> frozenset[str]:
        if isinstance(kind, list):  # a list inside a type list
            return self.value_types(with_type(schema, kind), depth)
        if "const" in schema:
            return frozenset({_json_type(schema["const"])})
        if "enum" in schema and isinstance(schema["enum"], list):
            return frozenset(_json_type(v) for v in schema["enum"])
        if kind is None:
            if has_properties(schema):
                return frozenset({"object"})
            if "allOf" in schema:
                return self._all_of_types(schema["allOf"], depth)
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
            return self._all_of_types(schema["allOf"], depth)
        if kind == "number":
            return frozenset({"number", "integer"})
        if kind in ALL_TYPES:
            return frozenset({kind})
        return ALL_TYPES

    def _all_of_types(self, children: Any, depth: int) -> frozenset[str]:
        out = ALL_TYPES
        for child in children if isinstance(children, list) else []:
            out &= self.value_types(child, depth)
        return out

    # -- may be a string -----------------------------------------------------------------------

    def may_be_string(self, schema: Any, depth: int = 0) -> bool:
        """llama.cpp's ``may_be_string``: a string type, string const/enum, or a branch that
        is; a schema without any type is *not* a string."""
        if not isinstance(schema, Mapping):
            return False
        depth = self._deeper(schema, depth)
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                return False
            target = resolve_ref(self.root, ref)
            # a cycle is not a string, like llama.cpp (which knows a target by its node)
            return self._strings.follow(
                id(target), target, ref, lambda found: self.may_be_string(found, depth)
            )
        for key in ("oneOf", "anyOf"):
            if key in schema:
                alts = schema[key]
                return isinstance(alts, list) and any(self.may_be_string(a, depth) for a in alts)
        kind = schema.get("type")
        if isinstance(kind, list):
            for one in kind:
                spend_on(schema)  # each type reads the schema again
                if self._typed_string(schema, one, depth):
                    return True
            return False
        return self._typed_string(schema, kind, depth)

    def _typed_string(self, schema: Mapping[str, Any], kind: Any, depth: int) -> bool:
        if isinstance(kind, list):  # a list inside a type list
            return self.may_be_string(with_type(schema, kind), depth)
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
                return self._all_of_string(schema["allOf"], depth)
            if "items" in schema or "prefixItems" in schema:
                return False
            return any(k in schema for k in ("pattern", "minLength", "maxLength", "format"))
        if kind == "string":
            if "allOf" in schema:
                return self._all_of_string(schema["allOf"], depth)
            return True
        if kind == "object" and not with_properties and "allOf" in schema:
            return self._all_of_string(schema["allOf"], depth)
        return False

    def _all_of_string(self, children: Any, depth: int) -> bool:
        any_string = False
        for child in children if isinstance(children, list) else []:
            if _is_any(child):
                continue
            if not self.may_be_string(child, depth):
                return False
            any_string = True
        return any_string


def value_types(schema: Any, root: Mapping[str, Any] | None = None) -> frozenset[str]:
    """The JSON types a value may take (llama.cpp: a schema without a type allows all);
    ``root`` is the document its ``$ref``s point into (``schema`` itself by default)."""
    return SchemaTypes.of(root if root is not None else schema).value_types(schema)


def may_be_string(schema: Any, root: Mapping[str, Any]) -> bool:
    """llama.cpp's ``may_be_string``: a string type, string const/enum, or a branch that is;
    a schema without any type is *not* a string."""
    return SchemaTypes.of(root).may_be_string(schema)


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


def _is_any(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    structural = (
        "$ref", "oneOf", "anyOf", "type", "const", "enum", "properties", "additionalProperties",
        "allOf", "items", "prefixItems", "pattern", "minLength", "maxLength", "format",
    )  # fmt: skip
    return not any(k in schema for k in structural)
