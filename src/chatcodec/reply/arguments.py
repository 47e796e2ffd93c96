"""Argument encodings shared by families: tool calls described as data, compiled to PEG parsers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import mapper as t
from . import peg
from .schema import parameters, value_types

__all__ = [
    "XmlCallSyntax",
    "xml_call_parsers",
    "tool_functions",
    "tool_names",
    "tool_name",
    "arg_name",
]


@dataclass(frozen=True)
class XmlCallSyntax:
    """A call as XML-ish tags with one typed parameter per tag (``<function=f>`` ... style).

    String parameters are raw text; other types are JSON read per the tool's schema; a union
    with string tries JSON first (llama.cpp's typed XML parameters). Required parameters come
    in any order, then any number of optional ones.
    """

    scope_open: str
    function_open: str
    function_name_end: str
    function_close: str
    scope_close: str
    param_open: str
    param_name_end: str
    param_close: str


def tool_functions(tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The ``function`` objects of an OpenAI tools array (llama.cpp's foreach_function)."""
    out: list[Mapping[str, Any]] = []
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            out.append(fn)
    return out


def tool_names(functions: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The names of the tools a reply may call (anything else is an unknown tool)."""
    return frozenset(str(fn["name"]) for fn in functions)


def tool_name(name: str) -> peg.Parser:
    """A declared tool's name, tagged for the mapper once complete."""
    return peg.atomic_tag(t.TOOL_NAME, peg.Literal(name))


def arg_name(name: str) -> peg.Parser:
    """A declared parameter's name, tagged for the mapper once complete."""
    return peg.atomic_tag(t.TOOL_ARG_NAME, peg.Literal(name))


def _value(types: frozenset[str], arg_close: peg.Parser, arg_string: peg.Parser) -> peg.Parser:
    if "string" not in types:
        return peg.Seq(peg.Tag(t.TOOL_ARG_VALUE, peg.json_value), arg_close)
    if types == {"string"}:
        return arg_string
    alternatives: list[peg.Parser] = []
    if "object" in types:
        alternatives.append(peg.json_object)
    if "array" in types:
        alternatives.append(peg.json_array)
    if "number" in types or "integer" in types:
        alternatives.append(peg.json_number)
    if "boolean" in types:
        alternatives.append(peg.json_bool)
    if "null" in types:
        alternatives.append(peg.json_null)
    typed = peg.Atomic(peg.Seq(peg.Tag(t.TOOL_ARG_VALUE, peg.Choice(*alternatives)), arg_close))
    return peg.Choice(typed, arg_string)


def xml_call_parsers(syntax: XmlCallSyntax, functions: Sequence[Mapping[str, Any]]) -> peg.Parser:
    """A choice of one parser per declared function (unknown names never match)."""
    arg_close = peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Literal(syntax.param_close))
    arg_string = peg.Seq(peg.Tag(t.TOOL_ARG_STRING_VALUE, peg.Until(syntax.param_close)), arg_close)
    funcs: list[peg.Parser] = []
    for fn in functions:
        name = str(fn["name"])
        required: list[peg.Parser] = []
        optional: list[peg.Parser] = []
        for pname, schema, is_required, root in parameters(fn):
            arg_open = peg.atomic_tag(
                t.TOOL_ARG_OPEN,
                peg.Seq(
                    peg.Literal(syntax.param_open),
                    arg_name(pname),
                    peg.Literal(syntax.param_name_end),
                ),
            )
            value = _value(value_types(schema, root), arg_close, arg_string)
            arg = peg.Tag(t.TOOL_ARG, peg.Seq(arg_open, value))
            (required if is_required else optional).append(arg)
        args = peg.permute(required)
        if optional:
            args = peg.Seq(args, peg.Repeat(peg.Choice(*optional)))
        opener = peg.atomic_tag(
            t.TOOL_OPEN,
            peg.Seq(
                peg.Literal(syntax.function_open),
                tool_name(name),
                peg.Literal(syntax.function_name_end),
            ),
        )
        closer = peg.atomic_tag(t.TOOL_CLOSE, peg.Literal(syntax.function_close))
        funcs.append(peg.Tag(t.TOOL, peg.Seq(opener, peg.Tag(t.TOOL_ARGS, args), closer)))
    return peg.Choice(*funcs)
