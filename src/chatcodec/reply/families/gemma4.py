"""Gemma 4 replies (llama.cpp's "Gemma4 (inferred from format)" handler, mapper PEG_GEMMA4).

A reply is a run of messages, each an optional thought ``<|channel>thought ... <channel|>``
(empty ``<|channel>`` tokens before it are skipped) and content up to the next channel marker.
With tools, whatever follows the last message up to ``<|tool_call>`` is skipped and calls
``<|tool_call>call:NAME{key:value,...}<tool_call|>`` follow: bare keys, ``<|"|>`` quoted strings,
JSON numbers, booleans and null, nested dicts and arrays, rebuilt as compact JSON. Text after
the calls is dropped. With a response format the reply is an optional thought, then one JSON
value fenced as ```` ```json ... ``` ```` (tools aside); what follows it is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from ...grammar import rules as g
from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_name, tool_names
from ..constraint import (
    Constraint,
    calls_offered,
    calls_or_json,
    has_response_format,
    words,
)
from ..description import (
    CallMessage,
    Flow,
    FlowState,
    Messages,
    ReplyFormat,
    TextMessage,
)
from ..grammar import calls_only, members_in_order, tool_parameters
from ..mapper import CallMapper, MappedCall, find_node, json_escape_inner
from ..peg import Node
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import fenced_json
from . import has_markers

__all__ = [
    "NAME",
    "PRESERVED_TOKENS",
    "matches",
    "describe",
    "constraint_for",
    "grammar",
    "Gemma4Mapper",
    "Gemma4Arguments",
    "gemma4_json",
]

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


def gemma4_json(node: Node, text: str) -> str:
    """A Gemma 4 value node as compact JSON; containers and strings stay open while cut short.

    Containers are walked with an explicit stack: a value nests as deep as its text does."""
    out: list[str] = []
    # a node to write, or a piece of text already written
    todo: list[Node | str] = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        if item.end <= item.start:
            continue
        tag = item.tag
        if tag in (GEMMA4_ARRAY, GEMMA4_DICT):
            is_array = tag == GEMMA4_ARRAY
            if not item.partial:
                todo.append("]" if is_array else "}")
            for i in range(len(item.children) - 1, -1, -1):
                todo.append(item.children[i])
                if i:
                    todo.append(",")
            out.append("[" if is_array else "{")
        elif tag == GEMMA4_DICT_KV:
            todo.extend(reversed(item.children))
        elif tag == GEMMA4_VALUE:
            if item.children:
                todo.append(item.children[0])
        else:
            out.append(_gemma4_leaf(item, text))
    return "".join(out)


def _gemma4_leaf(node: Node, text: str) -> str:
    """A node that holds no value nodes (a scalar, a string, a key) as JSON."""
    if node.end <= node.start:
        return ""
    tag = node.tag
    if tag == GEMMA4_SCALAR or tag == GEMMA4_DICT_KEY_NAME:
        return text[node.start : node.end]
    if tag == GEMMA4_STRING_CONTENT:
        return json_escape_inner(text[node.start : node.end])
    if tag == GEMMA4_STRING:
        if not node.children:
            return '"'
        return '"' + _gemma4_leaf(node.children[0], text) + ("" if node.partial else '"')
    if tag == GEMMA4_DICT_KEY:
        name = json_escape_inner(_gemma4_leaf(node.children[0], text)) if node.children else ""
        return '"' + name + ("" if node.partial else '":')
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
            arguments = gemma4_json(args.children[0], text) if args.children else ""
            self.calls.append(MappedCall(text[name.start : name.end], arguments))

    def flush(self) -> None:
        return


class _Open:
    """A container being read: its items so far and the member in progress (dicts)."""

    __slots__ = ("is_dict", "start", "items", "member_start", "key")

    def __init__(self, is_dict: bool, start: int) -> None:
        self.is_dict, self.start = is_dict, start
        self.items: list[Node] = []
        self.member_start = -1  # where the member in progress begins (-1: none)
        self.key: Node | None = None  # its key, once complete


class Gemma4Arguments(peg.Parser):
    """Gemma 4's argument dict (llama.cpp's gemma4-* rules), tagged for Gemma4Mapper.

    The same Result as the combinator grammar ``{ ws (} | member (, ws member)* ws })``, a
    member ``key: ws value``, arrays alike (kept in tests/test_reply_nesting.py as the
    reference), read with an explicit stack so that nesting depth never meets Python's
    recursion limit."""

    def __init__(self) -> None:
        string = peg.Tag(
            GEMMA4_STRING,
            peg.Seq(
                peg.Literal(QUOTE),
                peg.Tag(GEMMA4_STRING_CONTENT, peg.Until(QUOTE)),
                peg.Literal(QUOTE),
            ),
        )
        self.key = peg.Tag(
            GEMMA4_DICT_KEY,
            peg.Seq(peg.Tag(GEMMA4_DICT_KEY_NAME, peg.CharsExcept(":}", 1, -1)), peg.Literal(":")),
        )
        scalar = peg.Choice(peg.json_number, peg.json_bool, peg.json_null)
        # a value that is not a container (strings first: llama.cpp's order)
        self.leaf = peg.Tag(GEMMA4_VALUE, peg.Choice(string, peg.Tag(GEMMA4_SCALAR, scalar)))

    def _member_key(self, frame: _Open, text: str, pos: int) -> peg.Result:
        """A dict member begins at ``pos``: its key (kept on the frame when it parsed)."""
        frame.member_start = pos
        r = self.key.parse(text, pos)
        if r.status == peg.SUCCESS:
            frame.key = r.nodes[0]
        return r

    def parse(self, text: str, pos: int) -> peg.Result:
        n = len(text)
        if pos >= n:
            return peg.Result(peg.NEED_MORE, n, [Node(GEMMA4_DICT, pos, n, True)])
        if text[pos] != "{":
            return peg.Result(peg.FAIL, pos)
        stack: list[_Open] = []
        first_item = -1  # where the outermost dict's first member begins: its FAIL end
        while True:
            # text[pos] opens a container, or pos begins a leaf value
            if pos < n and text[pos] in "{[":
                frame = _Open(text[pos] == "{", pos)
                stack.append(frame)
                pos = _skip_space(text, pos + 1)
                if pos >= n:
                    return _cut(stack, [], n)
                if text[pos] != ("}" if frame.is_dict else "]"):
                    if first_item < 0:
                        first_item = pos
                    if frame.is_dict:
                        r = self._member_key(frame, text, pos)
                        if r.status != peg.SUCCESS:
                            return _stopped(r, stack, first_item)
                        pos = _skip_space(text, r.end)
                    continue
                pos += 1
                stack.pop()
                value = _closed(frame, pos, outermost=not stack)
            else:
                r = self.leaf.parse(text, pos)
                if r.status != peg.SUCCESS:
                    return _stopped(r, stack, first_item)
                value, pos = r.nodes[0], r.end
            # a complete value: the next item, or the close of its container(s)
            while True:
                if not stack:
                    return peg.Result(peg.SUCCESS, pos, [value])
                frame = stack[-1]
                if frame.is_dict:
                    assert frame.key is not None
                    member = Node(
                        GEMMA4_DICT_KV, frame.member_start, pos, False, (frame.key, value)
                    )
                    frame.items.append(member)
                    frame.member_start, frame.key = -1, None
                else:
                    frame.items.append(value)
                if pos >= n:
                    return _cut(stack, [], n)
                if text[pos] == ",":
                    pos = _skip_space(text, pos + 1)
                    if frame.is_dict:
                        r = self._member_key(frame, text, pos)
                        if r.status != peg.SUCCESS:
                            return _stopped(r, stack, first_item)
                        pos = _skip_space(text, r.end)
                    break
                pos = _skip_space(text, pos)
                if pos >= n:
                    return _cut(stack, [], n)
                if text[pos] != ("}" if frame.is_dict else "]"):
                    return peg.Result(peg.FAIL, first_item)
                pos += 1
                stack.pop()
                value = _closed(frame, pos, outermost=not stack)


def _skip_space(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and peg.is_c_space(text[pos]):
        pos += 1
    return pos


def _closed(frame: _Open, end: int, outermost: bool) -> Node:
    """A complete container's node (a value node around it, but for the outermost dict)."""
    tag = GEMMA4_DICT if frame.is_dict else GEMMA4_ARRAY
    node = Node(tag, frame.start, end, False, tuple(frame.items))
    return node if outermost else Node(GEMMA4_VALUE, frame.start, end, False, (node,))


def _cut(stack: list[_Open], inner: list[Node], end: int) -> peg.Result:
    """NEED_MORE at ``end``: every open container's node, cut short, around ``inner``."""
    nodes = inner
    for depth in range(len(stack) - 1, -1, -1):
        frame = stack[depth]
        children = list(frame.items)
        if frame.is_dict and frame.member_start >= 0:
            kv = ((frame.key,) if frame.key is not None else ()) + tuple(nodes)
            children.append(Node(GEMMA4_DICT_KV, frame.member_start, end, True, kv))
        else:
            children.extend(nodes)
        tag = GEMMA4_DICT if frame.is_dict else GEMMA4_ARRAY
        node = Node(tag, frame.start, end, True, tuple(children))
        nodes = [node if depth == 0 else Node(GEMMA4_VALUE, frame.start, end, True, (node,))]
    return peg.Result(peg.NEED_MORE, end, nodes)


def _stopped(r: peg.Result, stack: list[_Open], first_item: int) -> peg.Result:
    """An inner NEED_MORE cuts every open container; an inner FAIL fails the outermost dict."""
    if r.status == peg.NEED_MORE:
        return _cut(stack, r.nodes, r.end)
    return peg.Result(peg.FAIL, first_item)


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
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
    if request.json_schema:
        # a response format (tools aside): an optional thought, then one fenced JSON value;
        # what follows it is dropped
        no_thought = TextMessage(peg.Not(peg.Literal(CHANNEL)), then="value")
        states["first"] = FlowState((_then(thought, "value"), no_thought))
        states["value"] = FlowState((CallMessage(fenced_json()),))
    elif not calls:
        # one message at least; an unmatched <channel|> ends the reply (the rest is dropped)
        states["first"] = FlowState(
            (_then(thought, "more"), _then(content, "more")), otherwise="!", loop=True
        )
        states["more"] = FlowState(
            (_then(thought, "more"), _then(content, "more")), otherwise="", loop=True
        )
    else:
        dict_grammar = Gemma4Arguments()
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


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (CHANNEL, CHANNEL_END, CALL_OPEN, CALL_CLOSE, "<|turn>")


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    return calls_or_json(request, PRESERVED_TOKENS, words(CALL_OPEN))


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar text


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the model turn, thoughts and content, then
    the calls (each an argument dict in Gemma 4's own notation, whatever the tool's schema says)
    or the response format's fenced JSON."""
    r = g.Rules()
    start = r.rule("start", g.optional(TURN))
    header = CHANNEL + "thought" + g.space()
    if request.reasoning_format != "none":
        body = header + g.tag(g.until(CHANNEL_END)) + CHANNEL_END
    else:
        body = g.tag(header + g.until(CHANNEL_END) + CHANNEL_END)
    # the empty channels skipped before a thought, and the look-aheads, are no grammar text
    empty_channels = g.raw(g.zero_or_more(CHANNEL + g.nothing()), "")
    thought = (g.nothing() + empty_channels + r.rule("thought", body)) | g.nothing()
    if has_response_format(request):
        value = g.tag(g.schema(r.json(), "response-format-schema", request.json_schema))
        response = "```json" << value << "```"
        return r.gbnf(start + g.optional(thought) + response, lazy=False)
    if not calls_offered(request):
        content = r.rule("content", g.tag(g.until(CHANNEL, CHANNEL_END)))
        message = r.rule("message", thought + content)
        return r.gbnf(start + g.one_or_more(message), lazy=False)
    arguments = _dict_rules(r)
    tools = g.choice()
    for fn in tool_functions(request.tools):
        name = fn["name"]
        args = _typed_dict(r, fn) if calls_only(request) else arguments
        call = g.tag(g.seq(g.tag(g.tag(g.lit(name)) + g.nothing()), g.tag(args)))
        tools = tools | r.rule(f"tool-{name}", call)
    required = request.tool_choice == "required"
    calls = r.trigger_rule(
        "tool-call",
        g.repeat(
            CALL_OPEN + "call:" + tools + CALL_CLOSE,
            1 if required else 0,
            -1 if request.parallel_tool_calls else 1,
        ),
    )
    if required:
        return r.gbnf(start + thought + calls, lazy=False)
    scan = r.rule("scan-to-toolcall", g.until(CALL_OPEN))
    content = r.rule("content", g.tag(g.until(CHANNEL, CHANNEL_END, CALL_OPEN)))
    message = r.rule("message", thought + content)
    return r.gbnf(start + g.zero_or_more(message) + scan + calls, lazy=True)


def _typed_dict(r: g.Rules, fn: Mapping[str, object]) -> g.Expr:
    """A call's argument dict that holds to the tool's schema (the guaranteed policy's required
    calls): every required key, in the schema's order, then any optional ones; a value that
    may be no string, object or array is a JSON value of its schema (Gemma 4 writes numbers,
    booleans and null as JSON does), any other a value in Gemma 4's notation."""
    name = str(fn["name"])
    assert "gemma4-value" in r.rules, "_dict_rules first"
    value = r.rule("gemma4-value", lambda: g.nothing())  # the rule _dict_rules wrote
    required: list[g.Expr] = []
    optional: list[g.Expr] = []
    for param in tool_parameters(fn):
        if param.types & {"string", "object", "array"} or not param.types:
            typed = value
        else:
            typed = g.schema(r.json(), f"tool-{name}-arg-{param.name}-schema", param.schema)
        member = g.lit(param.name) + ":" + g.space() + typed
        (required if param.required else optional).append(member)
    members = members_in_order(required, optional, "," + g.space())
    return r.rule(f"tool-{name}-args", "{" + g.space() + members + g.space() + "}")


def _dict_rules(r: g.Rules) -> g.Expr:
    """The rules of Gemma 4's argument notation (all of them, as llama.cpp defines them);
    the reference to its dict rule."""
    string = r.rule(
        "gemma4-string", QUOTE + r.rule("gemma4-string-content", g.until(QUOTE)) + QUOTE
    )
    boolean = r.rule("gemma4-bool", r.json_bool())
    null = r.rule("gemma4-null", r.json_null())
    number = r.rule("gemma4-number", r.json_number())
    key = r.rule("gemma4-dict-key", r.rule("gemma4-dict-key-name", g.chars("[^:}]", 1, -1)) + ":")

    def value() -> g.Expr:
        return r.rule(
            "gemma4-value", lambda: g.choice(string, dict_(), array(), number, boolean, null)
        )

    def dict_() -> g.Expr:
        def body() -> g.Expr:
            member = r.rule("gemma4-dict-kv", lambda: key + g.space() + value())
            members = g.seq(member, g.zero_or_more(g.seq(",", g.space(), member)))
            return g.seq("{", g.space(), g.choice("}", g.seq(members, g.space(), "}")))

        return r.rule("gemma4-dict", body)

    def array() -> g.Expr:
        def body() -> g.Expr:
            elements = g.seq(value(), g.zero_or_more(g.seq(",", g.space(), value())))
            return g.seq("[", g.space(), g.choice("]", g.seq(elements, g.space(), "]")))

        return r.rule("gemma4-array", body)

    return dict_()
