"""llguidance as the judge of a Lark grammar: its verdict on whole texts, over a byte vocabulary
(256 one-byte tokens and an end token), so any text is spelled exactly byte by byte."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import llguidance


class _Bytes:
    """A tokenizer of the 256 bytes and one end token (llguidance's TokenizerWrapper input)."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<end>"]
    special_token_ids = [256]

    def __call__(self, text: Any) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)


@lru_cache(maxsize=1)
def byte_tokenizer() -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def matcher(lark: str) -> llguidance.LLMatcher:
    """A matcher of the grammar (AssertionError with llguidance's message if it refuses it)."""
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    error = llguidance.LLMatcher.validate_grammar(grammar, byte_tokenizer())
    assert not error, error
    m = llguidance.LLMatcher(byte_tokenizer(), grammar, log_level=0)
    assert not m.is_error(), m.get_error()
    return m


def lark_verdicts(lark: str, texts: Sequence[str]) -> list[str]:
    """``accept`` (the whole text is in the language), ``reject`` (no continuation of some
    prefix of it is), or ``incomplete`` (it is a proper prefix of texts in the language)."""
    pristine = matcher(lark)
    out = []
    for text in texts:
        m = pristine.deep_copy()  # a matcher that rejected a token stays in its error state
        verdict = "accept"
        for byte in text.encode("utf-8"):
            if not m.consume_token(byte):
                verdict = "reject"
                break
        if verdict == "accept" and not m.is_accepting():
            verdict = "incomplete"
        out.append(verdict)
    return out
