"""chatcodec serve over llama.cpp in process: a tiny random-weight GGUF (byte-level BPE
vocabulary with the template's special tokens, the template in its metadata). The model's text
is noise, so the shapes come from the request's constraint: every call must be a call of a
declared tool whose arguments validate against its schema."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("starlette")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
httpx = pytest.importorskip("httpx")

from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import chatcodec  # noqa: E402
from chatcodec.serve import (  # noqa: E402
    EngineTimeout,
    Generation,
    Piece,
    RemoteEngine,
    ServeConfig,
    create_app,
)
from chatcodec.serve.llama import LlamaEngine  # noqa: E402

from ._hypothesis import SEEDED, maybe  # noqa: E402
from ._llama import write_chat_model  # noqa: E402
from ._standin import ServerThread  # noqa: E402
from .conftest import template_source  # noqa: E402

MODEL = "tiny"
SPECIALS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
UNIT = {"type": "string", "enum": ["celsius", "fahrenheit"]}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"unit": UNIT, "days": {"type": "integer", "enum": [1, 2, 3]}},
                "required": ["unit", "days"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
]
USER = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("serve") / "qwen-tiny.gguf"
    template = template_source("Qwen-Qwen2.5-7B-Instruct.jinja")
    # the random model leans towards opening a call, closing it and ending the turn, so a reply
    # whose grammar lets free text run until a call gets there soon; what is valid text is
    # the grammar's decision alone
    favoured = {"<tool_call>": 8.0, "\n": 8.0, "</tool_call>": 9.0, "<|im_end|>": 10.0}
    # Qwen2.5's tokenizer marks its call markers as not special: user-defined in a GGUF
    return write_chat_model(
        path,
        template,
        SPECIALS,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        favoured=favoured,
        user_defined=["<tool_call>", "</tool_call>"],
    )


@pytest.fixture(scope="module")
def engine(gguf: Path) -> Iterator[LlamaEngine]:
    engine = LlamaEngine(gguf, n_ctx=2048, n_threads=1)
    yield engine
    asyncio.run(engine.aclose())


@pytest.fixture(scope="module")
def client(gguf: Path, engine: LlamaEngine) -> Iterator[Any]:
    codec = chatcodec.load(str(gguf))  # the template and tokens from the GGUF's metadata
    app = create_app(codec, engine, ServeConfig(MODEL))
    with ServerThread(app) as thread:
        yield openai.OpenAI(base_url=thread.url + "/v1", api_key="unused", max_retries=0)


def check_calls(calls: list[Any], names: set[str]) -> None:
    """Every call names a declared tool and its arguments validate against its schema."""
    assert calls
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in calls:
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])


def test_the_gguf_carries_the_template_and_its_tokens(gguf: Path, engine: LlamaEngine) -> None:
    codec = chatcodec.load(str(gguf))
    assert codec.special_tokens["eos_token"] == "<|im_end|>"
    prompt = "<|im_start|>user\nhé llo<|im_end|>\n"
    tokens = engine.tokenize(prompt)
    # the two special tokens are one token each, every other byte one token
    assert len(tokens) == len("user\nhé llo\n".encode()) + 2
    assert b"".join(engine.piece(t) for t in tokens).decode() == prompt


@pytest.mark.parametrize("seed", range(4))
def test_required_tool_choice_gives_valid_calls(client: Any, seed: int) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=USER, tools=TOOLS, tool_choice="required", seed=seed
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    check_calls(choice.message.tool_calls, {"get_weather", "get_time"})
    assert reply.usage is not None and reply.usage.completion_tokens > 0


@pytest.mark.parametrize("seed", range(3))
def test_a_named_tool_streams_one_valid_call(client: Any, seed: int) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=USER,
            tools=TOOLS,
            tool_choice=named,
            parallel_tool_calls=False,
            seed=seed,
            stream=True,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    calls: dict[int, Any] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or ():
            if delta.index in calls:
                calls[delta.index].function.arguments += delta.function.arguments or ""
            else:
                calls[delta.index] = delta
    assert list(calls) == [0]
    check_calls(list(calls.values()), {"get_weather"})


def test_a_json_schema_response_format_validates(client: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"unit": UNIT},
        "required": ["unit"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
    )
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_longer_than_the_context_is_a_400(client: Any, stream: bool) -> None:
    """The request's fault, not the engine's: OpenAI's context_length_exceeded, before any
    stream begins; the engine serves the next request."""
    long = [{"role": "user", "content": "word " * 500}]  # a token a byte: past 2,048
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=long, max_tokens=4, stream=stream)
    error = caught.value
    assert error.status_code == 400
    assert (error.type, error.code, error.param) == (
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )
    assert "context holds 2048 tokens" in error.message
    reply = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4)
    assert reply.choices[0].finish_reason in ("length", "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_a_grammar_llama_cpp_cannot_parse_is_a_400_naming_the_schema(
    client: Any, stream: bool
) -> None:
    """A schema whose grammar repeats a rule a billion times: llama.cpp's grammar parser
    refuses it (its limit is 2,000), which is the request's fault."""
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 1_000_000_000}
    response_format = {"type": "json_schema", "json_schema": {"name": "many", "schema": schema}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=USER, response_format=response_format, stream=stream
        )
    error = caught.value
    assert error.status_code == 400 and error.type == "invalid_request_error"
    assert "grammar" in error.message and "response_format" in error.message
    reply = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4)
    assert reply.choices[0].finish_reason in ("length", "stop")


def test_max_tokens_ends_with_length(client: Any) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=USER, max_tokens=1, temperature=0.0
    )
    usage = reply.usage
    assert usage is not None and usage.completion_tokens <= 1
    assert reply.choices[0].finish_reason in ("length", "stop")
    assert (reply.choices[0].finish_reason == "length") == (usage.completion_tokens == 1)


def test_the_default_max_tokens_holds_in_process(gguf: Path) -> None:
    """``--max-tokens-default`` limits a request that sets none on the in-process engine too
    (the JSON schema asks for more tokens than the default, so the reply cannot end first)."""
    codec = chatcodec.load(str(gguf))
    schema = {"type": "object", "properties": {"unit": UNIT}, "required": ["unit"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}
    engine = LlamaEngine(gguf, n_ctx=512, n_threads=1)  # the app closes it when it stops
    app = create_app(codec, engine, ServeConfig(MODEL, max_tokens_default=4))
    with ServerThread(app) as thread:
        client = openai.OpenAI(base_url=thread.url + "/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model=MODEL, messages=USER, response_format=response_format, seed=2
        )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 4


def test_top_k_and_min_p_are_honoured_in_process(client: Any) -> None:
    """``top_k: 1`` and ``min_p: 1`` each keep only the likeliest token: at temperature 1,
    whatever the seed, the reply is the greedy one."""
    body: dict[str, Any] = {"model": MODEL, "messages": USER, "max_tokens": 12}
    greedy = client.chat.completions.create(**body, temperature=0.0).choices[0].message.content
    drawn = {
        client.chat.completions.create(**body, seed=seed).choices[0].message.content
        for seed in range(4)
    }
    assert drawn != {greedy}  # the seeds alone do give other replies
    for kept in ({"top_k": 1}, {"min_p": 1.0}):
        for seed in range(3):
            reply = client.chat.completions.create(**body, seed=seed, extra_body=kept)
            assert reply.choices[0].message.content == greedy, (kept, seed)


def test_usage_comes_when_the_requests_stop_string_ends_the_reply(client: Any) -> None:
    """The engine stops at the request's stop string itself (as llama-server does), and its
    last piece, which carries the usage, still comes: whole and streamed."""
    schema = {"type": "object", "properties": {"unit": UNIT}, "required": ["unit"]}
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": USER,
        "seed": 3,
        "stop": ['"'],  # the value's first key opens with one
        "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
    }
    whole = client.chat.completions.create(**body)
    assert whole.choices[0].finish_reason == "stop"
    assert '"' not in whole.choices[0].message.content
    assert whole.usage is not None and whole.usage.completion_tokens > 0
    chunks = list(
        client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True})
    )
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_a_call_cut_by_max_tokens_says_length(client: Any) -> None:
    """A required call cut by max_tokens: ``length``, and no call whose arguments are cut."""
    reply = client.chat.completions.create(
        model=MODEL, messages=USER, tools=TOOLS, tool_choice="required", seed=1, max_tokens=16
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    for call in choice.message.tool_calls or ():
        json.loads(call.function.arguments)


def test_concurrent_requests_are_served_in_turn(client: Any) -> None:
    async def ask() -> list[Any]:
        aclient = openai.AsyncOpenAI(base_url=str(client.base_url), api_key="unused")
        async with aclient:
            return await asyncio.gather(
                *(
                    aclient.chat.completions.create(
                        model=MODEL, messages=USER, tools=TOOLS, tool_choice="required", seed=s
                    )
                    for s in range(6)
                )
            )

    for reply in asyncio.run(ask()):
        check_calls(reply.choices[0].message.tool_calls, {"get_weather", "get_time"})


def test_a_cancelled_queued_request_never_reaches_the_model(engine: LlamaEngine) -> None:
    async def run() -> tuple[int, int]:
        before = engine.generations
        first = engine.generate(Generation("<|im_start|>user\nhi", max_tokens=3, seed=1))
        piece = await first.__anext__()  # the first request holds the model

        async def second() -> None:
            async for _ in engine.generate(Generation("hello", max_tokens=3)):
                pass

        waiting = asyncio.ensure_future(second())
        await asyncio.sleep(0)  # it is queued behind the first
        waiting.cancel()
        async for piece in first:  # noqa: B007 (the last piece is read below)
            pass
        await asyncio.gather(waiting, return_exceptions=True)
        # a third request still runs: the queue is not stuck
        async for piece in engine.generate(Generation("hello", max_tokens=2)):  # noqa: B007
            pass
        assert piece.finish_reason is not None
        return before, engine.generations

    before, after = asyncio.run(run())
    assert after - before == 2


def test_a_request_past_the_timeout_is_an_engine_timeout(gguf: Path) -> None:
    """The in-process engine's timeout bounds the wait for the next piece, a queued request's
    wait for the model included; the request after it runs."""
    engine = LlamaEngine(gguf, n_ctx=512, n_threads=1, timeout=0.3)

    async def run() -> Piece:
        first = engine.generate(Generation("<|im_start|>user\nhi", max_tokens=4, seed=1))
        await first.__anext__()  # the first request holds the model, and is not read on
        with pytest.raises(EngineTimeout, match="waiting for the model"):
            async for _ in engine.generate(Generation("hello", max_tokens=2)):
                pass
        async for _ in first:
            pass
        return await last_piece(engine)

    assert run_and_close(engine, run).finish_reason in ("stop", "length")


def test_a_prompt_past_the_timeout_is_an_engine_timeout(gguf: Path) -> None:
    """A prompt whose decoding outlasts the timeout (3,900 tokens: ~0.2 s here, against
    0.05 s) fails with EngineTimeout; the engine goes on serving (the start that was given up
    ends on the worker thread and its sampler is freed)."""
    engine = LlamaEngine(gguf, n_ctx=4096, n_threads=1, timeout=0.05)

    async def run() -> Piece:
        with pytest.raises(EngineTimeout, match="reading the prompt"):
            async for _ in engine.generate(Generation("x" * 3900, max_tokens=1)):
                pass
        return await last_piece(engine)

    assert run_and_close(engine, run).finish_reason in ("stop", "length")


async def last_piece(engine: LlamaEngine) -> Piece:
    """The last piece of a short generation: the engine still serves. The timeout is lifted
    first: the abandoned work may still hold the model for a while on a loaded machine."""
    engine.timeout = None
    async for piece in engine.generate(Generation("hello", max_tokens=2)):  # noqa: B007
        pass
    return piece


def run_and_close(engine: LlamaEngine, run: Any) -> Any:
    """What the coroutine ``run()`` gives, the engine freed after it."""
    try:
        return asyncio.run(run())
    finally:
        asyncio.run(engine.aclose())


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_command_serves_a_gguf(gguf: Path) -> None:
    """``chatcodec serve MODEL.gguf`` as a user runs it, called with the openai client."""
    import os
    import sys

    port = free_port()
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-m", "chatcodec", "serve", str(gguf), "--port", str(port)]
    command += ["--model-name", MODEL, "--api-key", "sesame", "--log-level", "warning"]
    root = f"http://127.0.0.1:{port}"
    with running(command, root + "/health", env):
        client = openai.OpenAI(base_url=root + "/v1", api_key="sesame", max_retries=0)
        assert [m.id for m in client.models.list()] == [MODEL]
        reply = client.chat.completions.create(
            model=MODEL, messages=USER, tools=TOOLS, tool_choice="required", seed=5
        )
        check_calls(reply.choices[0].message.tool_calls, {"get_weather", "get_time"})


@contextmanager
def running(command: list[str], probe: str, env: dict[str, str]) -> Iterator[None]:
    """A server process, from when ``probe`` answers (it fails the test if the process dies
    first) until the block ends."""
    import subprocess

    import httpx

    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            try:
                httpx.get(probe)
                break
            except httpx.TransportError:
                server_wait(server)
        yield
    finally:
        server.terminate()
        server.wait()


def server_wait(server: Any) -> None:
    import subprocess

    try:
        server.wait(0.1)
    except subprocess.TimeoutExpired:
        pass


@contextmanager
def llama_cpp_python_server(gguf: Path) -> Iterator[str]:
    """llama-cpp-python's own HTTP server on ``gguf``, on loopback: its ``/v1`` root."""
    pytest.importorskip("llama_cpp.server.app")  # llama-cpp-python[server]
    import os
    import sys

    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf)]
    command += ["--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--verbose", "false"]
    root = f"http://127.0.0.1:{port}/v1"
    with running(command, root + "/models", dict(os.environ)):
        yield root


@pytest.fixture(scope="module")
def llama_cpp_server(gguf: Path) -> Iterator[str]:
    """llama-cpp-python's own HTTP server on the tiny GGUF: its ``/v1`` root."""
    with llama_cpp_python_server(gguf) as root:
        yield root


@pytest.fixture(scope="module")
def fronted(gguf: Path, llama_cpp_server: str) -> Iterator[Any]:
    """``chatcodec serve --backend ... --backend-no-stream`` in front of llama-cpp-python's
    server: its streams lose characters that span byte tokens (docs/serve.md)."""
    codec = chatcodec.load(str(gguf))
    engine = RemoteEngine(llama_cpp_server, kind="llama-cpp-python", stream=False)
    with ServerThread(create_app(codec, engine, ServeConfig(MODEL))) as thread:
        yield openai.OpenAI(base_url=thread.url + "/v1", api_key="unused", max_retries=0)


# fixed seeds: llama-cpp-python decodes its text with errors="ignore", so invalid UTF-8 that
# the noise model writes is dropped and can join free text into a call marker (seed 2 gives a
# reply whose call does not parse); the in-process engine writes U+FFFD instead
@pytest.mark.parametrize("seed", [0, 1, 3])
def test_in_front_of_llama_cpp_pythons_server_required_calls_validate(
    fronted: Any, seed: int
) -> None:
    reply = fronted.chat.completions.create(
        model=MODEL,
        messages=USER,
        tools=TOOLS,
        tool_choice="required",
        seed=seed,
        temperature=1.0,
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    check_calls(reply.choices[0].message.tool_calls, {"get_weather", "get_time"})


def test_in_front_of_llama_cpp_pythons_server_a_named_call_streams(fronted: Any) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    chunks = list(
        fronted.chat.completions.create(
            model=MODEL,
            messages=USER,
            tools=TOOLS,
            tool_choice=named,
            seed=4,
            temperature=1.0,
            max_tokens=400,
            stream=True,
        )
    )
    # under guaranteed the grammar ends with the call, so the noise model cannot write on
    # past it until max_tokens (a cut reply would say length: test_serve.py)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    calls: dict[int, Any] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or ():
            calls.setdefault(delta.index, []).append(delta)
    assert calls
    for deltas in calls.values():
        assert deltas[0].function.name == "get_time"
        arguments = "".join(d.function.arguments or "" for d in deltas)
        jsonschema.validate(json.loads(arguments), TOOLS[1]["function"]["parameters"])


@pytest.mark.parametrize("seed", range(3))
def test_in_front_of_llama_cpp_pythons_server_a_json_schema_validates(
    fronted: Any, seed: int
) -> None:
    schema = TOOLS[0]["function"]["parameters"]
    reply = fronted.chat.completions.create(
        model=MODEL,
        messages=USER,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
        seed=seed,
    )
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), schema)


def test_in_front_of_llama_cpp_pythons_server_auto_sends_no_grammar(fronted: Any) -> None:
    """Its server runs no lazy grammar: a request with tool_choice auto goes without one and
    comes back read as the template's reply (here noise, so content or calls, both valid)."""
    reply = fronted.chat.completions.create(
        model=MODEL, messages=USER, tools=TOOLS, seed=1, max_tokens=16
    )
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")


# ------------------------------------------------------------------ random constraints

_LEAF_SCHEMAS = [
    {},
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
    {"enum": ["a", 1, None]},
    {"const": "x"},
    {"type": "string", "minLength": 1, "maxLength": 3},
    {"type": "string", "pattern": "^[a-c]+$"},
    {"type": "integer", "minimum": -5, "maximum": 5},
    {"type": "number", "exclusiveMinimum": 0},
    {"type": "string", "format": "date"},
    {"type": ["string", "null"]},
]
_NAMES = st.sampled_from(["a", "b", "c"])


def _object(inner: Any) -> Any:
    """An object schema; its required names are among its properties (satisfiable)."""
    return st.dictionaries(_NAMES, inner, max_size=3).flatmap(
        lambda properties: st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.just(properties)},
            optional={
                "required": st.lists(st.sampled_from(sorted(properties) or ["a"]), unique=True)
                if properties
                else st.just([]),
                "additionalProperties": st.booleans(),
            },
        )
    )


def _array(inner: Any) -> Any:
    """An array schema; at most as many items as at least (satisfiable)."""
    return st.tuples(inner, st.integers(0, 2), st.integers(0, 2), st.booleans()).map(
        lambda t: (
            {"type": "array", "items": t[0]}
            | ({"minItems": t[1], "maxItems": t[1] + t[2]} if t[3] else {})
        )
    )


SCHEMA = st.recursive(
    st.sampled_from(_LEAF_SCHEMAS),
    lambda inner: (
        _object(inner)
        | _array(inner)
        | st.lists(inner, min_size=1, max_size=3).map(lambda options: {"anyOf": options})
    ),
    max_leaves=6,
)
PARAMETERS = _object(SCHEMA) | maybe(st.just({"type": "object"}))
_TOOL = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": st.sampled_from(["get_weather", "get_time"])},
            optional={"parameters": PARAMETERS},
        ),
    }
)
CONSTRAINED = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "messages": st.just(USER),
        # one token per byte of text here: a call needs about 80
        "max_tokens": st.sampled_from([1, 12, 200, 200, 200]),
        "seed": st.integers(0, 3),
        "stream": st.booleans(),
        "tools": st.lists(_TOOL, min_size=1, max_size=2),
        "tool_choice": st.sampled_from(
            ["required", "required", {"type": "function", "function": {"name": "get_time"}}]
            + ["auto", "none"]
        ),
    },
    optional={
        "parallel_tool_calls": st.booleans(),
        "response_format": st.sampled_from([{"type": "json_object"}, {"type": "text"}])
        | SCHEMA.map(lambda s: {"type": "json_schema", "json_schema": {"name": "r", "schema": s}}),
    },
)
RESPONSE = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "messages": st.just(USER),
        "max_tokens": st.just(200),
        "seed": st.integers(0, 3),
        "stream": st.booleans(),
        "response_format": SCHEMA.map(
            lambda s: {"type": "json_schema", "json_schema": {"name": "r", "schema": s}}
        ),
    }
)


def _valid_schema(schema: Any) -> bool:
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError:
        return False
    return True


def _message_of(response: Any, streamed: bool) -> tuple[dict[str, Any] | None, str | None]:
    """(the message, the finish reason) of a 200; (None, None) for a stream that ended with an
    error event."""
    if not streamed:
        choice = response.json()["choices"][0]
        return choice["message"], choice["finish_reason"]
    events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"  # after the last chunk, or after an error event
    chunks = [json.loads(e) for e in events[:-1]]
    if "error" in chunks[-1]:
        return None, None
    content, calls, finish = "", {}, None
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                entry["name"] += call.get("function", {}).get("name") or ""
                entry["arguments"] += call.get("function", {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    message = {
        "content": content,
        "tool_calls": [{"function": c} for _, c in sorted(calls.items())] or None,
    }
    return message, finish


@settings(SEEDED, max_examples=50)
@given(body=CONSTRAINED)
def test_random_tools_and_tool_choices_never_break_the_server(
    body: dict[str, Any], client: Any
) -> None:
    """Random tool schemas and tool choices (and response formats beside them) through the
    grammar to llama.cpp: a 200 whose finished calls validate against their tool's schema, a
    400 naming the field, or a 502 for a reply that does not parse; and the server (llama.cpp
    in its process) still answers afterwards."""
    _exchange(body, client)


@settings(SEEDED, max_examples=25)
@given(body=RESPONSE)
def test_random_response_formats_never_break_the_server(body: dict[str, Any], client: Any) -> None:
    """Random JSON schemas as the response format: a finished answer validates against its
    schema; otherwise as above."""
    _exchange(body, client)


def _exchange(body: dict[str, Any], client: Any) -> None:
    root = str(client.base_url).rstrip("/")
    content = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    with httpx.stream("POST", root + "/chat/completions", content=content, headers=headers) as r:
        if r.status_code != 200:
            r.read()
            assert r.status_code in (400, 502), r.text
            error = r.json()["error"]
            assert error["message"] and (r.status_code == 502) == (error["type"] == "server_error")
            event(f"{r.status_code} {error['param'] or error['code']}")
        else:
            if not body["stream"]:
                r.read()
            message, finish = _message_of(r, body["stream"])
            event(f"200 {finish or 'error event'}")
            if message is not None and finish == "tool_calls":
                declared = {t["function"]["name"]: t["function"] for t in body.get("tools", [])}
                for call in message["tool_calls"]:
                    function = declared[call["function"]["name"]]
                    schema = function.get("parameters") or {"type": "object"}
                    if _valid_schema(schema):
                        jsonschema.validate(json.loads(call["function"]["arguments"]), schema)
                        event("a call validated")
            format_ = body.get("response_format") or {}
            if message is not None and finish == "stop" and format_.get("type") == "json_schema":
                schema = format_["json_schema"]["schema"]
                if _valid_schema(schema) and not body.get("tools"):
                    jsonschema.validate(json.loads(message["content"]), schema)
                    event("a JSON answer validated")
    assert httpx.get(root.removesuffix("/v1") + "/health").status_code == 200
