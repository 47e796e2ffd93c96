"""Issue 38, guarantee 2: under the ``guaranteed`` policy a reply is never an error.

A reply that llama.cpp reads reads the same. One that it does not read keeps what was read;
the text from where reading stopped becomes content (no call had started there), dropped
``trailing_text`` (after calls) or dropped ``invalid_call`` (a call had started there).
Only a call already announced in a stream can still fail it (``StreamedCallError``).
The decoder's other promises hold as under ``reference``: stream = parse in any chunking,
deltas are final, and no text is lost that ``dropped`` does not name.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatcodec import Codec, ReplyError, StreamedCallError
from chatcodec.reply import AssistantMessage, Turn
from chatcodec.reply.description import Calls, Thought

from ._hypothesis import SEEDED
from ._reply_invariants import SENTINEL, check_reply, parse, reply_markers, sentinel
from .test_fuzz_replies import TEMPLATES, _mutate, _replies

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "chat_templates"
OWN = ROOT / "dev" / "templates"
# the project's own templates the prose test runs on without ../shared
OWN_TEMPLATES = (
    "ggml-org-llama.cpp-test-chat-template-Llama-3.jinja",
    "ggml-org-llama.cpp-llama-cpp-lfm2.jinja",
    "ggml-org-llama.cpp-glm_4_5.jinja",
    "ggml-org-llama.cpp-mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja",
    "ggml-org-llama.cpp-nvidia-Llama-3_3-Nemotron-Super-49B-v1_5.jinja",
)
# replies per template (prose), half the mutants per family; CHATCODEC_FUZZ for a long run
EXAMPLES = int(os.environ.get("CHATCODEC_FUZZ", "12"))
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def guaranteed(turn: Turn) -> Turn:
    """``turn`` read under the guaranteed policy."""
    return replace(turn, format=replace(turn.format, policy="guaranteed"))


def _template_paths() -> list[Path]:
    shared = sorted(SHARED.glob("*.jinja")) if SHARED.is_dir() else []
    return shared + [OWN / name for name in OWN_TEMPLATES if (OWN / name).is_file()]


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}}


@cache
def _turn(path: Path, value: bool = False, policy: str = "guaranteed") -> Turn | None:
    """A guaranteed turn of the template with one tool offered, or (``value``) a response
    format asked for; None where the template cannot render the request."""
    try:
        codec = Codec(path.read_text())
        return codec.prepare(
            [{"role": "user", "content": "hi"}],
            None if value else TOOLS,
            response_format=RESPONSE_FORMAT if value else None,
            tool_call_id=7,
            policy=policy,
        )
    except Exception:  # a template that cannot render this request is not this test's subject
        return None


def _named(name: str, value: bool = False, policy: str = "guaranteed") -> Turn:
    path = SHARED / name if (SHARED / name).is_file() else OWN / name
    if not path.is_file():
        pytest.skip(f"{name} is not here (../shared is absent)")
    turn = _turn(path, value, policy)
    assert turn is not None, name
    return turn


def _markers(turn: Turn) -> list[str]:
    found = set(reply_markers(turn))
    calls = turn.format.find(Calls)
    if calls is not None:
        found.update(calls.section.openers)
    return sorted(m for m in found if m)


# ------------------------------------------------------------------ the property


PROSE = st.lists(
    st.sampled_from(
        [" ", "\n", "Use", "braces", "like", "{", "}", "[", "]", "<", ">", '"', ":", ",", ";"]
        + ['{"', "{this}", "[1, 2", "<b>", "</", "get_weather", '"name"', "é", "🚀", "\\"]
    )
    | st.integers(0, 999).map(lambda n: f" {sentinel(n)} "),
    min_size=1,
    max_size=14,
)


@pytest.mark.parametrize("value", [False, True], ids=["tools", "response_format"])
@pytest.mark.parametrize("path", _template_paths(), ids=lambda p: p.name)
def test_prose_with_brackets_and_markers_never_fails(path: Path, value: bool) -> None:
    """Plain text holding ``{``, ``[``, ``<`` and the format's own call markers inside prose
    reads (never a ReplyError), streams to its parse in any chunking, and loses no text;
    with tools offered, and with a response format asked for."""
    turn = _turn(path, value)
    if turn is None:
        pytest.skip("the template cannot render a request with tools")
    markers = _markers(turn) or ["<tool_call>"]

    @settings(SEEDED, max_examples=EXAMPLES)
    @given(
        words=PROSE,
        inserts=st.lists(
            st.tuples(st.integers(0, 20), st.sampled_from(markers)), min_size=0, max_size=3
        ),
        cuts=st.lists(st.integers(0, 400), max_size=4),
    )
    def check(words: list[str], inserts: list[tuple[int, str]], cuts: list[int]) -> None:
        for at, marker in inserts:
            words.insert(min(at, len(words)), marker)
        text = "".join(words)
        message = parse(turn, text)
        assert isinstance(message, AssistantMessage), (text, message)
        points = sorted({min(c, len(text)) for c in cuts})
        pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
        check_reply(turn, text, [[text], pieces, list(text)])

    check()


# ------------------------------------------------------------------ the corpus, mutated


@pytest.mark.parametrize("template", TEMPLATES)
def test_mutated_corpus_replies_never_fail(template: str) -> None:
    """The reference fuzz's mutants of each family's corpus replies, read under guaranteed:
    every promise of ``check_reply`` holds and the parse is always a message."""
    if not SHARED.is_dir():
        pytest.skip("../shared is absent")
    replies = [(guaranteed(turn), text) for turn, text in _replies(template)]
    assert replies, f"no corpus reply for {template}"
    rng = random.Random(f"38:{template}")
    markers = {id(turn): reply_markers(turn) for turn, _ in replies}
    for _ in range(2 * EXAMPLES):
        turn, text = rng.choice(replies)
        for _ in range(rng.randrange(1, 4)):
            text = _mutate(rng, text, markers[id(turn)])
        cut = rng.randrange(len(text) + 1)
        assert isinstance(parse(turn, text), AssistantMessage), text
        check_reply(turn, text, [[text], list(text), [text[:cut], text[cut:]]])


# ------------------------------------------------------------------ the rules, one by one


LLAMA_CALL = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
QWEN_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.parametrize(
    "name", ["meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja"]
)
def test_llama_prose_with_braces_is_content(name: str) -> None:
    """llama.cpp throws on this ordinary answer (its calls are bare JSON); here it is content."""
    turn = _named(name)
    text = "Use {curly} braces like {this}."
    with pytest.raises(ReplyError):
        replace(turn, format=replace(turn.format, policy="reference")).parse(text)
    assert turn.parse(text) == AssistantMessage(content=text)
    check_reply(turn, text, [[text], list(text)])


def test_qwen3_tool_call_marker_before_garbage_is_content() -> None:
    """``<tool_call>`` and then no JSON: no call had started, so all of it is content."""
    turn = _named("Qwen-Qwen3-0.6B.jinja")
    text = "Hi <tool_call>\nnot json</tool_call> after"
    assert turn.parse(text) == AssistantMessage(content=text)
    check_reply(turn, text, [[text], list(text)])


def test_text_after_calls_in_an_anchored_format_is_dropped_trailing_text() -> None:
    """DeepSeek V3.2 forbids text after its calls: the calls are kept, the text dropped."""
    turn = _named("deepseek-ai-DeepSeek-V3.2.jinja")
    call = (
        "<｜DSML｜function_calls>\n"
        '<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n"
        "</｜DSML｜function_calls>"
    )
    text = "</think>Hi" + call + " trailing zq1x"
    message = turn.parse(text)
    assert message.content == "Hi"
    assert [(c.name, c.arguments) for c in message.tool_calls] == [
        ("get_weather", '{"city":"Paris"}')
    ]
    assert [(d.text, d.reason, d.offset) for d in message.dropped] == [
        (" trailing zq1x", "trailing_text", len(text) - len(" trailing zq1x"))
    ]
    check_reply(turn, text, [[text], list(text)])


def test_a_broken_call_after_prose_is_dropped_invalid_call() -> None:
    """The call's name was complete (a stream would have announced it), its arguments are not
    JSON: the prose before it stays content, the call and what follows are dropped."""
    turn = _named("meta-llama-Llama-3.3-70B-Instruct.jinja")
    broken = '{"name": "get_weather", "parameters": {"city": 1 2}} zq2x'
    text = "See " + broken
    message = turn.parse(text)
    assert message == AssistantMessage(
        content="See ",
        dropped=(message.dropped[0],),
    )
    assert (message.dropped[0].text, message.dropped[0].reason) == (broken, "invalid_call")
    assert message.dropped[0].offset == 4
    check_reply(turn, text, [[text], [text[:30], text[30:]]])


def test_a_broken_call_announced_in_the_stream_fails_it() -> None:
    """The one error left: the stream announced the call before it proved unreadable."""
    turn = _named("Qwen-Qwen3-0.6B.jinja")
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 1 2}}\n</tool_call>'
    assert turn.parse(text).dropped[0].reason == "invalid_call"
    stream = turn.stream()
    announced = stream.feed(text[:40])
    assert any(d.tool_call is not None for d in announced)
    stream.feed(text[40:])
    with pytest.raises(StreamedCallError):
        stream.finish()


def test_calls_before_the_failure_are_kept() -> None:
    """A good call then a broken one: the first is kept, the second dropped as invalid_call."""
    turn = _named("Qwen-Qwen3-0.6B.jinja")
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 1 2}}\n</tool_call>'
    text = QWEN_CALL + "\n" + broken
    message = turn.parse(text)
    assert [c.arguments for c in message.tool_calls] == ['{"city": "Paris"}']
    assert [(d.text, d.reason) for d in message.dropped] == [(broken, "invalid_call")]
    check_reply(turn, text, [[text], [text[: len(QWEN_CALL) + 3], text[len(QWEN_CALL) + 3 :]]])


def test_reasoning_read_before_stays_reasoning() -> None:
    """A thought read before the failure stays reasoning; the rest becomes content."""
    turn = _named("Qwen-Qwen3-0.6B.jinja")
    text = "<think>\nzq3x plan\n</think>\n\nAnswer <tool_call>\n[not, json] zq4x"
    message = turn.parse(text)
    assert message.reasoning_content == "zq3x plan\n"
    assert message.content == "Answer <tool_call>\n[not, json] zq4x"
    assert not message.dropped
    check_reply(turn, text, [[text], list(text)])


def test_gpt_oss_call_with_unreadable_arguments_is_dropped() -> None:
    """A multi-message format: a call whose header named an offered tool is an invalid call."""
    turn = _named("openai-gpt-oss-120b.jinja")
    text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"a": 1 2}'
    message = turn.parse(text + "<|call|>")
    assert [d.reason for d in message.dropped] == ["invalid_call"]
    assert not message.content and not message.tool_calls


def test_gpt_oss_text_without_a_channel_is_content() -> None:
    turn = _named("openai-gpt-oss-120b.jinja")
    text = "Hello {there} zq5x"
    assert turn.parse(text) == AssistantMessage(content=text)
    check_reply(turn, text, [[text], list(text)])


def test_reference_is_unchanged() -> None:
    """The same replies under reference still fail as llama.cpp's parser does."""
    turn = _named("Qwen-Qwen3-0.6B.jinja")
    reference = replace(turn, format=replace(turn.format, policy="reference"))
    for text in ("Hi <tool_call>\nnot json</tool_call> after", QWEN_CALL + " after"):
        with pytest.raises(ReplyError):
            reference.parse(text)
        assert SENTINEL.findall(text) == []


def test_a_response_format_value_that_is_not_json_is_content() -> None:
    """The value failed where it began: all of it is content; a fence before it is skipped."""
    turn = _named("Qwen3-Coder.jinja", value=True)
    text = '{"city": zq6x}'
    assert turn.parse(text) == AssistantMessage(content=text)
    check_reply(turn, text, [[text], list(text)])
    turn = _named("mistralai-Ministral-3-14B-Reasoning-2512.jinja", value=True)
    text = '```json\n{"city": 1 2} zq7x\n```'
    message = turn.parse(text)
    assert message.content == '{"city": 1 2} zq7x\n```'
    assert [(d.text, d.reason) for d in message.dropped] == [("```json\n", "skipped_text")]
    check_reply(turn, text, [[text], list(text)])


def test_a_thought_before_a_response_format_reads_past_tool_call() -> None:
    """Qwen3.5 opens the thought in its generation prompt. llama.cpp ends it at <tool_call>
    (the value then fails); with no call to follow, the thought reads on to </think>."""
    turn = _named("Qwen3.5-4B.jinja", value=True)
    text = 'I think <tool_call> is odd</think>\n{"city": "use <tool_call> here"}'
    with pytest.raises(ReplyError):
        _named("Qwen3.5-4B.jinja", value=True, policy="reference").parse(text)
    message = turn.parse(text)
    assert message.reasoning_content == "I think <tool_call> is odd"
    assert message.content == '{"city": "use <tool_call> here"}'
    check_reply(turn, text, [[text], list(text)])
    # a thought never closed is reasoning, as llama.cpp reads it without the marker
    open_thought = '{"city": "use <tool_call> here"}'
    assert turn.parse(open_thought).reasoning_content == open_thought


def _fenced(turn: Turn) -> bool:
    """Whether the format reads a response format's value inside a code fence."""
    try:
        return turn.parse("```json\n{}\n```").content == "{}"
    except ReplyError:
        return False


@pytest.mark.parametrize("policy", ["reference", "guaranteed"])
@pytest.mark.parametrize(
    "name",
    [
        "Qwen3-Coder.jinja",
        "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        "LFM2-8B-A1B.jinja",
        "Qwen-Qwen3-0.6B.jinja",
    ],
)
def test_a_response_format_value_streams_in_pieces(name: str, policy: str) -> None:
    """A response format's value (read whole by the format) streams as it is written: a
    delta for nearly every chunk, folding to the parse."""
    turn = _named(name, value=True, policy=policy)
    value = '{"city": "Paris", "days": [1, 2, 3], "note": "sunny \\"and\\" warm"}'
    fenced = "```json\n" + value + "\n```"
    text = fenced if _fenced(turn) else value
    if turn.format.find(Thought) is not None and "<think>" in turn.generation_prompt:
        text = "ok</think>" + text
    assert turn.parse(text).content == value
    stream = turn.stream()
    contents = [d.content for ch in text for d in stream.feed(ch) if d.content]
    end = stream.finish()
    contents += [d.content for d in end.deltas if d.content]
    assert "".join(contents) == value
    assert len(contents) > len(value) // 2, contents
    check_reply(turn, text, [[text], list(text), [text[:20], text[20:]]])


@pytest.mark.parametrize(
    "name", ["meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja"]
)
def test_llama_calls_joined_by_a_semicolon_are_two_calls(name: str) -> None:
    """Llama 3.x writes `; ` between parallel calls (vLLM's llama3_json parser splits on it);
    llama.cpp reads only a comma there and throws."""
    path = SHARED / name
    if not path.is_file():
        pytest.skip("../shared is absent")
    rome = LLAMA_CALL.replace("Paris", "Rome")
    text = LLAMA_CALL + "; " + rome
    turns = {
        policy: Codec(path.read_text()).prepare(
            [{"role": "user", "content": "hi"}],
            TOOLS,
            parallel_tool_calls=True,
            tool_call_id=7,
            policy=policy,
        )
        for policy in ("reference", "guaranteed")
    }
    with pytest.raises(ReplyError):
        turns["reference"].parse(text)
    turn = turns["guaranteed"]
    message = turn.parse(text)
    assert [c.arguments for c in message.tool_calls] == ['{"city": "Paris"}', '{"city": "Rome"}']
    assert not message.content and not message.dropped
    check_reply(turn, text, [[text], list(text)])
    # a comma reads as under reference
    comma = LLAMA_CALL + ", " + rome
    assert turn.parse(comma) == turns["reference"].parse(comma)
