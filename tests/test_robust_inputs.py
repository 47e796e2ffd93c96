"""Malformed requests: only chatcodec's documented errors ever leave the library.

A request built by a careless client or an attacker (messages that are not a list, a message
that is a number, tools that are strings, a ``response_format`` list, a ``tool_choice`` of any
type) must fail as a ``ChatCodecError`` subclass naming what is wrong, never as Python's own
``AttributeError`` / ``KeyError`` / ``TypeError``. These tests need no ``../shared``: they run
on ``examples/chatml-tiny`` and inline templates.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatcodec import (
    ChatCodecError,
    ChatTemplate,
    Codec,
    RequestError,
    TemplateArgumentError,
    load,
)
from chatcodec.template import probe_capabilities, to_template_messages

from ._hypothesis import (
    CONTINUE,
    MESSAGES,
    NAMED,
    REPLIES,
    RESPONSE_FORMAT,
    SEEDED,
    TOOL_CHOICE,
    TOOLS,
    maybe,
)
from .conftest import ROOT

CHECKPOINT = ROOT / "examples" / "chatml-tiny"
HI = [{"role": "user", "content": "Hi"}]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
# a template reading every part of a request the way real ones do (tools, calls, blocks)
INLINE = (
    "{%- for tool in tools or [] %}{{ tool.function.name }}\n{% endfor -%}"
    "{%- for m in messages %}<{{ m.role }}>"
    "{%- if m.content is string %}{{ m.content }}{% else %}"
    "{%- for b in m.content or [] %}{{ b.text }}{% endfor %}{% endif %}"
    "{%- for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments | tojson }}]"
    "{%- endfor %}</{{ m.role }}>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<assistant>{% endif %}"
)


@cache
def _codec() -> Codec:
    return load(CHECKPOINT)


@cache
def _inline() -> Codec:
    return Codec(INLINE, eos_token="</assistant>")


# --- the classes the issue found, one example each ---------------------------------------


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ([1, 2], "message 0 is an int"),
        ("x", "messages must be a list"),
        (None, "messages must be a list"),
        (5, "messages must be a list"),
        ({"role": "user", "content": "hi"}, "messages must be a list"),
        ([{"role": "user", "content": "hi"}, "hello"], "message 1 is a str"),
        ([[{"role": "user", "content": "hi"}]], "message 0 is a list"),
    ],
)
def test_prepare_refuses_messages_that_are_not_a_list_of_mappings(messages: Any, says: str) -> None:
    with pytest.raises(TemplateArgumentError, match=says) as caught:
        _codec().prepare(messages)
    assert isinstance(caught.value, RequestError)  # the request must change
    assert caught.value.stage == "render"


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ("get_weather", "tools must be a list"),
        (TOOL, "tools must be a list"),
        (5, "tools must be a list"),
        ([TOOL, 1], "tool 1 is an int"),
        ([TOOL, "get_weather"], "tool 1 is a str"),
        ([len], r"get_json_schema\(function\) makes one"),
    ],
)
def test_prepare_refuses_tools_that_are_not_a_list_of_schemas(tools: Any, says: str) -> None:
    for choice in ("auto", NAMED):
        with pytest.raises(TemplateArgumentError, match=says):
            _codec().prepare(HI, tools=tools, tool_choice=choice)


@pytest.mark.parametrize("response_format", [[1], "json_object", 5, True, [{"type": "text"}]])
def test_prepare_refuses_a_response_format_that_is_not_a_mapping(response_format: Any) -> None:
    with pytest.raises(RequestError, match="response_format must be a mapping"):
        _codec().prepare(HI, response_format=response_format)


@pytest.mark.parametrize("choice", [5, None, [1], True, {"type": "function"}, {"function": 3}])
def test_prepare_refuses_a_tool_choice_of_the_wrong_type(choice: Any) -> None:
    with pytest.raises(RequestError, match="tool_choice"):
        _codec().prepare(HI, tools=[TOOL], tool_choice=choice)


@pytest.mark.parametrize("option", [{"parallel_tool_calls": "yes"}, {"reasoning_format": [1]}])
def test_prepare_refuses_options_of_the_wrong_type(option: dict[str, Any]) -> None:
    with pytest.raises(RequestError, match=next(iter(option))):
        _codec().prepare(HI, **option)


def test_render_names_the_message_that_is_not_a_mapping_with_the_references_kind() -> None:
    # transformers fails on `msg.items()`: the kind stays AttributeError, the text says which
    with pytest.raises(TemplateArgumentError, match="message 1 is an int") as caught:
        _codec().render([{"role": "user", "content": "hi"}, 7])
    assert caught.value.kind == "AttributeError"


def test_to_template_messages_refuses_shapes_it_cannot_convert() -> None:
    capabilities = probe_capabilities(_codec().template, _codec().special_tokens)
    for messages, tools in (("x", None), ([1], None), (HI, "t"), (HI, [TOOL, None]), (None, None)):
        with pytest.raises(RequestError):
            to_template_messages(messages, capabilities, tools)  # type: ignore[arg-type]


def test_a_valid_request_still_prepares_and_parses() -> None:
    # the checks refuse only malformed shapes: tuples and generators of messages still work
    for messages in (HI, tuple(HI), (m for m in HI)):
        turn = _codec().prepare(messages, tools=[TOOL], tool_choice="auto")
        message = turn.parse('<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>')
        assert [call.name for call in message.tool_calls] == ["get_weather"]


# --- any JSON value anywhere in a request -------------------------------------------------

_PROPERTY = settings(SEEDED, max_examples=150)


@pytest.mark.parametrize("codec", [_codec, _inline], ids=["chatml-tiny", "inline"])
@_PROPERTY
@given(
    messages=MESSAGES,
    tools=TOOLS,
    tool_choice=TOOL_CHOICE,
    response_format=RESPONSE_FORMAT,
    continuation=CONTINUE,
)
def test_prepare_and_parse_raise_only_chatcodec_errors(
    codec: Any,
    messages: Any,
    tools: Any,
    tool_choice: Any,
    response_format: Any,
    continuation: Any,
) -> None:
    try:
        turn = codec().prepare(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            response_format=response_format,
            continue_final_message=continuation,
            tool_call_id=0,
        )
    except ChatCodecError:
        return
    for reply in REPLIES:  # a turn set up from odd input reads replies without crashing
        for partial in (False, True):
            try:
                turn.parse(reply, partial=partial)
            except ChatCodecError:
                pass
        stream = turn.stream()
        try:
            for character in reply:
                stream.feed(character)
            stream.finish()
        except ChatCodecError:
            pass


@pytest.mark.parametrize("codec", [_codec, _inline], ids=["chatml-tiny", "inline"])
@_PROPERTY
@given(
    messages=MESSAGES,
    tools=TOOLS,
    documents=st.none() | maybe(st.just([{"title": "T", "text": "x"}])),
    continuation=CONTINUE,
    add_generation_prompt=st.booleans(),
)
def test_render_raises_only_chatcodec_errors(
    codec: Any,
    messages: Any,
    tools: Any,
    documents: Any,
    continuation: Any,
    add_generation_prompt: bool,
) -> None:
    template: ChatTemplate = codec().template
    for render in (codec().render, template.render):
        try:
            prompt = render(
                messages,
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continuation,
            )
        except ChatCodecError:
            continue
        assert isinstance(prompt, str)
    try:
        spans = template.render_with_spans(messages, tools=tools, documents=documents)
    except ChatCodecError:
        return
    assert all(0 <= s.start <= s.end <= len(spans.text) for s in spans.spans)
