"""Token ids and assistant masks of a rendered conversation (``Codec.encode``).

The spans of the assistant's text become token flags by transformers 5.23.0's rule for
``return_assistant_tokens_mask``: a span ``[start, end)`` marks the tokens from the one holding
character ``start`` to the one holding character ``end - 1``. Then two switches narrow each
span: without the end-of-turn marker (the special tokens that close it) and without the
thought (from its start marker to its closing marker, as llama.cpp reads the template's
replies). docs/training.md states the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .template import RenderedChat, Span
from .tokenizer import Tokenized, Tokenizer

__all__ = ["Encoding", "ThoughtMarkers", "assistant_token_mask", "encode_rendered"]


@dataclass(frozen=True)
class Encoding:
    """A rendered conversation as a trainer takes it.

    ``input_ids``, ``attention_mask`` and ``assistant_masks`` are transformers' names (one
    entry per token; the mask is 1 on the tokens trained on); ``offsets`` is the ``[start,
    end)`` character range of each token in ``text``; ``spans`` the character spans of the
    assistant's text the mask was made from.
    """

    text: str
    input_ids: list[int]
    attention_mask: list[int]
    assistant_masks: list[int]
    offsets: list[tuple[int, int]]
    spans: tuple[Span, ...]

    def to_dict(self, text: bool = False) -> dict[str, Any]:
        """``input_ids``, ``attention_mask`` and ``assistant_masks`` (and ``text`` on request),
        as ``apply_chat_template(..., return_dict=True)`` names them."""
        row: dict[str, Any] = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "assistant_masks": self.assistant_masks,
        }
        if text:
            row["text"] = self.text
        return row


@dataclass(frozen=True)
class ThoughtMarkers:
    """How a template's replies open and close a thought (llama.cpp's reading of them):
    ``closers`` end it; ``start`` opens it, or the generation prompt did when it is absent."""

    start: str
    closers: tuple[str, ...]


def assistant_token_mask(tokens: Tokenized, spans: Sequence[Span]) -> list[int]:
    """transformers' ``return_assistant_tokens_mask`` over these tokens: each span marks the
    tokens from the one holding its first character to the one holding its last; a span
    whose first character no token holds ends the marking (this span and the rest); one
    whose last character no token holds, or whose last character is in token 0, runs to the
    end of the text. An empty span at character 0 (transformers fails on it) marks nothing."""
    count = len(tokens.ids)
    mask = [0] * count
    for span in spans:
        first = tokens.char_to_token(span.start)
        if first is None:
            break
        if span.end <= 0:
            continue
        last = tokens.char_to_token(span.end - 1)
        stop = last + 1 if last else count
        mask[first:stop] = [1] * max(0, stop - first)
    return mask


def encode_rendered(
    rendered: RenderedChat,
    tokenizer: Tokenizer,
    *,
    mask_end_marker: bool = True,
    mask_reasoning: bool = True,
    thought: ThoughtMarkers | None = None,
) -> Encoding:
    """The Encoding of a rendered conversation (see the module's rule)."""
    text = rendered.text
    tokens = tokenizer.tokenize(text)
    mask = assistant_token_mask(tokens, rendered.spans)
    if not mask_end_marker or (not mask_reasoning and thought is not None):
        for span in rendered.spans:
            if not mask_end_marker:
                _drop_end_marker(mask, tokens, tokenizer, text, span)
            if not mask_reasoning and thought is not None:
                _drop_thought(mask, tokens, text, span, thought)
    return Encoding(
        text=text,
        input_ids=tokens.ids,  # lists the tokenizer made for this text alone
        attention_mask=[1] * len(tokens.ids),
        assistant_masks=mask,
        offsets=tokens.offsets,
        spans=rendered.spans,
    )


def _tokens_within(tokens: Tokenized, start: int, end: int) -> range:
    """The tokens whose characters all lie in ``[start, end)`` and that hold one (a run:
    tokens follow the text)."""
    first = last = None
    for index, (a, b) in enumerate(tokens.offsets):
        if a >= start and b <= end and b > a:
            if first is None:
                first = index
            last = index
        elif first is not None and a >= end:
            break
    return range(0) if first is None or last is None else range(first, last + 1)


def _drop_end_marker(
    mask: list[int], tokens: Tokenized, tokenizer: Tokenizer, text: str, span: Span
) -> None:
    """Unmark the span's end-of-turn marker: its last tokens while they are special tokens
    or whitespace, when a special token is among them."""
    within = _tokens_within(tokens, span.start, span.end)
    cut = None
    for index in reversed(within):
        a, b = tokens.offsets[index]
        if tokenizer.is_special(tokens.ids[index]):
            cut = index
        elif not text[a:b].isspace():
            break
    if cut is not None:
        end = within.stop
        mask[cut:end] = [0] * (end - cut)


def _drop_thought(
    mask: list[int], tokens: Tokenized, text: str, span: Span, thought: ThoughtMarkers
) -> None:
    """Unmark the span's thought: from its start marker (or the span's start, when the
    generation prompt opened it) through the first closing marker and the whitespace after."""
    part = text[span.start : span.end]
    found = [(part.find(closer), closer) for closer in thought.closers]
    found = [(at, closer) for at, closer in found if at >= 0]
    if not found:
        return
    at, closer = min(found)
    opened = part.rfind(thought.start, 0, at) if thought.start else -1
    begin = span.start + max(opened, 0)
    end = span.start + at + len(closer)
    while end < span.end and text[end].isspace():
        end += 1
    for index in _tokens_within(tokens, begin, end):
        mask[index] = 0
