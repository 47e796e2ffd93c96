"""Stream = parse, for every template of the parse corpus (../shared/chat_templates).

For each template: draw one of its corpus requests and finished replies, cut the reply at
random, and feed the pieces through ``turn.stream()``. The deltas fold to the finished parse,
content and reasoning only ever extend, each tool call's id and name are announced once and
never change (its arguments then only extend), and a reply that fails to parse fails the
same way when streamed. The one documented exception: a call announced while the model wrote
it that the parse then drops or reads otherwise fails the stream with StreamedCallError
(llama.cpp's server ends such a stream with an error); checked to happen only then.
"""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatcodec.errors import ChatCodecError, StreamedCallError
from chatcodec.reply import AssistantMessage, Delta, Turn, fold

from ._reply_invariants import contradicts
from ._reply_oracle import (
    PARSE_CASES,
    cases_by_template,
    chunks,
    cut,
    handler_cases,
    per_case,
    prepare_request,
    same_message,
)


def _corpus_templates() -> list[str]:
    """The templates of the parse corpus (the corpus is read once, shared with parse parity)."""
    return sorted(cases_by_template())


@cache
def _samples(template: str) -> tuple[tuple[Turn, str], ...]:
    """(turn, finished reply) of every corpus request of ``template`` that can be set up."""
    out: list[tuple[Turn, str]] = []
    for case in cases_by_template()[template]:
        if case["llama_cpp"] is None:
            continue
        try:
            turn = prepare_request(case)
        except ChatCodecError:  # a request transformers cannot render (counted by parse parity)
            continue
        out.extend(
            (turn, output["text"])
            for output in case["outputs"]
            if output["kind"] in ("final", "truncated")
        )
    return tuple(out)


def _parse(turn: Turn, text: str) -> AssistantMessage | ChatCodecError:
    try:
        return turn.parse(text)
    except ChatCodecError as exc:
        return exc


def _stream(
    turn: Turn, pieces: list[str]
) -> tuple[list[Delta], AssistantMessage | StreamedCallError]:
    """The deltas (the finish's included) and the finished message, checking every delta;
    or the deltas sent and the StreamedCallError of a call announced while it was written
    that did not parse as sent."""
    stream = turn.stream()
    deltas: list[Delta] = []
    announced: dict[int, tuple[str, str]] = {}

    def check(step: list[Delta]) -> None:
        for delta in step:
            # the role comes once, with the first delta of the stream
            assert bool(delta.role) == (not deltas), f"role {delta.role!r} on delta {len(deltas)}"
            deltas.append(delta)
            call = delta.tool_call
            if call is None:
                continue
            if call.index in announced:
                # announced once: later deltas of the call carry argument text only
                assert (call.id, call.name) == ("", ""), f"call {call.index} announced again"
            else:
                assert call.name, f"call {call.index} starts without its name"
                announced[call.index] = (call.id, call.name)

    for piece in pieces:
        check(stream.feed(piece))
    try:
        last, message = stream.finish()
    except StreamedCallError as exc:
        return deltas, exc
    check(last)
    assert deltas and deltas[0].role == "assistant"
    return deltas, message


def _announced_as_finished(deltas: list[Delta], expected: AssistantMessage) -> None:
    """The id and name a call is announced with are the finished call's, and its arguments
    so far a prefix of the finished call's."""
    for delta in deltas:
        if delta.tool_call is not None and delta.tool_call.name:
            call = expected.tool_calls[delta.tool_call.index]
            assert (delta.tool_call.id, delta.tool_call.name) == (call.id, call.name)
            assert call.arguments.startswith(delta.tool_call.arguments)


@pytest.mark.parametrize(
    "template", per_case(PARSE_CASES.exists(), _corpus_templates, lambda template: template)
)
def test_any_chunking_folds_to_the_finished_parse(template: str) -> None:
    samples = _samples(template)
    assert samples, f"no corpus request of {template} can be set up"

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        turn, text = data.draw(st.sampled_from(samples), label="request and reply")
        cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12), label="cuts")
        pieces = cut(text, cuts)
        expected = _parse(turn, text)
        if isinstance(expected, ChatCodecError):
            with pytest.raises(type(expected)) as failed:
                _stream(turn, pieces)
            assert str(failed.value) == str(expected)
            return
        deltas, message = _stream(turn, pieces)
        if isinstance(message, StreamedCallError):  # only where the parse contradicts a call
            assert contradicts(deltas, expected), (pieces, expected)
            return
        assert message == expected
        # content and reasoning only extend: what was sent is a prefix of the finished field
        content = reasoning = ""
        for delta in deltas:
            content += delta.content
            reasoning += delta.reasoning_content
            assert expected.content.startswith(content)
            assert expected.reasoning_content.startswith(reasoning)
        folded = fold(deltas)
        assert same_message(folded, expected), (folded, expected)
        _announced_as_finished(deltas, expected)

    check()


# ------------------------------------------------------------------ every reply, fixed chunks

# the dedicated handlers: every finished reply of their corpus cases, streamed in fixed chunks
FIXED_CHUNKS: dict[str, tuple[int, ...]] = {
    "Kimi K2 Thinking": (1,),
    "Kimi K3": (1,),
    "Ling 3.0 (Bailing V3)": (1,),
    "MiniMax-M3": (1,),
    "DeepSeek V3.2/V4": (1,),
    "MiniCPM5": (1,),
    "GPT-OSS": (1, 2, 5),
    "Gemma4 (inferred from format)": (1, 2, 5),
    "Muse Glimmer": (1, 2, 5),
    "Functionary v3.2": (1, 2, 5),
    "GigaChatV3": (1, 2, 5),
    "Ministral/Magistral Large 3": (1, 3),
    "LFM2": (1, 3),
    "LFM2.5": (1, 3),
    "Cohere2 MoE": (1, 3),
}


@pytest.mark.parametrize(
    ("handler", "size"), [(h, size) for h, sizes in FIXED_CHUNKS.items() for size in sizes]
)
def test_every_finished_reply_streams_to_its_parse(handler: str, size: int) -> None:
    streamed = 0
    for case in handler_cases(handler):
        try:
            turn = prepare_request(case)
        except ChatCodecError:  # a request transformers cannot render (counted by parse parity)
            continue
        for output in case["outputs"]:
            if output["kind"] not in ("final", "truncated"):
                continue
            text = output["text"]
            expected = _parse(turn, text)
            if isinstance(expected, ChatCodecError):
                with pytest.raises(type(expected)):
                    _stream(turn, chunks(text, size))
                continue
            deltas, message = _stream(turn, chunks(text, size))
            if isinstance(message, StreamedCallError):  # (see above)
                assert contradicts(deltas, expected), (case["id"], text)
                continue
            assert message == expected, (case["id"], text)
            assert same_message(fold(deltas), expected), (case["id"], text)
            _announced_as_finished(deltas, expected)
            streamed += 1
    assert streamed > 0
