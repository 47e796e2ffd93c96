"""Random request bodies against the server on loopback: every answer is a 200 in OpenAI's
shape, a 400 in OpenAI's error shape, or the documented 502 for a whole reply that does not
parse; never a 500.

The bodies are mostly valid in shape with any JSON value now and then
(tests/_hypothesis.py), plus the sampling fields with values in and out of range.
The engine stand-in answers each with the next of a few replies (text, a call, JSON, a
cut-short thought; every other one the call where the prompt offers its tool), so calls and
streams that end with an unparseable reply are reached too. Runs without ``../shared``
(examples/chatml-tiny and an inline template that reads every part of a request).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

from chatcodec import Codec, load  # noqa: E402
from chatcodec.serve import RemoteEngine, ServeConfig, create_app  # noqa: E402

from ._hypothesis import (  # noqa: E402
    JSON,
    MESSAGES,
    REPLIES,
    RESPONSE_FORMAT,
    SEEDED,
    TOOL_CHOICE,
    TOOLS,
    maybe,
)
from ._standin import ServerThread, StandIn  # noqa: E402
from .conftest import ROOT  # noqa: E402
from .test_robust_inputs import INLINE  # noqa: E402

MODEL = "tiny"
_NUMBER = st.integers(-3, 3) | st.floats(-3, 3) | st.floats(allow_nan=False)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
BODY = st.fixed_dictionaries(
    # streamed or not; often one plain question and the one tool the replies call
    {"model": st.just(MODEL), "messages": st.just(ASK) | MESSAGES, "stream": st.booleans()},
    optional={
        "tools": st.just([WEATHER]) | TOOLS,
        "tool_choice": TOOL_CHOICE,
        "response_format": RESPONSE_FORMAT,
        "parallel_tool_calls": maybe(st.booleans()),
        "stream_options": maybe(st.fixed_dictionaries({"include_usage": st.booleans()})),
        "stop": maybe(st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=3)),
        "max_tokens": maybe(st.integers(-1, 40)),
        "temperature": maybe(_NUMBER),
        "top_p": maybe(_NUMBER),
        "seed": maybe(st.integers()),
        "presence_penalty": maybe(_NUMBER),
        "continue_final_message": maybe(st.booleans()),
        "chat_template_kwargs": maybe(
            st.dictionaries(st.sampled_from(["enable_thinking", "tools", "x"]), JSON, max_size=2)
        ),
        "reasoning_effort": maybe(st.sampled_from(["low", "high"])),
        "policy": maybe(st.sampled_from(["reference", "guaranteed"])),
        "n": maybe(st.integers(0, 2)),
    },
)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    engine = StandIn(seed=3)
    count = itertools.count()

    def reply(body: dict[str, Any]) -> str:  # the next reply; every other one a call, if offered
        n = next(count)
        return REPLIES[1] if n % 2 and "get_weather" in body["prompt"] else REPLIES[n % 4]

    engine.reply = reply
    codecs = {"chatml-tiny": load(ROOT / "examples" / "chatml-tiny"), "inline": Codec(INLINE)}
    with ServerThread(engine.app) as backend:
        url = backend.url + "/v1"
        apps = {
            name: create_app(codec, RemoteEngine(url, kind="llama"), ServeConfig(MODEL))
            for name, codec in codecs.items()
        }
        with ServerThread(apps["chatml-tiny"]) as tiny, ServerThread(apps["inline"]) as inline:
            yield {"chatml-tiny": tiny.url, "inline": inline.url}


def check_error(
    response: Any, kind: str = "invalid_request_error", code: str | None = None
) -> None:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == kind
    assert error["param"] is None or isinstance(error["param"], str)
    if code is not None:
        assert error["code"] == code


def check_stream(response: Any) -> str:
    """How the stream ended (its finish reason, or an error event) once its shape is checked."""
    events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"  # after the last chunk, or after an error event
    payloads = [json.loads(e) for e in events[:-1]]
    error = "error" in payloads[-1]
    if error:  # a reply that turned out unparseable: the stream ends so
        payloads.pop()
    chunks = [ChatCompletionChunk.model_validate(p) for p in payloads]
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert all(f is None for f in finishes[:-1])
    if error:
        return "error event"
    assert finishes[-1] in ("stop", "length", "tool_calls")
    return str(finishes[-1])


@pytest.mark.parametrize("name", ["chatml-tiny", "inline"])
@settings(SEEDED, max_examples=120)
@given(body=BODY)
def test_any_body_is_answered_in_openais_shape(
    name: str, body: dict[str, Any], servers: dict[str, str]
) -> None:
    url = servers[name] + "/v1/chat/completions"
    # Python's writer, not httpx's: a body may hold Infinity, which a hostile client can send
    content = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    with httpx.stream("POST", url, content=content, headers=headers, timeout=30) as response:
        response.read() if response.status_code != 200 else None
        assert response.status_code in (200, 400, 502), (response.status_code, response.read())
        if response.status_code == 502:  # a whole reply that does not parse (docs/serve.md)
            check_error(response, "server_error", "unparseable_reply")
            event("502 unparseable")
        elif response.status_code == 400:
            check_error(response)
            event(f"400 {response.json()['error']['param']}")
        elif response.headers["content-type"].startswith("text/event-stream"):
            assert body["stream"] is True
            event(f"200 stream, {check_stream(response)}")
        else:
            completion = ChatCompletion.model_validate(json.loads(response.read()))
            finish = completion.choices[0].finish_reason
            assert finish in ("stop", "length", "tool_calls")
            event(f"200 whole, {finish}")
