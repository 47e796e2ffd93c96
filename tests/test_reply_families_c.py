"""Ministral/Magistral/Devstral, LFM2, LFM2.5 and Cohere2 MoE: parity with llama.cpp's corpus
and test vectors, and stream = parse over random chunkings of the corpus replies."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from functools import lru_cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatcodec import Codec, ReplyError
from chatcodec.reply import AssistantMessage, Delta, ReplyStream, fold
from chatcodec.reply.cli import batch_result, prepare_request
from chatcodec.reply.select import describe
from chatcodec.reply.turn import Turn

from ._reply_oracle import load_compare
from .conftest import read_jsonl, shared_path, template_source
from .test_reply_vectors import _messages, _openai_tools

HANDLERS = {
    "Ministral/Magistral Large 3": "ministral-3",
    "LFM2": "lfm2",
    "LFM2.5": "lfm2.5",
    "Cohere2 MoE": "cohere2moe",
}
# outputs per handler in the developer corpus (all must match llama.cpp)
EXPECTED_OUTPUTS = {
    "Ministral/Magistral Large 3": 757,
    "LFM2": 420,
    "LFM2.5": 742,
    "Cohere2 MoE": 377,
}


@lru_cache(maxsize=1)
def _cases() -> tuple[dict[str, Any], ...]:
    cases = read_jsonl(shared_path("oracle", "parse", "cases.jsonl"))
    return tuple(c for c in cases if (c["llama_cpp"] or {}).get("handler") in HANDLERS)


def test_corpus_parity_per_handler() -> None:
    compare = load_compare()
    tally: Counter[tuple[str, bool]] = Counter()
    failures: list[str] = []
    for case in _cases():
        handler = case["llama_cpp"]["handler"]
        results = batch_result(case)["results"]
        for i, (output, result) in enumerate(zip(case["outputs"], results, strict=True)):
            why = compare.compare_output(output, result)
            tally[(handler, why is None)] += 1
            if why is not None:
                failures.append(f"{case['id']} [{i} {output['kind']}]: {why}")
    report = {h: f"{tally[(h, True)]}/{tally[(h, True)] + tally[(h, False)]}" for h in HANDLERS}
    print("\nparse parity (families c):\n" + json.dumps(report, indent=1))
    for handler, count in EXPECTED_OUTPUTS.items():
        assert tally[(handler, True)] + tally[(handler, False)] == count, handler
    assert not failures, "\n".join(failures[:20])


def test_cohere_ids_come_from_the_reply() -> None:
    """Cohere2's ``tool_call_id`` is the call's id (the corpus does not compare ids)."""
    seen = 0
    for case in _cases():
        if case["llama_cpp"]["handler"] != "Cohere2 MoE":
            continue
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


def _vectors() -> list[dict[str, Any]]:
    path = shared_path("oracle", "parse", "llamacpp_tests.json")
    parsers = set(HANDLERS.values())
    return [v for v in json.loads(path.read_text("utf-8")) if v["parser"] in parsers]


def _turn(v: dict[str, Any]) -> Turn:
    codec = Codec(template_source(v["template"].rsplit("/", 1)[-1]), bos_token="", eos_token="")
    messages = _messages(v["messages"])
    if v["continue_final_message"] != "none":
        # llama.cpp renders without the continued message and prefills it itself
        messages = messages[:-1]
    return codec.prepare(
        messages,
        tools=_openai_tools(v["tools"]),
        tool_choice=v["tool_choice"],
        parallel_tool_calls=v["parallel_tool_calls"],
        enable_thinking=v["enable_thinking"],
        reasoning_format=v["reasoning_format"],
    )


def _run_vector(v: dict[str, Any], turn: Turn) -> str | None:
    compare = load_compare()
    observed = v["observed_llama_cpp"]
    # a continued message is prefilled into the generation prompt (llama.cpp builds it by hand)
    stream = ReplyStream(turn.format, observed["generation_prompt"])
    got = stream.feed(v["input"])
    got += stream.flush()
    message = stream.finish(partial=v["is_partial"])
    why: str | None = compare.compare(observed, message.to_dict())
    if why is None:
        why = compare.compare(observed, fold(got).to_dict())
    if why is None and any(c.get("id") for c in observed["tool_calls"]):
        if [c.id for c in message.tool_calls] != [c["id"] for c in observed["tool_calls"]]:
            why = "ids differ"
    return why


def test_llama_cpp_vectors() -> None:
    vectors = [v for v in _vectors() if v["json_schema"] is None]
    assert len(vectors) == 76
    failures: list[str] = []
    for v in vectors:
        turn = _turn(v)
        assert HANDLERS[turn.handler] == v["parser"], v["id"]
        if v["continue_final_message"] == "none":
            assert turn.generation_prompt == v["observed_llama_cpp"]["generation_prompt"], v["id"]
        why = _run_vector(v, turn)
        if why is not None:
            failures.append(f"{v['id']}: {why}")
    assert not failures, "\n".join(failures)


def test_response_format_vectors() -> None:
    """The vectors that set a response format (``json_schema``), read through ``describe``
    (``Codec.prepare`` takes no response format yet)."""
    vectors = [v for v in _vectors() if v["json_schema"] is not None]
    assert len(vectors) == 2
    for v in vectors:
        turn = _turn(v)
        fmt = describe(
            template_source(v["template"].rsplit("/", 1)[-1]),
            turn.generation_prompt,
            tools=_openai_tools(v["tools"]),
            tool_choice=v["tool_choice"],
            parallel_tool_calls=v["parallel_tool_calls"],
            reasoning_format=v["reasoning_format"],
            json_schema=v["json_schema"],
        )
        assert _run_vector(v, replace(turn, format=fmt)) is None, v["id"]


def test_response_format_content_is_one_json_value() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}

    def turn(template: str, tools: Any = None) -> Turn:
        codec = Codec(template_source(template), bos_token="", eos_token="")
        base = codec.prepare([{"role": "user", "content": "JSON?"}], tools=tools)
        fmt = describe(codec.template.source, base.generation_prompt, tools, json_schema=schema)
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
    _check(lfm, text, [text[i : i + 2] for i in range(0, len(text), 2)])
    with pytest.raises(ReplyError):
        lfm.parse(text + " trailing")
    cohere = turn("Cohere2MoE.jinja", WEATHER)
    assert cohere.parse("t<|END_THINKING|><|START_TEXT|>[1]<|END_TEXT|>").content == "[1]"


# ------------------------------------------------------------------ stream = parse


@lru_cache(maxsize=1)
def _replies() -> tuple[tuple[int, str], ...]:
    """(case index, reply) for every finished reply of the corpus (errors included)."""
    out = []
    for i, case in enumerate(_cases()):
        for output in case["outputs"]:
            if output["kind"] in ("final", "truncated"):
                out.append((i, output["text"]))
    return tuple(out)


def _stream(turn: Turn, pieces: list[str], expected: AssistantMessage) -> list[Delta]:
    stream = turn.stream()
    deltas: list[Delta] = []
    content = reasoning = ""
    for piece in pieces:
        for delta in stream.feed(piece):
            deltas.append(delta)
            content += delta.content
            reasoning += delta.reasoning_content
            # monotonic: what was sent is a prefix of the finished message
            assert expected.content.startswith(content)
            assert expected.reasoning_content.startswith(reasoning)
            if delta.tool_call is not None:
                sent = expected.tool_calls[delta.tool_call.index]
                assert (delta.tool_call.name, delta.tool_call.arguments) == (
                    sent.name,
                    sent.arguments,
                )
    deltas += stream.flush()
    assert stream.finish() == expected
    return deltas


def _check(turn: Turn, text: str, pieces: list[str]) -> None:
    try:
        expected = turn.parse(text)
    except ReplyError:
        stream = turn.stream()
        for piece in pieces:
            stream.feed(piece)
        with pytest.raises(ReplyError):
            stream.finish()
        return
    folded = fold(_stream(turn, pieces, expected))
    assert folded.content == expected.content
    assert folded.reasoning_content == expected.reasoning_content
    assert folded.tool_calls == expected.tool_calls


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_folds_to_the_finished_parse(data: st.DataObject) -> None:
    index, text = data.draw(st.sampled_from(_replies()))
    turn = prepare_request(_cases()[index])
    cuts = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    _check(turn, text, pieces)


@pytest.mark.parametrize("size", [1, 3])
def test_every_corpus_reply_streams_to_its_parse(size: int) -> None:
    for index, text in _replies():
        turn = prepare_request(_cases()[index])
        _check(turn, text, [text[i : i + size] for i in range(0, len(text), size)])


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
    """Linear streaming: a Ministral call is re-parsed when its braces balance or its text
    doubles, not for every ``}`` inside its strings or nested objects."""
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
        message = stream.finish()
    finally:
        object.__delattr__(section.first, "parse")
    assert json.loads(message.tool_calls[0].arguments)["city"] == city
    assert counted["n"] < 40
