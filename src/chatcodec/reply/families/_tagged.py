"""Helpers of the tagged call formats (Kimi, Ling 3, DeepSeek DSML, MiniMax-M3, MiniCPM5).

Small builders of the AST-tagged PEG pieces llama.cpp's chat builder offers (``tool_open`` is
atomic, ``tool_arg_value`` is not, ...) and the one schema question these formats ask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import mapper as t
from .. import peg

__all__ = [
    "atomic_tag",
    "tag",
    "optional",
    "may_be_string",
    "resolve",
    "function_parameters",
    "arg_name",
    "tool_name",
]


def tag(name: str, parser: peg.Parser) -> peg.Parser:
    return peg.Tag(name, parser)


def atomic_tag(name: str, parser: peg.Parser) -> peg.Parser:
    """``tool_open``, ``tool_close``, ``tool_name``, ``tool_id``, ``tool_arg_open`` ... (atomic)."""
    return peg.Atomic(peg.Tag(name, parser))


def optional(parser: peg.Parser) -> peg.Parser:
    return peg.Repeat(parser, 0, 1)


def resolve(schema: Any, root: Mapping[str, Any]) -> Any:
    """A local ``$ref`` followed once (None when it does not resolve)."""
    ref = schema.get("$ref") if isinstance(schema, Mapping) else None
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node: Any = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return None
    return node


def may_be_string(schema: Any, root: Mapping[str, Any], seen: frozenset[int] = frozenset()) -> bool:
    """llama.cpp's ``may_be_string``: a string type, string const/enum, or a branch that is;
    a schema without any type is *not* a string."""
    if not isinstance(schema, Mapping):
        return False
    if "$ref" in schema:
        target = resolve(schema, root)
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
    has_properties = "properties" in schema or (
        "additionalProperties" in schema and schema["additionalProperties"] is not True
    )
    if kind is None:
        if has_properties:
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
    if kind == "object" and not has_properties and "allOf" in schema:
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


def function_parameters(function: Mapping[str, Any]) -> Mapping[str, Any]:
    params = function.get("parameters")
    return params if isinstance(params, Mapping) else {}


def arg_name(name: str) -> peg.Parser:
    return atomic_tag(t.TOOL_ARG_NAME, peg.Literal(name))


def tool_name(name: str) -> peg.Parser:
    return atomic_tag(t.TOOL_NAME, peg.Literal(name))
