"""llama.cpp's own test vectors (tests/test-chat.cpp) for the Qwen3-Coder handler."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.reply import ReplyStream, fold

from ._reply_oracle import load_compare
from .conftest import shared_path, template_source


def _vectors() -> list[dict[str, Any]]:
    path = shared_path("oracle", "parse", "llamacpp_tests.json")
    return [v for v in json.loads(path.read_text("utf-8")) if v["parser"] == "qwen3-coder"]


def _openai_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["parameters"],
            },
        }
        for t in tools
    ]


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """llama.cpp hands templates that read object arguments parsed ones (its message rewrite)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                # the vectors keep llama.cpp's flat call form; templates read the OpenAI one
                fn = dict(c.get("function") or {"name": c["name"], "arguments": c["arguments"]})
                if isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.loads(fn["arguments"])
                calls.append({"type": "function", "id": c.get("id", ""), "function": fn})
            m["tool_calls"] = calls
            m.setdefault("content", "")
        out.append(m)
    return out


def test_all_qwen3_coder_vectors_pass() -> None:
    compare = load_compare()
    vectors = _vectors()
    assert len(vectors) == 71
    failures: list[str] = []
    for v in vectors:
        observed = v["observed_llama_cpp"]
        codec = Codec(template_source(v["template"].rsplit("/", 1)[-1]))
        turn = codec.prepare(
            _messages(v["messages"]),
            tools=_openai_tools(v["tools"]),
            tool_choice=v["tool_choice"],
            parallel_tool_calls=v["parallel_tool_calls"],
            enable_thinking=v["enable_thinking"],
            reasoning_format=v["reasoning_format"],
        )
        assert turn.handler == "Qwen3-Coder"
        prompt = observed["generation_prompt"]
        if v["continue_final_message"] == "none":
            assert turn.generation_prompt == prompt, v["id"]
        # a continued message is prefilled into the generation prompt (llama.cpp builds it by hand)
        stream = ReplyStream(turn.format, prompt)
        got = stream.feed(v["input"])
        got += stream.flush()
        message = stream.finish(partial=v["is_partial"])
        why = compare.compare(observed, message.to_dict())
        if why is None:
            why = compare.compare(observed, fold(got).to_dict())
        if why is not None:
            failures.append(f"{v['id']}: {why}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_vectors_stream_in_small_chunks_to_the_same_message(size: int) -> None:
    for v in _vectors():
        codec = Codec(template_source(v["template"].rsplit("/", 1)[-1]))
        turn = codec.prepare(
            _messages(v["messages"]),
            tools=_openai_tools(v["tools"]),
            tool_choice=v["tool_choice"],
            parallel_tool_calls=v["parallel_tool_calls"],
            enable_thinking=v["enable_thinking"],
            reasoning_format=v["reasoning_format"],
        )
        prompt = v["observed_llama_cpp"]["generation_prompt"]
        whole = ReplyStream(turn.format, prompt, "id_")
        whole.feed(v["input"])
        expected = whole.finish()
        stream = ReplyStream(turn.format, prompt, "id_")
        deltas = []
        text = v["input"]
        for i in range(0, len(text), size):
            deltas += stream.feed(text[i : i + size])
        deltas += stream.flush()
        folded = fold(deltas)
        assert folded.content == expected.content, v["id"]
        assert folded.reasoning_content == expected.reasoning_content, v["id"]
        assert folded.tool_calls == expected.tool_calls, v["id"]
