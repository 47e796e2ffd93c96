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

__all__ = ["Encoding", "ThoughtMarkers", "assistant_token_mask", "encode_rendered", "span_tokens"]


@dataclass(frozen=True)
class Encoding:
    """A rendered conversation as a trainer takes it.

    ``input_ids``, ``attention_mask`` and ``assistant_masks`` are transformers' names (one
    entry per token; the mask is 1 on the tokens trained on); ``offsets`` is the ``[start,
    end)`` character range of each token in ``text`` (a sequence of pairs, read from the
    tokenizer's answers on first use); ``spans`` the character spans of the assistant's
    text the mask was made from.
    """

    text: str
    input_ids: list[int]
    attention_mask: list[int]
    assistant_masks: list[int]
    offsets: Sequence[tuple[int, int]]
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


def span_tokens(tokens: Tokenized, spans: Sequence[Span]) -> list[range]:
    """The tokens each span marks, by transformers' ``return_assistant_tokens_mask`` rule:
    from the token holding the span's first character to the one holding its last. A span
    whose first character no token holds ends the marking (this span and the rest); one whose
    last character no token holds, or whose last character is in token 0, runs to the end of
    the text. An empty span at character 0 (transformers fails on it) marks nothing."""
    count = len(tokens.ids)
    marked = []
    for span in spans:
        first = tokens.char_to_token(span.start)
        if first is None:
            break
        if span.end <= 0:
            marked.append(range(first, first))
            continue
        last = tokens.char_to_token(span.end - 1)
        marked.append(range(first, last + 1 if last else count))
    return marked


def assistant_token_mask(tokens: Tokenized, spans: Sequence[Span]) -> list[int]:
    """One 0/1 flag per token: 1 on the tokens the spans mark (``span_tokens``)."""
    return _flags(len(tokens.ids), span_tokens(tokens, spans))


def _flags(count: int, marked: Sequence[range]) -> list[int]:
    mask = [0] * count
    for run in marked:
        mask[run.start : run.stop] = [1] * len(run)
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
    marked = span_tokens(tokens, rendered.spans)
    mask = _flags(len(tokens.ids), marked)
    for span, run in zip(rendered.spans, marked, strict=False):  # marking may stop early
        if not mask_reasoning and thought is not None:
            _drop_thought(mask, tokens, text, span, run, thought)
        if not mask_end_marker:
            _drop_end_marker(mask, tokens, tokenizer, text, run)
    return Encoding(
        text=text,
        input_ids=tokens.ids,  # lists the tokenizer made for this text alone
        attention_mask=[1] * len(tokens.ids),
        assistant_masks=mask,
        offsets=tokens.offsets,
        spans=rendered.spans,
    )


def _drop_end_marker(
    mask: list[int], tokens: Tokenized, tokenizer: Tokenizer, text: str, run: range
) -> None:
    """Unmark the end-of-turn marker of a span's tokens: its last tokens while they are
    special tokens or whitespace, from the first special token among them."""
    cut = None
    for index in reversed(run):
        a, b = tokens.offsets[index]
        if tokenizer.is_special(tokens.ids[index]):
            cut = index
        elif not text[a:b].isspace():
            break
    if cut is not None:
        mask[cut : run.stop] = [0] * (run.stop - cut)


def _drop_thought(
    mask: list[int], tokens: Tokenized, text: str, span: Span, run: range, thought: ThoughtMarkers
) -> None:
    """Unmark the thought of a span's tokens: from its start marker (or the span's start,
    when the generation prompt opened it) through its first closing marker and the
    whitespace after; a token reaching past that stays marked."""
    if not run:
        return
    low = min(span.start, tokens.offsets[run.start][0])  # the first token may start earlier
    part = text[low : span.end]
    found = [(part.find(closer), closer) for closer in thought.closers]
    found = [(at, closer) for at, closer in found if at >= 0]
    if not found:
        return
    at, closer = min(found)
    opened = part.rfind(thought.start, 0, at) if thought.start else -1
    begin = low + max(opened, 0)
    end = low + at + len(closer)
    while end < span.end and text[end].isspace():
        end += 1
    for index in run:
        a, b = tokens.offsets[index]
        if b > begin and a < end and b <= end:
            mask[index] = 0
