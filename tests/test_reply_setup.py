"""Request setup as llama.cpp does it: generation prompts, requests it cannot set up, the
llama.cpp-compatible render, the parallel-calls default, and every llama.cpp test vector run
through ``Codec.prepare`` + ``Turn.parse``."""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.errors import ChatCodecError, TemplateError
from chatcodec.reply.cli import prepare_request

from ._reply_oracle import load_compare
from .conftest import read_jsonl, shared_path, template_source

# Cases whose generation prompt llama.cpp computes from a conversation it rewrites first, with a
# rewrite chatcodec does not port yet: case id -> the rewrite.
_GEMMA4_FOLD = "gemma4.cpp convert_tool_responses_gemma4 (tool results folded into the model turn)"
NOT_PORTED: dict[str, str] = {
    "google-gemma-4-31B-it-interleaved__history-par1__history_call": _GEMMA4_FOLD,
    "google-gemma-4-31B-it-interleaved__history-par1__reasoning": _GEMMA4_FOLD,
    "google-gemma-4-31B-it-interleaved__history-par1__tool_parallel": _GEMMA4_FOLD,
}


@lru_cache(maxsize=1)
def _cases() -> tuple[dict[str, Any], ...]:
    return tuple(read_jsonl(shared_path("oracle", "parse", "cases.jsonl")))


def test_generation_prompts_equal_llama_cpp_for_every_request_it_set_up() -> None:
    agree = 0
    mismatches: list[str] = []
    unexplained: list[str] = []
    for case in _cases():
        if case["llama_cpp"] is None:
            continue
        expected = case["llama_cpp"]["generation_prompt"]
        got = prepare_request(case).generation_prompt
        if got == expected:
            agree += 1
            continue
        mismatches.append(case["id"])
        if case["id"] not in NOT_PORTED:
            unexplained.append(f"{case['id']}: got {got!r}, llama.cpp {expected!r}")
    print(f"\ngeneration prompts equal to llama.cpp's: {agree}/{agree + len(mismatches)}")
    assert not unexplained, "\n".join(unexplained[:20])
    assert agree >= 6300


def test_requests_llama_cpp_cannot_set_up_fail_in_prepare() -> None:
    failed = [c for c in _cases() if c["llama_cpp"] is None]
    assert len(failed) == 26
    for case in failed:
        with pytest.raises(ChatCodecError):
            prepare_request(case)


def test_llama_cpp_render_only_where_transformers_cannot() -> None:
    # Hermes 2 Pro iterates `tools`: transformers passes None (the loop fails), llama.cpp
    # leaves it undefined (an empty loop)
    source = template_source("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja")
    codec = Codec(source, bos_token="<|begin_of_text|>", eos_token="<|im_end|>")
    messages = [{"role": "user", "content": "Hi"}]
    with pytest.raises(TemplateError):
        codec.render(messages, add_generation_prompt=True)
    turn = codec.prepare(messages)
    assert turn.prompt.endswith("<|im_start|>assistant\n")
    assert turn.generation_prompt == "<|im_start|>assistant\n"
    # a template transformers renders keeps transformers' prompt, byte for byte
    qwen = Codec(template_source("Qwen-Qwen3-0.6B.jinja"), eos_token="<|im_end|>")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert qwen.prepare(messages, tools=tools).prompt == qwen.render(
        messages, tools=tools, add_generation_prompt=True, enable_thinking=True
    )


def test_a_false_add_generation_prompt_is_left_undefined() -> None:
    # rwkv-world defaults an undefined add_generation_prompt to true: llama.cpp's render
    # "without" it still ends with the assistant header, so the generation prompt is empty
    codec = Codec(template_source("llama-cpp-rwkv-world.jinja"))
    turn = codec.prepare([{"role": "user", "content": "Hi"}])
    assert turn.prompt.endswith("Assistant: <think>")
    assert turn.generation_prompt == ""
    assert turn.parse("a</think>b").content == "a</think>b"


def test_parallel_tool_calls_default_to_the_template_capability() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"a": {"type": "string"}}},
            },
        }
    ]
    messages = [{"role": "user", "content": "x"}]
    call = "<tool_call>\n<function=f>\n<parameter=a>\n{}\n</parameter>\n</function>\n</tool_call>"
    reply = call.format(1) + "\n" + call.format(2)
    # Qwen3-Coder renders two calls in one message: parallel by default, as llama-server does
    coder = Codec(template_source("Qwen3-Coder.jinja"))
    counts = [
        len(coder.prepare(messages, tools=tools, parallel_tool_calls=p).parse(reply).tool_calls)
        for p in (None, False, True)
    ]
    assert counts == [2, 1, 2]
    # Llama 3.1 refuses two calls in one message: not parallel by default
    from chatcodec.codec import _supports_parallel_tool_calls

    llama = Codec(template_source("meta-llama-Llama-3.1-8B-Instruct.jinja"))
    assert not _supports_parallel_tool_calls(llama.template)


# ---------------------------------------------------------------- llama.cpp's test vectors


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
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c.get("function") or {"name": c["name"], "arguments": c["arguments"]})
                if isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.loads(fn["arguments"])
                calls.append({"type": "function", "id": c.get("id", ""), "function": fn})
            m["tool_calls"] = calls
            m.setdefault("content", "")
        out.append(m)
    return out


def _setup_gap(v: dict[str, Any]) -> str | None:
    """The request option of a vector that prepare does not set up as llama.cpp does yet."""
    if v["json_schema"]:
        return "response_format"
    if v["continue_final_message"] != "none":
        return "continuation"
    return None


def _run(v: dict[str, Any], compare: Any) -> str | None:
    observed = v["observed_llama_cpp"]
    try:
        turn = Codec(template_source(v["template"].rsplit("/", 1)[-1])).prepare(
            _messages(v["messages"]),
            tools=_openai_tools(v["tools"]),
            tool_choice=v["tool_choice"],
            parallel_tool_calls=v["parallel_tool_calls"],
            enable_thinking=v["enable_thinking"],
            reasoning_format=v["reasoning_format"],
        )
    except ChatCodecError as exc:
        return f"prepare failed: {exc}"
    if turn.generation_prompt != observed["generation_prompt"]:
        return (
            f"generation prompt {turn.generation_prompt!r}, "
            f"llama.cpp {observed['generation_prompt']!r}"
        )
    try:
        message = turn.parse(v["input"], partial=v["is_partial"])
    except ChatCodecError as exc:
        return None if "error" in observed else f"unexpected error {exc}"
    if "error" in observed:
        return "expected an error"
    return compare.compare(observed, message.to_dict())


def test_every_llama_cpp_vector_through_prepare_and_parse() -> None:
    compare = load_compare()
    vectors = json.loads(shared_path("oracle", "parse", "llamacpp_tests.json").read_text("utf-8"))
    assert len(vectors) == 463
    tally: Counter[str] = Counter()
    unexplained: list[str] = []
    for v in vectors:
        why = _run(v, compare)
        gap = _setup_gap(v)
        tally["pass" if why is None else f"fail ({gap or 'unexplained'})"] += 1
        if why is not None and gap is None:
            unexplained.append(f"{v['id']}: {why}")
    print("\nllama.cpp vectors through prepare + parse: " + json.dumps(dict(tally)))
    assert not unexplained, "\n".join(unexplained[:20])
