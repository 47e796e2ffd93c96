"""The grammar text of a request is derived once per template, tool set and options (a bounded
LRU in chatcodec.reply.select), and only requests that shape the same grammar share it."""

from __future__ import annotations

import copy
from typing import Any

from chatcodec import Codec
from chatcodec.reply.select import clear_grammar_cache

from ._requests import HI, QWEN3_CODER


def _tools(properties: dict[str, Any]) -> list[dict[str, Any]]:
    parameters = {"type": "object", "properties": properties, "required": list(properties)}
    return [{"type": "function", "function": {"name": "search", "parameters": parameters}}]


QUERY_FIRST = _tools({"query": {"type": "string"}, "limit": {"type": "integer"}})
LIMIT_FIRST = _tools({"limit": {"type": "integer"}, "query": {"type": "string"}})


def _gbnf(codec: Codec, tools: list[dict[str, Any]], **options: Any) -> str:
    grammar = codec.prepare(HI, tools=tools, tool_choice="required", **options).grammar
    assert grammar is not None
    return grammar.gbnf


def _fresh(codec: Codec, tools: list[dict[str, Any]], **options: Any) -> str:
    """The text derived with nothing cached."""
    clear_grammar_cache()
    return _gbnf(codec, tools, **options)


def test_an_equal_request_gets_the_cached_text() -> None:
    clear_grammar_cache()
    codec = Codec(QWEN3_CODER)
    first = _gbnf(codec, QUERY_FIRST)
    again = _gbnf(Codec(QWEN3_CODER), copy.deepcopy(QUERY_FIRST))
    assert again is first
    clear_grammar_cache()
    fresh = _gbnf(codec, QUERY_FIRST)
    assert fresh == first and fresh is not first


def test_the_property_order_of_a_schema_is_part_of_the_key() -> None:
    clear_grammar_cache()
    codec = Codec(QWEN3_CODER)
    query_first = _gbnf(codec, QUERY_FIRST)
    limit_first = _gbnf(codec, LIMIT_FIRST)
    assert query_first != limit_first
    assert query_first == _fresh(codec, QUERY_FIRST)
    assert limit_first == _fresh(codec, LIMIT_FIRST)


def test_options_that_shape_the_grammar_are_part_of_the_key() -> None:
    clear_grammar_cache()
    codec = Codec(QWEN3_CODER)
    one = _gbnf(codec, QUERY_FIRST, parallel_tool_calls=False)
    many = _gbnf(codec, QUERY_FIRST, parallel_tool_calls=True)
    assert one != many
    assert many == _fresh(codec, QUERY_FIRST, parallel_tool_calls=True)
