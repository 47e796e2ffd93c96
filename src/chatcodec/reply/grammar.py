"""What the families share to write their grammar (``grammar(request) -> str``).

A family writes its reply format with ``chatcodec.grammar.rules`` as llama.cpp writes its PEG;
these helpers read a tool's parameters the way llama.cpp's grammar side reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..grammar import rules as g
from ..grammar.document import ObjectNode, SchemaNode, read_schema
from .arguments import tool_functions
from .schema import function_parameters, parameters, value_types

__all__ = ["Parameter", "tool_parameters", "parameters_node", "python_style_calls"]

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


# ------------------------------------------------------------------ Python-style calls (LFM2)


def _python_style_call(r: g.Rules, fn: Mapping[str, Any], json_literals: bool) -> g.Expr:
    """``name(arg=value, ...)``: a ``string`` parameter takes a quoted string, any other a
    Python value (with JSON's literals too when ``json_literals``)."""
    args = g.nothing()
    params = list(parameters(fn))
    if params:
        arguments = g.choice()
        for name, schema, _required, _root in params:
            if isinstance(schema, Mapping) and schema.get("type") == "string":
                quoted = g.choice('"' + g.string_body('"') + '"', "'" + g.string_body("'") + "'")
                value = g.tag(quoted)
            else:
                value = g.tag(r.python_or_json_value() if json_literals else r.python_value())
            opener = g.tag(g.tag(g.lit(name)) + "=")
            arguments = arguments | g.tag(opener + value + g.tag(g.nothing()))
        args = arguments + g.zero_or_more("," + g.space() + arguments)
    opener = g.tag(g.tag(g.lit(str(fn["name"]))) + "(")
    return g.tag(opener + g.space() + g.tag(args) + g.space() + g.tag(g.lit(")")))


def python_style_calls(
    r: g.Rules, tools: Sequence[Mapping[str, Any]] | None, parallel: bool, json_literals: bool
) -> g.Expr:
    """llama.cpp's Python-style call list: ``[`` one call (or, when ``parallel``, several
    separated by ``,``) ``]``, each call a rule ``tool-NAME``."""
    if not tools:
        return g.nothing()
    calls = g.choice()
    for fn in tool_functions(tools):
        calls = calls | r.rule(f"tool-{fn['name']}", _python_style_call(r, fn, json_literals))
    if parallel:
        return "[" + g.space() + calls + g.zero_or_more("," + g.space() + calls) + g.space() + "]"
    return "[" + g.space() + calls + g.space() + "]"


# ------------------------------------------------- llama.cpp's chat builder helpers (grammar side)

__all__ += ["prefix"]


def prefix(text: str, delimiter: str) -> g.Expr:
    """The generation prompt up to ``delimiter`` (all of it when the delimiter is absent)."""
    if not text:
        return g.nothing()
    at = text.find(delimiter) if delimiter else -1
    return g.lit(text if at < 0 else text[:at])
