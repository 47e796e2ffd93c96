"""Gemma 4 replies (llama.cpp's "Gemma4 (inferred from format)" handler, mapper PEG_GEMMA4).

A reply is a run of messages, each an optional thought ``<|channel>thought ... <channel|>``
(empty ``<|channel>`` tokens before it are skipped) and content up to the next channel marker.
With tools, whatever follows the last message up to ``<|tool_call>`` is skipped and calls
``<|tool_call>call:NAME{key:value,...}<tool_call|>`` follow: bare keys, ``<|"|>`` quoted strings,
JSON numbers, booleans and null, nested dicts and arrays, rebuilt as compact JSON. Text after
the calls is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_name, tool_names
from ..description import (
    CallMessage,
    Flow,
    FlowState,
    Messages,
    ReplyFormat,
    TextMessage,
)
from ..mapper import CallMapper, MappedCall, find_node, json_escape_inner
from ..peg import Node
from ..prefill import Continuation
from ..request import ReplyRequest
from . import has_markers

__all__ = ["NAME", "matches", "describe", "Gemma4Mapper"]

NAME = "Gemma4 (inferred from format)"
REQUIRED = ("'<|tool_call>call:'",)
TURN = "<|turn>model\n"
CHANNEL = "<|channel>"
CHANNEL_END = "<channel|>"
CALL_OPEN = "<|tool_call>"
CALL_CLOSE = "<tool_call|>"
QUOTE = '<|"|>'
# the prefill: the model turn (when the prompt ended a turn), then the thought channel
CONTINUATION = Continuation(
    TURN, lead_when="<turn|>\n", think_start=CHANNEL + "thought\n", think_end=CHANNEL_END
)


# Gemma 4's value nodes (llama.cpp's gemma4-* rules)
GEMMA4_STRING = "gemma4-string"
GEMMA4_STRING_CONTENT = "gemma4-string-content"
GEMMA4_SCALAR = "gemma4-scalar"
GEMMA4_ARRAY = "gemma4-array"
GEMMA4_DICT = "gemma4-dict"
GEMMA4_DICT_KV = "gemma4-dict-kv"
GEMMA4_DICT_KEY = "gemma4-dict-key"
GEMMA4_DICT_KEY_NAME = "gemma4-dict-key-name"
GEMMA4_VALUE = "gemma4-value"


def _gemma4_json(node: Node, text: str) -> str:
    """A Gemma 4 value node as compact JSON; containers and strings stay open while cut short."""
    if node.end <= node.start:
        return ""
    tag = node.tag
    if tag == GEMMA4_SCALAR:
        return text[node.start : node.end]
    if tag == GEMMA4_STRING_CONTENT:
        return json_escape_inner(text[node.start : node.end])
    if tag == GEMMA4_DICT_KEY_NAME:
        return text[node.start : node.end]
    if tag == GEMMA4_STRING:
        if not node.children:
            return '"'
        return '"' + _gemma4_json(node.children[0], text) + ("" if node.partial else '"')
    if tag in (GEMMA4_ARRAY, GEMMA4_DICT):
        inner = ",".join(_gemma4_json(c, text) for c in node.children)
        close = "]" if tag == GEMMA4_ARRAY else "}"
        return ("[" if tag == GEMMA4_ARRAY else "{") + inner + ("" if node.partial else close)
    if tag == GEMMA4_DICT_KEY:
        name = json_escape_inner(_gemma4_json(node.children[0], text)) if node.children else ""
        return '"' + name + ("" if node.partial else '":')
    if tag == GEMMA4_DICT_KV:
        return "".join(_gemma4_json(c, text) for c in node.children)
    if tag == GEMMA4_VALUE:
        return _gemma4_json(node.children[0], text) if node.children else ""
    return ""


class Gemma4Mapper(CallMapper):
    """llama.cpp's PEG_GEMMA4 mapper: a ``tool`` node is a call once its name is complete; its
    arguments are rebuilt from the value nodes as compact JSON.

    Its own mapper because the generic one builds flat ``{"name": value}`` objects only, while
    Gemma 4 nests dicts and arrays whose JSON closes only where their node is complete."""

    def visit(self, nodes: Iterable[Node], text: str) -> None:
        for node in nodes:
            if node.tag != t.TOOL:
                self.visit(node.children, text)
                continue
            name = find_node(node, t.TOOL_NAME)
            args = find_node(node, t.TOOL_ARGS)
            if name is None or args is None or name.partial:
                continue
            arguments = _gemma4_json(args.children[0], text) if args.children else ""
            self.calls.append(MappedCall(text[name.start : name.end], arguments))

    def flush(self) -> None:
        return


def _value_grammar() -> peg.Parser:
    """Gemma 4's argument dict (the gemma4-* rules), tagged for Gemma4Mapper."""
    ws = peg.Space()
    value = peg.Ref()
    string = peg.Tag(
        GEMMA4_STRING,
        peg.Seq(
            peg.Literal(QUOTE), peg.Tag(GEMMA4_STRING_CONTENT, peg.Until(QUOTE)), peg.Literal(QUOTE)
        ),
    )
    key = peg.Tag(
        GEMMA4_DICT_KEY,
        peg.Seq(peg.Tag(GEMMA4_DICT_KEY_NAME, peg.CharsExcept(":}", 1, -1)), peg.Literal(":")),
    )
    member = peg.Tag(GEMMA4_DICT_KV, peg.Seq(key, ws, value))
    members = peg.Seq(member, peg.Repeat(peg.Seq(peg.Literal(","), ws, member)))
    mapping = peg.Tag(
        GEMMA4_DICT,
        peg.Seq(
            peg.Literal("{"),
            ws,
            peg.Choice(peg.Literal("}"), peg.Seq(members, ws, peg.Literal("}"))),
        ),
    )
    elements = peg.Seq(value, peg.Repeat(peg.Seq(peg.Literal(","), ws, value)))
    array = peg.Tag(
        GEMMA4_ARRAY,
        peg.Seq(
            peg.Literal("["),
            ws,
            peg.Choice(peg.Literal("]"), peg.Seq(elements, ws, peg.Literal("]"))),
        ),
    )
    scalar = peg.Choice(peg.json_number, peg.json_bool, peg.json_null)
    value.target = peg.Tag(
        GEMMA4_VALUE, peg.Choice(string, mapping, array, peg.Tag(GEMMA4_SCALAR, scalar))
    )
    return mapping


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def describe(request: ReplyRequest) -> ReplyFormat:
    functions = tool_functions(request.tools)
    calls = bool(functions) and request.tool_choice != "none"
    # empty channel tokens before a thought are skipped
    empty_channels = peg.Repeat(
        peg.Seq(peg.Literal(CHANNEL), peg.Not(peg.Literal("thought"))), 0, -1
    )
    header = peg.Seq(peg.Literal(CHANNEL + "thought"), peg.Space())
    closer = peg.Literal(CHANNEL_END)
    if request.reasoning_format != "none":
        thought = TextMessage(header, "reasoning", (CHANNEL_END,), closer, lead=empty_channels)
    else:
        thought = TextMessage(
            header, "content", (CHANNEL_END,), closer, lead=empty_channels, wrap="content"
        )
    stops = (CHANNEL, CHANNEL_END) + ((CALL_OPEN,) if calls else ())
    content = TextMessage(peg.Not(peg.Literal(CHANNEL)), "content", stops)
    begin = TextMessage(peg.optional(peg.Literal(TURN)), then="first")
    states: dict[str, FlowState] = {"begin": FlowState((begin,))}
    if not calls:
        # one message at least; an unmatched <channel|> ends the reply (the rest is dropped)
        states["first"] = FlowState(
            (_then(thought, "more"), _then(content, "more")), otherwise="!", loop=True
        )
        states["more"] = FlowState(
            (_then(thought, "more"), _then(content, "more")), otherwise="", loop=True
        )
    else:
        dict_grammar = _value_grammar()
        choice = peg.Choice(
            *(
                peg.Tag(
                    t.TOOL,
                    peg.Seq(
                        peg.atomic_tag(
                            t.TOOL_OPEN,
                            peg.Seq(tool_name(str(fn["name"])), peg.Peek(peg.Literal("{"))),
                        ),
                        peg.Tag(t.TOOL_ARGS, dict_grammar),
                    ),
                )
                for fn in functions
            )
        )
        one = peg.Seq(peg.Literal(CALL_OPEN + "call:"), choice, peg.Literal(CALL_CLOSE))
        more = "calls" if request.parallel_tool_calls else ""
        required = request.tool_choice == "required"
        states["calls0"] = FlowState(
            (CallMessage(one, CALL_CLOSE, then=more),), otherwise="!" if required else ""
        )
        states["calls"] = FlowState((CallMessage(one, CALL_CLOSE, then="calls"),), otherwise="")
        if required:
            no_thought = TextMessage(peg.Not(peg.Literal(CHANNEL)), then="calls0")
            states["first"] = FlowState((_then(thought, "calls0"), no_thought))
        else:
            states["first"] = FlowState(
                (_then(thought, "first"), _then(content, "first")), otherwise="scan", loop=True
            )
            # what lies between the last message and the first call is skipped
            states["scan"] = FlowState((TextMessage(peg.Eps(), "", (CALL_OPEN,), then="calls0"),))
    flow = Flow(
        states=states,
        start="begin",
        make_mapper=Gemma4Mapper,
        openers=(CALL_OPEN,),
        name_marker=CALL_OPEN + "call:",
        name_marker_end="{",
        tool_names=tool_names(functions),
    )
    return ReplyFormat(NAME, (Messages(flow),), stop=("<turn|>",), continuation=CONTINUATION)


def _then(message: TextMessage, state: str) -> TextMessage:
    return TextMessage(
        message.header,
        message.field,
        message.stops,
        message.closer,
        lead=message.lead,
        wrap=message.wrap,
        then=state,
    )
