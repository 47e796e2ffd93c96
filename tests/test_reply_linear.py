"""Invariant 4 (../shared/docs/DESIGN.md): feeding N characters in k chunks costs O(N + k).

For every reply family (one template per llama.cpp handler of the parse corpus, three for the
auto parser), a corpus reply of its template has one field stretched to prose: its content,
its thought, or a string argument of a tool call. The reply is fed to ``Turn.stream().feed``
in 4-character chunks, and the work of feeding the first 2N characters of the stretched field
must be at most 2.2 times the work of its first N. Linear streaming gives 2 (the prose
repeats: both halves are the same text) or a little less (entering the field is paid once);
a re-parse or a re-join of the buffer per chunk gives up to 4. The reply's head is fed before
and its tail after, unmeasured. Measuring from the field's start, not over two disjoint
stretches, keeps amortized work (a look at the whole field each time it doubles: linear in
all) from landing in one stretch and not the other.

Work is counted, not timed (the machines are shared and noisy), and deterministically:
- calls: every function call, Python or C (``sys.setprofile``), so a re-parse of the buffer
  per chunk that runs Python per character or per piece shows;
- allocated: per chunk, the memory its ``feed`` needs beyond what was live before it (the rise
  of ``tracemalloc``'s traced peak), summed. A linear stream needs a bounded amount per chunk;
  one that copies its buffer per chunk needs more with each chunk, though the copy is one C
  call: a re-join (``"".join(pieces)``), a re-concatenation (``buf = buf + chunk``), a
  re-slice from the start, and a re-parse that scans in C (it copies what it reads).
Not seen: a C scan of the whole buffer per chunk that neither calls nor allocates
(``buf.find(marker)`` from 0 each time); that would need an instruction counter.

The negative controls at the end feed a reply through streams made quadratic on purpose
(through the public API: a re-join, a re-concatenation, a re-parse per chunk) and check that
the measure fails each of them.
"""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from functools import cache
from types import FrameType
from typing import Any, NamedTuple, Protocol

import pytest

from chatcodec import Codec
from chatcodec.errors import ChatCodecError
from chatcodec.reply import AssistantMessage, Delta, Turn, fold
from chatcodec.reply.description import CallMessage

from ._reply_oracle import (
    PARSE_CASES,
    cases_by_template,
    chunks,
    end_stream,
    per_case,
    prepare_request,
)
from .conftest import template_source
from .test_reply_stream_arguments import CHATML, GPT_OSS, QWEN3_CODER
from .test_reply_stream_arguments import TOOLS as WRITE_FILE

# (llama.cpp handler, template): one template per handler of the parse corpus, three of the
# auto parser's
FAMILIES = (
    ("Qwen3-Coder", "Qwen3-Coder.jinja"),
    ("DeepSeek V3.2/V4", "deepseek-ai-DeepSeek-V3.2.jinja"),
    ("GPT-OSS", "openai-gpt-oss-120b.jinja"),
    ("Gemma4 (inferred from format)", "google-gemma-4-31B-it.jinja"),
    ("Kimi K2 Thinking", "Kimi-K2-Thinking.jinja"),
    ("Kimi K3", "Kimi-K3.jinja"),
    ("Ministral/Magistral Large 3", "mistralai-Ministral-3-14B-Reasoning-2512.jinja"),
    ("LFM2", "LFM2-8B-A1B.jinja"),
    ("LFM2.5", "LFM2.5-8B-A1B.jinja"),
    ("Cohere2 MoE", "Cohere2MoE.jinja"),
    ("MiniMax-M3", "MiniMax-M3.jinja"),
    ("Ling 3.0 (Bailing V3)", "inclusionai-ling-3.0-flash.jinja"),
    ("MiniCPM5", "openbmb-MiniCPM5-1B.jinja"),
    ("Muse Glimmer", "muse-glimmer.jinja"),
    ("Functionary v3.2", "meetkai-functionary-medium-v3.2.jinja"),
    ("GigaChatV3", "GigaChat3-10B-A1.8B.jinja"),
    ("autoparser", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"),
    ("autoparser", "Qwen-Qwen3-0.6B.jinja"),
    ("autoparser", "meta-llama-Llama-3.1-8B-Instruct.jinja"),
)
FIELDS = ("content", "reasoning", "arguments")
# templates whose corpus replies have no thought (their format reads none)
NO_THOUGHT = {
    "Qwen3-Coder.jinja",
    "LFM2-8B-A1B.jinja",
    "meetkai-functionary-medium-v3.2.jinja",
    "GigaChat3-10B-A1.8B.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
}
# no quote, backslash or newline: a valid string in every family's argument syntax; '<', '[',
# '{' and a cut marker make the stream hold text back and let it go again
PROSE = "The answer is < 42 and <b>bold</b>; see x[1] = {y} & <tool_ca... no, naïve 🚀. "
CHUNK = 4
# N: whole repeats of the prose and whole chunks, so both halves are the same chunks
N = 32 * len(PROSE)
LIMIT = 2.2  # work(first 2N characters) / work(first N); linear is 2, quadratic up to 4


def _prose(size: int) -> str:
    return (PROSE * (size // len(PROSE) + 1))[:size]


STRETCH = _prose(2 * N)


# ------------------------------------------------------------------ the replies


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _field(message: AssistantMessage, field: str) -> list[str]:
    """The texts of ``field`` in ``message`` (for arguments: every string argument)."""
    if field == "content":
        return [message.content]
    if field == "reasoning":
        return [message.reasoning_content]
    texts: list[str] = []
    for call in message.tool_calls:
        try:
            texts.extend(_strings(json.loads(call.arguments)))
        except ValueError:  # arguments a family keeps as raw text
            texts.append(call.arguments)
    return texts


class Reply(NamedTuple):
    """A corpus reply cut around the text of one field: ``head + stretch + tail``."""

    case: str
    turn: Turn
    head: str
    tail: str


@cache
def long_reply(template: str, field: str) -> Reply | None:
    """The first finished corpus reply of ``template`` in which one text of ``field``,
    replaced by ``STRETCH``, is read whole into that field."""
    for case in cases_by_template().get(template, ()):
        if case["llama_cpp"] is None:
            continue
        try:
            turn = prepare_request(case)
        except ChatCodecError:  # a request transformers cannot render
            continue
        for output in case["outputs"]:
            if output["kind"] != "final":
                continue
            text = output["text"]
            try:
                message = turn.parse(text)
            except ChatCodecError:
                continue
            for found in _field(message, field):
                found = found.strip()
                if len(found) < 3 or text.count(found) != 1:
                    continue
                head, tail = text.split(found)
                try:
                    stretched = turn.parse(head + STRETCH + tail)
                except ChatCodecError:
                    continue
                if any(STRETCH in t for t in _field(stretched, field)):
                    return Reply(case["id"], turn, head, tail)
    return None


# ------------------------------------------------------------------ the measure


class Work(NamedTuple):
    calls: int
    allocated: int


class Feedable(Protocol):
    def feed(self, chunk: str) -> list[Delta]: ...


def work_of_regions(stream: Feedable, regions: list[list[str]]) -> list[Work]:
    """Feed ``regions`` (lists of chunks) in turn; the work of feeding each one."""
    calls = [0] * len(regions)
    allocated = [0] * len(regions)
    region = [0]  # the region being fed

    def count(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" or event == "c_call":
            calls[region[0]] += 1

    traced = tracemalloc.get_traced_memory
    reset_peak = tracemalloc.reset_peak
    was_tracing = tracemalloc.is_tracing()
    was_collecting = gc.isenabled()
    previous = sys.getprofile()
    gc.disable()  # a collection would free memory at a point that depends on earlier tests
    if not was_tracing:
        tracemalloc.start(1)
    try:
        sys.setprofile(count)
        try:
            for index, pieces in enumerate(regions):
                region[0] = index
                for piece in pieces:
                    reset_peak()
                    live = traced()[0]
                    stream.feed(piece)
                    allocated[index] += traced()[1] - live
        finally:
            sys.setprofile(previous)
    finally:
        if not was_tracing:
            tracemalloc.stop()
        if was_collecting:
            gc.enable()
    return [Work(c, a) for c, a in zip(calls, allocated, strict=True)]


def stretch_work(reply: Reply, stream: Feedable) -> tuple[Work, Work]:
    """The work of feeding the first N characters of the stretch, and its first 2N."""
    regions = [
        chunks(reply.head, CHUNK),
        chunks(STRETCH[:N], CHUNK),
        chunks(STRETCH[N:], CHUNK),
        chunks(reply.tail, CHUNK),
    ]
    _, first, second, _ = work_of_regions(stream, regions)
    return first, Work(first.calls + second.calls, first.allocated + second.allocated)


def growth(short: Work, long: Work) -> dict[str, float]:
    return {
        "calls": long.calls / max(1, short.calls),
        "allocated": long.allocated / max(1, short.allocated),
    }


def _targets() -> list[tuple[str, str]]:
    """(template, field) of every measured stream."""
    return [(template, field) for _, template in FAMILIES for field in FIELDS]


def _target_id(target: tuple[str, str]) -> str:
    template, field = target
    return f"{template.removesuffix('.jinja')}:{field}"


# ------------------------------------------------------------------ the tests


def test_every_handler_of_the_corpus_is_measured() -> None:
    handlers = {}
    for template, cases in cases_by_template().items():
        for case in cases:
            if case["llama_cpp"] is not None:
                handlers[template] = case["llama_cpp"]["handler"]
    assert {handlers[template] for _, template in FAMILIES} == set(handlers.values())
    for handler, template in FAMILIES:
        assert handlers[template] == handler, template


@pytest.mark.parametrize("target", per_case(PARSE_CASES.exists(), _targets, _target_id))
def test_streaming_a_long_field_is_linear(target: tuple[str, str]) -> None:
    template, field = target
    reply = long_reply(template, field)
    if template in NO_THOUGHT and field == "reasoning":
        assert reply is None, f"{template} now has a corpus reply with a thought: measure it"
        return
    assert reply is not None, f"no corpus reply of {template} reads a long {field}"
    # a first stream fills what is filled once (caches, lazily built tables): not measured
    stream = reply.turn.stream()
    for piece in chunks(reply.head + STRETCH + reply.tail, CHUNK):
        stream.feed(piece)
    _, message = end_stream(stream)
    assert any(STRETCH in t for t in _field(message, field)), "the stream read another field"
    first, second = stretch_work(reply, reply.turn.stream())
    grown = growth(first, second)
    assert max(grown.values()) <= LIMIT, (
        f"{reply.case}: the first {2 * N} characters of the {field} cost {grown} times the "
        f"work of its first {N} ({first}, then {second})"
    )


# ------------------------------------------------------------------ negative controls


class _QuadraticStream:
    """A correct stream that also does, per chunk, work that grows with the text so far."""

    def __init__(self, turn: Turn, waste: Callable[[_QuadraticStream, str], None]) -> None:
        self.inner = turn.stream()
        self.turn = turn
        self.waste = waste
        self.pieces: list[str] = []
        self.text = ""

    def feed(self, chunk: str) -> list[Delta]:
        self.waste(self, chunk)
        return self.inner.feed(chunk)


def _rejoin(s: _QuadraticStream, chunk: str) -> None:
    s.pieces.append(chunk)
    s.text = "".join(s.pieces)


def _concatenate(s: _QuadraticStream, chunk: str) -> None:
    s.text = s.text + chunk


def _reparse(s: _QuadraticStream, chunk: str) -> None:
    # what llama.cpp's server and vLLM do: parse the whole text so far after every chunk
    s.text = s.text + chunk
    s.turn.parse(s.text, partial=True)


@pytest.mark.parametrize(
    "waste", [_rejoin, _concatenate, _reparse], ids=lambda f: f.__name__.strip("_")
)
def test_the_measure_fails_a_quadratic_stream(waste: Callable[..., None]) -> None:
    reply = long_reply("openai-gpt-oss-120b.jinja", "content")
    assert reply is not None
    first, second = stretch_work(reply, _QuadraticStream(reply.turn, waste))
    assert max(growth(first, second).values()) > LIMIT, (first, second)


# ------------------------------------------------------------------ the finished parse of many calls

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MANY_CALLS = (
    (
        "Qwen-Qwen3-0.6B.jinja",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n',
    ),
    (
        "Qwen3-Coder.jinja",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>\n",
    ),
    (
        "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    ),
)


def parse_work(turn: Turn, text: str) -> Work:
    """The work of ``turn.parse(text)``: its calls, and the memory it allocated summed over
    every interval between two calls (a copy of the rest of the text per call shows here)."""
    calls = [0]
    allocated = [0]
    traced = tracemalloc.get_traced_memory
    reset_peak = tracemalloc.reset_peak
    live = [0]

    def count(frame: FrameType, event: str, arg: object) -> None:
        calls[0] += 1
        allocated[0] += max(0, traced()[1] - live[0])
        reset_peak()
        live[0] = traced()[0]

    was_collecting = gc.isenabled()
    previous = sys.getprofile()
    gc.disable()
    tracemalloc.start(1)
    try:
        live[0] = traced()[0]
        sys.setprofile(count)
        try:
            message = turn.parse(text)
        finally:
            sys.setprofile(previous)
    finally:
        tracemalloc.stop()
        if was_collecting:
            gc.enable()
    assert message.tool_calls, "the reply must parse to calls"
    return Work(calls[0], allocated[0])


@pytest.mark.parametrize(("template", "call"), MANY_CALLS, ids=[t for t, _ in MANY_CALLS])
def test_the_finished_parse_of_many_calls_is_linear(template: str, call: str) -> None:
    """Issue 8: 2N calls must cost at most 2.2x N calls (a failed literal that copied the rest
    of the text, the buffer re-sliced after every call and the kept calls copied after every
    call made it 2.8x at 200 -> 400 calls)."""
    codec = Codec(template_source(template), eos_token="<|im_end|>")
    turn = codec.prepare(
        [{"role": "user", "content": "hi"}], tools=WEATHER, parallel_tool_calls=True
    )
    short, long = parse_work(turn, call * 200), parse_work(turn, call * 400)
    assert len(turn.parse(call * 400).tool_calls) == 400
    worst = growth(short, long)
    assert max(worst.values()) <= LIMIT, f"{template}: 200 -> 400 calls grew the work {worst}"


# ------------------------------------------------------------------ a streamed call's parse work


def _call_grammars(turn: Turn) -> list[Any]:
    """The parsers that read a call of ``turn`` (a call in progress is parsed with these)."""
    fmt = turn.format
    found = []
    if fmt.calls is not None:
        found += [p for p in (fmt.calls.first, fmt.calls.next) if p is not None]
    if fmt.flow is not None:
        for state in fmt.flow.states.values():
            found += [o.call for o in state.options if isinstance(o, CallMessage)]
    return list({id(p): p for p in found}.values())


class ParseWork:
    """Counts the characters every call parse of ``turn`` reads (``len(text) - pos``: a
    partial parse reads the call from its start to the end of the text so far)."""

    def __init__(self, turn: Turn) -> None:
        self.characters = 0
        self.parses = 0
        self._patched = _call_grammars(turn)
        for parser in self._patched:
            parser.parse = self._counted(parser.parse)

    def _counted(self, parse: Callable[[str, int], Any]) -> Callable[[str, int], Any]:
        def counted(text: str, pos: int) -> Any:
            self.characters += len(text) - pos
            self.parses += 1
            return parse(text, pos)

        return counted

    def close(self) -> None:
        for parser in self._patched:
            del parser.parse  # (the instance attribute: the class's method again)


# one tool call whose "content" argument is BODY, per kind of arguments: raw JSON (the auto
# parser's Hermes/Qwen format), XML-style parameters (Qwen3-Coder), gpt-oss's channels
STREAMED_CALLS = {
    "json": (
        CHATML,
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt", "content": "BODY"}}'
        "\n</tool_call>",
    ),
    "xml": (
        QWEN3_CODER,
        "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n"
        "<parameter=content>\nBODY\n</parameter>\n</function>\n</tool_call>",
    ),
    "gpt-oss": (
        GPT_OSS,
        "<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>"
        '{"path": "a.txt", "content": "BODY"}',
    ),
}
# the most characters the call's parses may read per character fed, at every call length;
# a parse of the call so far on every chunk reads ~L/8 per character of an L-character call
# (~128 at 1 KB, ~1,280 at 10 KB)
PARSE_PER_CHARACTER = 32


def _sized_call(kind: str, size: int) -> tuple[Turn, str]:
    source, shape = STREAMED_CALLS[kind]
    turn = Codec(source).prepare(
        [{"role": "user", "content": "Save it"}], tools=WRITE_FILE, tool_choice="auto"
    )
    body = _prose(max(5, size - len(shape) + len("BODY")))
    return turn, shape.replace("BODY", body)


@pytest.mark.parametrize("kind", STREAMED_CALLS)
@pytest.mark.parametrize("size", [100, 1 << 10, 10 << 10])
def test_a_streamed_call_costs_bounded_parse_work_per_chunk(kind: str, size: int) -> None:
    """A call fed in 4-character chunks: its parses read at most PARSE_PER_CHARACTER
    characters per character fed, at 100 B, 1 KB and 10 KB alike (a constant per chunk:
    arguments that grow as written are not parsed again until they close)."""
    turn, text = _sized_call(kind, size)
    work = ParseWork(turn)
    try:
        stream = turn.stream()
        deltas = [d for piece in chunks(text, CHUNK) for d in stream.feed(piece)]
        end = stream.finish()
    finally:
        work.close()
    (call,) = end.message.tool_calls
    assert json.loads(call.arguments)["content"] in text
    # the arguments streamed: most of them before the reply ended
    streamed = [d.tool_call.arguments for d in deltas if d.tool_call is not None]
    assert len("".join(streamed)) >= len(call.arguments) - 8
    assert work.characters <= PARSE_PER_CHARACTER * len(text), (
        f"{kind}, {len(text)} characters: the call's {work.parses} parses read "
        f"{work.characters} characters ({work.characters / len(text):.0f} per character fed)"
    )


def test_the_parse_work_measure_fails_a_parse_per_chunk() -> None:
    """The negative control: a stream that also parses the whole text so far on every chunk
    (llama.cpp's server, vLLM) reads far more than the bound at 1 KB."""
    turn, text = _sized_call("xml", 1 << 10)
    work = ParseWork(turn)
    try:
        stream = _QuadraticStream(turn, _reparse)
        for piece in chunks(text, CHUNK):
            stream.feed(piece)
    finally:
        work.close()
    assert work.characters > PARSE_PER_CHARACTER * len(text), work.characters


# a call's markup is mostly literals: a character fed inside one that does not complete it
# changes no parse, and is not parsed (cursor.Stall); parsing on every chunk parsed a 100 B
# call fed a character at a time on more than half its characters (54 of 100 for JSON, 87 of
# 133 for XML parameters, 51 of 111 for gpt-oss)
PARSES_PER_CHARACTER_FED = 0.25


@pytest.mark.parametrize("kind", STREAMED_CALLS)
def test_a_short_call_fed_a_character_at_a_time_is_parsed_at_its_markup_only(kind: str) -> None:
    """A 100 B call fed byte by byte is parsed once per piece of its markup (a name, a tag, a
    value's close), not once per character; the stream still folds to the parse."""
    turn, text = _sized_call(kind, 100)
    work = ParseWork(turn)
    try:
        stream = turn.stream()
        deltas = [d for ch in text for d in stream.feed(ch)]
        end = stream.finish()
    finally:
        work.close()
    assert fold(deltas + end.deltas).tool_calls == turn.parse(text).tool_calls
    assert work.parses <= PARSES_PER_CHARACTER_FED * len(text), (
        f"{kind}: {work.parses} parses for {len(text)} characters fed one at a time"
    )
