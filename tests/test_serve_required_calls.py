"""Issue 38, G1 through ``chatcodec serve``: a required call is a call (docs/differences.md).

A tiny random-weight GGUF (tests/_llama.py, ``write_chat_model``: the template's special tokens,
the template in its metadata, and no bias towards any token) answers through the server, in
process (``LlamaEngine``) and in front of llama-cpp-python's own server, asked with the official
``openai`` client. The model's text is noise: under the server's default ``guaranteed`` policy
the grammar leaves it nothing to write but the calls, so every ``required``, named and
single-call request ends with ``finish_reason: "tool_calls"`` and valid arguments. Under
``reference`` (llama.cpp's grammar) the same noise runs as free text before any call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("starlette")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

import chatcodec  # noqa: E402
from chatcodec.serve import RemoteEngine, ServeConfig, create_app  # noqa: E402
from chatcodec.serve.llama import LlamaEngine  # noqa: E402

from ._llama import write_chat_model  # noqa: E402
from ._standin import ServerThread  # noqa: E402
from .conftest import template_source  # noqa: E402
from .test_grammar_guaranteed import NAMED, SCHEMAS, TOOLS  # noqa: E402
from .test_serve_llama import llama_cpp_python_server  # noqa: E402

MODEL = "tiny"
MAX_TOKENS = 256
USER = [{"role": "user", "content": "Wake me at seven, and tell me the weather in Oslo."}]
# (template, its special tokens, bos, eos): a JSON call in tags (the auto parser), Qwen3-Coder's
# XML call (its own family), Llama 3.3's bare JSON call (the auto parser, no call marker)
TEMPLATES = {
    "qwen2.5": (
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
        "<|endoftext|>",
        "<|im_end|>",
    ),
    "qwen3-coder": (
        "Qwen3-Coder.jinja",
        ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
        "<|endoftext|>",
        "<|im_end|>",
    ),
    "llama3.3": (
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
        ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"],
        "<|begin_of_text|>",
        "<|eot_id|>",
    ),
}
CHOICES: dict[str, dict[str, Any]] = {
    "required": {"tool_choice": "required"},
    # one call, as OpenAI's forced function gives (with parallel calls allowed, the noise may
    # go on calling until max_tokens: calls all the same, but cut)
    "named": {"tool_choice": NAMED, "parallel_tool_calls": False},
    "single": {"tool_choice": "required", "parallel_tool_calls": False},
}
SEEDS = (0, 1)


@pytest.fixture(scope="module", params=list(TEMPLATES))
def gguf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    name, specials, bos, eos = TEMPLATES[request.param]
    path = tmp_path_factory.mktemp("required") / f"{request.param}.gguf"
    return write_chat_model(path, template_source(name), specials, bos=bos, eos=eos)


@pytest.fixture(scope="module")
def in_process(gguf: Path) -> Iterator[str]:
    """chatcodec serve over llama.cpp in this process: its ``/v1`` root."""
    engine = LlamaEngine(gguf, n_ctx=2048, n_threads=1)
    app = create_app(chatcodec.load(str(gguf)), engine, ServeConfig(MODEL))
    try:
        with ServerThread(app) as thread:
            yield thread.url + "/v1"
    finally:
        asyncio.run(engine.aclose())


@pytest.fixture(scope="module")
def fronted(gguf: Path) -> Iterator[str]:
    """chatcodec serve in front of llama-cpp-python's own server (``--backend``): its ``/v1``."""
    with llama_cpp_python_server(gguf) as root:
        engine = RemoteEngine(root, kind="llama-cpp-python", stream=False)
        app = create_app(chatcodec.load(str(gguf)), engine, ServeConfig(MODEL))
        with ServerThread(app) as thread:
            yield thread.url + "/v1"


def ask(root: str, choice: str, seed: int, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=root, api_key="unused", max_retries=0)
    return client.chat.completions.create(
        model=MODEL,
        messages=USER,
        tools=TOOLS,
        seed=seed,
        temperature=1.0,
        max_tokens=MAX_TOKENS,
        **CHOICES[choice],
        **extra,
    )


def check(reply: Any, choice: str) -> None:
    """Calls, and only calls: of the declared tools (the named one), arguments valid, one when
    parallel calls are off."""
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls", message
    calls = message.tool_calls or []
    assert calls and not (message.content or "").strip()
    if choice != "required":
        assert len(calls) == 1
    allowed = {"set_alarm"} if choice == "named" else set(SCHEMAS)
    for call in calls:
        assert call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("choice", list(CHOICES))
def test_in_process_a_required_call_is_a_call(in_process: str, choice: str, seed: int) -> None:
    check(ask(in_process, choice, seed), choice)


@pytest.mark.parametrize("choice", list(CHOICES))
def test_in_front_of_llama_cpp_python_a_required_call_is_a_call(fronted: str, choice: str) -> None:
    check(ask(fronted, choice, 0), choice)


def test_under_reference_the_noise_runs_as_text(in_process: str) -> None:
    """The control: llama.cpp's own grammar (the request's ``policy: reference``) lets the
    same model write free text before any call, and a reply runs to ``max_tokens`` as text
    (the same requests under ``guaranteed`` are calls, above)."""
    replies = [
        ask(in_process, "required", seed, extra_body={"policy": "reference"}) for seed in SEEDS
    ]
    cut = [r.choices[0] for r in replies if r.choices[0].finish_reason == "length"]
    assert cut and all(not c.message.tool_calls and c.message.content for c in cut)
