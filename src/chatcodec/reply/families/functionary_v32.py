"""Functionary v3.2 replies (llama.cpp's "Functionary v3.2" handler): ``>>>RECIPIENT\\n`` messages.

The generation prompt ends with ``>>>``, so the reply opens with a recipient: ``all\\n`` then
content, or a tool name and its JSON arguments (``get_weather\\n{"city": "Paris"}``), further
calls written right after it (parallel only). llama.cpp's grammar reads content up to ``>>>`` and
expects a tool name there, which never follows the ``>>>`` it stopped before, so content then a
call reads as content, markup included (its fallback alternative); text after the calls fails.
"""

from __future__ import annotations

from dataclasses import replace

from ...grammar import rules as g
from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_name, tool_names
from ..constraint import (
    Constraint,
    calls_offered,
    constraint,
    patterns,
)
from ..description import (
    CallMessage,
    Expect,
    Flow,
    FlowState,
    Messages,
    ReplyFormat,
    TextMessage,
)
from ..grammar import calls_only, parameters_node
from ..prefill import Continuation
from ..request import ReplyRequest
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

NAME = "Functionary v3.2"
REQUIRED = (">>>all", ">>>${recipient}")
PREFIX = "<|start_header_id|>assistant<|end_header_id|>\n\n>>>"
# the prefill continues the content message, whatever is continued
CONTINUATION = Continuation(PREFIX + "all\n", content_always=True)


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    functions = tool_functions(request.tools)
    all_header = peg.Literal("all\n")
    rest = TextMessage(all_header, "content", (), then="$")
    states: dict[str, FlowState]
    if not functions or request.tool_choice == "none":
        states = {"first": FlowState((rest,))}
    else:
        choice = peg.Choice(
            *(
                peg.Tag(
                    t.TOOL,
                    peg.Seq(
                        peg.atomic_tag(
                            t.TOOL_OPEN, peg.Seq(tool_name(str(fn["name"])), peg.Literal("\n"))
                        ),
                        peg.Tag(t.TOOL_ARGS, peg.json_value),
                    ),
                )
                for fn in functions
            )
        )
        more = "calls" if request.parallel_tool_calls else "$"
        required = request.tool_choice == "required"
        content_until_call = TextMessage(all_header, "content", (">>>",), then="content_calls")
        after_first: tuple[CallMessage, ...] = (CallMessage(choice, then=more),)
        further: tuple[CallMessage, ...] = (CallMessage(choice, then="calls"),)
        if request.policy == "guaranteed":
            # the template writes each call after >>>, the content's too: read them so
            # (docs/differences.md, G3); llama.cpp reads a call after another only bare
            headed = peg.Seq(peg.Literal(">>>"), choice)
            after_first += (CallMessage(headed, then=more),)
            further += (CallMessage(headed, then="calls"),)
        states = {
            "first": FlowState((content_until_call, CallMessage(choice, then=more))),
            # the calls after the content: when they fail, the content reads on to the end
            "content_calls": FlowState(after_first, otherwise="!" if required else "rest"),
            "rest": FlowState((TextMessage(peg.Eps(), "content", (), then="$"),)),
            "calls": FlowState(further, otherwise="$"),
        }
    flow = Flow(
        states=states,
        start="first",
        openers=(">>>",),
        name_marker=">>>",
        name_marker_end="\n",
        tool_names=tool_names(functions),
    )
    return ReplyFormat(
        NAME,
        (Expect(PREFIX), Messages(flow)),
        stop=("<|eot_id|>",),
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (">>>all",)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    return constraint(
        PRESERVED_TOKENS,
        grammar=calls_offered(request),
        lazy=request.tool_choice == "auto",
        triggers=patterns(">>>(?!all)"),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): after the prompt's ``>>>``, content
    (``all\\n``) up to ``>>>`` then calls, content alone, or calls alone (each a tool's name and
    its arguments as its schema says); one call unless parallel. Lazy under ``auto``: its root
    is the calls."""
    r = g.Rules()
    content_to_end = "all\n" + g.tag(g.until())
    lazy = request.tool_choice == "auto"
    if not calls_offered(request):
        return r.gbnf(PREFIX + content_to_end, lazy=lazy)
    content_to_call = "all\n" + g.tag(g.until(">>>"))
    call = g.choice()
    for function in tool_functions(request.tools):
        name = str(function["name"])
        args = g.schema(r.json(), f"tool-{name}-schema", parameters_node(function))
        call = call | r.rule(f"tool-{name}", g.tag(g.tag(g.tag(g.lit(name)) + "\n") + g.tag(args)))
    calls = r.trigger_rule("tools", g.one_or_more(call))
    required = request.tool_choice == "required"
    if calls_only(request):  # the guaranteed policy: the calls alone, one unless parallel
        return r.gbnf(PREFIX + (calls if request.parallel_tool_calls else call), lazy=lazy)
    # calls alone are one call only when neither parallel nor required
    after_content = calls if request.parallel_tool_calls else call
    alone = calls if request.parallel_tool_calls or required else call
    replies = [content_to_call + after_content, *([] if required else [content_to_end]), alone]
    return r.gbnf(PREFIX + g.choice(*replies), lazy=lazy)
