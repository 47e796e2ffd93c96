"""llguidance as the judge of a Lark grammar: its verdict on whole texts, over a byte vocabulary
(256 one-byte tokens, an end token, and optionally special tokens), so any text is spelled
exactly byte by byte, a special token's text as that one token."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import llguidance


class _Bytes:
    """A tokenizer of the 256 bytes, one end token (256) and ``special`` tokens (257 on), in
    llguidance's TokenizerWrapper shape."""

    eos_token_id = 256
    bos_token_id = None

    def __init__(self, special: tuple[str, ...]) -> None:
        self.tokens = [bytes([i]) for i in range(256)] + [b"<end>"]
        self.tokens += [token.encode("utf-8") for token in special]
        self.special_token_ids = list(range(256, 257 + len(special)))

    def __call__(self, text: Any) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)


@lru_cache(maxsize=8)
def byte_tokenizer(special: tuple[str, ...] = ()) -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes(special)))


def tokens_of(text: str, special: tuple[str, ...] = ()) -> list[int]:
    """The text's tokens: each special token's text as that token, the rest byte by byte."""
    out: list[int] = []
    i = 0
    while i < len(text):
        found = max((t for t in special if text.startswith(t, i)), key=len, default="")
        if found:
            out.append(257 + special.index(found))
            i += len(found)
        else:
            out.extend(text[i].encode("utf-8"))
            i += 1
    return out


def matcher(lark: str, special: tuple[str, ...] = ()) -> llguidance.LLMatcher:
    """A matcher of the grammar (AssertionError with llguidance's message if it refuses it)."""
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    error = llguidance.LLMatcher.validate_grammar(grammar, byte_tokenizer(special))
    assert not error, error
    m = llguidance.LLMatcher(byte_tokenizer(special), grammar, log_level=0)
    assert not m.is_error(), m.get_error()
    return m


def lark_verdicts(lark: str, texts: Sequence[str], special_tokens: Sequence[str] = ()) -> list[str]:
    """``accept`` (the whole text is in the language), ``reject`` (no continuation of some
    prefix of it is), or ``incomplete`` (it is a proper prefix of texts in the language)."""
    special = tuple(special_tokens)
    pristine = matcher(lark, special)
    out = []
    for text in texts:
        m = pristine.deep_copy()  # a matcher that rejected a token stays in its error state
        verdict = "accept"
        for token in tokens_of(text, special):
            if not m.consume_token(token):
                verdict = "reject"
                break
        if verdict == "accept" and not m.is_accepting():
            verdict = "incomplete"
        out.append(verdict)
    return out
