"""A hostile engine behind ``chatcodec serve``: whatever the remote engine sends, a client gets
an answer in OpenAI's shape, never a 500 and never a cut connection.

The engine here is a real HTTP server on loopback (Starlette on uvicorn) that answers each
request with the bytes a test scripts. The fuzzer builds a few hundred seeded scripts: a
reply split into random events and random writes, with CRLF endings, comments, blank lines
and other SSE fields among them, and often a fault: a malformed event (wrong types, not
JSON, not an object), an engine error event, a connection cut mid-event, a bad status or a
whole answer that is not a completion. Each goes through the server with ``httpx``, streamed
and not, from an engine that streams and one that does not. A script without a fault must
come back whole and exact; one with a fault must come back as a 502 error body, or as valid
chunks, then an error event, then ``data: [DONE]``. Runs without ``../shared``.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from chatcodec import load  # noqa: E402
from chatcodec.serve import RemoteEngine, ServeConfig, create_app  # noqa: E402
from chatcodec.serve.remote import MAX_LINE  # noqa: E402

from ._standin import ServerThread  # noqa: E402
from .conftest import ROOT  # noqa: E402

MODEL = "tiny"
USER = [{"role": "user", "content": "Hello?"}]
BAD = "bad_engine_reply"
# one client for every request (a new httpx client makes its TLS context: ~0.1 s each)
CLIENT = httpx.Client(timeout=30)


class Cut(Exception):
    """Raised by the engine's body to close the connection mid-answer."""


@dataclass
class Script:
    """What the engine answers next: ``writes`` (each one write), then the connection is cut
    when ``cut`` is set, else the answer ends properly."""

    writes: list[bytes] = field(default_factory=list)
    status: int = 200
    cut: bool = False
    sleepy: bool = False  # a short pause between writes, so that reads split there
    gate: threading.Event | None = None  # set: the last write waits for it
    waited: threading.Event = field(default_factory=threading.Event)  # the wait is over


class HostileEngine:
    def __init__(self) -> None:
        self.script = Script()
        self.app = Starlette(routes=[Route("/v1/completions", self.completions, methods=["POST"])])

    async def completions(self, request: Request) -> Response:
        await request.body()
        script = self.script
        kind = "text/event-stream" if (await request.json()).get("stream") else "application/json"
        if not script.cut and len(script.writes) == 1:
            return Response(script.writes[0], status_code=script.status, media_type=kind)

        async def body() -> AsyncIterator[bytes]:
            for n, data in enumerate(script.writes):
                if script.gate is not None and n == len(script.writes) - 1:
                    await asyncio.to_thread(script.gate.wait, 10)
                    script.waited.set()
                yield data
                await asyncio.sleep(0.001 if script.sleepy else 0)
            if script.cut:
                raise Cut("the engine goes away mid-answer")

        return StreamingResponse(body(), status_code=script.status, media_type=kind)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[HostileEngine, dict[bool, str]]]:
    """The engine, and the server's ``/v1`` root over it: streaming from it (True) or asking
    for whole completions (False)."""
    engine = HostileEngine()
    codec = load(ROOT / "examples" / "chatml-tiny")
    with ServerThread(engine.app) as backend:
        url = backend.url + "/v1"
        streaming = create_app(codec, RemoteEngine(url), ServeConfig(MODEL))
        whole = create_app(codec, RemoteEngine(url, stream=False), ServeConfig(MODEL))
        with ServerThread(streaming) as a, ServerThread(whole) as b:
            yield engine, {True: a.url + "/v1", False: b.url + "/v1"}


# ------------------------------------------------------------------ what a client may see


@dataclass
class Outcome:
    status: int
    content: str = ""
    finish: str | None = None
    error: dict[str, Any] | None = None  # the error body's or the error event's fields


def exchange(root: str, stream: bool) -> Outcome:
    """One request through the server, its answer checked for OpenAI's shapes."""
    body = {"model": MODEL, "messages": USER, "stream": stream}
    with CLIENT.stream("POST", root + "/chat/completions", json=body) as response:
        response.read()
    if response.status_code != 200:
        return Outcome(response.status_code, error=error_fields(response.json()))
    if not stream:
        completion = ChatCompletion.model_validate(response.json())
        choice = completion.choices[0]
        return Outcome(200, choice.message.content or "", choice.finish_reason)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = response.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""], events[-3:]  # every stream ends so
    assert all(e.startswith("data: ") for e in events[:-2])
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    error = None
    if "error" in payloads[-1]:
        error = error_fields(payloads.pop())
    chunks = [ChatCompletionChunk.model_validate(p) for p in payloads]
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    if error is not None:
        assert all(f is None for f in finishes)
        return Outcome(200, content, None, error)
    assert all(f is None for f in finishes[:-1]) and finishes[-1] in ("stop", "length")
    return Outcome(200, content, finishes[-1])


def error_fields(body: dict[str, Any]) -> dict[str, Any]:
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == "server_error" and error["param"] is None
    return dict(error)


# ------------------------------------------------------------------ the scripts

# Events in the right shape that carry nothing: a usage chunk's forms, a choice with no text
QUIET = [
    {"choices": [], "usage": None},
    {"choices": None},
    {"choices": [{"index": 0, "text": None, "finish_reason": None}]},
    {"choices": [{"index": 0, "text": ""}], "usage": {}},
    {"object": "text_completion", "choices": [{"index": 0, "text": "", "logprobs": None}]},
]
# Events the protocol does not allow, each a bad_engine_reply
MALFORMED: list[bytes] = [
    b'{"choices": 5}',
    b'{"choices": "abc"}',
    b'{"choices": {"0": {"text": "a"}}}',
    b'{"choices": [5]}',
    b'{"choices": [null]}',
    b'{"choices": [{"text": 5}]}',
    b'{"choices": [{"text": ["a"]}]}',
    b'{"choices": [{"text": "a", "finish_reason": 7}]}',
    b'{"choices": [{"text": "a", "finish_reason": {"why": "stop"}}]}',
    b'{"choices": [], "usage": 5}',
    b'{"choices": [], "usage": "many"}',
    b'{"choices": [], "usage": {"prompt_tokens": "3", "completion_tokens": 2}}',
    b'{"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 2}}',
    b'{"choices": [], "usage": {"prompt_tokens": true, "completion_tokens": 2}}',
    b'{"choices": [], "usage": {"prompt_tokens": 1.5, "completion_tokens": 2}}',
    b"[1, 2]",
    b'"text"',
    b"null",
    b"5",
    b"",
    b'{"choices": [',
    b"not json",
    b"\xff\xfe{}",
    b'{"choices": [{"text": "\\ud800"}]}',
    b"[" * 3000 + b"]" * 3000,
    b'{"choices": [{"text": "a"}]} trailing',
    b"1e999",
]
ENGINE_ERRORS = [b'{"error": {"message": "out of memory"}}', b'{"error": "overloaded"}']
NOISE = [b": ping", b"", b"event: completion", b"id: 7", b"retry: 1000", b":"]
ALPHABET = 'abcdef xyz,.!?é世界🙂"\\\t'


@dataclass
class Case:
    script: Script
    text: str  # the reply, when the script has no fault
    finish: str  # its finish reason
    fault: set[str | None] | None  # the error codes a fault may end in; None: no fault


def reply_text(rng: random.Random) -> str:
    size = rng.choice([0, 1, 5, 20, 80, 400, 20_000])
    text = "".join(rng.choice(ALPHABET) for _ in range(size)).strip()
    return text or "ok"


def split(rng: random.Random, data: bytes, most: int) -> list[bytes]:
    """``data`` in pieces of 1 to ``most`` bytes."""
    out, i = [], 0
    while i < len(data):
        size = rng.randint(1, most)
        out.append(data[i : i + size])
        i += size
    return out


def event(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode()


def sse_case(rng: random.Random) -> Case:
    """An SSE answer: the reply's text in events, the finish, a usage chunk and ``[DONE]``;
    noise among the lines, and now and then one fault."""
    text = reply_text(rng)
    reason = rng.choice(["stop", "length", "eos", None])  # None: the finish on its own event
    finish = "length" if reason == "length" else "stop"
    pieces, i = [], 0
    while i < len(text):
        size = rng.randint(1, 60)
        pieces.append(text[i : i + size])
        i += size
    payloads = [
        event({"choices": [{"index": 0, "text": p, "finish_reason": None}]}) for p in pieces
    ]
    payloads += [event(rng.choice(QUIET)) for _ in range(rng.randint(0, 2))]
    last = {"index": 0, "text": "", "finish_reason": reason or "stop"}
    payloads.append(event({"choices": [last]}))
    if rng.random() < 0.5:
        usage = {"prompt_tokens": 9, "completion_tokens": len(pieces)}
        payloads.append(event({"choices": [], "usage": usage}))
    fault: set[str | None] | None = None
    kind = rng.choice(["clean", "clean", "malformed", "malformed", "error", "cut", "after"])
    if kind == "malformed" or kind == "error":
        where = rng.randint(0, len(payloads))
        bad = rng.choice(MALFORMED if kind == "malformed" else ENGINE_ERRORS)
        payloads.insert(where, bad)
        fault = {BAD} if kind == "malformed" else {None}
    crlf = rng.random() < 0.3
    end = b"\r\n" if crlf else b"\n"
    lines: list[bytes] = []
    for payload in payloads:
        for _ in range(rng.choice([0, 0, 0, 1, 2])):
            lines.append(rng.choice(NOISE))
        lines.append(rng.choice([b"data: ", b"data:", b"data:  "]) + payload)
        lines.append(b"")
    lines.append(b"data: [DONE]")
    lines.append(b"")
    if kind == "after":  # what follows [DONE] is not read
        lines += [b"data: " + rng.choice(MALFORMED), b""]
    data = end.join(lines) + end
    cut = False
    if kind == "cut":  # a transfer broken off before [DONE] fails, even past the finish
        done = data.rindex(b"data: [DONE]" + end) + len(b"data: [DONE]" + end)
        data, cut, fault = data[: rng.randint(0, done - 1)], True, {BAD, None}
    # at most ~200 writes, the first few cases' byte by byte; now and then a pause between
    script = Script(split(rng, data, max(rng.choice([1, 7, 100, 5000]), len(data) // 100)))
    script.cut, script.sleepy = cut, len(script.writes) < 50 and rng.random() < 0.3
    return Case(script, text, finish, fault)


def whole_case(rng: random.Random) -> Case:
    """A whole completion (the engine asked for no stream), or now and then a fault."""
    text = reply_text(rng)
    reason = rng.choice(["stop", "length", None])
    finish = "length" if reason == "length" else "stop"
    completion: dict[str, Any] = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": reason}],
    }
    if rng.random() < 0.5:
        completion["usage"] = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    data = event(completion)
    kind = rng.choice(["clean", "clean", "malformed", "empty", "error", "status", "cut"])
    fault: set[str | None] | None = None
    status, cut = 200, False
    if kind == "malformed":
        data, fault = rng.choice(MALFORMED), {BAD}
    elif kind == "empty":
        data, fault = event({"choices": rng.choice([[], None, {}])}), {BAD}
    elif kind == "error":
        data, fault = rng.choice(ENGINE_ERRORS), {None}
    elif kind == "status":
        status = rng.choice([400, 404, 500, 503])
        data = rng.choice([*ENGINE_ERRORS, *MALFORMED[:6]])
        fault = {None}
    elif kind == "cut":
        data, cut, fault = data[: rng.randint(0, len(data) - 1)], True, {BAD, None}
    script = Script(split(rng, data, rng.choice([7, 100, 100_000])), status=status, cut=cut)
    return Case(script, text, finish, fault)


def check(case: Case, got: Outcome) -> None:
    if case.fault is None:
        assert got.status == 200 and got.error is None, got
        assert (got.content, got.finish) == (case.text, case.finish)
        return
    assert got.status in (200, 502), got
    assert got.error is not None, got  # a fault is never a success
    assert got.error["code"] in case.fault, (got.error, case.fault)
    assert case.text.startswith(got.content)  # what went out before it stands


@pytest.mark.parametrize("seed", range(300))
def test_a_hostile_engine_never_breaks_a_reply(
    seed: int, servers: tuple[HostileEngine, dict[bool, str]]
) -> None:
    engine, roots = servers
    rng = random.Random(seed)
    streams = seed % 4 != 3  # the engine: mostly SSE, every fourth a whole completion
    case = sse_case(rng) if streams else whole_case(rng)
    engine.script = case.script
    check(case, exchange(roots[streams], stream=rng.random() < 0.6))


# ------------------------------------------------------------------ the cases reproduced


def sse(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


TEXT = event({"choices": [{"index": 0, "text": "Hello", "finish_reason": None}]})
STOP = event({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})


@pytest.mark.parametrize("stream", [False, True])
def test_choices_that_are_not_a_list_are_a_502_before_any_text(
    stream: bool, servers: tuple[HostileEngine, dict[bool, str]]
) -> None:
    """``{"choices": 5}`` as the engine's first event: a 502 ``bad_engine_reply`` (it was a
    500 with a traceback)."""
    engine, roots = servers
    engine.script = Script([sse(b'{"choices": 5}', STOP) + b"data: [DONE]\n\n"])
    got = exchange(roots[True], stream)
    assert got.status == 502 and got.error is not None and got.error["code"] == BAD
    assert "choices" in got.error["message"]
    engine.script = Script([b'{"choices": 5}'])
    got = exchange(roots[False], stream)
    assert got.status == 502 and got.error is not None and got.error["code"] == BAD


def test_choices_that_are_not_a_list_mid_stream_end_it_with_an_error_event(
    servers: tuple[HostileEngine, dict[bool, str]],
) -> None:
    """The same event once the first text went out (the engine sends it when the client has
    that text): the text stands, then one error event and ``data: [DONE]`` (the connection
    was cut with neither)."""
    engine, roots = servers
    gate = threading.Event()
    engine.script = Script([sse(TEXT), sse(b'{"choices": 5}', STOP)], gate=gate)
    body = {"model": MODEL, "messages": USER, "stream": True}
    events = []
    with CLIENT.stream("POST", roots[True] + "/chat/completions", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                events.append(line.removeprefix("data: "))
            if "Hello" in line:
                gate.set()
    assert events[-1] == "[DONE]"
    *chunks, error = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == [None, "Hello"]
    assert error_fields(error)["code"] == BAD and "choices" in error["error"]["message"]


def test_the_openai_client_raises_on_the_error_event(
    servers: tuple[HostileEngine, dict[bool, str]],
) -> None:
    engine, roots = servers
    gate = threading.Event()
    engine.script = Script([sse(TEXT), sse(b'{"choices": [{"text": 5}]}')], gate=gate)
    client = openai.OpenAI(base_url=roots[True], api_key="unused", max_retries=0)
    stream = client.chat.completions.create(model=MODEL, messages=USER, stream=True)
    seen = []
    with pytest.raises(openai.APIError, match="text is not a string"):
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "")
            gate.set() if "Hello" in seen else None
    assert "".join(seen) == "Hello"


@pytest.mark.parametrize("stream", [False, True])
def test_a_line_past_the_bound_is_an_engine_fault(
    stream: bool, servers: tuple[HostileEngine, dict[bool, str]]
) -> None:
    """A line one byte over `MAX_LINE`, with no newline, in 64 KiB writes: a 502 once the bound
    is passed (the line was re-split on every read, a quadratic cost, and never bounded)."""
    engine, roots = servers
    line = b'data: {"choices": [{"text": "' + b"x" * MAX_LINE + b'"}]}'
    engine.script = Script([line[i : i + 65536] for i in range(0, len(line), 65536)])
    got = exchange(roots[True], stream)
    assert got.status == 502 and got.error is not None and got.error["code"] == BAD
    assert f"longer than {MAX_LINE} bytes" in got.error["message"]


def test_a_whole_answer_past_the_bound_is_an_engine_fault(
    servers: tuple[HostileEngine, dict[bool, str]],
) -> None:
    engine, roots = servers
    body = b'{"choices": [{"text": "' + b"x" * MAX_LINE + b'"}]}'
    engine.script = Script([body[i : i + 65536] for i in range(0, len(body), 65536)])
    got = exchange(roots[False], stream=False)
    assert got.status == 502 and got.error is not None and got.error["code"] == BAD


def test_a_long_line_over_many_reads_is_read_whole() -> None:
    """Lines up to the bound are the engine's to send: a long event split over many reads
    comes through whole, as one piece (the engine's own reader, without the server)."""
    text = "y" * 100_000
    data = sse(event({"choices": [{"text": text, "finish_reason": "stop"}]}))
    engine = HostileEngine()
    engine.script = Script(split(random.Random(1), data, 4096))

    async def pieces(url: str) -> list[Any]:
        from chatcodec.serve import Generation

        remote = RemoteEngine(url)
        try:
            return [p async for p in remote.generate(Generation("x"))]
        finally:
            await remote.aclose()

    with ServerThread(engine.app) as thread:
        got = asyncio.run(pieces(thread.url + "/v1"))
    assert "".join(p.text for p in got) == text and got[-1].finish_reason == "stop"


def test_an_engines_long_error_message_is_clipped(
    servers: tuple[HostileEngine, dict[bool, str]],
) -> None:
    """The engine's own error message goes to the client in its first 500 characters, as an
    error status's body or as an error event: an engine cannot fill the client's answer."""
    engine, roots = servers
    said = event({"error": {"message": "m" * 100_000}})
    for script in (Script([said], status=500), Script([sse(said)])):
        engine.script = script
        got = exchange(roots[True], stream=False)
        assert got.status == 502 and got.error is not None
        assert "m" * 500 + "..." in got.error["message"] and len(got.error["message"]) < 600


def test_done_ends_the_engines_stream(servers: tuple[HostileEngine, dict[bool, str]]) -> None:
    """An engine that sends ``data: [DONE]`` and then keeps the connection open (or keeps
    sending): the reply is complete at ``[DONE]``, and the server answers without waiting
    for the engine to close (it waited until then)."""
    engine, roots = servers
    for stream in (False, True):
        gate = threading.Event()
        writes = [sse(TEXT, STOP) + b"data: [DONE]\n\n", b"data: 5\n\n"]
        engine.script = script = Script(writes, gate=gate)
        got = exchange(roots[True], stream)
        assert not script.waited.is_set()  # the engine still holds its last write back
        gate.set()
        assert (got.status, got.content, got.finish, got.error) == (200, "Hello", "stop", None)


def test_a_bug_mid_stream_still_ends_the_stream_in_its_shape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An engine of the caller's own that raises something other than `EngineError` once text
    went out (a bug, the server's or the engine's): one error event, a 500 in OpenAI's shape,
    then ``data: [DONE]``; the traceback goes to the log, not to the client."""
    from chatcodec.serve import Generation, Piece

    class Broken:
        takes_grammar = False

        async def generate(self, request: Generation) -> AsyncIterator[Piece]:
            yield Piece("Hello")
            raise KeyError("choices")

        async def aclose(self) -> None:
            pass

    app = create_app(load(ROOT / "examples" / "chatml-tiny"), Broken(), ServeConfig(MODEL))
    with ServerThread(app) as thread, caplog.at_level("ERROR", "chatcodec.serve"):
        body = {"model": MODEL, "messages": USER, "stream": True}
        response = CLIENT.post(thread.url + "/v1/chat/completions", json=body)
    *events, done = [e.removeprefix("data: ") for e in response.text.split("\n\n") if e]
    assert response.status_code == 200 and done == "[DONE]"
    error = json.loads(events[-1])["error"]
    assert error["type"] == "server_error" and "KeyError" in error["message"]
    assert "Traceback" not in response.text and "choices" not in error["message"]
    assert [r.message for r in caplog.records] == ["internal error"]
