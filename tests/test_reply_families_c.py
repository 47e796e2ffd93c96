"""Ministral/Magistral/Devstral, LFM2, LFM2.5 and Cohere2 MoE: what the corpus and the vector
runs (test_parse_parity, test_reply_vectors) do not compare, and behaviour pinned by hand; the
fenced response format of DeepSeek V3.2/V4, MiniMax-M3 and Gemma 4."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from chatcodec import Codec, ReplyError
from chatcodec.batch import prepare_request
from chatcodec.reply import ReplyStream, fold
from chatcodec.reply.cursor import PREVIEW_WINDOW
from chatcodec.reply.request import ReplyRequest
from chatcodec.reply.select import describe
from chatcodec.reply.turn import Turn

from ._reply_oracle import (
    chunks,
    handler_cases,
    load_compare,
    openai_tools,
    prepare_vector,
    same_message,
    vector_template,
    vectors,
)
from .conftest import template_source


def test_cohere_ids_come_from_the_reply() -> None:
    """Cohere2's ``tool_call_id`` is the call's id (the corpus does not compare ids)."""
    seen = 0
    for case in handler_cases("Cohere2 MoE"):
        turn = prepare_request(case)
        for output in case["outputs"]:
            calls = (output.get("expected") or {}).get("tool_calls") or []
            if not calls or any("id" not in c for c in calls):
                continue
            message = turn.parse(output["text"], partial=output["is_partial"])
            assert [c.id for c in message.tool_calls] == [c["id"] for c in calls], case["id"]
            seen += 1
    assert seen > 20


# ------------------------------------------------------------------ llama.cpp's test vectors


def _turn(v: dict[str, Any]) -> Turn:
    """The turn llama.cpp's handler gets: without a continued message (it prefills that)."""
    if v["continue_final_message"] != "none":
        v = {**v, "messages": v["messages"][:-1]}
    return prepare_vector(v)


def test_response_format_vectors() -> None:
    """The vectors that set a response format (``json_schema``), read through ``describe``
    (the format ``Codec.prepare`` builds from a ``response_format``)."""
    compare = load_compare()
    parsers = {"ministral-3", "lfm2", "lfm2.5", "cohere2moe"}
    with_schema = [v for v in vectors() if v["parser"] in parsers and v["json_schema"]]
    assert len(with_schema) == 2
    for v in with_schema:
        turn = _turn(v)
        fmt = describe(
            ReplyRequest(
                vector_template(v),
                turn.generation_prompt,
                tools=openai_tools(v["tools"]),
                tool_choice=v["tool_choice"],
                parallel_tool_calls=v["parallel_tool_calls"],
                reasoning_format=v["reasoning_format"],
                json_schema=v["json_schema"],
            )
        )
        observed = v["observed_llama_cpp"]
        # a continued message is prefilled into the generation prompt (llama.cpp builds it)
        stream = ReplyStream(fmt, observed["generation_prompt"])
        deltas = stream.feed(v["input"])
        last, message = stream.finish(partial=v["is_partial"])
        deltas += last
        assert compare.compare(observed, message.to_dict()) is None, v["id"]
        assert compare.compare(observed, fold(deltas).to_dict()) is None, v["id"]
        ids = [c.get("id") for c in observed["tool_calls"]]
        assert not any(ids) or [c.id for c in message.tool_calls] == ids, v["id"]


def test_response_format_content_is_one_json_value() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}

    def turn(template: str, tools: Any = None) -> Turn:
        codec = Codec(template_source(template), bos_token="", eos_token="")
        base = codec.prepare([{"role": "user", "content": "JSON?"}], tools=tools)
        request = ReplyRequest(
            codec.template.source, base.generation_prompt, tools, json_schema=schema
        )
        fmt = describe(request)
        return replace(base, format=fmt)

    mistral = turn("mistralai-Ministral-3-14B-Reasoning-2512.jinja", WEATHER)
    message = mistral.parse('[THINK]t[/THINK]\n```json\n{"a": 1}\n```\nDone.')
    assert (message.reasoning_content, message.content) == ("t", '{"a": 1}')
    assert [d.reason for d in message.dropped] == ["trailing_text"]
    assert mistral.parse('```json\n{"a": ', partial=True).content == '{"a": '
    with pytest.raises(ReplyError):
        mistral.parse("Sure: {}")
    lfm = turn("LFM2-8B-A1B.jinja")
    text = '{"a": [1, 2], "b": "x"}'
    assert lfm.parse(text).content == text
    _check(lfm, text, chunks(text, 2))
    with pytest.raises(ReplyError):
        lfm.parse(text + " trailing")
    cohere = turn("Cohere2MoE.jinja", WEATHER)
    assert cohere.parse("t<|END_THINKING|><|START_TEXT|>[1]<|END_TEXT|>").content == "[1]"


def _check(turn: Turn, text: str, pieces: list[str]) -> None:
    """The pieces streamed fold to the finished parse, and finish as it."""
    expected = turn.parse(text)
    stream = turn.stream()
    deltas = [d for piece in pieces for d in stream.feed(piece)]
    last, message = stream.finish()
    assert message == expected
    deltas += last
    assert same_message(fold(deltas), expected)


# ------------------------------------------------------------------ behaviour pinned by hand

WEATHER = [
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
    }
]


def _prepare(template: str, **options: Any) -> Turn:
    codec = Codec(template_source(template), bos_token="", eos_token="")
    return codec.prepare([{"role": "user", "content": "Weather?"}], tools=WEATHER, **options)


def test_ministral_drops_what_llama_cpp_drops_and_says_why() -> None:
    turn = _prepare("mistralai-Ministral-3-14B-Reasoning-2512.jinja", parallel_tool_calls=False)
    call = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
    message = turn.parse(call + call + " and more")
    assert [c.arguments for c in message.tool_calls] == ['{"city": "Paris"}']
    assert [d.reason for d in message.dropped] == ["parallel_limit"]
    message = turn.parse('Sure.[TOOL_CALLS]delete[ARGS]{"x": 1}')
    assert message.content == "Sure." and not message.tool_calls
    assert [d.reason for d in message.dropped] == ["unknown_tool"]


def test_lfm2_python_arguments_become_json() -> None:
    turn = _prepare("LFM2-8B-A1B.jinja")
    reply = "<|tool_call_start|>[get_weather(city='Rome', days=None)]<|tool_call_end|>"
    (call,) = turn.parse(reply).tool_calls
    assert json.loads(call.arguments) == {"city": "Rome", "days": None}
    with pytest.raises(ReplyError):  # the section must end the reply
        turn.parse(reply + " done")


def test_cohere_needs_text_or_action_blocks() -> None:
    turn = _prepare("Cohere2MoE.jinja")
    assert turn.parse("hm<|END_THINKING|><|START_TEXT|>Hi<|END_TEXT|>").content == "Hi"
    with pytest.raises(ReplyError):
        turn.parse("hm<|END_THINKING|>Hi")
    inline = _prepare("Cohere2MoE.jinja", reasoning_format="none")
    message = inline.parse("hm<|END_THINKING|><|START_TEXT|>Hi")
    assert message.content == "<|START_THINKING|>hm<|END_THINKING|>Hi"


def test_json_call_arguments_are_parsed_a_bounded_number_of_times() -> None:
    """Linear streaming: a Ministral call is re-parsed on every chunk only while its text is
    within PREVIEW_WINDOW characters (so that its arguments stream), then when its braces
    balance or its text doubles, not for every ``}`` inside its strings or nested objects."""
    turn = _prepare("mistralai-Ministral-3-14B-Reasoning-2512.jinja")
    section = turn.format.calls
    assert section is not None
    counted = {"n": 0}
    original = section.first.parse

    def counting(text: str, pos: int) -> Any:
        counted["n"] += 1
        return original(text, pos)

    object.__setattr__(section.first, "parse", counting)
    try:
        city = "".join("{a}" for _ in range(2000))
        nested = "".join('{"k": ' for _ in range(50)) + "1" + "}" * 50
        reply = f'[TOOL_CALLS]get_weather[ARGS]{{"city": "{city}", "n": {nested}}}'
        stream = turn.stream()
        for ch in reply:
            stream.feed(ch)
        message = stream.finish().message
    finally:
        object.__delattr__(section.first, "parse")
    assert json.loads(message.tool_calls[0].arguments)["city"] == city
    assert counted["n"] < PREVIEW_WINDOW + 40


FENCED_ANSWER = '{"answer": "U", "kind": "fact"}'


@pytest.mark.parametrize(
    ("template", "bos", "eos", "thought"),
    [
        (
            "deepseek-ai-DeepSeek-V3.2.jinja",
            "<｜begin▁of▁sentence｜>",
            "<｜end▁of▁sentence｜>",
            "hm</think>",
        ),
        ("MiniMax-M3.jinja", "]~!b[", "[e~[", "<mm:think>hm</mm:think>"),
        # empty channels before the thought are passed over
        (
            "google-gemma-4-31B-it.jinja",
            "<bos>",
            "<eos>",
            "<|channel><|channel>thought\nhm<channel|>",
        ),
    ],
)
def test_a_response_format_is_read_inside_its_fence(
    template: str, bos: str, eos: str, thought: str
) -> None:
    """DeepSeek V3.2/V4, MiniMax-M3 and Gemma 4 read a response format's JSON fenced in
    ```json after the thought, the value alone the content, as llama.cpp's parse of these
    replies does (checked with its oracle); a bare value fails."""
    codec = Codec(template_source(template), bos_token=bos, eos_token=eos)
    schema = {"type": "object"}
    turn = codec.prepare(
        [{"role": "user", "content": "Hi"}],
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    )
    reply = f"{thought}```json {FENCED_ANSWER}```"
    message = turn.parse(reply)
    assert (message.reasoning_content, message.content) == ("hm", FENCED_ANSWER)
    for size in (1, 3):
        _check(turn, reply, chunks(reply, size))
    with pytest.raises(ReplyError):
        turn.parse(f"{thought}{FENCED_ANSWER}")
