"""Anthropic's Messages API on chatcodec serve: the official ``anthropic`` client against the
app on loopback, in front of the replaying engine stand-in (exact replies) or llama.cpp in
process over the tests' tiny GGUF (replies shaped by the request's grammar)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

pytest.importorskip("starlette")
anthropic = pytest.importorskip("anthropic")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

import chatcodec  # noqa: E402
from chatcodec import Codec  # noqa: E402
from chatcodec.serve import RemoteEngine  # noqa: E402

from ._reply_oracle import PARSE_CASES, load_compare, per_case  # noqa: E402
from ._standin import ServerThread, StandIn  # noqa: E402
from .conftest import TEMPLATES, template_source  # noqa: E402
from .test_serve import (  # noqa: E402
    MODEL,
    QWEN,
    QWEN_CALL,
    family_cases,
    plain_codec,
    qwen,
    reset,
    served,
)

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}
USER = [{"role": "user", "content": "What's the weather in Paris?"}]
QWEN3 = "Qwen-Qwen3-0.6B.jinja"
needs_templates = pytest.mark.skipif(not TEMPLATES.exists(), reason="needs ../shared")


@pytest.fixture(scope="module")
def standin() -> Iterator[tuple[StandIn, str]]:
    engine = StandIn(seed=11)
    with ServerThread(engine.app) as thread:
        yield engine, thread.url + "/v1"


def client_of(root: str, **kwargs: Any) -> Any:
    """The official client for a server whose ``/v1`` root is ``root``."""
    kwargs.setdefault("api_key", "unused")
    return anthropic.Anthropic(base_url=root.removesuffix("/v1"), max_retries=0, **kwargs)


EVENT = TypeAdapter(anthropic.types.RawMessageStreamEvent)
MESSAGE = TypeAdapter(anthropic.types.Message)


def both(client: Any, **request: Any) -> tuple[Any, Any, list[str]]:
    """The message whole and streamed (the SDK's accumulator), and the stream's event types.
    The SDK builds its objects without checking them: each is checked here against its type."""
    whole = client.messages.create(**request)
    MESSAGE.validate_python(whole.to_dict())
    with client.messages.stream(**request) as stream:
        types = []
        for event in stream:
            if event.type in ("text", "thinking", "input_json", "signature", "citation"):
                continue  # the helper's own events, made from the raw ones
            EVENT.validate_python(event.to_dict())
            types.append(event.type)
        streamed = stream.get_final_message()
    return whole, streamed, types


def shape(message: Any) -> dict[str, Any]:
    """What a message says, the per-reply ids left out."""
    blocks = []
    for block in message.content:
        fields = block.model_dump(exclude_none=True)
        fields.pop("parsed_output", None)
        if block.type == "tool_use":
            assert block.id.startswith("toolu_")
            del fields["id"]
        blocks.append(fields)
    return {
        "content": blocks,
        "stop_reason": message.stop_reason,
        "stop_sequence": message.stop_sequence,
        "usage": (message.usage.input_tokens, message.usage.output_tokens),
    }


def check_stream(types: list[str]) -> None:
    """The events come in Anthropic's order: a start, blocks opened and closed, the end."""
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    open_block = False
    for kind in types[1:-2]:
        if kind == "content_block_start":
            assert not open_block
            open_block = True
        elif kind == "content_block_stop":
            assert open_block
            open_block = False
        else:
            assert open_block, kind
    assert not open_block


# ------------------------------------------------------------------ the stand-in: exact replies


def test_plain_text_whole_and_streamed(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "It is sunny in Paris.")
    with served(plain_codec(), RemoteEngine(url)) as root:
        client = client_of(root)
        whole, streamed, types = both(client, model=MODEL, max_tokens=64, messages=USER)
    assert whole.type == "message" and whole.role == "assistant" and whole.model == MODEL
    assert whole.id.startswith("msg_")
    assert [(b.type, b.text) for b in whole.content] == [("text", "It is sunny in Paris.")]
    assert whole.stop_reason == "end_turn" and whole.stop_sequence is None
    assert whole.usage.input_tokens == len(engine.requests[-1]["prompt"])
    assert whole.usage.output_tokens == len("It is sunny in Paris.")
    assert shape(streamed) == shape(whole)
    check_stream(types)
    assert engine.requests[-1]["max_tokens"] == 64


def test_system_blocks_and_sampling_reach_the_engine(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "Bonjour.")
    with served(plain_codec(), RemoteEngine(url)) as root:
        client_of(root).messages.create(
            model=MODEL,
            max_tokens=32,
            system=[
                {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Answer in French."},
            ],
            messages=[{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
            metadata={"user_id": "someone"},
            cache_control={"type": "ephemeral"},
            # the SDK leaves out the sampler fields newer models refuse: sent as extra fields
            extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 20},
        )
    sent = engine.requests[-1]
    # the plain template reads strings only: the text blocks are joined with newlines
    assert sent["prompt"] == "system: Be brief.\nAnswer in French.\nuser: Hello\n"
    assert (sent["temperature"], sent["top_p"], sent["top_k"]) == (0.5, 0.9, 20)


def test_max_tokens_and_stop_sequences(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "one two three four")
    with served(plain_codec(), RemoteEngine(url)) as root:
        client = client_of(root)
        whole, streamed, _ = both(client, model=MODEL, max_tokens=7, messages=USER)
        assert whole.stop_reason == "max_tokens" and whole.content[0].text == "one two"
        assert shape(streamed) == shape(whole)
        # an engine that echoes the stop string: the server cuts it and knows which it was
        engine.echo_stops = True
        request = {"model": MODEL, "max_tokens": 64, "messages": USER}
        whole, streamed, _ = both(client, stop_sequences=["zzz", "three"], **request)
        assert whole.stop_reason == "stop_sequence" and whole.stop_sequence == "three"
        assert whole.content[0].text == "one two "
        assert shape(streamed) == shape(whole)
        # one that ends at it and does not say which: the end of the turn is all that is known
        engine.echo_stops = False
        whole = client.messages.create(stop_sequences=["three"], **request)
        assert whole.stop_reason == "end_turn" and whole.content[0].text == "one two "


def validates(block: Any, tool: dict[str, Any]) -> None:
    assert block.type == "tool_use" and block.name == tool["name"]
    jsonschema.validate(block.input, tool["input_schema"])


@needs_templates
@pytest.mark.parametrize(
    "choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}, {"type": "auto"}]
)
def test_a_tool_call(choice: dict[str, Any], standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "Let me look. " + QWEN_CALL)
    with served(qwen(), RemoteEngine(url, kind="llama")) as root:
        client = client_of(root)
        request = {"model": MODEL, "max_tokens": 200, "messages": USER, "tools": [WEATHER, TIME]}
        whole, streamed, types = both(client, tool_choice=choice, **request)
    assert [b.type for b in whole.content] == ["text", "tool_use"]
    validates(whole.content[1], WEATHER)
    assert whole.content[1].input == {"city": "Paris"}
    assert whole.stop_reason == "tool_use"
    assert shape(streamed) == shape(whole)
    check_stream(types)
    # the request's grammar went to the engine: a forced call is a whole grammar
    sent = engine.requests[-1]
    assert "grammar" in sent
    assert sent["grammar_lazy"] is (choice["type"] == "auto")
    if choice["type"] == "tool":
        assert "get_time" not in sent["grammar"]


@needs_templates
def test_disable_parallel_tool_use_is_parallel_tool_calls_false(
    standin: tuple[StandIn, str],
) -> None:
    """The grammar sent is the chat endpoint's with ``parallel_tool_calls: false`` (the
    grammar, not the reading, holds the reply to one call, as in llama.cpp)."""
    engine, url = standin
    reset(engine, QWEN_CALL)
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": WEATHER["description"],
            "parameters": WEATHER["input_schema"],
        },
    }
    with served(qwen(), RemoteEngine(url, kind="llama")) as root:
        client = client_of(root)
        chat = openai.OpenAI(base_url=root, api_key="unused", max_retries=0)
        grammars = []
        for parallel in (True, False):
            client.messages.create(
                model=MODEL,
                max_tokens=300,
                messages=USER,
                tools=[WEATHER],
                tool_choice={"type": "any", "disable_parallel_tool_use": not parallel},
            )
            grammar = engine.requests[-1]["grammar"]
            chat.chat.completions.create(
                model=MODEL,
                max_tokens=300,
                messages=USER,
                tools=[tool],
                tool_choice="required",
                parallel_tool_calls=parallel,
            )
            assert engine.requests[-1]["grammar"] == grammar
            grammars.append(grammar)
    assert grammars[0] != grammars[1]


@needs_templates
def test_an_agent_loop_renders_as_the_openai_messages(standin: tuple[StandIn, str]) -> None:
    """tool_use, then its tool_result, then the next turn: the prompt is the one the chat
    endpoint renders from the same conversation in OpenAI's messages."""
    engine, url = standin
    with served(qwen(), RemoteEngine(url, kind="llama")) as root:
        client = client_of(root)
        reset(engine, QWEN_CALL)
        first = client.messages.create(
            model=MODEL, max_tokens=200, messages=USER, tools=[WEATHER], system="Be brief."
        )
        call = first.content[0]
        assert first.stop_reason == "tool_use" and call.type == "tool_use"
        reset(engine, "It is 18 °C in Paris.")
        result = {"type": "tool_result", "tool_use_id": call.id, "content": "18 °C, sunny"}
        history = [
            *USER,
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {"role": "user", "content": [result, {"type": "text", "text": "Thanks!"}]},
        ]
        second = client.messages.create(
            model=MODEL, max_tokens=200, messages=history, tools=[WEATHER], system="Be brief."
        )
        assert (
            second.content[0].text == "It is 18 °C in Paris." and second.stop_reason == "end_turn"
        )
        prompt = engine.requests[-1]["prompt"]
        # the same conversation as OpenAI messages, through the chat endpoint
        tool = {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"],
            },
        }
        arguments = call.input  # an object: how OpenAI clients of llama-server may send it
        messages = [
            {"role": "system", "content": "Be brief."},
            *USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "18 °C, sunny"},
            {"role": "user", "content": "Thanks!"},
        ]
        chat = openai.OpenAI(base_url=root, api_key="unused", max_retries=0)
        chat.chat.completions.create(model=MODEL, messages=messages, tools=[tool])
        assert engine.requests[-1]["prompt"] == prompt
    assert prompt == qwen().render(messages, tools=[tool], add_generation_prompt=True)
    assert "<tool_response>\n18 °C, sunny\n</tool_response>" in prompt


@needs_templates
def test_thinking_blocks_on_a_thinking_template(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    codec = Codec(template_source(QWEN3), eos_token="<|im_end|>")
    reset(engine, "<think>\nThe user greets me.\n</think>\n\nHello!")
    with served(codec, RemoteEngine(url)) as root:
        client = client_of(root)
        request = {"model": MODEL, "max_tokens": 200, "messages": USER}
        whole, streamed, types = both(
            client, thinking={"type": "enabled", "budget_tokens": 1024}, **request
        )
        assert [b.type for b in whole.content] == ["thinking", "text"]
        # the fields the chat endpoint reads from the same reply (llama.cpp's)
        chat = openai.OpenAI(base_url=root, api_key="unused", max_retries=0)
        read = chat.chat.completions.create(model=MODEL, messages=USER).choices[0].message
        assert whole.content[0].thinking == read.reasoning_content == "The user greets me.\n"
        assert whole.content[1].text == read.content == "Hello!"
        assert shape(streamed) == shape(whole)
        check_stream(types)
        assert not engine.requests[-1]["prompt"].endswith("<think>\n\n</think>\n\n")
        # thinking disabled: the template's toggle (an empty thought in Qwen3's prompt)
        reset(engine, "Hello!")
        off = client.messages.create(thinking={"type": "disabled"}, **request)
        assert [b.type for b in off.content] == ["text"]
        assert engine.requests[-1]["prompt"].endswith("<think>\n\n</think>\n\n")
        # a thinking block is the assistant message's reasoning_content: the prompt is the
        # chat endpoint's for the same message (a final one, continued as llama-server does)
        reset(engine, "Fine.")
        past = [
            *USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Look it up.", "signature": ""},
                    {"type": "text", "text": "Sunny."},
                ],
            },
        ]
        client.messages.create(model=MODEL, max_tokens=50, messages=past)
        prompt = engine.requests[-1]["prompt"]
        assert "Look it up." in prompt
        openai_past = [
            *USER,
            {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."},
        ]
        chat.chat.completions.create(model=MODEL, messages=openai_past)
        assert engine.requests[-1]["prompt"] == prompt


@needs_templates
def test_json_output_is_the_chat_endpoints_response_format(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    reset(engine, '{"city": "Paris"}')
    with served(qwen(), RemoteEngine(url, kind="llama")) as root:
        whole = client_of(root).messages.create(
            model=MODEL,
            max_tokens=100,
            messages=USER,
            output_config={"format": {"type": "json_schema", "schema": schema}},
        )
        grammar = engine.requests[-1]["grammar"]
        chat = openai.OpenAI(base_url=root, api_key="unused", max_retries=0)
        response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        chat.chat.completions.create(model=MODEL, messages=USER, response_format=response_format)
        assert engine.requests[-1]["grammar"] == grammar
    assert [b.type for b in whole.content] == ["text"]
    jsonschema.validate(json.loads(whole.content[0].text), schema)


def test_count_tokens(standin: tuple[StandIn, str]) -> None:
    """A remote engine counts the prompt in the usage of a one-token generation (the stand-in
    counts a character a token)."""
    engine, url = standin
    reset(engine, "ignored")
    with served(plain_codec(), RemoteEngine(url)) as root:
        count = client_of(root).messages.count_tokens(model=MODEL, messages=USER, system="Hi.")
    sent = engine.requests[-1]
    assert sent["max_tokens"] == 1
    assert (
        count.input_tokens
        == len(sent["prompt"])
        == len("system: Hi.\nuser: ") + len(USER[0]["content"] + "\n")
    )


# ------------------------------------------------------------------ errors, in Anthropic's shape


def error_of(response: httpx.Response, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    return str(body["error"]["message"])


def test_errors_are_in_anthropics_shape(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "Hi.")
    good = {"model": MODEL, "max_tokens": 16, "messages": USER}
    with served(plain_codec(), RemoteEngine(url), api_key="sekrit") as root:
        post = f"{root}/messages"
        key = {"x-api-key": "sekrit"}
        error_of(httpx.post(post, json=good), 401, "authentication_error")
        error_of(
            httpx.post(post, json=good, headers={"x-api-key": "no"}), 401, "authentication_error"
        )
        assert httpx.post(post, json=good, headers=key).status_code == 200
        bearer = {"authorization": "Bearer sekrit"}
        assert httpx.post(post, json=good, headers=bearer).status_code == 200
        # the same key on the chat endpoint, given as Anthropic's clients give it
        chat = {"model": MODEL, "messages": USER}
        assert httpx.post(f"{root}/chat/completions", json=chat, headers=key).status_code == 200

        def bad(body: dict[str, Any]) -> str:
            return error_of(httpx.post(post, json=body, headers=key), 400, "invalid_request_error")

        assert "max_tokens" in bad({"model": MODEL, "messages": USER})
        assert "mcp_servers" in bad({**good, "mcp_servers": []})
        image = {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}
        assert "image" in bad({**good, "messages": [{"role": "user", "content": [image]}]})
        web = {"type": "web_search_20250305", "name": "web_search"}
        assert "tools.0" in bad({**good, "tools": [web]})
        assert "tool_choice" in bad({**good, "tool_choice": {"type": "any"}})
        assert "role" in bad({**good, "messages": [{"role": "system", "content": "x"}]})
        message = error_of(
            httpx.post(post, json={**good, "model": "claude"}, headers=key), 404, "not_found_error"
        )
        assert "'claude'" in message
        count = f"{root}/messages/count_tokens"
        error_of(httpx.post(count, json=good), 401, "authentication_error")
        # the engine fails: api_error
        engine.status = 500
        error_of(httpx.post(post, json=good, headers=key), 502, "api_error")
        error_of(httpx.post(post, json={**good, "stream": True}, headers=key), 502, "api_error")
        # the SDK reads these bodies into its own errors
        client = client_of(root, api_key="sekrit")
        with pytest.raises(anthropic.InternalServerError) as failed:
            client.messages.create(**good)
        assert failed.value.body["error"]["type"] == "api_error"
        engine.status = 200
        with pytest.raises(anthropic.NotFoundError):
            client.messages.create(**{**good, "model": "claude"})
        with pytest.raises(anthropic.AuthenticationError):
            client_of(root, api_key="wrong").messages.create(**good)


def test_other_paths_and_methods_answer_in_anthropics_shape(standin: tuple[StandIn, str]) -> None:
    _, url = standin
    with served(plain_codec(), RemoteEngine(url)) as root:
        error_of(httpx.get(f"{root}/messages"), 405, "invalid_request_error")
        error_of(httpx.post(f"{root}/messages/batches", json={}), 404, "not_found_error")
        error_of(httpx.post(f"{root}/messages", content=b"{"), 400, "invalid_request_error")
        # the chat endpoint keeps OpenAI's shape
        response = httpx.post(f"{root}/chat/completions", content=b"{")
        assert response.status_code == 400 and set(response.json()) == {"error"}


def test_tool_results_and_text_keep_their_order(standin: tuple[StandIn, str]) -> None:
    """A user message's tool_result blocks are tool messages, its text a user message, in the
    order sent; a result given as blocks is their text."""
    engine, url = standin
    reset(engine, "Done.")
    template = (
        "{% for m in messages %}{{ m.role }}"
        "{% if m.tool_call_id %}[{{ m.tool_call_id }}]{% endif %}: {{ m.content }}\n"
        "{% endfor %}"
    )
    call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    messages = [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": [call, {**call, "id": "toolu_2"}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "two"}],
                    "is_error": True,
                },
                {"type": "text", "text": "And now?"},
            ],
        },
    ]
    with served(Codec(template), RemoteEngine(url)) as root:
        client_of(root).messages.create(model=MODEL, max_tokens=8, messages=messages)
    prompt = engine.requests[-1]["prompt"]
    assert prompt.endswith("tool[toolu_1]: one\ntool[toolu_2]: two\nuser: And now?\n")


@needs_templates
def test_an_unreadable_reply_mid_stream_is_an_error_event(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "Let me see. " + QWEN_CALL.replace('"Paris"', ""))
    body = {"model": MODEL, "max_tokens": 200, "messages": USER, "tools": [WEATHER]}
    with served(qwen(), RemoteEngine(url), policy="reference") as root:
        response = httpx.post(f"{root}/messages", json={**body, "stream": True})
        assert response.status_code == 200
        events = [e.split("\n", 1) for e in response.text.split("\n\n") if e]
        names = [name.removeprefix("event: ") for name, _ in events]
        assert names[:2] == ["message_start", "ping"] and names[-1] == "error"
        last = json.loads(events[-1][1].removeprefix("data: "))
        assert last["type"] == "error" and last["error"]["type"] == "api_error"
        with pytest.raises(anthropic.APIStatusError) as failed:
            with client_of(root).messages.stream(**body) as stream:
                stream.get_final_message()
        assert failed.value.body["error"]["type"] == "api_error"
        error_of(httpx.post(f"{root}/messages", json=body), 502, "api_error")


# ------------------------------------------------------------------ every family's tool call


def anthropic_request(case: dict[str, Any]) -> dict[str, Any]:
    """A corpus case (OpenAI's messages) as Anthropic's client sends it."""
    system, messages = None, []
    for message in case["messages"]:
        role, content = message["role"], message.get("content")
        if role == "system":
            system = content
        elif role == "user":
            messages.append({"role": "user", "content": content})
        elif role == "assistant":
            blocks = [{"type": "text", "text": content}] if content else []
            for call in message.get("tool_calls") or ():
                arguments = call["function"]["arguments"]
                parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "input": parsed,
                    }
                )
            messages.append({"role": "assistant", "content": blocks})
        else:
            result = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": content,
            }
            messages.append({"role": "user", "content": [result]})
    tools = [
        {
            "name": t["function"]["name"],
            "input_schema": t["function"].get("parameters") or {"type": "object"},
        }
        for t in case["tools"]
    ]
    choice = {"auto": "auto", "required": "any", "none": "none"}[case["tool_choice"]]
    request = {
        "model": MODEL,
        "max_tokens": 4000,
        "messages": messages,
        "tools": tools,
        "tool_choice": {
            "type": choice,
            "disable_parallel_tool_use": not case["parallel_tool_calls"],
        },
        "thinking": {
            "type": "enabled" if case["enable_thinking"] else "disabled",
            "budget_tokens": 1024,
        },
    }
    if system is not None:
        request["system"] = system
    return request


def message_of(message: Any) -> dict[str, Any]:
    """A message's blocks in the parse corpus's comparison shape."""
    kinds = {"text": "content", "thinking": "reasoning_content"}
    out: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": []}
    for block in message.content:
        if block.type == "tool_use":
            out["tool_calls"].append({"name": block.name, "arguments": json.dumps(block.input)})
        else:
            out[kinds[block.type]] += block.text if block.type == "text" else block.thinking
    return out


@pytest.mark.parametrize(
    "case",
    per_case(PARSE_CASES.exists(), family_cases, lambda c: c["template"].removesuffix(".jinja")),
)
def test_every_family_calls_a_tool_through_messages(
    case: dict[str, Any], standin: tuple[StandIn, str]
) -> None:
    assert not case["chat_template_kwargs"]  # Anthropic's request has no place for them
    engine, url = standin
    codec = Codec(
        template_source(case["template"]),
        bos_token=case["bos_token"],
        eos_token=case["eos_token"],
    )
    output = case["outputs"][0]
    reset(engine, output["text"])
    compare = load_compare().compare
    with served(codec, RemoteEngine(url, kind="llama")) as root:
        whole, streamed, types = both(client_of(root), **anthropic_request(case))
    got = message_of(whole)
    assert compare(output["expected"], got) is None, (got, output["expected"])
    assert whole.stop_reason == "tool_use"
    assert message_of(streamed) == got and streamed.stop_reason == "tool_use"
    check_stream(types)


# ------------------------------------------------------------------ llama.cpp in process


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("llama_cpp")
    from ._llama import write_chat_model
    from .test_serve_llama import SPECIALS

    path = tmp_path_factory.mktemp("anthropic") / "qwen-tiny.gguf"
    favoured = {"<tool_call>": 8.0, "\n": 8.0, "</tool_call>": 9.0, "<|im_end|>": 10.0}
    return write_chat_model(
        path,
        template_source(QWEN),
        SPECIALS,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        favoured=favoured,
        user_defined=["<tool_call>", "</tool_call>"],
    )


@pytest.fixture(scope="module")
def llama(gguf: Path) -> Iterator[tuple[Any, Any]]:
    from chatcodec.serve import ServeConfig, create_app
    from chatcodec.serve.llama import LlamaEngine

    engine = LlamaEngine(gguf, n_ctx=2048, n_threads=1)
    app = create_app(chatcodec.load(str(gguf)), engine, ServeConfig(MODEL))
    with ServerThread(app) as thread:
        yield engine, client_of(thread.url + "/v1")
    asyncio.run(engine.aclose())


@needs_templates
def test_llama_text_and_count_tokens(llama: tuple[Any, Any]) -> None:
    engine, client = llama
    request = {
        "model": MODEL,
        "max_tokens": 24,
        "messages": USER,
        "extra_body": {"temperature": 0.0},
    }
    whole, streamed, types = both(client, **request)
    assert whole.stop_reason in ("end_turn", "max_tokens")
    assert whole.usage.output_tokens <= 24
    assert shape(streamed) == shape(whole)  # greedy: the same reply twice
    check_stream(types)
    count = client.messages.count_tokens(model=MODEL, messages=USER)
    assert count.input_tokens == whole.usage.input_tokens > 0


@needs_templates
@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_llama_forced_tool_call_validates(choice: dict[str, Any], llama: tuple[Any, Any]) -> None:
    from .test_serve_llama import TOOLS

    _, client = llama
    # the llama tests' tools: arguments of enums, which the random model finishes soon
    tools = [
        {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS
    ]
    request = {
        "model": MODEL,
        "max_tokens": 1000,
        "messages": USER,
        "tools": tools,
        # one call: the random model would go on writing parallel calls until max_tokens
        "tool_choice": {**choice, "disable_parallel_tool_use": True},
        "extra_body": {"seed": 1},
    }
    whole, streamed, types = both(client, **request)
    calls = [b for b in whole.content if b.type == "tool_use"]
    assert calls and whole.stop_reason == "tool_use", whole
    for block in calls:
        if choice["type"] == "tool":
            assert block.name == "get_weather"
        validates(block, next(t for t in tools if t["name"] == block.name))
    assert shape(streamed) == shape(whole)
    check_stream(types)


@needs_templates
def test_llama_knows_which_stop_sequence_ended_the_reply(llama: tuple[Any, Any]) -> None:
    """The engine in process says which stop string it met: ``stop_sequence``."""
    _, client = llama
    # (this seed's reply runs a few characters: the tiny model ends its turn soon)
    request = {"model": MODEL, "max_tokens": 64, "messages": USER, "extra_body": {"seed": 1}}
    free = client.messages.create(**request)
    assert free.stop_reason == "end_turn"
    text = free.content[0].text
    assert len(text) >= 2
    stop = text[1:]
    whole, streamed, _ = both(client, stop_sequences=["\x00never", stop], **request)
    assert whole.stop_reason == "stop_sequence" and whole.stop_sequence == stop
    assert [b.text for b in whole.content] == [text[:1]]
    assert shape(streamed) == shape(whole)
