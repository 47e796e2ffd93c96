"""Stream = parse: any chunking folds to the finished parse; deltas only grow; no markup leaks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatcodec import Codec, ReplyError, StreamedCallError
from chatcodec.reply import AssistantMessage, Delta, Turn, fold

from ._reply_invariants import contradicts
from .conftest import template_source

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": ["string", "null"]}, "n": {"type": "number"}},
                "required": ["query"],
            },
        },
    },
]
TEMPLATES = (
    "Qwen3-Coder.jinja",
    "Qwen3.5-4B.jinja",
    "StepFun3.5-Flash.jinja",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
)
_TURNS: dict[tuple[str, bool, bool, str, str], Turn] = {}


def _turn(name: str, thinking: bool, parallel: bool, fmt: str, choice: str = "auto") -> Turn:
    key = (name, thinking, parallel, fmt, choice)
    if key not in _TURNS:
        codec = Codec(template_source(name))
        _TURNS[key] = codec.prepare(
            [{"role": "user", "content": "hi"}],
            tools=TOOLS,
            tool_choice=choice,
            parallel_tool_calls=parallel,
            enable_thinking=thinking,
            reasoning_format=fmt,
        )
    return _TURNS[key]


# pieces of the family's own markup and prose, glued at random
MARKUP = [
    "<tool_call>\n",
    "</tool_call>",
    "<function=get_weather>\n",
    "<function=search>\n",
    "<function=nope>\n",
    "<parameter=city>\n",
    "<parameter=days>\n",
    "<parameter=query>\n",
    "<parameter=n>\n",
    "\n</parameter>\n",
    "</function>\n",
    "<think>",
    "</think>",
    "\n",
    "  ",
    "Paris",
    "12",
    "null",
    '{"a": 1}',
    "<",
    "</",
    "hello world",
    "é🚀",
]
CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
)
reply_text = st.lists(
    st.one_of(st.sampled_from(MARKUP), st.just(CALL), st.text(max_size=6)), max_size=14
).map("".join)


def _stream(turn: Turn, text: str, cuts: list[int]) -> tuple[list[list[Delta]], AssistantMessage]:
    stream = turn.stream()
    steps = [stream.feed(piece) for piece in _pieces(text, cuts)]
    end = stream.finish()
    steps.append(end.deltas)
    return steps, end.message


def _pieces(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _check(turn: Turn, text: str, cuts: list[int]) -> None:
    try:
        expected = turn.parse(text)
    except ReplyError:
        with pytest.raises(ReplyError):
            _stream(turn, text, cuts)
        return
    try:
        steps, finished = _stream(turn, text, cuts)
    except StreamedCallError:
        # the documented failure: a call announced while it was written did not parse as sent
        # (only where the parse really contradicts what the stream sent)
        stream = turn.stream()
        sent = [d for piece in _pieces(text, cuts) for d in stream.feed(piece)]
        assert contradicts(sent, expected)
        return
    deltas = [d for step in steps for d in step]
    folded = fold(deltas)
    assert [d.role for d in deltas] == ["assistant"] + [""] * (len(deltas) - 1)
    assert finished == expected
    assert folded.content == expected.content
    assert folded.reasoning_content == expected.reasoning_content
    assert folded.tool_calls == expected.tool_calls
    # monotonic: every delta is a prefix-extension of the finished fields
    grown = ""
    for d in deltas:
        grown += d.content
        assert expected.content.startswith(grown)
    for d in deltas:
        if d.tool_call is not None:
            assert d.tool_call.index < len(expected.tool_calls)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reply_text,
    st.lists(st.integers(0, 400), max_size=8),
    st.sampled_from(TEMPLATES),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["deepseek", "none"]),
)
def test_random_chunking_folds_to_the_finished_parse(
    text: str, cuts: list[int], name: str, thinking: bool, parallel: bool, fmt: str
) -> None:
    turn = _turn(name, thinking, parallel, fmt)
    _check(turn, text, [c for c in cuts if c <= len(text)])


@settings(max_examples=40, deadline=None)
@given(reply_text, st.sampled_from(TEMPLATES))
def test_byte_by_byte_and_every_two_way_split(text: str, name: str) -> None:
    turn = _turn(name, True, True, "deepseek")
    _check(turn, text, list(range(len(text))))
    for cut in range(len(text) + 1):
        _check(turn, text, [cut])


def test_held_back_only_while_a_marker_may_start() -> None:
    turn = _turn("Qwen3-Coder.jinja", True, True, "deepseek")
    stream = turn.stream()
    assert fold(stream.feed("Hello <")).content == "Hello "
    assert fold(stream.feed("b>")).content == "<b>"
    assert fold(stream.feed(" <tool_c")).content == " "
    # the call is announced once its name is complete, its arguments so far with it
    (announced,) = stream.feed("all>\n<function=get_weather>\n<parameter=city>\nPar")
    assert announced.tool_call is not None
    assert announced.tool_call.name == "get_weather"
    assert announced.tool_call.arguments == '{"city":"Par'
    # a newline that may begin the closing tag is held back; the value's quote comes with it
    assert fold(stream.feed("is\n")).tool_calls[0].arguments == "is"
    rest = stream.feed("</parameter>\n</function>\n</tool_call>")
    assert [(d.tool_call.index, d.tool_call.name) for d in rest if d.tool_call] == [(0, "")]
    assert fold(rest).tool_calls[0].arguments == '"}'
    last, message = stream.finish()
    assert last == []  # the call was complete at its closing marker
    assert message.content == "Hello <b> "
    assert message.tool_calls[0].arguments == '{"city":"Paris"}'


def test_seed_rules_and_what_was_dropped() -> None:
    turn = _turn("Qwen3-Coder.jinja", True, False, "deepseek")
    two = CALL + "\n" + CALL + "\nbye"
    message = turn.parse(two)
    assert len(message.tool_calls) == 1
    assert [d.reason for d in message.dropped] == ["parallel_limit"]
    assert message.dropped[0].text.startswith("<tool_call>")
    unknown = turn.parse("Hi\n<tool_call>\n<function=nope>\n</function>\n</tool_call>")
    assert unknown.content == "Hi\n" and not unknown.tool_calls
    assert [d.reason for d in unknown.dropped] == ["unknown_tool"]
    trailing = _turn("Qwen3-Coder.jinja", True, True, "deepseek").parse(CALL + "\nand more")
    assert [(d.reason, d.text) for d in trailing.dropped] == [("trailing_text", "and more")]
    cut = turn.parse(CALL[:-5])
    assert cut.tool_calls[0].arguments == '{"city":"Paris","days":3}'
    stray = turn.parse("Plan.</think>done")
    assert stray.content == "Plan.</think>done" and stray.reasoning_content == ""
    step = _turn("StepFun3.5-Flash.jinja", False, True, "deepseek").parse("idea" + CALL)
    assert step.reasoning_content == "idea" and step.tool_calls[0].name == "get_weather"


def test_required_without_a_valid_call_is_a_reply_error() -> None:
    turn = _turn("Qwen3-Coder.jinja", True, True, "deepseek", "required")
    assert turn.parse("just text").content == "just text"
    with pytest.raises(ReplyError):
        turn.parse("<tool_call>\n<function=nope>\n</function>\n</tool_call>")
    assert turn.parse("<tool_call>\n<function=nope>", partial=True) == AssistantMessage()


def test_openai_chunk_deltas() -> None:
    turn = _turn("Qwen3.5-4B.jinja", True, True, "deepseek")
    stream = turn.stream()
    deltas = stream.feed("Let me see.\n</think>\n\nSure." + CALL) + stream.finish().deltas
    chunks = [d.to_openai() for d in deltas]
    assert chunks[0] == {"role": "assistant", "reasoning_content": "Let me see.\n"}
    assert chunks[1] == {"content": "Sure."}
    call = chunks[2]["tool_calls"][0]
    assert call["index"] == 0 and call["type"] == "function" and call["id"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris","days":3}'}


def test_text_llama_cpp_reads_and_keeps_nowhere_is_reported_as_skipped() -> None:
    # gpt-oss without tools: llama.cpp reads a message to a recipient and keeps none of it
    turn = Codec(template_source("openai-gpt-oss-120b.jinja")).prepare(
        [{"role": "user", "content": "Weather in Paris?"}], tools=None
    )
    reply = (
        "<|channel|>analysis<|message|>Let me check.<|end|><|start|>assistant"
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}'
    )
    message = turn.parse(reply)
    assert message.reasoning_content == "Let me check."
    assert message.content == "" and message.tool_calls == ()
    assert [(d.reason, d.text) for d in message.dropped] == [
        (
            "skipped_text",
            'functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}',
        )
    ]
    assert message.dropped[0].offset == reply.index("functions.")  # counted in the reply


def test_a_muse_glimmer_recipient_that_is_not_the_call_is_reported_as_skipped() -> None:
    # llama.cpp reads ` to=RECIPIENT<|message|>` before a call with `until` and keeps it
    # nowhere; the call's name comes from `<atem:invoke name=...>` (found by the fuzz suite)
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    turn = Codec(template_source("muse-glimmer.jinja")).prepare(
        [{"role": "user", "content": "Weather in Paris?"}], tools=[tool]
    )
    call = (
        '<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls>'
    )
    for recipient, dropped in (("get_weather", []), ("weather now", ["weather now"]), ("", [])):
        for reply in (f" to={recipient}{call}", f" to={recipient}{call[:-30]}"):
            message = turn.parse(reply)
            assert [c.name for c in message.tool_calls] == ["get_weather"], reply
            assert [(d.reason, d.text, d.offset) for d in message.dropped] == [
                ("skipped_text", text, 4) for text in dropped
            ], reply
            stream = turn.stream()
            for character in reply:
                stream.feed(character)
            assert stream.finish().message == message  # the same byte by byte


def test_a_gpt_oss_content_type_other_than_json_is_reported_as_skipped() -> None:
    # llama.cpp reads the word after `<|channel|>commentary` (`<|constrain|>json`) and keeps it
    # nowhere: `json`, what the template writes, is markup; another word is the model's text
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    turn = Codec(template_source("openai-gpt-oss-120b.jinja")).prepare(
        [{"role": "user", "content": "Weather in Paris?"}], tools=[tool]
    )
    for kind, dropped in (("json", []), ("<|constrain|>json", []), ("<|constrain|>yaml", ["yaml"])):
        reply = (
            f' to=functions.get_weather<|channel|>commentary {kind}<|message|>{{"city": "Paris"}}'
        )
        message = turn.parse(reply)
        assert [(c.name, c.arguments) for c in message.tool_calls] == [
            ("get_weather", '{"city": "Paris"}')
        ]
        assert [(d.reason, d.text, d.offset) for d in message.dropped] == [
            ("skipped_text", text, reply.index(text)) for text in dropped
        ], reply


def test_kimi_k3_call_attributes_that_are_not_attributes_are_reported_as_skipped() -> None:
    # llama.cpp reads a call's ` index="0"` and an argument's ` type="string"` with `until` and
    # keeps them nowhere: well-formed they are markup, anything else is the model's lost text
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
    turn = Codec(template_source("Kimi-K3.jinja")).prepare(
        [{"role": "user", "content": "Find Paris"}], tools=[tool]
    )

    def reply(index: str, kind: str) -> str:
        return (
            "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
            f'<|open|>tools<|sep|><|open|>call tool="search"{index}<|sep|>'
            f'<|open|>argument key="query"{kind}<|sep|>Paris<|close|>argument<|sep|>'
            "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
        )

    well_formed = turn.parse(reply(' index="0"', ' type="string"'))
    assert well_formed.dropped == ()
    for index, kind in ((' index=zero"0"', " type=string"), (' index="0"x', ' type="str\nok"')):
        text = reply(index, kind)
        odd = turn.parse(text)
        assert odd.tool_calls == well_formed.tool_calls
        assert [(d.reason, d.text, d.offset) for d in odd.dropped] == [
            ("skipped_text", index, text.index(" index")),
            ("skipped_text", kind, text.index(" type")),
        ]


@pytest.mark.parametrize(
    "template", ["meta-llama-Llama-3.1-8B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja"]
)
@pytest.mark.parametrize("text", ['"42"\n', '{"a": [1, 2]}  \n', '```json\n{"a": 1}\n```\n'])
def test_a_response_format_value_that_ends_a_chunk_may_still_grow(template: str, text: str) -> None:
    """A JSON value read whole must not be taken at a chunk's end: the space after it comes next
    (llama.cpp's vector L6309 streamed in 1- and 2-character chunks failed here)."""
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    turn = Codec(template_source(template)).prepare(
        [{"role": "user", "content": "Hi"}], response_format=schema
    )
    for cut in range(len(text) + 1):
        _check(turn, text, [cut])
    _check(turn, text, list(range(len(text))))


def _failure(turn: Turn, pieces: list[str]) -> str:
    stream = turn.stream()
    try:
        for piece in pieces:
            stream.feed(piece)
        stream.finish()
    except ReplyError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize(
    "template",
    [
        "Qwen-Qwen3-0.6B.jinja",
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "openai-gpt-oss-120b.jinja",
        "LFM2-8B-A1B.jinja",
        "Cohere2MoE.jinja",
        "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    ],
)
def test_a_failed_reply_fails_with_the_same_error_in_every_chunking(template: str) -> None:
    """Issue 8: the ReplyError (its reason and offset) must not depend on the chunking (a
    response-format value followed by text failed at offset 9 whole, 8 byte by byte)."""
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    turn = Codec(template_source(template)).prepare(
        [{"role": "user", "content": "Hi"}], response_format=schema
    )
    replies = ['{"a": 1} x', '{"a": 1}\n\nmore', '"42" extra', '<think>hm</think>{"a": 1} z', "x"]
    for text in replies:
        whole = _failure(turn, [text])
        assert _failure(turn, list(text)) == whole, text
        for cut in range(len(text) + 1):
            assert _failure(turn, [text[:cut], text[cut:]]) == whole, (text, cut)


def _finished_call(output: dict[str, Any]) -> bool:
    return not output["is_partial"] and bool((output.get("expected") or {}).get("tool_calls"))


@pytest.mark.parametrize(
    "template", ["meta-llama-Llama-3.3-70B-Instruct.jinja", "deepseek-ai-DeepSeek-V3.2.jinja"]
)
def test_a_reply_can_fail_after_its_call_was_announced(template: str) -> None:
    """The documented contract (docs/decoding.md): a call announced is final as a call, but
    text the format forbids after it fails the reply at finish(), as the parse fails."""
    from ._reply_oracle import corpus_cases, prepare_request

    case = next(
        c
        for c in corpus_cases()
        if c["template"] == template
        and c.get("tools")
        and any(_finished_call(o) for o in c["outputs"])
    )
    output = next(o for o in case["outputs"] if _finished_call(o))
    turn = prepare_request(case)
    called = turn.parse(output["text"])
    assert called.tool_calls
    text = output["text"] + "\nTrailing words."
    with pytest.raises(ReplyError):
        turn.parse(text)
    stream = turn.stream()
    deltas = [d for ch in text for d in stream.feed(ch)]
    announced = [d.tool_call for d in deltas if d.tool_call is not None]
    assert announced and announced[0].name == called.tool_calls[0].name
    with pytest.raises(ReplyError):
        stream.finish()


@pytest.mark.parametrize(
    ("template", "messages", "reply", "content", "skipped"),
    [
        # thinking off: a thought the model writes anyway is read and dropped, and said so
        (
            "MiniMax-M3.jinja",
            [],
            "<mm:think>I think</mm:think>Answer",
            "Answer",
            "<mm:think>I think</mm:think>",
        ),
        # a thought that never closes takes the whole reply with it
        ("MiniMax-M3.jinja", [], "<mm:think>lost forever", "", "<mm:think>lost forever"),
        # a continued reasoning prefill with thinking off: the model's text goes with it
        (
            "deepseek-ai-DeepSeek-V3.2.jinja",
            [{"role": "assistant", "reasoning_content": "I was thinking"}],
            " more thoughts</think>Answer",
            "Answer",
            " more thoughts</think>",
        ),
        (
            "MiniMax-M3.jinja",
            [{"role": "assistant", "reasoning_content": "I was thinking"}],
            " and so on",
            "",
            " and so on",
        ),
        # the generation prompt's own closed thought is the prompt's, not dropped model text
        ("deepseek-ai-DeepSeek-V3.2.jinja", [], "Plain", "Plain", ""),
    ],
)
def test_a_dropped_thought_is_reported_as_skipped_text(
    template: str, messages: list[dict[str, Any]], reply: str, content: str, skipped: str
) -> None:
    """Issue 8: with thinking off llama.cpp reads a thought and keeps it nowhere; the message
    is llama.cpp's, and ``dropped`` names the text (never the generation prompt's)."""
    turn = Codec(template_source(template)).prepare(
        [{"role": "user", "content": "hi"}, *messages], enable_thinking=False
    )
    message = turn.parse(reply)
    assert message.content == content and message.reasoning_content == ""
    reported = [(d.text, d.reason, d.offset) for d in message.dropped]
    assert reported == ([(skipped, "skipped_text", 0)] if skipped else [])
    for cut in range(len(reply) + 1):
        _check(turn, reply, [cut])
    _check(turn, reply, list(range(len(reply))))


def test_kimi_k3_reports_text_it_reads_past_in_a_header() -> None:
    """Issue 8: llama.cpp reads past anything between a Kimi K3 header's name and ``<|sep|>``;
    the attributes the template writes are markup, other text there is reported as skipped,
    in every chunking."""
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    turn = Codec(template_source("Kimi-K3.jinja")).prepare(
        [{"role": "user", "content": "hi"}], tools=[tool]
    )
    reply = (
        '<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1" junk'
        '<|sep|><|open|>argument key="city" type="string"LOST<|sep|>Paris<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|>"
    )
    message = turn.parse(reply)
    assert [(c.name, c.arguments) for c in message.tool_calls] == [
        ("get_weather", '{"city":"Paris"}')
    ]
    # the header's text is reported whole where it is not what the template writes
    assert [(d.text, d.reason, d.offset) for d in message.dropped] == [
        (' index="1" junk', "skipped_text", reply.index(' index="1" junk')),
        (' type="string"LOST', "skipped_text", reply.index(' type="string"LOST')),
    ]
    clean = reply.replace(" junk", "").replace("LOST", "")
    assert turn.parse(clean).dropped == ()  # attributes alone are markup
    for cut in range(len(reply) + 1):
        _check(turn, reply, [cut])
    _check(turn, reply, list(range(len(reply))))


@pytest.mark.parametrize(
    ("template", "reply"),
    [
        (
            "Qwen-Qwen3-0.6B.jinja",
            '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n</tool_call>',
        ),
        (
            "meta-llama-Llama-3.2-3B-Instruct.jinja",
            '{"name": "get_weather", "parameters": "{\\"city\\": \\"Paris\\"}"}',
        ),
        (
            "Qwen-Qwen3-0.6B.jinja",
            '<tool_call>\n{"name": "get_weather", "arguments": 42}\n</tool_call>',
        ),
    ],
)
def test_arguments_that_are_not_an_object_are_reported_not_silently_emptied(
    template: str, reply: str
) -> None:
    """Issue 8: llama.cpp reads a call's arguments only as an object; written as a JSON string
    (or a number) the call gets ``{}``, as llama.cpp's does, and ``dropped`` names the text."""
    turn = Codec(template_source(template)).prepare(
        [{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS
    )
    message = turn.parse(reply)
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("get_weather", "{}")]
    unread = reply[reply.index(": ", reply.index('"get_weather"')) + 2 :].rsplit("}", 1)[0]
    assert [(d.text, d.reason, d.offset) for d in message.dropped] == [
        (unread, "unread_arguments", reply.index(unread))
    ]
    for cut in range(0, len(reply) + 1, 3):
        _check(turn, reply, [cut])
    _check(turn, reply, list(range(len(reply))))
