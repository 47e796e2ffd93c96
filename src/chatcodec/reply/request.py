"""What a family reads to describe a reply: the template and the request's options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # (the template package is imported where a template is rendered)
    from ..template.environment import Limits

__all__ = ["ReplyRequest", "Policy", "POLICIES"]

# How a reply is read and constrained (docs/decoding.md, "Policies"): ``reference`` is
# llama.cpp exactly; ``guaranteed`` is llama.cpp's result wherever llama.cpp reads the reply,
# plus what a user relies on where it does not (docs/differences.md, "Guarantees").
Policy = Literal["reference", "guaranteed"]
POLICIES: tuple[Policy, ...] = ("reference", "guaranteed")


@dataclass(frozen=True)
class ReplyRequest:
    """One request as llama.cpp's handlers see it (the argument of every family's ``describe``).

    ``generation_prompt``: the template's, for the conversation the reply follows.
    ``json_schema``: the request's response format (parsed by the families that support it:
    the auto parser, gpt-oss, Ministral, LFM2/LFM2.5, Cohere2 MoE; every family's constraint
    reads it as llama.cpp does). ``continue_final_message``:
    ``"content"`` or ``"reasoning_content"`` when a final assistant message is continued
    (``generation_prompt`` is then the template's for the conversation before it; the format's
    ``continuation`` writes the one to parse with), else ``"none"``. ``policy``: ``reference``
    (llama.cpp exactly) or ``guaranteed`` (see ``Policy``). ``limits``: the template's
    ``Limits``, which the renders of the families that render it (the auto parser's
    analysis) run under (the defaults when None).
    """

    source: str
    generation_prompt: str
    tools: Sequence[Mapping[str, Any]] | None = None
    tool_choice: str = "auto"
    parallel_tool_calls: bool = True
    reasoning_format: str = "deepseek"
    enable_thinking: bool = True
    special_tokens: Mapping[str, str] | None = None
    json_schema: Mapping[str, Any] | None = None
    continue_final_message: str = "none"
    policy: Policy = "reference"
    limits: Limits | None = None
