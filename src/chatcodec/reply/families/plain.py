"""Plain replies: content, with a leading thought where the template has think tags.

The generic description for templates whose tool-call markup is not described yet; it reads
content and reasoning the way llama.cpp's parsers share (generation prompt, one thought, rest).
"""

from __future__ import annotations

from ..description import ReasoningBlock, ReplyFormat, legacy_format

__all__ = ["describe", "THINK_TAGS"]

# (start, end) thought markers known from the templates llama.cpp's analyser handles
THINK_TAGS: tuple[tuple[str, str], ...] = (
    ("<think:opensource>", "</think:opensource>"),
    ("<seed:think>", "</seed:think>"),
    ("<mm:think>", "</mm:think>"),
    ("<think>", "</think>"),
    ("[THINK]", "[/THINK]"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
)


def thought_tags(source: str) -> tuple[str, str] | None:
    for start, end in THINK_TAGS:
        if start in source and end in source:
            return start, end
    return None


def describe(
    handler: str, source: str, generation_prompt: str, reasoning_format: str
) -> ReplyFormat:
    tags = thought_tags(source)
    reasoning = None
    prefix = generation_prompt
    if tags is not None and reasoning_format != "none":
        start, end = tags
        reasoning = ReasoningBlock(
            start=start, stops=(end,), closers=((end, True),), space_after_start=False
        )
        # a prompt that opens (or pre-closes) a thought leaves it to the reasoning block
        at = generation_prompt.find(start)
        if at >= 0:
            prefix = generation_prompt[:at]
    return legacy_format(handler, prefix, reasoning, None, space_before_content=False)
