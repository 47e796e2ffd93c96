"""OpenAI's Responses API on chatcodec serve: the official ``openai`` client's
``responses.create`` and ``responses.stream`` against the app on loopback, in front of the
replaying engine stand-in (exact replies) or llama.cpp in process over the tests' tiny GGUF."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

pytest.importorskip("starlette")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
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
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
QWEN3 = "Qwen-Qwen3-0.6B.jinja"
needs_templates = pytest.mark.skipif(not TEMPLATES.exists(), reason="needs ../shared")
EVENT = TypeAdapter(openai.types.responses.ResponseStreamEvent)
RESPONSE = TypeAdapter(openai.types.responses.Response)


@pytest.fixture(scope="module")
def standin() -> Iterator[tuple[StandIn, str]]:
    engine = StandIn(seed=13)
    with ServerThread(engine.app) as thread:
        yield engine, thread.url + "/v1"


def client_of(root: str) -> Any:
    return openai.OpenAI(base_url=root, api_key="unused", max_retries=0)


def both(client: Any, **request: Any) -> tuple[Any, Any, list[str]]:
    """The response whole and streamed (the SDK's accumulator), and the stream's event types.
    The SDK builds its objects without checking them: each is checked here against its type,
    and the sequence numbers count up from 0."""
    whole = client.responses.create(**request)
    RESPONSE.validate_python(whole.to_dict())
    types = []
    with client.responses.stream(**request) as stream:
        for number, event in enumerate(stream):
            EVENT.validate_python(event.to_dict(warnings=False))
            assert event.sequence_number == number
            types.append(event.type)
        streamed = stream.get_final_response()
    return whole, streamed, types


def shape(response: Any) -> dict[str, Any]:
    """What a response says, the per-response ids left out."""
    items = []
    for item in response.output:
        fields = item.model_dump(exclude_none=True, warnings=False)
        fields.pop("id")
        fields.pop("parsed_arguments", None)
        if item.type == "message":
            for part in fields["content"]:
                part.pop("parsed", None)
        if item.type == "function_call":
            fields.pop("call_id")
        items.append(fields)
    usage = response.usage
    return {
        "output": items,
        "status": response.status,
        "usage": (usage.input_tokens, usage.output_tokens) if usage else None,
    }


def check_stream(types: list[str]) -> None:
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] in ("response.completed", "response.incomplete")
    opened = False
    for kind in types[2:-1]:
        if kind == "response.output_item.added":
            assert not opened
            opened = True
        elif kind == "response.output_item.done":
            assert opened
            opened = False
        else:
            assert opened, kind
    assert not opened


# ------------------------------------------------------------------ the stand-in: exact replies


def test_plain_text_whole_and_streamed(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "It is sunny in Paris.")
    with served(plain_codec(), RemoteEngine(url)) as root:
        whole, streamed, types = both(
            client_of(root),
            model=MODEL,
            input="What's the weather?",
            instructions="Be brief.",
            max_output_tokens=64,
            temperature=0.5,
            metadata={"k": "v"},
            store=False,
            prompt_cache_key="x",
        )
    assert whole.object == "response" and whole.id.startswith("resp_")
    assert whole.status == "completed" and whole.output_text == "It is sunny in Paris."
    assert shape(streamed) == shape(whole)
    check_stream(types)
    sent = engine.requests[-1]
    assert sent["prompt"] == "system: Be brief.\nuser: What's the weather?\n"
    assert (sent["max_tokens"], sent["temperature"]) == (64, 0.5)
    assert whole.usage.input_tokens == len(sent["prompt"])


def test_max_output_tokens_is_incomplete(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "one two three")
    with served(plain_codec(), RemoteEngine(url)) as root:
        client = client_of(root)
        whole = client.responses.create(model=MODEL, input="Go", max_output_tokens=3)
        # the stream ends with response.incomplete, as OpenAI's does (the SDK's accumulator
        # waits for response.completed only: the raw events are read here)
        events = list(
            client.responses.create(model=MODEL, input="Go", max_output_tokens=3, stream=True)
        )
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"
    assert whole.output_text == "one"
    for event in events:
        EVENT.validate_python(event.to_dict(warnings=False))
    check_stream([event.type for event in events])
    assert events[-1].type == "response.incomplete"
    assert shape(events[-1].response) == shape(whole)


@needs_templates
@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "name": "get_weather"}, "auto"]
)
def test_a_tool_call(choice: Any, standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "Let me look. " + QWEN_CALL)
    with served(qwen(), RemoteEngine(url, kind="llama")) as root:
        request = {"model": MODEL, "input": "Weather in Paris?", "tools": [WEATHER, TIME]}
        whole, streamed, types = both(client_of(root), tool_choice=choice, **request)
    assert [item.type for item in whole.output] == ["message", "function_call"]
    call = whole.output[1]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert shape(streamed) == shape(whole)
    check_stream(types)
    assert "response.function_call_arguments.delta" in types
    sent = engine.requests[-1]
    assert sent["grammar_lazy"] is (choice == "auto")


@needs_templates
def test_an_agent_loop_renders_as_the_openai_messages(standin: tuple[StandIn, str]) -> None:
    """function_call and function_call_output items, sent back as input or continued with
    previous_response_id: the prompt is the chat endpoint's for the same messages."""
    engine, url = standin
    with served(qwen(), RemoteEngine(url, kind="llama")) as root:
        client = client_of(root)
        reset(engine, QWEN_CALL)
        first = client.responses.create(
            model=MODEL, input="Weather in Paris?", tools=[WEATHER], instructions="Be brief."
        )
        call = first.output[0]
        assert call.type == "function_call"
        reset(engine, "It is 18 °C.")
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "18 °C"}
        # the whole conversation sent again (store: false, as Codex CLI does)
        items = [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            result,
        ]
        again = client.responses.create(
            model=MODEL, input=items, tools=[WEATHER], instructions="Be brief.", store=False
        )
        assert again.output_text == "It is 18 °C."
        prompt = engine.requests[-1]["prompt"]
        # continued from the stored response
        client.responses.create(
            model=MODEL,
            input=[result],
            previous_response_id=first.id,
            tools=[WEATHER],
            instructions="Be brief.",
        )
        assert engine.requests[-1]["prompt"] == prompt
        # the chat endpoint's render of the same conversation
        messages = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        # an object, as the Responses input's JSON text is given to the template
                        "function": {"name": call.name, "arguments": json.loads(call.arguments)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "content": "18 °C"},
        ]
        tool = {
            "type": "function",
            "function": {k: v for k, v in WEATHER.items() if k != "type"},
        }
        client.chat.completions.create(model=MODEL, messages=messages, tools=[tool])
        assert engine.requests[-1]["prompt"] == prompt
        # a response not stored cannot be continued; an unknown id is a 404
        with pytest.raises(openai.NotFoundError) as missing:
            client.responses.create(model=MODEL, input="x", previous_response_id=again.id)
        assert missing.value.code == "previous_response_not_found"


@needs_templates
def test_reasoning_on_a_thinking_template(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    codec = Codec(template_source(QWEN3), eos_token="<|im_end|>")
    reset(engine, "<think>\nThe user greets me.\n</think>\n\nHello!")
    with served(codec, RemoteEngine(url)) as root:
        client = client_of(root)
        whole, streamed, types = both(client, model=MODEL, input="Hi", reasoning={"effort": "high"})
        assert [item.type for item in whole.output] == ["reasoning", "message"]
        read = (
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Hi"}]
            )
            .choices[0]
            .message
        )
        assert whole.output[0].content[0].text == read.reasoning_content
        assert whole.output_text == read.content == "Hello!"
        assert shape(streamed) == shape(whole)
        assert "response.reasoning_text.delta" in types
        reset(engine, "Hello!")
        client.responses.create(model=MODEL, input="Hi", reasoning={"effort": "none"})
        assert engine.requests[-1]["prompt"].endswith("<think>\n\n</think>\n\n")
        # a reasoning item sent back is the assistant message's reasoning_content
        items = [
            {"role": "user", "content": "Hi"},
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Greet."}],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
        ]
        client.responses.create(model=MODEL, input=items)
        prompt = engine.requests[-1]["prompt"]
        assert "Greet." in prompt
        messages = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet."},
        ]
        client.chat.completions.create(model=MODEL, messages=messages)
        assert engine.requests[-1]["prompt"] == prompt


@needs_templates
def test_json_output(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    reset(engine, '{"city": "Paris"}')
    with served(qwen(), RemoteEngine(url, kind="llama")) as root:
        client = client_of(root)
        text = {"format": {"type": "json_schema", "name": "place", "schema": schema}}
        whole = client.responses.create(model=MODEL, input="Where?", text=text)
        grammar = engine.requests[-1]["grammar"]
        response_format = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Where?"}],
            response_format=response_format,
        )
        assert engine.requests[-1]["grammar"] == grammar
    jsonschema.validate(json.loads(whole.output_text), schema)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def test_errors_are_in_openais_shape(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "Hi.")
    with served(plain_codec(), RemoteEngine(url), api_key="sekrit") as root:
        post = f"{root}/responses"
        key = {"authorization": "Bearer sekrit"}
        good = {"model": MODEL, "input": "Hi"}
        assert error_of(httpx.post(post, json=good), 401)["code"] == "invalid_api_key"
        assert httpx.post(post, json=good, headers=key).status_code == 200
        for kind in ("web_search", "custom", "local_shell"):
            tools = [WEATHER, {"type": kind, "name": "x"}]
            error = error_of(httpx.post(post, json={**good, "tools": tools}, headers=key), 400)
            assert error["param"] == "tools[1].type" and repr(kind) in error["message"]
        # a function tool without its name is named by the schema, not taken for another type
        nameless = {"type": "function", "parameters": {}}
        error = error_of(httpx.post(post, json={**good, "tools": [nameless]}, headers=key), 400)
        assert error["param"] == "tools" and "name" in error["message"]
        image = {"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}
        error = error_of(httpx.post(post, json={**good, "input": [image]}, headers=key), 400)
        assert "input_image" in error["message"]
        assert (
            "background"
            in error_of(httpx.post(post, json={**good, "background": True}, headers=key), 400)[
                "message"
            ]
        )
        assert (
            error_of(httpx.post(post, json={**good, "model": "gpt"}, headers=key), 404)["code"]
            == "model_not_found"
        )
        engine.status = 500
        assert error_of(httpx.post(post, json=good, headers=key), 502)["type"] == "server_error"
        engine.status = 200


@needs_templates
def test_an_unreadable_reply_mid_stream_is_response_failed(standin: tuple[StandIn, str]) -> None:
    engine, url = standin
    reset(engine, "Let me see. " + QWEN_CALL.replace('"Paris"', ""))
    body = {"model": MODEL, "input": "Weather?", "tools": [WEATHER]}
    with served(qwen(), RemoteEngine(url), policy="reference") as root:
        with client_of(root).responses.stream(**body) as stream:
            types = [event.type for event in stream]
        assert types[-1] == "response.failed"
        error_of(httpx.post(f"{root}/responses", json=body), 502)


# ------------------------------------------------------------------ every family's tool call


def responses_request(case: dict[str, Any]) -> dict[str, Any]:
    """A corpus case (OpenAI's chat messages) as the Responses API's input items."""
    items: list[dict[str, Any]] = []
    instructions = None
    for message in case["messages"]:
        role, content = message["role"], message.get("content")
        if role == "system":
            instructions = content
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": content,
                }
            )
        elif role == "assistant":
            if content:
                items.append(
                    {"role": "assistant", "content": [{"type": "output_text", "text": content}]}
                )
            for call in message.get("tool_calls") or ():
                arguments = call["function"]["arguments"]
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments)
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": arguments,
                    }
                )
        else:
            items.append({"role": role, "content": content})
    tools = [{"type": "function", **t["function"]} for t in case["tools"]]
    request = {
        "model": MODEL,
        "input": items,
        "tools": tools,
        "tool_choice": case["tool_choice"],
        "parallel_tool_calls": case["parallel_tool_calls"],
        "reasoning": {"effort": "medium" if case["enable_thinking"] else "none"},
    }
    if instructions is not None:
        request["instructions"] = instructions
    return request


def message_of(response: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": []}
    for item in response.output:
        if item.type == "function_call":
            out["tool_calls"].append({"name": item.name, "arguments": item.arguments})
        elif item.type == "reasoning":
            out["reasoning_content"] += "".join(part.text for part in item.content or ())
        else:
            out["content"] += "".join(part.text for part in item.content)
    return out


@pytest.mark.parametrize(
    "case",
    per_case(PARSE_CASES.exists(), family_cases, lambda c: c["template"].removesuffix(".jinja")),
)
def test_every_family_calls_a_tool_through_responses(
    case: dict[str, Any], standin: tuple[StandIn, str]
) -> None:
    assert not case["chat_template_kwargs"]  # the Responses API has no place for them
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
        whole, streamed, types = both(client_of(root), **responses_request(case))
    got = message_of(whole)
    assert compare(output["expected"], got) is None, (got, output["expected"])
    assert message_of(streamed) == got
    check_stream(types)


# ------------------------------------------------------------------ llama.cpp in process


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("llama_cpp")
    from chatcodec.serve import ServeConfig, create_app
    from chatcodec.serve.llama import LlamaEngine

    from ._llama import write_chat_model
    from .test_serve_llama import SPECIALS

    path = tmp_path_factory.mktemp("responses") / "qwen-tiny.gguf"
    favoured = {"<tool_call>": 8.0, "\n": 8.0, "</tool_call>": 9.0, "<|im_end|>": 10.0}
    gguf: Path = write_chat_model(
        path,
        template_source(QWEN),
        SPECIALS,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        favoured=favoured,
        user_defined=["<tool_call>", "</tool_call>"],
    )
    engine = LlamaEngine(gguf, n_ctx=2048, n_threads=1)
    app = create_app(chatcodec.load(str(gguf)), engine, ServeConfig(MODEL))
    with ServerThread(app) as thread:
        yield client_of(thread.url + "/v1")
    asyncio.run(engine.aclose())


@needs_templates
@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
def test_llama_forced_tool_call_validates(choice: Any, llama: Any) -> None:
    from .test_serve_llama import TOOLS

    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    request = {
        "model": MODEL,
        "input": "Weather?",
        "tools": tools,
        "tool_choice": choice,
        "parallel_tool_calls": False,  # the random model would go on writing calls
    }
    whole, streamed, types = both(llama, temperature=0.0, **request)
    calls = [item for item in whole.output if item.type == "function_call"]
    assert calls
    for call in calls:
        if not isinstance(choice, str):
            assert call.name == "get_weather"
        schema = next(t["parameters"] for t in tools if t["name"] == call.name)
        jsonschema.validate(json.loads(call.arguments), schema)
    assert shape(streamed) == shape(whole)
    check_stream(types)
