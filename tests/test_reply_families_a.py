"""Kimi K2, Kimi K3, Ling 3.0, MiniMax-M3, DeepSeek V3.2/V4 DSML and MiniCPM5.

Parity with llama.cpp over the parse corpus (per handler), llama.cpp's own test vectors for
these templates, and stream = parse over random chunkings of the corpus replies.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache, lru_cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatcodec import Codec, ReplyError
from chatcodec.reply import AssistantMessage, ReplyStream, Turn, fold
from chatcodec.reply.cli import batch_result, prepare_request
from chatcodec.reply.families import deepseek_dsml, kimi_k2, kimi_k3, ling3, minicpm5, minimax_m3

from ._reply_oracle import load_compare
from .conftest import read_jsonl, shared_path, template_source

HANDLERS = (
    kimi_k2.HANDLER,
    kimi_k3.HANDLER,
    ling3.HANDLER,
    minimax_m3.HANDLER,
    deepseek_dsml.HANDLER,
    minicpm5.HANDLER,
)
PARSERS = ("kimi-k2", "kimi-k3", "ling-3", "minimax-m3", "deepseek-v3.2/v4", "minicpm5")
# outputs that cannot be compared: the request itself cannot be rendered the way transformers
# renders it (transformers' sandbox refuses the Kimi K2 templates' `list.append` when the
# conversation holds tool calls, where llama.cpp's own Jinja engine renders them)
UNRENDERABLE = "SecurityError"


@lru_cache(maxsize=1)
def _cases() -> tuple[dict[str, Any], ...]:
    cases = read_jsonl(shared_path("oracle", "parse", "cases.jsonl"))
    return tuple(c for c in cases if (c["llama_cpp"] or {}).get("handler") in HANDLERS)


def test_corpus_parity_per_handler() -> None:
    compare = load_compare()
    tally: Counter[tuple[str, str]] = Counter()
    failures: list[str] = []
    for case in _cases():
        handler = case["llama_cpp"]["handler"]
        results = batch_result(case)["results"]
        for i, (output, result) in enumerate(zip(case["outputs"], results, strict=True)):
            why = compare.compare_output(output, result)
            if why is None:
                tally[(handler, "pass")] += 1
            elif "error" in result and "access to attribute" in result["error"]:
                tally[(handler, "unrenderable")] += 1
            else:
                tally[(handler, "fail")] += 1
                failures.append(f"{case['id']} [{i} {output['kind']}]: {why}")
    report = {
        h: f"{tally[(h, 'pass')]}/{sum(tally[(h, k)] for k in ('pass', 'fail', 'unrenderable'))}"
        + (f" ({tally[(h, 'unrenderable')]} unrenderable)" if tally[(h, "unrenderable")] else "")
        for h in HANDLERS
    }
    print("\nparse parity (families a):\n" + json.dumps(report, indent=1))
    assert not failures, "\n".join(failures[:20])
    assert sum(tally[(h, "pass")] for h in HANDLERS) >= 3900


# ------------------------------------------------------------------ llama.cpp's test vectors


def _vectors() -> list[dict[str, Any]]:
    path = shared_path("oracle", "parse", "llamacpp_tests.json")
    return [v for v in json.loads(path.read_text("utf-8")) if v["parser"] in PARSERS]


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


def _vector_turn(v: dict[str, Any]) -> Turn:
    codec = Codec(template_source(v["template"].rsplit("/", 1)[-1]))
    return codec.prepare(
        _messages(v["messages"]),
        tools=_openai_tools(v["tools"]),
        tool_choice=v["tool_choice"],
        parallel_tool_calls=v["parallel_tool_calls"],
        enable_thinking=v["enable_thinking"],
        reasoning_format=v["reasoning_format"],
    )


def test_llama_cpp_vectors_of_these_templates() -> None:
    compare = load_compare()
    vectors = _vectors()
    assert len(vectors) == 106
    failures: list[str] = []
    for v in vectors:
        observed = v["observed_llama_cpp"]
        turn = _vector_turn(v)
        # a continued message is prefilled into the generation prompt (llama.cpp builds it)
        prompt = observed["generation_prompt"]
        if v["continue_final_message"] == "none" and not v["json_schema"]:
            assert turn.generation_prompt == prompt, v["id"]
        stream = ReplyStream(turn.format, prompt)
        try:
            got = stream.feed(v["input"]) + stream.flush()
            message = stream.finish(partial=v["is_partial"])
        except ReplyError as exc:
            why = None if "error" in observed else f"unexpected error {exc}"
        else:
            why = compare.compare(observed, message.to_dict()) if "error" not in observed else (
                "expected an error"
            )
            if why is None and "error" not in observed:
                why = compare.compare(observed, fold(got).to_dict())
        if why is not None:
            failures.append(f"{v['id']}: {why}")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------ stream = parse


@lru_cache(maxsize=1)
def _replies() -> tuple[tuple[str, str], ...]:
    """(case id, finished reply) of every case whose request can be prepared."""
    out = []
    for case in _cases():
        if case["llama_cpp"] is None:
            continue
        final = case["outputs"][0]
        out.append((case["id"], final["text"]))
    return tuple(out)


@cache
def _case(case_id: str) -> dict[str, Any]:
    return next(c for c in _cases() if c["id"] == case_id)


def _finished(turn: Turn, text: str) -> AssistantMessage | None:
    try:
        return turn.parse(text)
    except ReplyError:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_folds_to_the_finished_parse(data: st.DataObject) -> None:
    replies = _replies()
    case_id, text = data.draw(st.sampled_from(replies))
    try:
        turn = prepare_request(_case(case_id))
    except Exception:  # noqa: BLE001 - a request transformers cannot render
        return
    cuts = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=12)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    expected = _finished(turn, text)
    stream = turn.stream()
    deltas = []
    seen_calls: dict[int, tuple[str, str]] = {}
    try:
        for chunk in chunks:
            step = stream.feed(chunk)
            for d in step:
                # monotonic: a call is announced once, whole, and never changes afterwards
                if d.tool_call is not None:
                    assert d.tool_call.index not in seen_calls, case_id
                    seen_calls[d.tool_call.index] = (d.tool_call.name, d.tool_call.arguments)
            deltas += step
        deltas += stream.flush()
        message = stream.finish()
    except ReplyError:
        assert expected is None, case_id
        return
    assert expected is not None, case_id
    assert message == expected, case_id
    folded = fold(deltas)
    assert folded.content == expected.content, case_id
    assert folded.reasoning_content == expected.reasoning_content, case_id
    assert [(c.name, c.arguments) for c in folded.tool_calls] == [
        (c.name, c.arguments) for c in expected.tool_calls
    ], case_id
    # no markup leaks into streamed content: every content delta is part of the content
    streamed = "".join(d.content for d in deltas)
    assert streamed == expected.content, case_id


@pytest.mark.parametrize("handler", HANDLERS)
def test_byte_by_byte_streams_of_each_handler(handler: str) -> None:
    count = 0
    for case in _cases():
        if case["llama_cpp"]["handler"] != handler or count >= 12:
            continue
        try:
            turn = prepare_request(case)
        except Exception:  # noqa: BLE001 - a request transformers cannot render
            continue
        text = case["outputs"][0]["text"]
        expected = _finished(turn, text)
        if expected is None:
            continue
        count += 1
        stream = turn.stream()
        deltas = [d for ch in text for d in stream.feed(ch)] + stream.flush()
        assert stream.finish() == expected, case["id"]
        folded = fold(deltas)
        assert (folded.content, folded.reasoning_content) == (
            expected.content,
            expected.reasoning_content,
        ), case["id"]
        assert [c.arguments for c in folded.tool_calls] == [
            c.arguments for c in expected.tool_calls
        ], case["id"]
    assert count > 0
