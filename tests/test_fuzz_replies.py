"""Issue 8: mutation fuzzing of replies, per reply family (a bounded, seeded run by default).

Each family's corpus replies are mutated: a marker of the family's own reply format inserted,
deleted, duplicated or split; a span deleted or repeated; many calls; deep brackets; random
unicode. Every mutant must keep the decoder's promises:

- only a documented error escapes (``ReplyError``), from the parse and the stream alike;
- the stream in any chunking (whole, byte by byte, a random split) ends with the finished
  parse's message, or with the same error;
- every delta is final (announced once, only extended, a prefix of the message) and the
  deltas fold to the message;
- ``dropped`` names the reply's own text, and no text is lost that it does not name: the
  sentinel words (``zq<n>x``) the mutations write are kept in a field or dropped by name.

(``tests/_reply_invariants.py`` checks all of this; ``tests/test_fuzz_generated.py`` builds
replies with hypothesis instead of mutating the corpus'.)

The default run is small and seeded (it is part of the suite). A long run:

    CHATCODEC_FUZZ=20000 python -m pytest tests/test_fuzz_replies.py -q

(mutants per family; ``CHATCODEC_FUZZ_SEED`` picks another seed).
"""

from __future__ import annotations

import os
import random

import pytest

from chatcodec import ChatCodecError
from chatcodec.reply import Turn

from ._reply_invariants import SENTINEL, check_reply, fuzz_cases, reply_markers, sentinel
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


def _mutate(rng: random.Random, text: str, markers: list[str]) -> str:
    at = rng.randrange(len(text) + 1)
    kind = rng.randrange(10)
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
    if kind >= 8:  # a sentinel word (each one new: the text is checked to be kept or dropped)
        word = sentinel(len(SENTINEL.findall(text)) + rng.randrange(1000))
        return text[:at] + rng.choice(["", " ", "\n"]) + word + rng.choice(["", " "]) + text[at:]
    return text[:at] + "".join(rng.choice(UNICODE) for _ in range(rng.randrange(1, 8))) + text[at:]


def _replies(template: str) -> list[tuple[Turn, str]]:
    out = []
    for case in fuzz_cases(cases_by_template().get(template, ()), 8):
        try:
            turn = prepare_request(case)
        except ChatCodecError:  # a request transformers cannot render
            continue
        texts = {o["text"] for o in case["outputs"] if not o["is_partial"]}
        out += [(turn, t) for t in sorted(texts)[:2]]
    return out


@pytest.mark.parametrize("template", per_case(PARSE_CASES.exists(), lambda: TEMPLATES, str))
def test_mutated_replies_keep_the_decoders_promises(template: str) -> None:
    replies = _replies(template)
    assert replies, f"no corpus reply for {template}"
    rng = random.Random(f"{SEED}:{template}")
    markers = {id(turn): reply_markers(turn) for turn, _ in replies}
    for _ in range(MUTANTS):
        turn, text = rng.choice(replies)
        for _ in range(rng.randrange(1, 4)):
            text = _mutate(rng, text, markers[id(turn)])
        cut = rng.randrange(len(text) + 1)
        check_reply(turn, text, [[text], list(text), [text[:cut], text[cut:]]])
