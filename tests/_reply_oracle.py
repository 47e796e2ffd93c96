"""Helpers of the reply tests: load compare.py from the shared corpus (never copied), read the
parse corpus and llama.cpp's test vectors, parametrize tests by their cases, set a vector's
request up, and stream replies.

The project names the corpus tests reach (the corpus worker, the end of a stream) are imported
or called here only, so a change to them is one edit in this file.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Iterable
from functools import lru_cache
from types import ModuleType
from typing import Any

import pytest

from chatcodec import Codec

# the corpus worker as `chatcodec batch` runs it, re-exported for the tests
from chatcodec.batch import batch_result as batch_result
from chatcodec.batch import prepare_request as prepare_request
from chatcodec.reply import AssistantMessage, Delta, ReplyStream, Turn, fold

from .conftest import ORACLE, read_jsonl, shared_path, template_source

PARSE_CASES = ORACLE / "parse" / "cases.jsonl"
VECTORS = ORACLE / "parse" / "llamacpp_tests.json"
RENDER_CASES = ORACLE / "render" / "expectations.jsonl"


def per_case(
    present: bool, cases: Callable[[], Iterable[Any]], case_id: Callable[[Any], str]
) -> list[Any]:
    """One pytest param per corpus case, its id ``case_id(case)`` (``pytest -k <id>`` reruns
    it); one skipped param when the corpus is absent, so collection never fails."""
    if not present:
        reason = "../shared is not present (the corpus lives beside the checkout)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-shared")]
    return [pytest.param(case, id=case_id(case)) for case in cases()]


@lru_cache(maxsize=1)
def load_compare() -> ModuleType:
    path = shared_path("oracle", "parse", "compare.py")
    spec = importlib.util.spec_from_file_location("_oracle_compare", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ the parse corpus


@lru_cache(maxsize=1)
def corpus_cases() -> tuple[dict[str, Any], ...]:
    """Every case of ../shared/oracle/parse/cases.jsonl (a request and its outputs)."""
    return tuple(read_jsonl(shared_path("oracle", "parse", "cases.jsonl")))


@lru_cache(maxsize=1)
def cases_by_template() -> dict[str, tuple[dict[str, Any], ...]]:
    """The corpus cases of each template, in corpus order."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for case in corpus_cases():
        grouped.setdefault(case["template"], []).append(case)
    return {template: tuple(cases) for template, cases in grouped.items()}


def handler_cases(*handlers: str) -> tuple[dict[str, Any], ...]:
    """The corpus cases llama.cpp set up with one of ``handlers``."""
    return tuple(c for c in corpus_cases() if (c["llama_cpp"] or {}).get("handler") in handlers)


# ------------------------------------------------------------------ llama.cpp's test vectors


@lru_cache(maxsize=1)
def vectors() -> tuple[dict[str, Any], ...]:
    """llama.cpp's own test vectors (tests/test-chat.cpp), every parser."""
    path = shared_path("oracle", "parse", "llamacpp_tests.json")
    return tuple(json.loads(path.read_text("utf-8")))


def vector_id(v: dict[str, Any]) -> str:
    """A vector's test id: its parser and its place in test-chat.cpp (``gpt-oss/L1234:x.jinja``)."""
    return f"{v['parser']}/{v['id']}"


def vector_template(v: dict[str, Any]) -> str:
    return template_source(v["template"].rsplit("/", 1)[-1])


def openai_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """A vector's flat tool list in the OpenAI form templates read."""
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


def vector_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def prepare_vector(v: dict[str, Any], **options: Any) -> Turn:
    """The vector's request set up by ``Codec.prepare`` as llama-server sets it up."""
    return Codec(vector_template(v)).prepare(
        vector_messages(v["messages"]),
        tools=openai_tools(v["tools"]),
        tool_choice=v["tool_choice"],
        parallel_tool_calls=v["parallel_tool_calls"],
        enable_thinking=v["enable_thinking"],
        reasoning_format=v["reasoning_format"],
        **options,
    )


# ------------------------------------------------------------------ streaming


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def cut(text: str, cuts: Iterable[int]) -> list[str]:
    """``text`` cut at the given offsets (in any order, repeats allowed)."""
    points = sorted(set(cuts))
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def end_stream(stream: ReplyStream, partial: bool = False) -> tuple[list[Delta], AssistantMessage]:
    """End the reply: the last deltas and the finished message (``partial``: llama.cpp's
    is_partial, the text read as a prefix of a longer reply)."""
    end = stream.finish(partial=partial)
    return end.deltas, end.message


def stream_deltas(turn: Turn, pieces: Iterable[str], partial: bool = False) -> list[Delta]:
    """Every delta of the turn's stream fed ``pieces``, the finish's included."""
    stream = turn.stream()
    deltas = [d for piece in pieces for d in stream.feed(piece)]
    return deltas + end_stream(stream, partial)[0]


def same_message(folded: AssistantMessage, expected: AssistantMessage) -> bool:
    """What a fold of deltas can hold (no dropped text) equals the message's."""
    return (folded.content, folded.reasoning_content, folded.tool_calls) == (
        expected.content,
        expected.reasoning_content,
        expected.tool_calls,
    )


def folds_to(turn: Turn, pieces: Iterable[str], expected: AssistantMessage) -> bool:
    return same_message(fold(stream_deltas(turn, pieces)), expected)
