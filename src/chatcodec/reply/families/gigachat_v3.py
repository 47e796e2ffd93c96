"""GigaChat V3 replies (llama.cpp's "GigaChatV3" handler): content, then at most one JSON call.

``assistant<|role_sep|>\\n`` content, then ``<|message_sep|>\\n\\nfunction call<|role_sep|>\\n``
and ``{"name": "NAME", "arguments": {...}}`` (arguments as the model wrote them). One call at
most, whatever parallel_tool_calls says; text after it is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_names
from ..description import CallSection, ReplyFormat, legacy_format
from ..prefill import Continuation

__all__ = ["HANDLER", "describe"]

HANDLER = "GigaChatV3"
PREFIX = "assistant<|role_sep|>\n"
SEPARATOR = "<|message_sep|>\n\n"
CALL_START = SEPARATOR + "function call<|role_sep|>\n"
CONTINUATION = Continuation(PREFIX, content_always=True)


def _call(name: str) -> peg.Parser:
    ws = peg.Space()
    opener = peg.Atomic(
        peg.Tag(
            t.TOOL_OPEN,
            peg.Seq(
                peg.Literal("{"),
                ws,
                peg.Literal('"name"'),
                ws,
                peg.Literal(":"),
                ws,
                peg.Literal('"'),
                peg.Atomic(peg.Tag(t.TOOL_NAME, peg.Literal(name))),
                peg.Literal('"'),
            ),
        )
    )
    return peg.Seq(
        opener,
        ws,
        peg.Literal(","),
        ws,
        peg.Literal('"arguments"'),
        ws,
        peg.Literal(":"),
        ws,
        peg.Tag(t.TOOL_ARGS, peg.json_value),
        ws,
        peg.Literal("}"),
    )


def describe(tools: Sequence[Mapping[str, Any]] | None, tool_choice: str) -> ReplyFormat:
    functions = tool_functions(tools)
    if not functions or tool_choice == "none":
        return legacy_format(
            HANDLER, PREFIX, None, None, space_before_content=False, continuation=CONTINUATION
        )
    call = peg.Seq(
        peg.Literal(CALL_START), peg.Choice(*(_call(str(fn["name"])) for fn in functions))
    )
    section = CallSection(
        first=call,
        next=None,
        required=tool_choice == "required",
        commit="",
        openers=(CALL_START,),
        name_marker='"name"',
        name_marker_end=",",
        tool_names=tool_names(functions),
    )
    return legacy_format(
        HANDLER,
        PREFIX,
        None,
        (SEPARATOR,),
        section,
        space_before_content=False,
        continuation=CONTINUATION,
    )
