"""llama.cpp's own test vectors (tests/test-chat.cpp), all 463 of every parser.

Each vector's request is set up by ``Codec.prepare`` as llama-server sets it up (the handler,
the generation prompt), its reply is parsed (the message, and the call ids where llama.cpp gives
them), and the reply streamed in chunks of 1, 2, 3 and 7 characters folds to that message.

One test per vector, named ``<parser>/L<line in test-chat.cpp>:<template>``:
``pytest -k 'gpt-oss/L1234:'`` reruns one vector, ``pytest -k gpt-oss/`` a parser's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from chatcodec.errors import ChatCodecError
from chatcodec.reply import fold

from ._reply_oracle import (
    VECTORS,
    chunks,
    end_stream,
    load_compare,
    per_case,
    prepare_vector,
    same_message,
    stream_deltas,
    vector_id,
    vectors,
)

# llama.cpp's parser of a vector -> the handler chatcodec picks for its template
HANDLERS = {
    "autoparser": "auto",
    "qwen3-coder": "Qwen3-Coder",
    "kimi-k2": "Kimi K2 Thinking",
    "kimi-k3": "Kimi K3",
    "ling-3": "Ling 3.0 (Bailing V3)",
    "minimax-m3": "MiniMax-M3",
    "deepseek-v3.2/v4": "DeepSeek V3.2/V4",
    "minicpm5": "MiniCPM5",
    "gpt-oss": "GPT-OSS",
    "gemma4": "Gemma4 (inferred from format)",
    "muse-glimmer": "Muse Glimmer",
    "functionary-v3.2": "Functionary v3.2",
    "gigachat-v3": "GigaChatV3",
    "ministral-3": "Ministral/Magistral Large 3",
    "lfm2": "LFM2",
    "lfm2.5": "LFM2.5",
    "cohere2moe": "Cohere2 MoE",
}
# vectors per parser (the corpus is the one expected)
COUNTS = {
    "autoparser": 148,
    "qwen3-coder": 71,
    "lfm2.5": 39,
    "gemma4": 28,
    "deepseek-v3.2/v4": 26,
    "ling-3": 21,
    "kimi-k2": 21,
    "minimax-m3": 21,
    "gpt-oss": 18,
    "lfm2": 16,
    "ministral-3": 13,
    "cohere2moe": 10,
    "kimi-k3": 9,
    "minicpm5": 8,
    "muse-glimmer": 7,
    "gigachat-v3": 4,
    "functionary-v3.2": 3,
}
CHUNK_SIZES = (1, 2, 3, 7)


def _run(v: dict[str, Any], compare: Any) -> str | None:
    observed = v["observed_llama_cpp"]
    try:
        turn = prepare_vector(
            v,
            continue_final_message=(
                False if v["continue_final_message"] == "none" else v["continue_final_message"]
            ),
            response_format=(
                {"type": "json_schema", "json_schema": {"schema": v["json_schema"]}}
                if v["json_schema"]
                else None
            ),
        )
    except ChatCodecError as exc:
        return f"prepare failed: {exc}"
    if turn.handler != HANDLERS[v["parser"]]:
        return f"handler {turn.handler!r}, llama.cpp's parser {v['parser']!r}"
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
    why = compare.compare(observed, message.to_dict())
    if why is not None:
        return why
    if any(c.get("id") for c in observed["tool_calls"]):
        if [c.id for c in message.tool_calls] != [c.get("id") for c in observed["tool_calls"]]:
            return "ids differ"
    # the deltas of the reply streamed in small chunks fold to the same message
    for size in CHUNK_SIZES:
        pieces = chunks(v["input"], size)
        folded = fold(stream_deltas(turn, pieces, v["is_partial"]))
        why = compare.compare(observed, folded.to_dict())
        if why is None and not same_message(folded, message):
            why = "the fold is not the parsed message"
        if why is not None:
            return f"streamed in chunks of {size}: {why}"
    return None


def test_the_vectors_are_the_ones_expected() -> None:
    all_vectors = vectors()
    assert Counter(v["parser"] for v in all_vectors) == COUNTS
    assert sum(COUNTS.values()) == 463
    assert len({vector_id(v) for v in all_vectors}) == 463, "vector ids must name one each"


@pytest.mark.parametrize("v", per_case(VECTORS.exists(), vectors, vector_id))
def test_llama_cpp_vector_through_prepare_parse_and_stream(v: dict[str, Any]) -> None:
    why = _run(v, load_compare())
    assert why is None, f"{vector_id(v)}: {why}"


def test_a_json_schema_reply_cut_after_its_value_finishes_like_its_parse() -> None:
    """The stream waits for what may follow a value that ends a chunk (it used to fail with
    'text after the end of the reply format' where the parse succeeds)."""
    (v,) = [
        v
        for v in vectors()
        if vector_id(v) == "autoparser/L6309:meta-llama-Llama-3.1-8B-Instruct.jinja"
    ]
    turn = prepare_vector(
        v, response_format={"type": "json_schema", "json_schema": {"schema": v["json_schema"]}}
    )
    expected = turn.parse(v["input"])  # '"42"\n' against {"const": "42"}
    stream = turn.stream()
    for piece in chunks(v["input"], 2):
        stream.feed(piece)
    assert end_stream(stream)[1] == expected
