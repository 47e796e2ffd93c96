"""Issue 8: mutation fuzzing of replies, per reply family (a bounded, seeded run by default).

Each family's corpus replies are mutated: a marker of the family's own reply format inserted,
deleted, duplicated or split; a span deleted or repeated; many calls; deep brackets; random
unicode. Every mutant must keep the decoder's promises:

- only a documented error escapes (``ReplyError``), from the parse and the stream alike;
- the stream in any chunking (whole, byte by byte, a random split) ends with the finished
  parse's message, or with the same error;
- the deltas fold to the message; ``dropped`` offsets lie inside the reply.

The default run is small and seeded (it is part of the suite). A long run:

    CHATCODEC_FUZZ=20000 python -m pytest tests/test_fuzz_replies.py -q

(mutants per family; ``CHATCODEC_FUZZ_SEED`` picks another seed).
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from chatcodec import ReplyError
from chatcodec.reply import AssistantMessage, Turn, fold
from chatcodec.reply.description import Calls, Content, Thought

from ._reply_oracle import PARSE_CASES, cases_by_template, per_case, prepare_request

MUTANTS = int(os.environ.get("CHATCODEC_FUZZ", "40"))
SEED = int(os.environ.get("CHATCODEC_FUZZ_SEED", "8"))
# one template per reply family of the corpus, and three of the auto parser's
TEMPLATES = (
    "Qwen3-Coder.jinja",
    "deepseek-ai-DeepSeek-V3.2.jinja",
    "openai-gpt-oss-120b.jinja",
    "google-gemma-4-31B-it.jinja",
    "Kimi-K2-Thinking.jinja",
    "Kimi-K3.jinja",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "LFM2-8B-A1B.jinja",
    "LFM2.5-8B-A1B.jinja",
    "Cohere2MoE.jinja",
    "MiniMax-M3.jinja",
    "inclusionai-ling-3.0-flash.jinja",
    "openbmb-MiniCPM5-1B.jinja",
    "muse-glimmer.jinja",
    "meetkai-functionary-medium-v3.2.jinja",
    "GigaChat3-10B-A1.8B.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
)
UNICODE = "é中🚀\u200b\u0301\ufeff\x00\r\n\t<>[]{}\"'\\"


def _markers(turn: Turn) -> list[str]:
    """The markers the turn's reply format reads (its thought, content stops and calls)."""
    fmt = turn.format
    found: set[str] = set(turn.stop)
    thought = fmt.find(Thought)
    if thought is not None:
        found.update([thought.block.start, *thought.block.stops])
    content = fmt.find(Content)
    if content is not None:
        found.update([*(content.stops or ()), content.open, content.close])
    calls = fmt.find(Calls)
    if calls is not None:
        section = calls.section
        found.update([*section.openers, section.name_marker, section.name_marker_end])
        if isinstance(section.commit, str):
            found.add(section.commit)
    if fmt.flow is not None:
        found.update(fmt.flow.openers)
    return sorted(m for m in found if m)


def _mutate(rng: random.Random, text: str, markers: list[str]) -> str:
    at = rng.randrange(len(text) + 1)
    kind = rng.randrange(8)
    if kind == 0 and markers:  # a marker inserted
        return text[:at] + rng.choice(markers) + text[at:]
    if kind == 1 and markers:  # a marker's first occurrence deleted
        marker = rng.choice(markers)
        return text.replace(marker, "", 1)
    if kind == 2 and markers:  # a marker duplicated
        marker = rng.choice(markers)
        return text.replace(marker, marker + marker, 1)
    if kind == 3 and markers:  # a marker split by text
        marker = rng.choice(markers)
        if len(marker) > 1:
            cut = rng.randrange(1, len(marker))
            return text.replace(marker, marker[:cut] + " x " + marker[cut:], 1)
    if kind == 4:  # a span deleted
        end = min(len(text), at + rng.randrange(1, 40))
        return text[:at] + text[end:]
    if kind == 5:  # a span repeated (many calls, when it holds one)
        end = min(len(text), at + rng.randrange(1, 200))
        return text[:at] + text[at:end] * rng.randrange(2, 30) + text[end:]
    if kind == 6:  # brackets opened deep (deeper than Python's recursion limit at times)
        depth = rng.choice((rng.randrange(1, 60), 3000))
        return text[:at] + rng.choice(["[", '{"a": ']) * depth + text[at:]
    return text[:at] + "".join(rng.choice(UNICODE) for _ in range(rng.randrange(1, 8))) + text[at:]


def _outcome(turn: Turn, pieces: list[str]) -> tuple[AssistantMessage | str, list[Any]]:
    stream = turn.stream()
    deltas: list[Any] = []
    try:
        for piece in pieces:
            deltas += stream.feed(piece)
        end = stream.finish()
    except ReplyError as exc:
        return f"ReplyError: {exc}", deltas
    return end.message, deltas + end.deltas


def _check(turn: Turn, text: str, rng: random.Random) -> None:
    try:
        expected: AssistantMessage | str = turn.parse(text)
    except ReplyError as exc:
        expected = f"ReplyError: {exc}"
    cut = rng.randrange(len(text) + 1)
    for pieces in ([text], list(text), [text[:cut], text[cut:]]):
        got, deltas = _outcome(turn, pieces)
        assert got == expected, f"chunking {len(pieces)} pieces of {text!r}"
        if isinstance(got, AssistantMessage):
            folded = fold(deltas)
            assert (folded.content, folded.reasoning_content, folded.tool_calls) == (
                got.content,
                got.reasoning_content,
                got.tool_calls,
            ), text
            for d in got.dropped:
                assert 0 <= d.offset and d.offset + len(d.text) <= len(text), (d, text)


def _replies(template: str) -> list[tuple[Turn, str]]:
    out = []
    for case in cases_by_template().get(template, ()):
        if len(out) >= 12:
            break
        try:
            turn = prepare_request(case)
        except ReplyError:
            continue
        texts = {o["text"] for o in case["outputs"] if not o["is_partial"]}
        out += [(turn, t) for t in sorted(texts)[:2]]
    return out


@pytest.mark.parametrize("template", per_case(PARSE_CASES.exists(), lambda: TEMPLATES, str))
def test_mutated_replies_keep_the_decoders_promises(template: str) -> None:
    replies = _replies(template)
    assert replies, f"no corpus reply for {template}"
    rng = random.Random(f"{SEED}:{template}")
    markers = {id(turn): _markers(turn) for turn, _ in replies}
    for _ in range(MUTANTS):
        turn, text = rng.choice(replies)
        for _ in range(rng.randrange(1, 4)):
            text = _mutate(rng, text, markers[id(turn)])
        _check(turn, text, rng)
