"""gpt-oss harmony, Gemma 4, Muse Glimmer, Functionary v3.2 and GigaChat V3: parity with
llama.cpp's corpus and test vectors, and stream = parse over random chunkings."""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatcodec import Codec
from chatcodec.reply import ReplyStream, fold
from chatcodec.reply.cli import batch_result, prepare_request

from ._reply_oracle import load_compare
from .conftest import read_jsonl, shared_path, template_source
from .test_reply_vectors import _messages, _openai_tools

HANDLERS = {
    "GPT-OSS": "gpt-oss",
    "Gemma4 (inferred from format)": "gemma4",
    "Muse Glimmer": "muse-glimmer",
    "Functionary v3.2": "functionary-v3.2",
    "GigaChatV3": "gigachat-v3",
}
# outputs per handler in the developer corpus (all must match llama.cpp)
EXPECTED_OUTPUTS = {
    "GPT-OSS": 426,
    "Gemma4 (inferred from format)": 765,
    "Muse Glimmer": 410,
    "Functionary v3.2": 359,
    "GigaChatV3": 304,
}


@lru_cache(maxsize=1)
def _cases() -> tuple[dict[str, Any], ...]:
    cases = read_jsonl(shared_path("oracle", "parse", "cases.jsonl"))
    return tuple(c for c in cases if (c["llama_cpp"] or {}).get("handler") in HANDLERS)


def test_corpus_parity_per_handler() -> None:
    compare = load_compare()
    tally: Counter[tuple[str, bool]] = Counter()
    failures: list[str] = []
    for case in _cases():
        handler = case["llama_cpp"]["handler"]
        results = batch_result(case)["results"]
        for i, (output, result) in enumerate(zip(case["outputs"], results, strict=True)):
            why = compare.compare_output(output, result)
            tally[(handler, why is None)] += 1
            if why is not None:
                failures.append(f"{case['id']} [{i} {output['kind']}]: {why}")
    report = {h: f"{tally[(h, True)]}/{tally[(h, True)] + tally[(h, False)]}" for h in HANDLERS}
    print("\nparse parity (families b):\n" + json.dumps(report, indent=1))
    for handler, count in EXPECTED_OUTPUTS.items():
        assert tally[(handler, True)] + tally[(handler, False)] == count, handler
    assert not failures, "\n".join(failures[:20])


def _vectors() -> list[dict[str, Any]]:
    path = shared_path("oracle", "parse", "llamacpp_tests.json")
    parsers = set(HANDLERS.values())
    return [v for v in json.loads(path.read_text("utf-8")) if v["parser"] in parsers]


def _turn_format(v: dict[str, Any]) -> Any:
    codec = Codec(template_source(v["template"].rsplit("/", 1)[-1]), bos_token="", eos_token="")
    return codec.prepare(
        _messages(v["messages"]),
        tools=_openai_tools(v["tools"]),
        tool_choice=v["tool_choice"],
        parallel_tool_calls=v["parallel_tool_calls"],
        enable_thinking=v["enable_thinking"],
        reasoning_format=v["reasoning_format"],
    )


def test_llama_cpp_vectors() -> None:
    compare = load_compare()
    vectors = [v for v in _vectors() if v["json_schema"] is None]
    assert len(vectors) >= 50
    failures: list[str] = []
    for v in vectors:
        observed = v["observed_llama_cpp"]
        turn = _turn_format(v)
        assert HANDLERS[turn.handler] == v["parser"], v["id"]
        prompt = observed["generation_prompt"]
        if v["continue_final_message"] == "none":
            assert turn.generation_prompt == prompt, v["id"]
        stream = ReplyStream(turn.format, prompt)
        got = stream.feed(v["input"])
        got += stream.flush()
        try:
            message = stream.finish(partial=v["is_partial"])
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(f"{v['id']}: {exc}")
            continue
        why = compare.compare(observed, message.to_dict())
        if why is None:
            why = compare.compare(observed, fold(got).to_dict())
        if why is not None:
            failures.append(f"{v['id']}: {why}")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------ stream = parse


@lru_cache(maxsize=1)
def _replies() -> tuple[tuple[int, str], ...]:
    """(case index, reply) for the finished replies of the corpus that parse without error."""
    out = []
    for i, case in enumerate(_cases()):
        for output in case["outputs"]:
            if output["kind"] in ("final", "truncated") and "error" not in output:
                out.append((i, output["text"]))
    return tuple(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_folds_to_the_finished_parse(data: st.DataObject) -> None:
    replies = _replies()
    index, text = data.draw(st.sampled_from(replies))
    turn = prepare_request(_cases()[index])
    cuts = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    whole = ReplyStream(turn.format, turn.generation_prompt, "id_")
    whole.feed(text)
    expected = whole.finish()
    stream = ReplyStream(turn.format, turn.generation_prompt, "id_")
    deltas = []
    content = reasoning = ""
    for piece in pieces:
        for delta in stream.feed(piece):
            deltas.append(delta)
            content += delta.content
            reasoning += delta.reasoning_content
            # monotonic: what was sent is a prefix of the finished message
            assert expected.content.startswith(content)
            assert expected.reasoning_content.startswith(reasoning)
    deltas += stream.flush()
    assert stream.finish() == expected
    folded = fold(deltas)
    assert folded.content == expected.content
    assert folded.reasoning_content == expected.reasoning_content
    assert folded.tool_calls == expected.tool_calls


@pytest.mark.parametrize("size", [1, 2, 5])
def test_every_corpus_reply_streams_to_its_parse(size: int) -> None:
    for index, text in _replies():
        turn = prepare_request(_cases()[index])
        whole = ReplyStream(turn.format, turn.generation_prompt, "id_")
        whole.feed(text)
        expected = whole.finish()
        stream = ReplyStream(turn.format, turn.generation_prompt, "id_")
        deltas = []
        for i in range(0, len(text), size):
            deltas += stream.feed(text[i : i + size])
        deltas += stream.flush()
        assert stream.finish() == expected, text
        folded = fold(deltas)
        assert (folded.content, folded.reasoning_content, folded.tool_calls) == (
            expected.content,
            expected.reasoning_content,
            expected.tool_calls,
        ), text
