"""Continuing a final assistant message (llama.cpp's prefill), as data.

llama.cpp renders the conversation without its final assistant message and, instead of the
template's generation prompt, writes the opening of that message itself, per handler: a lead
(the assistant header), the thought opener and the message's reasoning and, when the content
is continued, the thought closer and the content. The parser reads that generation prompt
like any other, so the parsed message includes the prefilled text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Continuation", "continuation_mode", "message_content"]


@dataclass(frozen=True)
class Continuation:
    """How a family writes the generation prompt that continues a final assistant message.

    ``lead`` None is the generation prompt the template computes for the conversation before
    the message, cut before the first ``lead_cut`` when it holds one; ``lead_when`` makes the
    lead conditional: written only when the prompt so far ends with it. ``think_start`` opens
    the thought (the reasoning follows), ``think_end`` closes it before the content; without
    ``think_start`` the reasoning is not written. ``empty_thought``, when set, replaces an empty
    thought (DeepSeek V4 writes a bare ``</think>``). ``content_always``: the content follows
    the lead even when the reasoning is continued.
    """

    lead: str | None = None
    lead_cut: str = ""
    lead_when: str = ""
    think_start: str = ""
    think_end: str = ""
    empty_thought: str | None = None
    content_always: bool = False

    def generation_prompt(
        self, computed: str, prompt: str, reasoning: str, content: str, mode: str
    ) -> str:
        """The generation prompt continuing a message with this ``reasoning`` and ``content``.

        ``computed``: the template's generation prompt for the conversation before it;
        ``prompt``: that conversation rendered without a generation prompt; ``mode``:
        ``"content"`` or ``"reasoning_content"`` (which of the two is continued)."""
        if self.lead is None:
            at = computed.find(self.lead_cut) if self.lead_cut else -1
            lead = computed[:at] if at >= 0 else computed
        elif self.lead_when and not prompt.endswith(self.lead_when):
            lead = ""
        else:
            lead = self.lead
        with_content = mode == "content"
        if not self.think_start:
            return lead + content if with_content or self.content_always else lead
        if self.empty_thought is not None and not reasoning:
            return lead + self.empty_thought + (content if with_content else "")
        out = lead + self.think_start + reasoning
        if with_content:
            out += self.think_end + content
        return out


def message_content(message: Mapping[str, Any]) -> str:
    """The text of a message's content as llama.cpp renders it (text parts joined by a blank
    line)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        ]
        return "\n\n".join(texts)
    return ""


def continuation_mode(message: Mapping[str, Any], requested: bool | str) -> str:
    """``"none"``, ``"content"`` or ``"reasoning_content"``: what of ``message`` is continued
    (llama.cpp's ``continue_final_message``; ``True``/``"auto"`` continue the reasoning only
    when the message has reasoning and no content)."""
    if requested is False or requested == "none":
        return "none"
    if requested in ("content", "reasoning_content"):
        return str(requested)
    if requested is True or requested == "auto":
        content = message.get("content")
        if message.get("reasoning_content") and not content:
            return "reasoning_content"
        return "content"
    raise ValueError(
        "continue_final_message must be a bool, 'auto', 'content' or 'reasoning_content', "
        f"not {requested!r}"
    )
