"""MiniMax-M3: namespaced XML calls whose nested values are XML elements too.

llama.cpp's handler "MiniMax-M3" (format ``peg-minimax-m3``): every tool tag carries the
namespace token ``]<]minimax[>[``; one ``<tool_call>`` block holds the ``<invoke name="f">``
calls (one unless ``parallel_tool_calls``), each parameter is an element named after it,
objects expand to member elements and arrays to ``<item>`` elements, and the arguments are
rebuilt as compact JSON from that tree. The thought is ``<mm:think>``, or a bare
``</mm:think>`` for none; with thinking disabled its body is read and dropped. Nothing may
follow the block (the parse fails). With a response format the thought is followed by one
JSON value fenced as ```` ```json ... ``` ```` (tools aside), and nothing after it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ...grammar import rules as g
from ...grammar.document import AnyOfNode, ArrayNode, ObjectNode, SchemaNode
from ...schema_bounds import with_type
from .. import mapper as t
from .. import peg
from ..arguments import arg_name, tool_functions, tool_name, tool_names
from ..constraint import (
    Constraint,
    calls_or_json,
    has_response_format,
    words,
)
from ..description import (
    Calls,
    CallSection,
    Content,
    ContentValue,
    End,
    Expect,
    ReasoningBlock,
    ReplyFormat,
    Thought,
    steps,
)
from ..grammar import before_calls, parameters_node, reads_thought, spaced_arguments
from ..grammar import prefix as prompt_prefix
from ..mapper import CallMapper, MappedCall, find_node, json_escape_inner
from ..peg import Node
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import fenced_json
from ..schema import function_parameters, has_properties, may_be_string
from . import has_markers

__all__ = [
    "NAME",
    "PRESERVED_TOKENS",
    "matches",
    "describe",
    "constraint_for",
    "MiniMaxM3Mapper",
    "grammar",
]

NAME = "MiniMax-M3"
REQUIRED = ("]<]minimax[>[", "<tool_call>", "<invoke name=")
NS = "]<]minimax[>["
THINK_START = "<mm:think>"
THINK_END = "</mm:think>"
FC_START = NS + "<tool_call>"
FC_END = NS + "</tool_call>"
INVOKE_END = NS + "</invoke>"
ARG_OBJECT = "tool-arg-object"
ARG_ARRAY = "tool-arg-array"
ARG_ITEM = "tool-arg-item"
_VALUE_TAGS = (t.TOOL_ARG_VALUE, t.TOOL_ARG_STRING_VALUE, ARG_OBJECT, ARG_ARRAY)
# the prefill follows the generation prompt the template computes
CONTINUATION = Continuation(None, think_start=THINK_START, think_end=THINK_END)


# ---------------------------------------------------------------------------- the grammar


def _alternatives(schema: Mapping[str, Any]) -> list[Any] | None:
    """The branches of a oneOf/anyOf or of a type array (None when the schema has none)."""
    if "$ref" in schema:
        return None
    for key in ("oneOf", "anyOf"):
        if key in schema:
            alts = schema[key]
            return list(alts) if isinstance(alts, list) else []
    kind = schema.get("type")
    if isinstance(kind, list):
        return [with_type(schema, k) for k in kind]  # views, not copies
    return None


def _value(schema: Any, root: Mapping[str, Any], close: str) -> peg.Parser:
    close_tag = peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Literal(close))
    if may_be_string(schema, root):
        # a string accepts anything, so a union with a string is a string
        return peg.Seq(peg.Tag(t.TOOL_ARG_STRING_VALUE, peg.Until(close)), close_tag)
    json_value = peg.Seq(peg.Tag(t.TOOL_ARG_VALUE, peg.json_value), close_tag)
    if not isinstance(schema, Mapping):
        return json_value
    alts = _alternatives(schema)
    if alts is not None:
        return peg.Choice(*(_value(a, root, close) for a in alts))
    if "$ref" in schema or "const" in schema or "enum" in schema:
        return json_value
    kind = schema.get("type")
    if kind == "object" or (kind is None and has_properties(schema)):
        props = schema.get("properties")
        if isinstance(props, Mapping) and props:
            return peg.Seq(peg.Tag(ARG_OBJECT, _members(schema, root)), peg.Space(), close_tag)
        return json_value
    is_array = kind == "array" or (
        kind is None and "allOf" not in schema and ("items" in schema or "prefixItems" in schema)
    )
    if is_array and "prefixItems" not in schema:
        item_close = NS + "</item>"
        item = peg.Tag(
            ARG_ITEM,
            peg.Seq(peg.Literal(NS + "<item>"), _value(schema.get("items", {}), root, item_close)),
        )
        return peg.Seq(
            peg.Tag(ARG_ARRAY, peg.Repeat(peg.Seq(peg.Space(), item))), peg.Space(), close_tag
        )
    return json_value


def _members(schema: Mapping[str, Any], root: Mapping[str, Any]) -> peg.Parser:
    """Required elements in schema order, then any number of optional ones in any order."""
    props = schema.get("properties")
    required_names = schema.get("required")
    required_set = set(required_names) if isinstance(required_names, list) else set()
    required: list[peg.Parser] = []
    optional: list[peg.Parser] = []
    for name, prop in props.items() if isinstance(props, Mapping) else ():
        opener = peg.Seq(peg.Literal(NS + "<"), arg_name(str(name)), peg.Literal(">"))
        element: peg.Parser = peg.Tag(
            t.TOOL_ARG,
            peg.Seq(peg.atomic_tag(t.TOOL_ARG_OPEN, opener), _value(prop, root, f"{NS}</{name}>")),
        )
        (required if name in required_set else optional).append(element)
    parts: list[peg.Parser] = []
    for i, element in enumerate(required):
        parts += [peg.Space(), element] if i else [element]
    if optional:
        parts.append(peg.Repeat(peg.Seq(peg.Space(), peg.Choice(*optional))))
    return peg.Seq(*parts) if parts else peg.Eps()


def _invoke(function: Mapping[str, Any]) -> peg.Parser:
    name = str(function["name"])
    params = function_parameters(function)
    body: peg.Parser = peg.Eps()
    if params.get("type", "object") == "object" or has_properties(params):
        body = _members(params, params)
    opener = peg.Seq(peg.Literal(NS + '<invoke name="'), tool_name(name), peg.Literal('">'))
    return peg.Tag(
        t.TOOL,
        peg.Seq(
            peg.atomic_tag(t.TOOL_OPEN, opener),
            peg.Space(),
            body,
            peg.Space(),
            peg.atomic_tag(t.TOOL_CLOSE, peg.Literal(INVOKE_END)),
        ),
    )


# ---------------------------------------------------------------------------- the mapper


def _collect(node: Node, name: str, out: list[Node]) -> None:
    for child in node.children:
        if child.tag == name:
            out.append(child)
        else:
            _collect(child, name, out)


def _value_of(node: Node) -> Node | None:
    for child in node.children:
        if child.tag in _VALUE_TAGS:
            return child
    return None


class MiniMaxM3Mapper(CallMapper):
    """Calls rebuilt from the element tree: a call once its name is known, containers closed
    only when their element is complete, members without a value element skipped.

    Its own mapper because the generic one builds flat ``{"name": value}`` objects only, while
    MiniMax-M3 nests objects and arrays as elements (llama.cpp's peg-minimax-m3 mapper)."""

    def visit(self, nodes: Iterable[Node], text: str) -> None:
        for node in nodes:
            if node.tag == t.TOOL:
                name = find_node(node, t.TOOL_NAME, 3)
                if name is not None:
                    arguments = self._container(node, text, True, not node.partial)
                    self.calls.append(MappedCall(text[name.start : name.end], arguments))
            elif node.children:
                self.visit(node.children, text)

    def flush(self) -> None:
        pass

    def _container(self, node: Node, text: str, is_object: bool, closed: bool) -> str:
        entries: list[Node] = []
        _collect(node, t.TOOL_ARG if is_object else ARG_ITEM, entries)
        parts: list[str] = []
        for entry in entries:
            if is_object:
                name = find_node(entry, t.TOOL_ARG_NAME, 3)
                if name is None:
                    continue
                key = json.dumps(text[name.start : name.end], ensure_ascii=False)
                part = key + ":" + self._value(_value_of(entry), text, not entry.partial)
            else:
                part = self._value(_value_of(entry), text, not entry.partial)
            if part:
                parts.append(part)
        body = ",".join(parts)
        if is_object:
            return "{" + body + ("}" if closed else "")
        return "[" + body + ("]" if closed else "")

    def _value(self, node: Node | None, text: str, closed: bool) -> str:
        if node is None:
            return ""
        if node.tag in (ARG_OBJECT, ARG_ARRAY):
            return self._container(node, text, node.tag == ARG_OBJECT, closed)
        value = text[node.start : node.end]
        if node.tag == t.TOOL_ARG_STRING_VALUE:
            return '"' + json_escape_inner(value) + ('"' if closed else "")
        return value


# ---------------------------------------------------------------------------- the format


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    at = request.generation_prompt.find(THINK_START)
    prefix = request.generation_prompt[:at] if at >= 0 else request.generation_prompt
    reasoning = None
    if request.reasoning_format != "none":
        reasoning = ReasoningBlock(
            start=THINK_START,
            stops=(THINK_END,),
            closers=((THINK_END, True),),
            space_after_start=request.enable_thinking,
            body="reasoning" if request.enable_thinking else "",
            bare=THINK_END,
        )
    functions = tool_functions(request.tools)
    if request.json_schema or not functions or request.tool_choice == "none":
        # a response format: one fenced JSON value (tools aside), and nothing after it
        body = ContentValue(fenced_json()) if request.json_schema else Content(None)
        return ReplyFormat(
            NAME,
            steps(Expect(prefix), Thought(reasoning) if reasoning else None, body, End()),
            continuation=CONTINUATION,
        )
    invoke = peg.Choice(*(_invoke(f) for f in functions))
    more: list[peg.Parser] = (
        [peg.Repeat(peg.Seq(peg.Space(), invoke))] if request.parallel_tool_calls else []
    )
    block = peg.Seq(
        peg.Literal(FC_START), peg.Space(), invoke, *more, peg.Space(), peg.Literal(FC_END)
    )
    section = CallSection(
        first=block,
        next=None,
        required=request.tool_choice == "required",
        commit=FC_END,
        openers=(FC_START,),
        tool_names=tool_names(functions),
        space_after=False,
        make_mapper=MiniMaxM3Mapper,
    )
    return ReplyFormat(
        NAME,
        steps(
            Expect(prefix),
            Thought(reasoning) if reasoning else None,
            Content((FC_START,)),
            Calls(section),
            End(),
        ),
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (NS, "<tool_call>", "</tool_call>", THINK_START, THINK_END)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    return calls_or_json(request, PRESERVED_TOKENS, words(FC_START))


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar


def _grammar_value(r: g.Rules, node: SchemaNode, rule_name: str, close: str) -> g.Expr:
    """An element's value up to its close tag: any text when it may be a string, the
    alternatives of a union, member elements, ``<item>`` elements, else the schema's JSON."""
    close_tag = g.tag(g.lit(close))
    if g.may_be_string(node):
        return g.up_to(close)
    if isinstance(node, AnyOfNode):
        return g.choice(
            *(
                _grammar_value(r, alt, f"{rule_name}-{i}", close)
                for i, alt in enumerate(node.children)
            )
        )
    if isinstance(node, ObjectNode) and node.properties:
        return g.tag(_grammar_members(r, node, rule_name)) + g.space() + close_tag
    if isinstance(node, ArrayNode):
        item_name = f"{rule_name}-item"
        item_value = _grammar_value(r, node.items, item_name, NS + "</item>")
        item = r.rule(item_name, g.tag(NS + "<item>" + item_value))
        return g.tag(g.zero_or_more(g.space() + item)) + g.space() + close_tag
    return g.tag(g.schema(r.json(), f"{rule_name}-schema", node)) + close_tag


def _grammar_members(r: g.Rules, node: ObjectNode, rule_prefix: str) -> g.Expr:
    """The required member elements in schema order, then any optional ones in any order."""
    required: list[g.Expr] = []
    optional: list[g.Expr] = []
    for prop in node.properties:
        rule_name = f"{rule_prefix}-{prop.name}"
        opener = g.tag(NS + "<" + g.tag(g.lit(prop.name)) + ">")
        value = _grammar_value(r, prop.schema, rule_name, f"{NS}</{prop.name}>")
        element = r.rule(rule_name, g.tag(opener + value))
        (required if prop.required else optional).append(element)
    return spaced_arguments(required, optional)


def _grammar_invoke(r: g.Rules, function: Mapping[str, Any]) -> g.Expr:
    name = str(function["name"])
    root = parameters_node(function)
    body = (
        _grammar_members(r, root, f"tool-{name}-arg")
        if isinstance(root, ObjectNode)
        else g.nothing()
    )
    opener = g.tag(NS + '<invoke name="' + g.tag(g.lit(name)) + '">')
    call = g.tag(opener + g.space() + body + g.space() + g.tag(g.lit(INVOKE_END)))
    return r.rule(f"tool-{name}", call)


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the thought (or a bare ``</mm:think>``),
    then the fenced response-format JSON, or the content and the ``<tool_call>`` block whose
    values are elements as their schema says. Eager for a response format or required calls."""
    r = g.Rules()
    start = prompt_prefix(request.generation_prompt, THINK_START)
    reasoning = g.nothing()
    if reads_thought(request):
        body = g.up_to(THINK_END)
        block = THINK_START + (g.space() + body if request.enable_thinking else body)
        reasoning = g.optional(g.choice(block, THINK_END))
    functions = tool_functions(request.tools)
    required = bool(functions) and request.tool_choice == "required"
    lazy = not (has_response_format(request) or required)
    if has_response_format(request):
        value = g.tag(g.schema(r.json(), "response-format-schema", request.json_schema))
        fenced = r.rule("response-format", "```json" + g.space() + value + g.space() + "```")
        return r.gbnf(start + reasoning + fenced + g.nothing(), lazy=lazy)
    if not functions or request.tool_choice == "none":
        return r.gbnf(start + reasoning + g.tag(g.until()) + g.nothing(), lazy=lazy)
    invoke = g.choice()
    for function in functions:
        invoke = invoke | _grammar_invoke(r, function)
    more = g.zero_or_more(g.space() + invoke) if request.parallel_tool_calls else g.nothing()
    block = FC_START + g.space() + invoke + more + g.space() + FC_END
    calls = r.trigger_rule("tool-call", block)
    if not required:
        calls = g.optional(calls)
    content = before_calls(request, g.tag(g.until(FC_START)))
    return r.gbnf(start + reasoning + content + calls + g.nothing(), lazy=lazy)
