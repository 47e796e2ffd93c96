"""What the families share to write their grammar (``grammar(request) -> str``).

A family writes its reply format with ``chatcodec.grammar.rules`` as llama.cpp writes its PEG;
these helpers read a tool's parameters the way llama.cpp's grammar side reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..grammar.document import ObjectNode, SchemaNode, read_schema
from .schema import function_parameters, value_types

__all__ = ["Parameter", "tool_parameters", "parameters_node"]

# llama.cpp's schema for a function without parameters
NO_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Parameter:
    """One parameter of a tool: its name, read schema, whether required, the JSON types its
    value may take."""

    name: str
    schema: SchemaNode
    required: bool
    types: frozenset[str]


def parameters_node(function: Mapping[str, Any]) -> SchemaNode:
    """The read ``parameters`` schema of a tool function (its root node); a function without
    parameters (absent, null or ``{}``) takes an object without properties, as llama.cpp's
    ``common_chat_tool_parameters`` gives it."""
    return read_schema(function_parameters(function) or NO_PARAMETERS).root


def tool_parameters(function: Mapping[str, Any]) -> list[Parameter]:
    """The parameters of a tool function in schema order (none unless its parameters are an
    object schema)."""
    params = function_parameters(function)
    root = read_schema(params).root
    if not isinstance(root, ObjectNode):
        return []
    raw = params.get("properties")
    raw = raw if isinstance(raw, Mapping) else {}
    return [
        Parameter(p.name, p.schema, p.required, value_types(raw.get(p.name), params))
        for p in root.properties
    ]
